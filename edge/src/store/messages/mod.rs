//! The `messages` table and every guarded statement that moves a message.
//!
//! Each move is one D1 batch: the guarded UPDATE (or INSERT) first, then the outbox event, the
//! history row and the ledger row, each conditioned on the statement before it having changed
//! exactly one row. A move that does not happen writes nothing else.

use exactly_core::event::{CarrierError, StatusReport};
use exactly_core::media::MediaItem;
use exactly_core::message::MessageStatus;
use exactly_core::number::PhoneNumber;
use exactly_core::segments::Encoding;
use exactly_core::webhook::EventType;
use exactly_core::{Provider, Timestamp};
use serde_json::{json, Value};
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;
use crate::store::media::{self, Media};
use crate::store::outbox::{Change, Event};
use crate::store::transition::Transition;
use crate::store::usage;
use crate::store::{self as db, int, opt_text, opt_time, text, time};

pub mod erase;
mod read;
pub use read::{by_carrier_id, by_id, by_idempotency_key, get, get_charged, history, list, HistoryStep, ListFilter};

crate::store::row! {
    /// A message row.
    #[derive(Clone, Debug)]
    pub struct Message {
        pub id: String,
        pub account_id: String,
        pub direction: Direction,
        pub from_number: String,
        pub to_number: String,
        pub text: String,
        pub segments: i64,
        pub encoding: Encoding,
        pub status: MessageStatus,
        pub carrier: Provider,
        pub carrier_message_id: Option<String>,
        pub error_code: Option<String>,
        pub error_title: Option<String>,
        pub idempotency_key: Option<String>,
        pub dispatch_token: Option<String>,
        pub claimed_until: Timestamp,
        pub send_attempts: i64,
        pub created_at: Timestamp,
        pub updated_at: Timestamp,
        pub sent_at: Option<Timestamp>,
        /// When a scheduled message becomes due (Unix ms).
        pub send_at: Option<Timestamp>,
        /// Its media (an MMS), in position order; empty for an SMS.
        pub media: Vec<Media>,
    }
}

/// Every column of a message row, and its media as one JSON array in position order (read by
/// the `Column` reading of `Vec<Media>` in `store::media`).
pub const MESSAGE_COLUMNS: &str =
    "id, account_id, direction, from_number, to_number, text, segments, encoding, status, carrier,
    carrier_message_id, error_code, error_title, idempotency_key, dispatch_token, claimed_until, send_attempts,
    created_at, updated_at, sent_at, send_at,
    (SELECT json_group_array(json_object('position', position, 'url', url, 'content_type', content_type,
            'size', size, 'r2_key', r2_key, 'stored_at', stored_at))
     FROM (SELECT * FROM message_media WHERE message_id = messages.id ORDER BY position)) AS media";

exactly_core::text_enum! {
    /// Which way a message went.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Direction {
        /// To a platform number.
        Inbound = "inbound",
        /// Sent by an account.
        Outbound = "outbound",
    }
}
crate::store::row::named!(Direction);

impl Message {
    /// Whether it is an outbound message not handed to the carrier yet.
    pub fn undispatched(&self) -> bool {
        self.direction == Direction::Outbound
            && self.carrier_message_id.is_none()
            && matches!(self.status, MessageStatus::Queued | MessageStatus::Scheduled | MessageStatus::Sending)
    }

    /// An MMS: it carries media, and an outbound one is billed as one `mms` unit.
    pub fn is_mms(&self) -> bool {
        !self.media.is_empty()
    }

    /// What sending it is billed as: one MMS unit, or its SMS segments.
    pub fn charge(&self) -> (usage::Kind, i64) {
        if self.is_mms() {
            (usage::Kind::Mms, 1)
        } else {
            (usage::Kind::SmsSegments, self.segments)
        }
    }

    /// The message as the API (and every customer event) shows it.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "type": if self.is_mms() { "mms" } else { "sms" },
            "direction": self.direction,
            "from": self.from_number,
            "to": self.to_number,
            "text": self.text,
            "segments": self.segments,
            "encoding": self.encoding.as_str(),
            "status": self.status,
            "carrier": self.carrier,
            "carrier_message_id": self.carrier_message_id,
            "error": self.error_code.as_ref().map(|code| json!({"code": code, "title": self.error_title})),
            "created_at": self.created_at.to_rfc3339(),
            "updated_at": self.updated_at.to_rfc3339(),
            "sent_at": self.sent_at.map(|t| t.to_rfc3339()),
            "send_at": self.send_at.map(|t| t.to_rfc3339()),
            "media": self.media.iter().map(|m| m.to_json(&self.id)).collect::<Vec<_>>(),
        })
    }

    fn moved(&self, status: MessageStatus, now: Timestamp) -> Message {
        Message { status, updated_at: now, ..self.clone() }
    }
}

