//! The transactional outbox: every customer event is inserted in the same D1 batch as the
//! change it announces, conditioned on that change having happened (`WHERE changes() = 1`, the
//! statement just before it in the batch being the guarded UPDATE or INSERT). The same batch
//! fans the event out: one `webhook_deliveries` row per enabled endpoint of the account
//! subscribed to its type, written only if the event row was (its id is new in this batch). The
//! deliveries' statements are `store::deliveries`'s, which alone writes that table.

use exactly_core::webhook::EventType;
use exactly_core::Timestamp;
use serde_json::{json, Value};
use wasm_bindgen::JsValue;
use worker::{D1Database, D1PreparedStatement};

use crate::store::Cursor;

use crate::error::EdgeError;
use crate::platform::new_id;
use crate::store::deliveries::fanout;
use crate::store::{self as db};

/// A customer event about to be written.
#[derive(Clone, Debug)]
pub struct Event {
    /// `evt_...`, the `webhook-id` of every delivery of it.
    pub id: String,
    /// The account it belongs to.
    pub account_id: String,
    /// `message.delivered`, `call.completed`, ...
    pub event_type: EventType,
    /// The message or call it is about.
    pub resource_id: String,
    /// The whole webhook body (docs/contract.md §6).
    pub payload: String,
}

impl Event {
    /// A new event whose `data` is the resource as the API shows it after the change.
    pub fn new(
        account_id: &str,
        event_type: EventType,
        resource_id: &str,
        data: Value,
        now: Timestamp,
    ) -> Result<Self, EdgeError> {
        let id = new_id("evt")?;
        let payload = json!({
            "id": id, "type": event_type.as_str(), "created_at": now.to_rfc3339(), "account_id": account_id, "data": data,
        })
        .to_string();
        Ok(Event { id, account_id: account_id.to_owned(), event_type, resource_id: resource_id.to_owned(), payload })
    }

    /// The INSERT that writes this event only if the previous statement of the batch changed
    /// exactly one row. At most one event of a type per resource.
    ///
    /// An event about a message is built from the row its writer read; when an erasure reached
    /// that row since (a number of it reads `[erased]`, `messages::erase::ERASED`), the body
    /// takes the row's numbers and no text or media instead: an erasure is never undone by an
    /// event whose writer was under way (docs/contract.md §5, "Erasure").
    pub fn insert_if_changed(&self, db: &D1Database, now: Timestamp) -> Result<D1PreparedStatement, EdgeError> {
        self.insert(db, &format!("{INSERT_EVENT} WHERE changes() = 1 ON CONFLICT (resource_id, type) DO NOTHING"), now)
    }

    /// The INSERT that writes this event unless an event of its type about its resource exists:
    /// for an event no earlier statement guards, the unique `(resource_id, type)` is the guard,
    /// so repeated and concurrent writers write it once. `changes()` after it says whether this
    /// one did.
    pub fn insert_once(&self, db: &D1Database, now: Timestamp) -> Result<D1PreparedStatement, EdgeError> {
        // `WHERE true`: an INSERT ... SELECT before ON CONFLICT needs a WHERE, or SQLite reads the
        // ON as a join's.
        self.insert(db, &format!("{INSERT_EVENT} WHERE true ON CONFLICT (resource_id, type) DO NOTHING"), now)
    }

    /// [`INSERT_EVENT`] completed by `sql`, bound to this event.
    fn insert(&self, db: &D1Database, sql: &str, now: Timestamp) -> Result<D1PreparedStatement, EdgeError> {
        db::stmt(
            db,
            sql,
            &[
                db::text(&self.id),
                db::text(&self.account_id),
                db::text(self.event_type.as_str()),
                db::text(&self.resource_id),
                db::text(&self.payload),
                db::time(now),
            ],
        )
    }
}

/// The INSERT ... SELECT of an event, up to its WHERE. The body carries the resource's next
/// `sequence` (docs/contract.md §6), counted in the same statement, so no two events of one
/// resource share a number; about a message an erasure reached meanwhile, it carries what the row
/// keeps.
const INSERT_EVENT: &str =
    "INSERT INTO outbound_events (id, account_id, type, resource_id, payload, sequence, created_at)
     SELECT ?1, ?2, ?3, ?4,
            json_set(CASE WHEN e.id IS NULL THEN ?5
                          ELSE json_set(?5, '$.data.from', e.from_number, '$.data.to', e.to_number,
                                        '$.data.text', '', '$.data.media', json('[]')) END,
                     '$.sequence', s.next),
            s.next, ?6
     FROM (SELECT COALESCE(MAX(sequence), 0) + 1 AS next FROM outbound_events WHERE resource_id = ?4) s
          LEFT JOIN messages e ON e.id = ?4 AND (e.from_number = '[erased]' OR e.to_number = '[erased]')";

