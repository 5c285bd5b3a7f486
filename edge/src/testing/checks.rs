//! Guard checks against real D1, for the end-to-end build only (`fault-injection`): each check
//! sets up fresh rows, runs one store statement twice, and reports the rows before, after the
//! first run and after the second, with what each run said it did. `tests/tests/store.rs`
//! asserts that the first run changed what it should and the second changed nothing.

use exactly_core::call::CallStatus;
use exactly_core::call_machine::{call_id, CallEnd, CallInfo, CallView, LegOutcome, LegView};
use exactly_core::event::{InboundMessage, StatusReport};
use exactly_core::media::MediaItem;
use exactly_core::message::MessageStatus;
use exactly_core::number::PhoneNumber;
use exactly_core::webhook::EventType;
use exactly_core::{Provider, Timestamp};
use serde_json::{json, Value};
use worker::{D1Database, Env};

use crate::error::EdgeError;
use crate::platform::{new_id, now};
use crate::store::{self as db, accounts, calls, carrier_events, deliveries, media, messages, numbers};

/// Runs SQL the end-to-end tests send (counting rows); test build only.
pub async fn raw(db: &D1Database, sql: &str) -> Result<Vec<Value>, String> {
    let result = db::query(db.prepare(sql)).await.map_err(|e| e.to_string())?;
    let rows = js_sys::Reflect::get(result.raw(), &"results".into()).map_err(|_| "a result with no rows")?;
    let text = js_sys::JSON::stringify(&rows).ok().and_then(|t| t.as_string()).ok_or("rows that are not JSON")?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

pub(super) async fn rows(db: &D1Database, sql: &str) -> Result<Value, EdgeError> {
    Ok(Value::Array(raw(db, sql).await.map_err(|e| EdgeError::unavailable("test build", e))?))
}

pub(super) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Before, first run, after, second run, after.
pub(super) struct Report {
    pub(super) before: Value,
    pub(super) runs: Vec<(Value, Value)>,
}

impl Report {
    pub(super) fn into_json(self) -> Value {
        let mut runs = self.runs.into_iter();
        let (first, after_first) = runs.next().unwrap_or_default();
        let (second, after_second) = runs.next().unwrap_or_default();
        json!({"before": self.before, "first": first, "after_first": after_first, "second": second,
            "after_second": after_second})
    }
}

async fn account(db: &D1Database) -> Result<String, EdgeError> {
    let id = new_id("acct")?;
    accounts::create(db, &id, "store check", &new_id("hash")?, now()).await?;
    Ok(id)
}

/// A message of a new account whose send is recorded under Telnyx id `carrier_id`.
async fn sent_as(db: &D1Database, carrier_id: &str) -> Result<(), EdgeError> {
    let m = outbound(db, &account(db).await?).await?;
    let recorded = format!(
        "UPDATE messages SET carrier = 'telnyx', carrier_message_id = {} WHERE id = {}",
        quote(carrier_id),
        quote(&m.id)
    );
    raw(db, &recorded).await.map_err(|e| EdgeError::unavailable("test build", e))?;
    Ok(())
}

async fn carrier_event(db: &D1Database) -> Result<String, EdgeError> {
    let event_id = new_id("check")?;
    let sql = format!(
        "INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, attempts, created_at)
         VALUES ('telnyx', {}, 'message.finalized', '{{}}', 0, {}) RETURNING 'cev_' || printf('%016x', id) AS id",
        quote(&event_id),
        now().unix_millis()
    );
    let rows = raw(db, &sql).await.map_err(|e| EdgeError::unavailable("test build", e))?;
    rows.first()
        .and_then(|r| r["id"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| EdgeError::unavailable("test build", "no carrier event"))
}

async fn outbound(db: &D1Database, account_id: &str) -> Result<messages::Message, EdgeError> {
    let id = new_id("msg")?;
    let new = messages::NewOutbound {
        id: &id,
        account_id,
        from: &number("+15550000001")?,
        to: &number("+15550000002")?,
        text: "store check",
        segments: 1,
        encoding: exactly_core::segments::Encoding::Gsm7,
        idempotency_key: None,
        send_at: None,
        media_urls: &[],
    };
    Ok(messages::create_outbound(db, new, now()).await?.0)
}

/// Two media items of an inbound MMS.
fn two_items() -> Vec<MediaItem> {
    ["https://media.example/0.jpg", "https://media.example/1.png"]
        .map(|url| MediaItem { url: url.into(), content_type: Some("image/jpeg".into()), size: Some(10) })
        .to_vec()
}

/// An inbound MMS with two items, recorded; its message id.
async fn inbound_mms(db: &D1Database) -> Result<String, EdgeError> {
    let id = new_id("msg")?;
    let inbound = InboundMessage {
        carrier_message_id: new_id("tlx")?,
        from: "+15550000007".into(),
        to: "+15550000008".into(),
        text: String::new(),
        media: two_items(),
    };
    messages::insert_inbound(db, &id, &account(db).await?, Provider::Telnyx, &inbound, now(), None, true, None, None)
        .await?;
    Ok(id)
}

fn number(text: &str) -> Result<PhoneNumber, EdgeError> {
    PhoneNumber::parse(text).map_err(|e| EdgeError::unavailable("test build", e.to_string()))
}

fn view(
    account_id: &str,
    session: &str,
    status: CallStatus,
    answered_at: Option<Timestamp>,
    end: Option<CallEnd>,
) -> CallView {
    let info = CallInfo {
        id: call_id(Provider::Telnyx, session),
        account_id: account_id.to_owned(),
        carrier: Provider::Telnyx,
        from: "+15550000003".into(),
        to: "+15550000004".into(),
        call_session_id: session.to_owned(),
        call_control_id: format!("cc-{session}"),
        call_leg_id: format!("leg-{session}"),
        created_at: now(),
    };
    CallView { info, status, answered_at, end, legs: Vec::new() }
}

/// Runs the check named `name`.
pub async fn run(env: &Env, name: &str) -> Result<Value, EdgeError> {
    let db = &db::d1(env, crate::bindings::DB)?;
    match name {
        "carrier_events.mark_processed" => carrier_events_mark_processed(env, db).await,
        "carrier_events.mark_failed" => carrier_events_mark_failed(env, db).await,
        "carrier_events.park_and_wake" => carrier_events_park_and_wake(env, db).await,
        "carrier_events.expire_park" | "carrier_events.expire_after_wake" => {
            carrier_events_expire_park(env, db, name).await
        }
        "carrier_events.expire_moved_away" => carrier_events_expire_moved_away(env, db).await,
        "messages.claim" => messages_claim(db).await,
        "messages.record_sent" => messages_record_sent(db).await,
        "messages.record_sent_after_erasure" => messages_record_sent_after_erasure(db).await,
        "messages.apply_report" => messages_apply_report(db).await,
        "messages.insert_inbound" => messages_insert_inbound(db).await,
        "media.claim" => media_claim(db).await,
        "media.record_stored" => media_record_stored(db).await,
        "messages.fail_undispatched" => messages_fail_undispatched(db).await,
        "calls.record" | "calls.record_answered" | "calls.record_end" | "calls.record_leg" => {
            calls_record(db, name).await
        }
        "deliveries.claim_attempt"
        | "deliveries.redrive"
        | "deliveries.next_in_line"
        | "deliveries.next_in_line_filtered"
        | "deliveries.next_in_line_unleased"
        | "deliveries.next_in_line_full"
        | "deliveries.due_claiming"
        | "deliveries.due_claiming_filtered"
        | "deliveries.due_claiming_full"
        | "deliveries.due_claiming_behind"
        | "deliveries.fan_out_claiming"
        | "deliveries.fan_out_claiming_filtered"
        | "deliveries.fan_out_claiming_full"
        | "deliveries.fan_out_claiming_behind"
        | "deliveries.fan_out_claiming_many" => deliveries_claim_attempt(db, name).await,
        "numbers.create" => numbers_create(db).await,
        _ => Err(EdgeError::NotFound),
    }
}

/// The dedupe log as the worker's configuration opens it, and its row of carrier event `id`.
async fn logged(env: &Env, id: &str) -> Result<(carrier_events::Log, carrier_events::Row), EdgeError> {
    let log = carrier_events::Log::open(env, &*crate::config::get(env)?);
    let row = log.load(id).await?.ok_or_else(|| EdgeError::unavailable("test build", "no carrier event"))?;
    Ok((log, row))
}

async fn carrier_events_mark_processed(env: &Env, db: &D1Database) -> Result<Value, EdgeError> {
    let id = carrier_event(db).await?;
    let show = format!(
        "SELECT processed_at IS NOT NULL AS processed, attempts FROM carrier_events
         WHERE 'cev_' || printf('%016x', id) = {}",
        quote(&id)
    );
    let (log, row) = logged(env, &id).await?;
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for _ in 0..2 {
        let changed = log.mark_processed(&row, now()).await?;
        r.runs.push((json!(changed), rows(db, &show).await?));
    }
    Ok(r.into_json())
}

async fn carrier_events_mark_failed(env: &Env, db: &D1Database) -> Result<Value, EdgeError> {
    let id = carrier_event(db).await?;
    let show =
        format!("SELECT error, attempts FROM carrier_events WHERE 'cev_' || printf('%016x', id) = {}", quote(&id));
    let (log, row) = logged(env, &id).await?;
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for reason in ["first", "second"] {
        let changed = log.mark_failed(db, &row, reason).await?.changed;
        r.runs.push((json!(changed), rows(db, &show).await?));
    }
    Ok(r.into_json())
}

async fn carrier_events_park_and_wake(env: &Env, db: &D1Database) -> Result<Value, EdgeError> {
    let id = carrier_event(db).await?;
    let carrier_id = new_id("tlx")?;
    let show =
        format!("SELECT woken_at IS NOT NULL AS woken FROM parked_receipts WHERE carrier_event = {}", quote(&id));
    let (log, row) = logged(env, &id).await?;
    log.park(db, &row, Provider::Telnyx, &carrier_id, now()).await?;
    // The send is recorded: a message now has the carrier id (the wake requires it).
    sent_as(db, &carrier_id).await?;
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for _ in 0..2 {
        let results = db::batch(db, vec![carrier_events::wake_stmt(db, Provider::Telnyx, &carrier_id, now())?]).await?;
        let woken = results.first().map(carrier_events::woken).transpose()?.unwrap_or_default();
        r.runs.push((json!(woken), rows(db, &show).await?));
    }
    Ok(r.into_json())
}

/// A receipt parked past its horizon is failed once. One the cron found unwoken but whose
/// message was recorded (and woke it) before the expiry ran is not failed at all.
async fn carrier_events_expire_park(env: &Env, db: &D1Database, name: &str) -> Result<Value, EdgeError> {
    let id = carrier_event(db).await?;
    let carrier_id = new_id("tlx")?;
    let (log, row) = logged(env, &id).await?;
    log.park(db, &row, Provider::Telnyx, &carrier_id, Timestamp::from_unix_millis(1)).await?;
    let park =
        carrier_events::Woken { id: id.clone(), carrier: Provider::Telnyx, carrier_message_id: carrier_id.clone() };
    if name == "carrier_events.expire_after_wake" {
        sent_as(db, &carrier_id).await?;
        db::batch(db, vec![carrier_events::wake_stmt(db, Provider::Telnyx, &carrier_id, now())?]).await?;
    }
    let show = format!(
        "SELECT (SELECT COUNT(*) FROM carrier_events WHERE 'cev_' || printf('%016x', id) = {id} AND error IS NOT NULL)
                  AS failed,
                (SELECT COUNT(*) FROM parked_receipts WHERE carrier_event = {id}) AS parked,
                (SELECT COUNT(*) FROM parked_receipts WHERE carrier_event = {id} AND woken_at > 0) AS woken",
        id = quote(&id)
    );
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for _ in 0..2 {
        let expired = log.expire_park(db, db, &park, now()).await?;
        r.runs.push((json!(expired.changed), rows(db, &show).await?));
    }
    Ok(r.into_json())
}

/// A park whose event is not where the expiry looks (a shard move removed the row from
/// the database it was read in): nothing is failed, and the park is kept for a later
/// sweep, which finds the event where it went.
async fn carrier_events_expire_moved_away(env: &Env, db: &D1Database) -> Result<Value, EdgeError> {
    let id = carrier_event(db).await?;
    let carrier_id = new_id("tlx")?;
    let (log, row) = logged(env, &id).await?;
    log.park(db, &row, Provider::Telnyx, &carrier_id, Timestamp::from_unix_millis(1)).await?;
    let park = carrier_events::Woken { id: id.clone(), carrier: Provider::Telnyx, carrier_message_id: carrier_id };
    raw(
        &log.database(&row.binding)?,
        &format!("DELETE FROM carrier_events WHERE 'cev_' || printf('%016x', id) = {}", quote(&id)),
    )
    .await
    .map_err(|e| EdgeError::unavailable("test build", e))?;
    let show = format!("SELECT COUNT(*) AS parked FROM parked_receipts WHERE carrier_event = {}", quote(&id));
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for _ in 0..2 {
        let expired = log.expire_park(db, db, &park, now()).await?;
        r.runs.push((json!(expired.changed), rows(db, &show).await?));
    }
    Ok(r.into_json())
}

async fn messages_claim(db: &D1Database) -> Result<Value, EdgeError> {
    let m = outbound(db, &account(db).await?).await?;
    let show = format!("SELECT status, dispatch_token, send_attempts FROM messages WHERE id = {}", quote(&m.id));
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    let lease = Timestamp::from_unix_millis(now().unix_millis() + 30_000);
    for token in ["dsp_first", "dsp_second"] {
        let claimed = messages::claim(db, &m.id, token, now(), lease).await?;
        r.runs.push((json!(claimed.is_some()), rows(db, &show).await?));
    }
    Ok(r.into_json())
}

/// Records the send of `m` (claimed as `dsp_check`) twice under one carrier id, `show`ing the
/// rows before and after each run.
async fn record_sent_twice(db: &D1Database, m: &messages::Message, show: &str) -> Result<Value, EdgeError> {
    let mut r = Report { before: rows(db, show).await?, runs: Vec::new() };
    let carrier_id = new_id("tlx")?;
    for _ in 0..2 {
        let (change, _) = messages::record_sent(db, m, "dsp_check", &carrier_id, now()).await?;
        r.runs.push((json!(change.changed), rows(db, show).await?));
    }
    Ok(r.into_json())
}

async fn messages_record_sent(db: &D1Database) -> Result<Value, EdgeError> {
    let m = outbound(db, &account(db).await?).await?;
    let lease = Timestamp::from_unix_millis(now().unix_millis() + 30_000);
    messages::claim(db, &m.id, "dsp_check", now(), lease).await?;
    let show = format!(
        "SELECT (SELECT status FROM messages WHERE id = {id}) AS status,
                (SELECT COUNT(*) FROM outbound_events WHERE resource_id = {id}) AS events,
                (SELECT COUNT(*) FROM usage WHERE resource_id = {id}) AS charges,
                (SELECT COUNT(*) FROM message_status_history WHERE message_id = {id}) AS history",
        id = quote(&m.id)
    );
    record_sent_twice(db, &m, &show).await
}

/// A dispatcher read the message, an erasure of its recipient reached the row, and then the
/// dispatcher records the send with what it read: the `message.sent` body holds the erased
/// row's numbers and no text.
async fn messages_record_sent_after_erasure(db: &D1Database) -> Result<Value, EdgeError> {
    let m = outbound(db, &account(db).await?).await?;
    let lease = Timestamp::from_unix_millis(now().unix_millis() + 30_000);
    messages::claim(db, &m.id, "dsp_check", now(), lease).await?;
    let ids = serde_json::to_string(&[&m.id]).map_err(|e| EdgeError::unavailable("test build", e.to_string()))?;
    db::run(messages::erase::redact(db, &m.to_number, &ids)?).await?;
    let show = format!(
        "SELECT (SELECT status FROM messages WHERE id = {id}) AS status,
                (SELECT COUNT(*) FROM outbound_events WHERE resource_id = {id}) AS events,
                (SELECT COUNT(*) FROM outbound_events WHERE resource_id = {id}
                 AND (instr(payload, {to}) > 0 OR instr(payload, {text}) > 0)) AS naming",
        id = quote(&m.id),
        to = quote(&m.to_number),
        text = quote(&m.text)
    );
    record_sent_twice(db, &m, &show).await
}

async fn messages_apply_report(db: &D1Database) -> Result<Value, EdgeError> {
    let m = outbound(db, &account(db).await?).await?;
    let lease = Timestamp::from_unix_millis(now().unix_millis() + 30_000);
    messages::claim(db, &m.id, "dsp_check", now(), lease).await?;
    let carrier_id = new_id("tlx")?;
    messages::record_sent(db, &m, "dsp_check", &carrier_id, now()).await?;
    let event = carrier_event(db).await?;
    let show = format!(
        "SELECT (SELECT status FROM messages WHERE id = {id}) AS status,
                (SELECT COUNT(*) FROM outbound_events WHERE resource_id = {id} AND type =
                    'message.delivered') AS events,
                (SELECT COUNT(*) FROM message_status_history WHERE message_id = {id}) AS history",
        id = quote(&m.id)
    );
    let report = StatusReport {
        carrier_message_id: carrier_id,
        status: Some(MessageStatus::Delivered),
        carrier_status: "delivered".into(),
        errors: vec![],
        cost: None,
    };
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for _ in 0..2 {
        let change = messages::apply_report(db, &m, MessageStatus::Delivered, &report, &event, now(), None).await?;
        r.runs.push((json!(change.changed), rows(db, &show).await?));
    }
    Ok(r.into_json())
}

async fn messages_insert_inbound(db: &D1Database) -> Result<Value, EdgeError> {
    let account_id = account(db).await?;
    let carrier_id = new_id("tlx")?;
    let show = format!(
        "SELECT (SELECT COUNT(*) FROM messages WHERE carrier_message_id = {c}) AS messages,
                (SELECT COUNT(*) FROM outbound_events e JOIN messages m ON m.id = e.resource_id WHERE
                    m.carrier_message_id = {c}) AS events,
                (SELECT COUNT(*) FROM message_media i JOIN messages m ON m.id = i.message_id WHERE
                    m.carrier_message_id = {c}) AS media",
        c = quote(&carrier_id)
    );
    let inbound = InboundMessage {
        carrier_message_id: carrier_id.clone(),
        from: "+15550000005".into(),
        to: "+15550000006".into(),
        text: "hi".into(),
        media: two_items(),
    };
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for _ in 0..2 {
        let change = messages::insert_inbound(
            db,
            &new_id("msg")?,
            &account_id,
            Provider::Telnyx,
            &inbound,
            now(),
            None,
            true,
            None,
            None,
        )
        .await?
        .0;
        r.runs.push((json!(change.changed), rows(db, &show).await?));
    }
    Ok(r.into_json())
}

async fn media_claim(db: &D1Database) -> Result<Value, EdgeError> {
    let id = inbound_mms(db).await?;
    let show = format!(
        "SELECT copying_until > 0 AS claimed, copy_attempts FROM message_media
         WHERE message_id = {} AND position = 1",
        quote(&id)
    );
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    let lease = Timestamp::from_unix_millis(now().unix_millis() + 90_000);
    for _ in 0..2 {
        let claimed = media::claim(db, &id, 1, now(), lease).await?;
        r.runs.push((json!(claimed.is_some()), rows(db, &show).await?));
    }
    Ok(r.into_json())
}

async fn media_record_stored(db: &D1Database) -> Result<Value, EdgeError> {
    let id = inbound_mms(db).await?;
    let show = format!(
        "SELECT stored_at IS NOT NULL AS stored, stored_size, copying_until FROM message_media
         WHERE message_id = {} AND position = 0",
        quote(&id)
    );
    let lease = Timestamp::from_unix_millis(now().unix_millis() + 90_000);
    media::claim(db, &id, 0, now(), lease).await?;
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for size in [10, 99] {
        let recorded = media::record_stored(db, &id, 0, size, None, now()).await?;
        r.runs.push((json!(recorded), rows(db, &show).await?));
    }
    Ok(r.into_json())
}

async fn messages_fail_undispatched(db: &D1Database) -> Result<Value, EdgeError> {
    let m = outbound(db, &account(db).await?).await?;
    let show = format!(
        "SELECT (SELECT status FROM messages WHERE id = {id}) AS status,
                (SELECT COUNT(*) FROM outbound_events WHERE resource_id = {id} AND type =
                    'message.failed') AS events",
        id = quote(&m.id)
    );
    // The carrier was never called (no claim yet): failing is safe, once.
    let horizon = Timestamp::from_unix_millis(now().unix_millis() - 86_400_000);
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for _ in 0..2 {
        let change = messages::fail_undispatched(db, &m.id, now(), horizon).await?;
        r.runs.push((json!(change.changed), rows(db, &show).await?));
    }
    Ok(r.into_json())
}

async fn calls_record(db: &D1Database, name: &str) -> Result<Value, EdgeError> {
    let account_id = account(db).await?;
    let session = new_id("sess")?;
    let ringing = view(&account_id, &session, CallStatus::Ringing, None, None);
    let id = ringing.info.id.clone();
    let show = format!(
        "SELECT (SELECT status FROM calls WHERE id = {id}) AS status,
                (SELECT billed_minutes FROM calls WHERE id = {id}) AS billed,
                (SELECT COUNT(*) FROM outbound_events WHERE resource_id = {id}) AS events,
                (SELECT COUNT(*) FROM usage WHERE resource_id = {id}) AS charges,
                (SELECT group_concat(outcome || '@' || version) FROM call_legs WHERE call_id = {id}) AS legs",
        id = quote(&id)
    );
    if name != "calls.record" {
        calls::record(db, &ringing, now()).await?;
    }
    let answered_at = now();
    let answered = view(&account_id, &session, CallStatus::InProgress, Some(answered_at), None);
    if name == "calls.record_end" {
        calls::record_answered(db, &answered, answered_at, now()).await?;
    }
    let leg = |outcome| LegView {
        position: 1,
        target: "+15550000007".into(),
        outcome,
        cause: None,
        call_control_id: Some("cc-leg".into()),
        answered_at: None,
        ended_at: None,
    };
    if name == "calls.record_leg" {
        calls::record_leg(db, &id, &leg(LegOutcome::NoAnswer), 2, now()).await?;
    }
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for _ in 0..2 {
        let did = match name {
            "calls.record" => json!(calls::record(db, &ringing, now()).await?.changed),
            "calls.record_answered" => {
                json!(calls::record_answered(db, &answered, answered_at, now()).await?.changed)
            }
            "calls.record_end" => {
                let end =
                    CallEnd { status: CallStatus::Completed, ended_at: now(), duration_secs: 61, billable_minutes: 2 };
                json!(calls::record_end(db, &answered, end, now()).await?.changed)
            }
            // An older write (version 1, still dialing) after the newer one changes nothing.
            _ => json!(calls::record_leg(db, &id, &leg(LegOutcome::Dialing), 1, now()).await?),
        };
        r.runs.push((did, rows(db, &show).await?));
    }
    Ok(r.into_json())
}

/// The rows of a delivery check `name`: an endpoint, an event and the delivery under test (but
/// for a fan-out's check, which writes it), with what the check's name asks for around it.
pub(super) struct DeliveryFixture {
    account_id: String,
    pub(super) endpoint: String,
    event: String,
    pub(super) delivery: String,
}

pub(super) async fn delivery_fixture(db: &D1Database, name: &str) -> Result<DeliveryFixture, EdgeError> {
    let account_id = account(db).await?;
    let (endpoint, event, delivery) = (new_id("ep")?, new_id("evt")?, new_id("dlv")?);
    let at = now().unix_millis();
    let status = if name == "deliveries.redrive" { "failed" } else { "pending" };
    // A delivery waiting in its endpoint's line, for the takes; the filtered endpoint's is taken
    // or read without its attempt claimed (its filter decides at the gate).
    let waiting = i32::from(name.starts_with("deliveries.next_in_line"));
    let filter = if name.ends_with("_filtered") { "'data.text = \"x\"'" } else { "NULL" };
    // A full endpoint: it takes one attempt at once, and another delivery's is in flight.
    let full = name.ends_with("_full");
    let max_in_flight = if full { 1 } else { 4 };
    let setup = [
        format!(
            "INSERT INTO webhook_endpoints (id, account_id, url, event_types, secret, filter, max_in_flight,
            created_at, updated_at) VALUES ({}, {}, 'https://example.com/hook', '[\"message.received\"]',
                'whsec_x', {filter}, {max_in_flight}, {at}, {at})",
            quote(&endpoint),
            quote(&account_id)
        ),
        format!(
            "INSERT INTO outbound_events (id, account_id, type, resource_id, payload, created_at)
             VALUES ({}, {}, 'message.received', {}, '{{}}', {at})",
            quote(&event),
            quote(&account_id),
            quote(&event)
        ),
        format!(
            "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status,
             attempts, waiting, next_attempt_at, created_at, updated_at) VALUES ({}, {}, {}, {}, 'initial',
                 '{status}', 0, {waiting}, {at}, {at},
                 {at})",
            quote(&delivery),
            quote(&event),
            quote(&endpoint),
            quote(&account_id)
        ),
    ];
    let fanned_out = name.starts_with("deliveries.fan_out_claiming");
    for sql in setup.iter().take(if fanned_out { 2 } else { 3 }) {
        raw(db, sql).await.map_err(|e| EdgeError::unavailable("test build", e))?;
    }
    // Two more endpoints subscribed to the event (`_many`), like the first.
    if name.ends_with("_many") {
        for _ in 0..2 {
            let another = setup[0].replace(&quote(&endpoint), &quote(&new_id("ep")?));
            raw(db, &another).await.map_err(|e| EdgeError::unavailable("test build", e))?;
        }
    }
    // Another, older delivery to the endpoint: in flight (`_full`), or waiting in its line with
    // room to spare (`_behind`: the one under test is behind it).
    let behind = name.ends_with("_behind");
    if full || behind {
        let (attempts, waiting, lease) = if full { (1, 0, at + 90_000) } else { (0, 1, 0) };
        let other = format!(
            "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, attempts, waiting,
                 next_attempt_at, in_flight_until, created_at, updated_at) VALUES ({}, {}, {}, {}, 'replay',
                 'pending', {attempts}, {waiting}, {at}, {lease}, {older}, {older})",
            quote(&new_id("dlv")?),
            quote(&event),
            quote(&endpoint),
            quote(&account_id),
            older = at - 1,
        );
        raw(db, &other).await.map_err(|e| EdgeError::unavailable("test build", e))?;
    }
    Ok(DeliveryFixture { account_id, endpoint, event, delivery })
}