/// A message the API is about to create.
pub struct NewOutbound<'a> {
    pub id: &'a str,
    pub account_id: &'a str,
    pub from: &'a PhoneNumber,
    pub to: &'a PhoneNumber,
    pub text: &'a str,
    pub segments: i64,
    pub encoding: Encoding,
    pub idempotency_key: Option<&'a str>,
    /// When to send it; `None` sends it now.
    pub send_at: Option<Timestamp>,
    /// Its media URLs, checked (an MMS); empty for an SMS.
    pub media_urls: &'a [String],
}

/// Inserts a queued (or, with `send_at`, scheduled) outbound message with its media, to be sent
/// through the carrier of its `from` number (Telnyx when the number's carrier is not known), unless the
/// account already used this idempotency key.
/// Returns the stored message and whether this call created it.
pub async fn create_outbound(
    db: &D1Database,
    new: NewOutbound<'_>,
    now: Timestamp,
) -> Result<(Message, bool), EdgeError> {
    let insert = db::stmt(
        db,
        "INSERT INTO messages (id, account_id, direction, from_number, to_number, text, segments, encoding, status,
                               carrier, idempotency_key, send_at, created_at, updated_at)
         VALUES (?1, ?2, 'outbound', ?3, ?4, ?5, ?6, ?7, CASE WHEN ?8 IS NULL THEN 'queued' ELSE 'scheduled' END,
                 COALESCE((SELECT carrier FROM phone_numbers WHERE phone_number = ?3), 'telnyx'), ?9, ?8, ?10, ?10)
         ON CONFLICT (account_id, idempotency_key) DO NOTHING",
        &[
            text(new.id),
            text(new.account_id),
            text(new.from.as_str()),
            text(new.to.as_str()),
            text(new.text),
            int(new.segments),
            text(new.encoding.as_str()),
            opt_time(new.send_at),
            opt_text(new.idempotency_key),
            time(now),
        ],
    )?;
    let items: Vec<MediaItem> =
        new.media_urls.iter().map(|url| MediaItem { url: url.clone(), content_type: None, size: None }).collect();
    let media = media::insert_if_message(db, new.id, &Media::new_items(new.id, &items, false), now)?;
    let select = match new.idempotency_key {
        Some(key) => db::stmt(
            db,
            &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE account_id = ?1 AND idempotency_key = ?2"),
            &[text(new.account_id), text(key)],
        )?,
        None => db::stmt(db, &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1"), &[text(new.id)])?,
    };
    let results = db::batch(db, vec![insert, media, select]).await?;
    let created = results.first().map(db::changes) == Some(1);
    let message = results
        .get(2)
        .map(db::rows::<Message>)
        .transpose()?
        .and_then(|rows| rows.into_iter().next())
        .ok_or_else(|| EdgeError::unavailable("store", "message vanished after insert"))?;
    Ok((message, created))
}

/// Claims a message for sending: `queued -> sending`, `scheduled -> sending` once it is due, or
/// takes over a `sending` message whose previous claim lapsed without a carrier id. Returns whether this caller owns
/// the send now; only the owner calls the carrier.
pub async fn claim(
    db: &D1Database,
    id: &str,
    token: &str,
    now: Timestamp,
    lease_until: Timestamp,
) -> Result<Option<Claimed>, EdgeError> {
    // A claim that lapsed (`claimed_until` still set, not released) ended without a result: its
    // answer was lost.
    db::first::<Claimed>(db::stmt(
        db,
        "UPDATE messages
         SET status = 'sending', dispatch_token = ?2, claimed_until = ?4, send_attempts = send_attempts + 1,
             answer_lost = CASE WHEN status = 'sending' AND claimed_until > 0 THEN 1 ELSE answer_lost END,
             updated_at = ?3
         WHERE id = ?1 AND direction = 'outbound' AND carrier_message_id IS NULL
           AND (status = 'queued' OR (status = 'scheduled' AND send_at <= ?3)
                OR (status = 'sending' AND claimed_until < ?3))
         RETURNING answer_lost",
        &[text(id), text(token), time(now), time(lease_until)],
    )?)
    .await
}

