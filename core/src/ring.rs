//! The sequential-ring decision.
//!
//! A number may have an ordered list of ring targets. An inbound call dials target 1; each
//! unanswered leg's hangup dials the next target; an answer stops the ring and bridges; when the
//! targets run out the call ends as missed.
//!
//! The decision is a pure function of (plan, cursor, leg outcome). The per-call Durable Object
//! stores the cursor and advances it by compare-and-swap *before* it dials, so the stale,
//! duplicate and late inputs this module answers with [`RingDecision::Unchanged`] can never
//! dial twice, even when they race.

/// What the platform attaches to each leg it dials (as the carrier's `client_state`), so the
/// leg's later events name their call and position.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LegTag {
    /// The platform's call id (`call_...`).
    pub call: String,
    /// 1-based position in the ring plan.
    pub position: u32,
}

impl LegTag {
    /// The tag as the text carried in `client_state`.
    pub fn encode(&self) -> String {
        serde_json::json!({ "call": self.call, "position": self.position }).to_string()
    }

    /// Reads a tag back; `None` for any other client state.
    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_str::<LegTag>(text).ok().filter(|t| t.position > 0 && !t.call.is_empty())
    }
}

/// The most targets one number may ring in sequence.
pub const MAX_TARGETS: usize = 10;

/// The ordered targets of one number (E.164 numbers or SIP URIs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingPlan {
    targets: Vec<String>,
}

/// Why a ring plan was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// No targets.
    Empty,
    /// More than [`MAX_TARGETS`].
    TooMany,
    /// A target is empty.
    BlankTarget,
}

impl RingPlan {
    /// A plan with these targets, in order.
    pub fn new(targets: Vec<String>) -> Result<Self, PlanError> {
        if targets.is_empty() {
            Err(PlanError::Empty)
        } else if targets.len() > MAX_TARGETS {
            Err(PlanError::TooMany)
        } else if targets.iter().any(|t| t.trim().is_empty()) {
            Err(PlanError::BlankTarget)
        } else {
            Ok(Self { targets })
        }
    }

    /// The targets, in order.
    pub fn targets(&self) -> &[String] {
        &self.targets
    }

    /// The target at 1-based `position`.
    pub fn target(&self, position: u32) -> Option<&str> {
        let index = usize::try_from(position).ok()?.checked_sub(1)?;
        self.targets.get(index).map(String::as_str)
    }

    fn len(&self) -> u32 {
        // MAX_TARGETS keeps this tiny.
        self.targets.len() as u32
    }
}

/// Where a sequential ring stands: the position whose leg is ringing, and whether it is over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingCursor {
    /// The 1-based position of the leg dialled last.
    pub position: u32,
    /// Whether the ring goes on.
    pub state: RingState,
}

/// The phase of a sequential ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingState {
    /// The leg at `position` is ringing.
    Ringing,
    /// The leg at `position` answered; the ring is over.
    Answered,
    /// Every target was tried, or the caller left; the ring is over.
    Over,
}

impl RingState {
    /// The name stored by the Durable Object.
    pub fn as_str(self) -> &'static str {
        match self {
            RingState::Ringing => "ringing",
            RingState::Answered => "answered",
            RingState::Over => "over",
        }
    }

    /// The state named `name`, as stored.
    pub fn from_name(name: &str) -> Option<Self> {
        [RingState::Ringing, RingState::Answered, RingState::Over].into_iter().find(|s| s.as_str() == name)
    }
}

/// What to do about a leg outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RingDecision {
    /// Dial `target` as the leg at `position`.
    Dial {
        /// 1-based position in the plan.
        position: u32,
        /// Who to dial.
        target: String,
    },
    /// The leg at `position` answered: bridge it to the caller.
    Bridge {
        /// 1-based position in the plan.
        position: u32,
    },
    /// No target answered: the call ends as missed.
    EndMissed,
    /// Nothing to do; an ordinary outcome for duplicates and late events.
    Unchanged(RingUnchanged),
}

/// Why a leg outcome changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingUnchanged {
    /// The outcome is for a leg before the current one (a duplicate or late hangup).
    StaleLeg,
    /// The outcome is for a position never dialled.
    UnknownLeg,
    /// A leg already answered; the ring is over.
    AlreadyAnswered,
    /// The ring already ended.
    AlreadyOver,
}

/// The first step of a ring: dial target 1.
pub fn start(plan: &RingPlan) -> (RingCursor, RingDecision) {
    let cursor = RingCursor { position: 1, state: RingState::Ringing };
    (cursor, RingDecision::Dial { position: 1, target: plan.targets[0].clone() })
}

fn unchanged_for(cursor: RingCursor, position: u32) -> Option<RingUnchanged> {
    match cursor.state {
        RingState::Answered => Some(RingUnchanged::AlreadyAnswered),
        RingState::Over => Some(RingUnchanged::AlreadyOver),
        RingState::Ringing if position == 0 || position > cursor.position => Some(RingUnchanged::UnknownLeg),
        RingState::Ringing if position < cursor.position => Some(RingUnchanged::StaleLeg),
        RingState::Ringing => None,
    }
}