impl Event {
    /// The fan-out, for the same batch: one pending delivery per endpoint subscribed to this
    /// event's type, only if this batch inserted the event, each where its first claim would put
    /// it ([`fanout::fan_out`]). It does not use `changes()`, so it may stand anywhere after the
    /// event's INSERT; it sees the endpoints as the statements before it left them.
    pub fn fan_out(&self, db: &D1Database, now: Timestamp) -> Result<D1PreparedStatement, EdgeError> {
        self.fan_out_claiming(db, now, None)
    }

    /// [`Event::fan_out`], with a `lease`: the first attempt of one delivery whose endpoint would
    /// let it through now is claimed under it, for the batch's caller to send itself.
    pub fn fan_out_claiming(
        &self,
        db: &D1Database,
        now: Timestamp,
        lease: Option<Timestamp>,
    ) -> Result<D1PreparedStatement, EdgeError> {
        fanout::fan_out(db, &self.id, &self.account_id, self.event_type, now, lease)
    }

    /// The statement that ends a batch which fans the event out, so that the batch returns the
    /// deliveries to enqueue and the one it claimed under `lease` ([`Change::announced`]), and
    /// announcing them needs no read ([`fanout::pending`]).
    pub fn pending_deliveries(
        &self,
        db: &D1Database,
        now: Timestamp,
        lease: Option<Timestamp>,
    ) -> Result<D1PreparedStatement, EdgeError> {
        fanout::pending(db, &self.id, now, lease)
    }
}

crate::store::row! {
    /// A stored customer event: its id, the webhook body, when it was written.
    #[derive(Debug)]
    pub struct Stored {
        pub id: String,
        pub event_type: EventType = "type",
        pub payload: String,
        pub created_at: Timestamp,
    }
}

/// One event of one account.
pub async fn get(db: &D1Database, account_id: &str, id: &str) -> Result<Option<Stored>, EdgeError> {
    db::first(db::stmt(
        db,
        "SELECT id, type, payload, created_at FROM outbound_events WHERE id = ?1 AND account_id = ?2",
        &[db::text(id), db::text(account_id)],
    )?)
    .await
}

/// Which events a list shows.
#[derive(Debug, Default)]
pub struct Filter<'a> {
    /// Only this type.
    pub event_type: Option<&'a str>,
    /// Only events about this message or call.
    pub resource_id: Option<&'a str>,
    /// Written at or after this time.
    pub since: Option<Timestamp>,
    /// Written before this time.
    pub until: Option<Timestamp>,
}

/// A page of an account's events, newest first, filtered.
pub async fn list(
    db: &D1Database,
    account_id: &str,
    filter: &Filter<'_>,
    cursor: Option<Cursor>,
    limit: u32,
) -> Result<Vec<Stored>, EdgeError> {
    let (at, after) = Cursor::args(&cursor);
    let time = |t: Option<Timestamp>| t.map_or(JsValue::NULL, db::time);
    db::all(db::stmt(
        db,
        // A test send of a real type is listed only by its id (or with `endpoint.test`'s own).
        "SELECT id, type, payload, created_at FROM outbound_events WHERE account_id = ?1 AND (?2 IS NULL OR type = ?2)
           AND (test = 0 OR type = 'endpoint.test')
           AND (?6 IS NULL OR resource_id = ?6) AND (?7 IS NULL OR created_at >= ?7) AND (?8 IS NULL OR created_at < ?8)
           AND (?3 IS NULL OR created_at < ?3 OR (created_at = ?3 AND id < ?4))
         ORDER BY created_at DESC, id DESC LIMIT ?5",
        &[
            db::text(account_id),
            db::opt_text(filter.event_type),
            at,
            after,
            db::int(i64::from(limit)),
            db::opt_text(filter.resource_id),
            time(filter.since),
            time(filter.until),
        ],
    )?)
    .await
}