crate::store::row! {
    /// A dispatcher's claim on a message.
    pub struct Claimed {
        /// Whether an earlier try may have reached the carrier without its answer reaching us:
        /// only then is the message looked up before it is sent again (docs/contract.md §4).
        pub answer_lost: bool,
    }
}

/// Gives up a claim after a carrier call that may be tried again, so the retry can claim again;
/// `answer_lost` says whether the carrier may have acted on it (docs/contract.md §4).
pub async fn release(db: &D1Database, id: &str, token: &str, answer_lost: bool) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "UPDATE messages SET claimed_until = 0, answer_lost = ?3
         WHERE id = ?1 AND dispatch_token = ?2 AND status = 'sending'",
        &[text(id), text(token), int(i64::from(answer_lost))],
    )?)
    .await?;
    Ok(())
}

fn history_if_changed(
    db: &D1Database,
    message_id: &str,
    status: MessageStatus,
    carrier_status: Option<&str>,
    carrier_event_id: Option<&str>,
    now: Timestamp,
) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "INSERT INTO message_status_history (message_id, status, carrier_status, carrier_event_id, created_at)
         SELECT ?1, ?2, ?3, ?4, ?5 WHERE changes() = 1",
        &[text(message_id), text(status.as_str()), opt_text(carrier_status), opt_text(carrier_event_id), time(now)],
    )
}

/// `sending -> sent` with the carrier's id, by the claim's owner: the `message.sent` event, the
/// history row and the segment charge, all in one batch, all only if the move happened. The
/// same batch wakes the receipts parked on that id; their ids are returned to enqueue.
pub async fn record_sent(
    db: &D1Database,
    message: &Message,
    token: &str,
    carrier_message_id: &str,
    now: Timestamp,
) -> Result<(Change, Vec<String>), EdgeError> {
    let mut after = message.moved(MessageStatus::Sent, now);
    after.carrier_message_id = Some(carrier_message_id.to_owned());
    after.sent_at = Some(now);
    let event = Event::new(&message.account_id, EventType::MessageSent, &message.id, after.to_json(), now)?;
    let guard = db::stmt(
        db,
        "UPDATE messages SET status = 'sent', carrier_message_id = ?3, sent_at = ?4, updated_at = ?4,
             claimed_until = 0
         WHERE id = ?1 AND status = 'sending' AND dispatch_token = ?2",
        &[text(&message.id), text(token), text(carrier_message_id), time(now)],
    )?;
    let (kind, segments) = message.charge();
    let committed = Transition::new(guard, Some(event))
        .then(history_if_changed(db, &message.id, MessageStatus::Sent, None, None, now)?)
        .then(usage::charge_if_changed(db, &message.account_id, kind, segments, &message.id, now)?)
        .apart(crate::store::carrier_events::wake_stmt(db, message.carrier, carrier_message_id, now)?)
        .apart(crate::store::carrier_events::wake_legacy_stmt(db, message.carrier, carrier_message_id)?)
        .commit(db, now)
        .await?;
    let mut woken = Vec::new();
    for result in (0..2).filter_map(|n| committed.apart(n)) {
        woken.extend(crate::store::carrier_events::woken(result)?);
    }
    Ok((committed.change, woken))
}

/// `sending -> failed` when the carrier refused the send (4xx), by the claim's owner.
pub async fn record_send_failed(
    db: &D1Database,
    message: &Message,
    token: &str,
    error: &CarrierError,
    now: Timestamp,
) -> Result<Change, EdgeError> {
    let mut after = message.moved(MessageStatus::Failed, now);
    after.error_code = Some(error.code.clone());
    after.error_title = error.title.clone();
    let event = Event::new(&message.account_id, EventType::MessageFailed, &message.id, after.to_json(), now)?;
    let guard = db::stmt(
        db,
        "UPDATE messages SET status = 'failed', error_code = ?3, error_title = ?4, updated_at = ?5,
             claimed_until = 0
         WHERE id = ?1 AND status = 'sending' AND dispatch_token = ?2",
        &[text(&message.id), text(token), text(&error.code), opt_text(error.title.as_deref()), time(now)],
    )?;
    let history = history_if_changed(db, &message.id, MessageStatus::Failed, None, None, now)?;
    Ok(Transition::new(guard, Some(event)).then(history).commit(db, now).await?.change)
}