/// The leg at `position` hung up without being answered.
pub fn leg_hung_up(plan: &RingPlan, cursor: RingCursor, position: u32) -> (RingCursor, RingDecision) {
    if let Some(reason) = unchanged_for(cursor, position) {
        return (cursor, RingDecision::Unchanged(reason));
    }
    let next = position + 1;
    match plan.target(next) {
        Some(target) if next <= plan.len() => (
            RingCursor { position: next, state: RingState::Ringing },
            RingDecision::Dial { position: next, target: target.to_owned() },
        ),
        _ => (RingCursor { position, state: RingState::Over }, RingDecision::EndMissed),
    }
}

/// The leg at `position` answered.
pub fn leg_answered(cursor: RingCursor, position: u32) -> (RingCursor, RingDecision) {
    if let Some(reason) = unchanged_for(cursor, position) {
        return (cursor, RingDecision::Unchanged(reason));
    }
    (RingCursor { position, state: RingState::Answered }, RingDecision::Bridge { position })
}

/// The caller hung up: the ring stops wherever it is.
pub fn caller_left(cursor: RingCursor) -> (RingCursor, bool) {
    match cursor.state {
        RingState::Ringing => (RingCursor { state: RingState::Over, ..cursor }, true),
        _ => (cursor, false),
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn plan(n: usize) -> RingPlan {
        RingPlan::new((1..=n).map(|i| format!("+1555000000{i}")).collect()).unwrap()
    }

    fn dial(position: u32) -> RingDecision {
        RingDecision::Dial { position, target: format!("+1555000000{position}") }
    }

    #[test]
    fn each_unanswered_hangup_dials_the_next_then_ends_missed() {
        let p = plan(3);
        let (c, d) = start(&p);
        assert_eq!(d, dial(1));
        let (c, d) = leg_hung_up(&p, c, 1);
        assert_eq!(d, dial(2));
        let (c, d) = leg_hung_up(&p, c, 2);
        assert_eq!(d, dial(3));
        let (c, d) = leg_hung_up(&p, c, 3);
        assert_eq!(d, RingDecision::EndMissed);
        assert_eq!(c.state, RingState::Over);
        assert_eq!(leg_hung_up(&p, c, 3).1, RingDecision::Unchanged(RingUnchanged::AlreadyOver));
    }

    #[test]
    fn duplicate_hangups_dial_once() {
        let p = plan(3);
        let (c, _) = start(&p);
        let (c, d) = leg_hung_up(&p, c, 1);
        assert_eq!(d, dial(2));
        for _ in 0..10 {
            assert_eq!(leg_hung_up(&p, c, 1), (c, RingDecision::Unchanged(RingUnchanged::StaleLeg)));
        }
    }

    #[test]
    fn answer_stops_the_ring_and_late_hangups_do_nothing() {
        let p = plan(3);
        let (c, _) = start(&p);
        let (c, _) = leg_hung_up(&p, c, 1);
        let (c, d) = leg_answered(c, 2);
        assert_eq!(d, RingDecision::Bridge { position: 2 });
        assert_eq!(leg_hung_up(&p, c, 1).1, RingDecision::Unchanged(RingUnchanged::AlreadyAnswered));
        assert_eq!(leg_hung_up(&p, c, 2).1, RingDecision::Unchanged(RingUnchanged::AlreadyAnswered));
        assert_eq!(leg_answered(c, 2).1, RingDecision::Unchanged(RingUnchanged::AlreadyAnswered));
    }

    #[test]
    fn unknown_positions() {
        let p = plan(2);
        let (c, _) = start(&p);
        assert_eq!(leg_hung_up(&p, c, 2).1, RingDecision::Unchanged(RingUnchanged::UnknownLeg));
        assert_eq!(leg_hung_up(&p, c, 0).1, RingDecision::Unchanged(RingUnchanged::UnknownLeg));
        assert_eq!(leg_answered(c, 7).1, RingDecision::Unchanged(RingUnchanged::UnknownLeg));
    }

    #[test]
    fn caller_leaving_stops_the_ring() {
        let p = plan(2);
        let (c, _) = start(&p);
        let (c, stopped) = caller_left(c);
        assert!(stopped);
        assert_eq!(leg_hung_up(&p, c, 1).1, RingDecision::Unchanged(RingUnchanged::AlreadyOver));
        assert!(!caller_left(c).1);
    }

    #[test]
    fn leg_tags_round_trip() {
        let tag = LegTag { call: "call_1".into(), position: 2 };
        assert_eq!(LegTag::parse(&tag.encode()), Some(tag));
        assert_eq!(LegTag::parse("inbound"), None);
        assert_eq!(LegTag::parse(r#"{"call":"c","position":0}"#), None);
        assert_eq!(LegTag::parse(r#"{"call":"","position":1}"#), None);
    }

    #[test]
    fn plan_limits() {
        assert_eq!(RingPlan::new(vec![]), Err(PlanError::Empty));
        assert_eq!(RingPlan::new(vec!["".into()]), Err(PlanError::BlankTarget));
        assert_eq!(RingPlan::new(vec!["+1".into(); MAX_TARGETS + 1]), Err(PlanError::TooMany));
        assert_eq!(plan(2).target(0), None);
        assert_eq!(plan(2).target(3), None);
        for s in [RingState::Ringing, RingState::Answered, RingState::Over] {
            assert_eq!(RingState::from_name(s.as_str()), Some(s));
        }
    }
}