/// A test send an account asked for.
pub struct TestSend<'a> {
    pub account_id: &'a str,
    /// The one endpoint it goes to.
    pub endpoint_id: &'a str,
    /// `endpoint.test`, or a type whose catalog example is sent.
    pub event_type: EventType,
}

/// A test event for one endpoint and its one delivery, in one batch: marked `"test": true`, with
/// `data` the endpoint (`endpoint.test`) or the catalog's example of its type. Returns the event
/// and the delivery's id.
pub async fn test_event(db: &D1Database, test: &TestSend<'_>, now: Timestamp) -> Result<(Event, String), EdgeError> {
    let TestSend { account_id, endpoint_id, event_type } = *test;
    // Each test is its own resource, so every test is a new event, however many come at once.
    let resource = format!("{endpoint_id}@{}", new_id("test")?);
    let data = match event_type {
        EventType::EndpointTest => json!({ "endpoint_id": endpoint_id }),
        other => {
            let entry = exactly_core::catalog::entry(other)
                .ok_or_else(|| EdgeError::invalid("event_type", format!("no example of {other}")))?;
            serde_json::from_str(entry.example).map_err(|e| EdgeError::platform("catalog", e))?
        }
    };
    let mut event = Event::new(account_id, event_type, &resource, data, now)?;
    event.payload = mark_test(&event.payload)?;
    let delivery = new_id("dlv")?;
    db::batch(
        db,
        vec![
            db::stmt(
                db,
                "INSERT INTO outbound_events (id, account_id, type, resource_id, payload, sequence, created_at, test)
             VALUES (?1, ?2, ?3, ?4, json_set(?5, '$.sequence', 1), 1, ?6, 1)",
                &[
                    db::text(&event.id),
                    db::text(account_id),
                    db::text(event.event_type.as_str()),
                    db::text(&resource),
                    db::text(&event.payload),
                    db::time(now),
                ],
            )?,
            fanout::insert_initial(db, &delivery, &event.id, endpoint_id, account_id, now)?,
        ],
    )
    .await?;
    Ok((event, delivery))
}

/// `payload` with `"test": true`.
fn mark_test(payload: &str) -> Result<String, EdgeError> {
    let mut body: Value = serde_json::from_str(payload).map_err(|e| EdgeError::platform("encode", e))?;
    body["test"] = Value::Bool(true);
    Ok(body.to_string())
}

/// What a guarded change committed: whether it happened, and the customer event it wrote.
#[derive(Debug, Default)]
pub struct Change {
    /// The guarded statement changed a row.
    pub changed: bool,
    /// The event written with it, whose deliveries are now pending.
    pub event: Option<String>,
    /// The event's deliveries to enqueue (id, endpoint URL), when the batch returned them
    /// ([`Change::announced`]); `None`: read them before enqueueing.
    pub pending: Option<Vec<(String, String)>>,
    /// The event's deliveries whose first attempt the batch claimed for its caller to send.
    pub claimed: Claimed,
}

/// Deliveries whose first attempt was claimed with their event's batch, as the attempt needs
/// them, and when (the claims' time, from which their lease runs).
#[derive(Default)]
pub struct Claimed {
    pub dues: Vec<fanout::Due>,
    pub at: Option<Timestamp>,
    /// Why what was claimed could not be read back: it is left to its lease and the sweeper,
    /// whose read of it fails it visibly if it still does not read.
    pub unread: Option<String>,
}

impl std::fmt::Debug for Claimed {
    /// Their ids only: a delivery carries its endpoint's secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.dues.iter().map(|due| &due.id)).finish()
    }
}

impl Change {
    /// The change of a batch whose first statement was the guard and which wrote `event`.
    pub fn of(results: &[crate::store::Reply], event: Option<&Event>) -> Self {
        let changed = results.first().map(db::changes) == Some(1);
        let event = if changed { event.map(|e| e.id.clone()) } else { None };
        Change { changed, event, ..Change::default() }
    }

    /// [`Change::of`] a batch that ended with `event`'s [`Event::pending_deliveries`]: its
    /// deliveries come with it, and the attempts it claimed at `claimed_at` (the batch's time,
    /// when it claimed under a lease).
    pub fn announced(
        results: &[crate::store::Reply],
        event: &Event,
        claimed_at: Option<Timestamp>,
    ) -> Result<Self, EdgeError> {
        let mut change = Change::of(results, Some(event));
        if change.changed {
            let pending = fanout::pending_of(results)?;
            change.pending = Some(pending.queued);
            // The event's other deliveries are announced whatever became of its claim.
            if let Some(at) = claimed_at {
                change.claimed = Claimed { dues: pending.claimed, at: Some(at), unread: pending.unread };
            }
        }
        Ok(change)
    }