/// Applies a carrier's status report to `message`, guarded by the core lattice: the UPDATE's
/// `WHERE status IN (...)` lists exactly the statuses `to` may follow; the history row names the
/// carrier event. Returns whether the message moved.
pub async fn apply_report(
    db: &D1Database,
    message: &Message,
    to: MessageStatus,
    report: &StatusReport,
    carrier_event: &str,
    now: Timestamp,
    also: Option<D1PreparedStatement>,
) -> Result<Change, EdgeError> {
    let predecessors: Vec<String> = to.predecessors().iter().map(|s| format!("'{}'", s.as_str())).collect();
    if predecessors.is_empty() {
        // Nothing may move to `to`: the carrier event's processed mark commits alone.
        if let Some(also) = also {
            db::batch(db, vec![also]).await?;
        }
        return Ok(Change::default());
    }
    let first_error = report.errors.first();
    let mut after = message.moved(to, now);
    if let Some(e) = first_error {
        after.error_code = Some(e.code.clone());
        after.error_title = e.title.clone();
    }
    let guard = db::stmt(
        db,
        // The guard: only a status `to` may follow moves (core::message::transition).
        &format!(
            "UPDATE messages SET status = ?2, error_code = COALESCE(?3, error_code), error_title =
                 COALESCE(?4, error_title), updated_at = ?5
             WHERE id = ?1 AND status IN ({})",
            predecessors.join(", ")
        ),
        &[
            text(&message.id),
            text(to.as_str()),
            opt_text(first_error.map(|e| e.code.as_str())),
            opt_text(first_error.and_then(|e| e.title.as_deref())),
            time(now),
        ],
    )?;
    let event = match to.event_type() {
        Some(event_type) => Some(Event::new(&message.account_id, event_type, &message.id, after.to_json(), now)?),
        None => None,
    };
    let history = history_if_changed(db, &message.id, to, Some(&report.carrier_status), Some(carrier_event), now)?;
    // The carrier event's processed mark commits with the effects; the event's deliveries come
    // back with the batch.
    let mut transition = Transition::new(guard, event).then(history).announced(None);
    if let Some(also) = also {
        transition = transition.apart(also);
    }
    Ok(transition.commit(db, now).await?.change)
}

/// An inbound message, once per carrier message id, with its media items and its
/// `message.received` event in the same batch. The items are written only with the message, so
/// a repeated or re-signed delivery adds none. `learn_carrier`: the number's carrier is not
/// recorded yet, so the batch records it. `unsettled` (a carrier event's [`Log::key_of`], and
/// the payload its job carried): the message is written only if that event is in this
/// database, neither processed nor failed, and still holds that payload (an erasure clears it,
/// or takes a number out of it), for an event that no read checked; its mark is then
/// [`Log::mark_carried`]. With a `lease`, the batch claims the first attempt of one
/// of the event's deliveries that could go at once, for the caller to send ([`Change::claimed`]).
/// Returns the change, and whether `also` changed a row.
///
/// [`Log::key_of`]: crate::store::carrier_events::Log::key_of
/// [`Log::mark_carried`]: crate::store::carrier_events::Log::mark_carried
#[allow(clippy::too_many_arguments)]
pub async fn insert_inbound(
    db: &D1Database,
    id: &str,
    account_id: &str,
    carrier: Provider,
    inbound: &exactly_core::event::InboundMessage,
    now: Timestamp,
    also: Option<D1PreparedStatement>,
    learn_carrier: bool,
    unsettled: Option<(JsValue, &str)>,
    lease: Option<Timestamp>,
) -> Result<(Change, bool), EdgeError> {
    let segments = exactly_core::segments::count(&inbound.text);
    let message = Message {
        id: id.to_owned(),
        account_id: account_id.to_owned(),
        direction: Direction::Inbound,
        from_number: inbound.from.clone(),
        to_number: inbound.to.clone(),
        text: inbound.text.clone(),
        segments: i64::from(segments.count),
        encoding: segments.encoding,
        status: MessageStatus::Received,
        carrier,
        carrier_message_id: Some(inbound.carrier_message_id.clone()),
        error_code: None,
        error_title: None,
        idempotency_key: None,
        dispatch_token: None,
        claimed_until: Timestamp::from_unix_millis(0),
        send_attempts: 0,
        created_at: now,
        updated_at: now,
        sent_at: None,
        send_at: None,
        media: Media::new_items(id, &inbound.media, true),
    };
    let event = Event::new(account_id, EventType::MessageReceived, id, message.to_json(), now)?;
    let guard = db::stmt(
        db,
        "INSERT INTO messages (id, account_id, direction, from_number, to_number, text, segments, encoding, status,
                                   carrier, carrier_message_id, created_at, updated_at)
             SELECT ?1, ?2, 'inbound', ?3, ?4, ?5, ?6, ?7, 'received', ?8, ?9, ?10, ?10
             WHERE ?11 IS NULL
                OR EXISTS (SELECT 1 FROM carrier_events
                           WHERE id = ?11 AND processed_at IS NULL AND error IS NULL AND payload = ?12)
             ON CONFLICT (carrier, carrier_message_id) DO NOTHING",
        &[
            text(id),
            text(account_id),
            text(&inbound.from),
            text(&inbound.to),
            text(&inbound.text),
            int(i64::from(segments.count)),
            text(segments.encoding.as_str()),
            text(carrier.as_str()),
            text(&inbound.carrier_message_id),
            time(now),
            unsettled.as_ref().map_or(JsValue::NULL, |(key, _)| key.clone()),
            opt_text(unsettled.as_ref().map(|(_, payload)| *payload)),
        ],
    )?;
    let mut transition = Transition::new(guard, Some(event)).announced(lease);
    // Statements with nothing to do are left out: each costs its share of the batch.
    if !message.media.is_empty() {
        transition = transition.apart(media::insert_if_message(db, id, &message.media, now)?);
    }
    if learn_carrier {
        transition = transition.apart(crate::store::numbers::learn_carrier(db, &inbound.to, carrier)?);
    }
    // The carrier event's processed mark, when it commits with the effects.
    let also_at = also.as_ref().map(|_| transition.aparts());
    if let Some(also) = also {
        transition = transition.apart(also);
    }
    let committed = transition.commit(db, now).await?;
    let also_changed = also_at.and_then(|n| committed.apart(n)).map(db::changes) == Some(1);
    Ok((committed.change, also_changed))
}

