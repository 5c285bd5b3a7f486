//! The sequential ring's plan: the ordered targets of one number, and the tag each dialled leg
//! carries so its events name their call and position.
//!
//! Who is dialled when is the call machine's decision ([`crate::call_machine`]).

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
        serde_json::from_slice::<LegTag>(text.as_bytes()).ok().filter(|t| t.position > 0 && !t.call.is_empty())
    }
}

/// The most targets one number may ring in sequence.
pub const MAX_TARGETS: usize = 10;

/// How long each target rings before the carrier ends its leg unanswered, unless the number
/// says otherwise.
pub const DEFAULT_RING_TIMEOUT_SECS: u32 = 30;

/// The shortest and longest ring timeout a number may have.
pub const RING_TIMEOUT_SECS: std::ops::RangeInclusive<u32> = 5..=120;

/// What a ring target is: a SIP URI (`sip:...`) is dialled as it is written; anything else must
/// be an E.164 number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// A SIP URI.
    Sip,
    /// A phone number (E.164 once checked).
    Phone,
}

impl TargetKind {
    /// The kind of `target`, by its scheme.
    pub fn of(target: &str) -> Self {
        if target.starts_with("sip:") {
            TargetKind::Sip
        } else {
            TargetKind::Phone
        }
    }
}

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
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn a_target_is_sip_by_its_scheme_and_a_phone_number_otherwise() {
        assert_eq!(TargetKind::of("sip:alice@example.com"), TargetKind::Sip);
        assert_eq!(TargetKind::of("+15551234567"), TargetKind::Phone);
        // Anything else is a phone number to check, which refuses it.
        assert_eq!(TargetKind::of("SIP:alice@example.com"), TargetKind::Phone);
        assert_eq!(TargetKind::of("alice@sip:example.com"), TargetKind::Phone);
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
        let two = RingPlan::new(vec!["+15550000001".into(), "+15550000002".into()]).unwrap();
        assert_eq!(two.target(0), None);
        assert_eq!(two.target(2), Some("+15550000002"));
        assert_eq!(two.target(3), None);
    }
}