    /// The deliveries to enqueue for the event this change wrote (none when it wrote none):
    /// those its batch returned, or else its event's pending first attempts, read now. If their
    /// enqueueing fails, the sweeper enqueues them once they are overdue.
    pub async fn to_enqueue(&self, db: &D1Database) -> Result<Vec<String>, EdgeError> {
        let Some(event_id) = &self.event else { return Ok(Vec::new()) };
        let pending = match &self.pending {
            Some(pending) => pending.clone(),
            None => fanout::pending_initial(db, event_id, crate::platform::now()).await?,
        };
        Ok(pending
            .into_iter()
            .filter(|(_, url)| !crate::faults::delivery_message_lost(url))
            .map(|(id, _)| id)
            .collect())
    }
}

/// The deliveries to enqueue for these events (operational signals, each written or not): each
/// one's pending first attempts.
pub async fn to_enqueue_for(db: &D1Database, event_ids: &[String]) -> Result<Vec<String>, EdgeError> {
    let mut ids = Vec::new();
    for event_id in event_ids {
        ids.extend(Change { changed: true, event: Some(event_id.clone()), ..Change::default() }.to_enqueue(db).await?);
    }
    Ok(ids)
}

/// One page of the retention of customer events (run by the cron's retention step): the events
/// written more than `RETENTION_CUSTOMER_EVENT_DAYS` ago, in rowid order from the watermark, with
/// their deliveries and attempts, in one batch of at most [`crate::store::retention::BATCH`]
/// rows. An event with a delivery still pending (held by a paused or disabled endpoint, in a
/// line, behind a circuit) is kept. `pruned` counts the events deleted.
pub async fn prune_events(
    db: &D1Database,
    limits: crate::config::Retention,
    now: Timestamp,
) -> Result<crate::store::retention::Page, EdgeError> {
    use crate::store::retention;
    crate::store::row! {
        struct Row {
            id: i64,
            created_at: Timestamp,
        }
    }
    let from = retention::mark(db, "customer_events").await?;
    let window: Vec<Row> = db::all(db::stmt(
        db,
        "SELECT rowid AS id, created_at FROM outbound_events WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
        &[db::int(from), db::int(retention::BATCH)],
    )?)
    .await?;
    let cutoff = now.unix_millis() - limits.customer_event_days * retention::DAY_MILLIS;
    let Some(upto) = window.iter().take_while(|r| r.created_at.unix_millis() < cutoff).last().map(|r| r.id) else {
        return Ok(retention::Page::default());
    };
    let more = window.len() == retention::BATCH as usize && window.last().map(|r| r.id) == Some(upto);
    let mut statements: Vec<D1PreparedStatement> =
        crate::store::deliveries::prune::of_settled_events(db, from, upto)?.into();
    statements.push(db::stmt(
        db,
        "DELETE FROM outbound_events WHERE rowid > ?1 AND rowid <= ?2
           AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p WHERE p.event_id = outbound_events.id)",
        &[db::int(from), db::int(upto)],
    )?);
    statements.push(retention::set_mark(db, "customer_events", from, upto)?);
    let results = db::batch(db, statements).await?;
    let moved = results.get(3).map(db::changes).unwrap_or(0) == 1;
    Ok(retention::Page { pruned: results.get(2).map(db::changes).unwrap_or(0), more: moved && more })
}

/// The statement that erases `number` from the bodies of the events about the resources `ids`
/// (a JSON array): the number, wherever it is a whole JSON string, reads as `erased`, and a
/// message's text and media are emptied.
pub fn erase(db: &D1Database, number: &str, ids: &str, erased: &str) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE outbound_events SET payload = CASE
             WHEN type LIKE 'message.%'
                 THEN json_set(replace(payload, ?1, ?3), '$.data.text', '', '$.data.media', json('[]'))
             ELSE replace(payload, ?1, ?3) END
         WHERE resource_id IN (SELECT value FROM json_each(?2))",
        // As whole JSON strings: a longer number that starts with it is another number.
        &[db::text(&format!("\"{number}\"")), db::text(ids), db::text(&format!("\"{erased}\""))],
    )
}