/// Outbound messages not handed to the carrier whose last change is older than `before`: their
/// dispatch job was lost or its claim lapsed.
pub async fn undispatched(db: &D1Database, before: Timestamp, limit: u32) -> Result<Vec<String>, EdgeError> {
    crate::store::row! {
        struct Row {
            id: String,
        }
    }
    let rows: Vec<Row> = db::all(db::stmt(
        db,
        "SELECT id FROM messages
         WHERE direction = 'outbound' AND carrier_message_id IS NULL AND status IN ('queued', 'sending')
           AND updated_at < ?1 AND claimed_until < ?1
         ORDER BY updated_at LIMIT ?2",
        &[time(before), int(i64::from(limit))],
    )?)
    .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Scheduled messages that are due at `now`, oldest first: the sweeper enqueues their dispatch
/// (the claim takes each once).
pub async fn due(db: &D1Database, now: Timestamp, limit: u32) -> Result<Vec<String>, EdgeError> {
    db::all_ids(db::stmt(
        db,
        "SELECT id FROM messages WHERE status = 'scheduled' AND send_at <= ?1 ORDER BY send_at LIMIT ?2",
        &[time(now), int(i64::from(limit))],
    )?)
    .await
}

/// `scheduled -> canceled`, only while it is scheduled and not yet claimed for sending, with its
/// history row. Returns whether this call canceled it.
pub async fn cancel(db: &D1Database, account_id: &str, id: &str, now: Timestamp) -> Result<bool, EdgeError> {
    let results = db::batch(
        db,
        vec![
            db::stmt(
                db,
                "UPDATE messages SET status = 'canceled', updated_at = ?3
                 WHERE id = ?1 AND account_id = ?2 AND status = 'scheduled'",
                &[text(id), text(account_id), time(now)],
            )?,
            history_if_changed(db, id, MessageStatus::Canceled, None, None, now)?,
        ],
    )
    .await?;
    Ok(results.first().map(db::changes) == Some(1))
}

/// Those of `carrier_ids` (a lookup's, at most a hundred) that no message of this carrier owns
/// yet, in their order, read in one query: what a send whose answer was lost may have become.
pub async fn unowned(db: &D1Database, carrier: Provider, carrier_ids: &[String]) -> Result<Vec<String>, EdgeError> {
    if carrier_ids.is_empty() {
        return Ok(Vec::new());
    }
    let listed = serde_json::to_string(carrier_ids).map_err(|e| EdgeError::unavailable("store", e.to_string()))?;
    let owned = db::all_ids(db::stmt(
        db,
        "SELECT carrier_message_id AS id FROM messages
         WHERE carrier = ?1 AND carrier_message_id IN (SELECT value FROM json_each(?2))",
        &[text(carrier.as_str()), text(&listed)],
    )?)
    .await?;
    Ok(carrier_ids.iter().filter(|id| !owned.contains(id)).cloned().collect())
}

/// Whether another message could own a carrier id that `message`'s lookup found.
pub enum Rivals {
    /// None: every other message of its sender and recipient has its id or had definite answers.
    None,
    /// One has a carrier call in flight until this time: its answer will say.
    InFlight(Timestamp),
    /// One also has a lost answer, so an id found could be either's.
    Unconfirmed,
}

/// The other outbound messages of `message`'s carrier, sender and recipient, tried since
/// `since`, that have no carrier id and may have reached the carrier: one whose claim is live,
/// lapsed, or whose answer was lost (docs/contract.md §4). One row: the latest claim.
pub async fn rivals(db: &D1Database, message: &Message, since: Timestamp, now: Timestamp) -> Result<Rivals, EdgeError> {
    crate::store::row! {
        struct Rival {
            claimed_until: Timestamp,
        }
    }
    let rival = db::first::<Rival>(db::stmt(
        db,
        "SELECT claimed_until FROM messages
         WHERE carrier = ?1 AND from_number = ?2 AND to_number = ?3 AND direction = 'outbound'
           AND carrier_message_id IS NULL AND updated_at >= ?4 AND id <> ?5
           AND (answer_lost = 1 OR (status = 'sending' AND claimed_until > 0))
         ORDER BY claimed_until DESC LIMIT 1",
        &[
            text(message.carrier.as_str()),
            text(&message.from_number),
            text(&message.to_number),
            time(since),
            text(&message.id),
        ],
    )?)
    .await?;
    Ok(match rival {
        None => Rivals::None,
        Some(r) if r.claimed_until > now => Rivals::InFlight(r.claimed_until),
        Some(_) => Rivals::Unconfirmed,
    })
}

/// A dispatch whose job failed on every retry: the message fails visibly (`dispatch_failed`),
/// with its `message.failed` event, only when that cannot hide a send: no dispatcher holds a
/// live claim (one may have a carrier call in flight), and either the carrier was never called
/// or the send is older than `horizon` (the carrier's idempotency key has lapsed, so a retry
/// could send twice). Returns what changed; `changed` is false when the message must be tried
/// again instead.
pub async fn fail_undispatched(
    db: &D1Database,
    id: &str,
    now: Timestamp,
    horizon: Timestamp,
) -> Result<Change, EdgeError> {
    let Some(message) = by_id(db, id).await? else { return Ok(Change::default()) };
    let mut after = message.moved(MessageStatus::Failed, now);
    after.error_code = Some("dispatch_failed".into());
    after.error_title = Some("the message could not be handed to the carrier".into());
    let event = Event::new(&message.account_id, EventType::MessageFailed, &message.id, after.to_json(), now)?;
    let guard = db::stmt(
        db,
        "UPDATE messages SET status = 'failed', error_code = 'dispatch_failed', error_title = ?2,
             updated_at = ?3, claimed_until = 0
         WHERE id = ?1 AND carrier_message_id IS NULL AND status IN ('queued', 'scheduled', 'sending')
           AND (status != 'scheduled' OR send_at <= ?3)
           AND claimed_until < ?3 AND (send_attempts = 0 OR COALESCE(send_at, created_at) < ?4)",
        &[text(id), opt_text(after.error_title.as_deref()), time(now), time(horizon)],
    )?;
    let history = history_if_changed(db, id, MessageStatus::Failed, None, None, now)?;
    Ok(Transition::new(guard, Some(event)).then(history).commit(db, now).await?.change)
}

/// Claims reconciliation's check of one message: whether this run asks the carrier (no other
/// run did since `checked_before`).
pub async fn claim_check(
    db: &D1Database,
    id: &str,
    checked_before: Timestamp,
    now: Timestamp,
) -> Result<bool, EdgeError> {
    let changed = db::run(db::stmt(
        db,
        "UPDATE messages SET checked_at = ?3 WHERE id = ?1 AND checked_at < ?2 AND status = 'sent'",
        &[text(id), time(checked_before), time(now)],
    )?)
    .await?;
    Ok(changed == 1)
}