async fn deliveries_claim_attempt(db: &D1Database, name: &str) -> Result<Value, EdgeError> {
    let DeliveryFixture { account_id, endpoint, event, delivery } = delivery_fixture(db, name).await?;
    let waiting = name.starts_with("deliveries.next_in_line");
    let show = format!(
        "SELECT status, attempts, waiting, in_flight_until > 0 AS in_flight FROM webhook_deliveries
         WHERE id = {} OR (event_id = {} AND kind = 'initial') ORDER BY attempts DESC, endpoint_id",
        quote(&delivery),
        quote(&event)
    );
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for _ in 0..2 {
        let did = if name == "deliveries.redrive" {
            json!(format!("{:?}", deliveries::redrive(db, &delivery, now()).await?))
        } else if name.starts_with("deliveries.due_claiming") {
            let lease = Timestamp::from_unix_millis(now().unix_millis() + 60_000);
            match deliveries::due_claiming(db, &delivery, now(), lease).await? {
                // The attempt's number when the read claimed it.
                deliveries::Queued::Claimed(_, number) => json!(number),
                deliveries::Queued::InLine => json!("in line"),
                deliveries::Queued::Read(Some(_)) => json!("read"),
                deliveries::Queued::Read(None) => json!("no such delivery"),
            }
        } else if name.starts_with("deliveries.fan_out_claiming") {
            // The batch that wrote the event, under a lease, from its fan-out on: what it claimed
            // and what it left to queue messages.
            let (at, lease) = (now(), Timestamp::from_unix_millis(now().unix_millis() + 60_000));
            let kind = EventType::MessageReceived;
            let statements = vec![
                deliveries::fanout::fan_out(db, &event, &account_id, kind, at, Some(lease))?,
                deliveries::fanout::pending(db, &event, at, Some(lease))?,
            ];
            let pending = deliveries::fanout::pending_of(&db::batch(db, statements).await?)?;
            json!({"claimed": pending.claimed.len(), "queued": pending.queued.len()})
        } else if waiting {
            let lease = Timestamp::from_unix_millis(now().unix_millis() + 60_000);
            let lease = (name != "deliveries.next_in_line_unleased").then_some(lease);
            match deliveries::next_in_line(db, &endpoint, now(), lease).await? {
                // The attempt's number when the take claimed it.
                Some(taken) => taken.claimed.map_or(json!("taken"), |number| json!(number)),
                None => json!("nothing taken"),
            }
        } else {
            let lease = Timestamp::from_unix_millis(now().unix_millis() + 60_000);
            let claim = deliveries::claim_attempt(db, &delivery, &endpoint, 1, lease, now(), 0).await?;
            json!(matches!(claim, deliveries::Claim::Claimed(_)))
        };
        r.runs.push((did, rows(db, &show).await?));
    }
    Ok(r.into_json())
}

async fn numbers_create(db: &D1Database) -> Result<Value, EdgeError> {
    let (first, second) = (account(db).await?, account(db).await?);
    let number = number(&format!("+1555{}", now().unix_millis() % 10_000_000))?;
    let show = format!("SELECT account_id FROM phone_numbers WHERE phone_number = {}", quote(number.as_str()));
    let mut r = Report { before: rows(db, &show).await?, runs: Vec::new() };
    for account_id in [&first, &second] {
        let id = new_id("num")?;
        let new = numbers::NewNumber {
            id: &id,
            account_id,
            number: &number,
            targets: &[],
            ring_timeout_secs: 30,
            carrier: None,
        };
        let created = numbers::create(db, new, now()).await?;
        r.runs.push((json!(created), rows(db, &show).await?));
    }
    let mut report = r.into_json();
    report["first_account"] = json!(first);
    Ok(report)
}
