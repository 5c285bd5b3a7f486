//! The `phone_numbers` table: which account owns a number (`UNIQUE (phone_number)`), and the
//! number's ring plan, parsed once here into a [`RingPlan`].

use crate::store::Reply;
use exactly_core::number::PhoneNumber;
use exactly_core::ring_plan::RingPlan;
use exactly_core::{Provider, Timestamp};
use worker::{D1Database, D1PreparedStatement};

use crate::error::EdgeError;
use crate::store::{self as db, int, text, time};

/// Who owns a number, and whom it rings.
#[derive(Clone, Debug)]
pub struct Owner {
    /// The owning account.
    pub account_id: String,
    /// The ring plan; `None` when the number rings nobody.
    pub plan: Option<RingPlan>,
    /// How long each target rings.
    pub ring_timeout_secs: u32,
    /// Whether the number's carrier is recorded ([`learn_carrier`] has nothing to do).
    pub carrier_known: bool,
}

/// The owner of `number`, if any account has it.
pub async fn owner(db: &D1Database, number: &str) -> Result<Option<Owner>, EdgeError> {
    owner_in(&db::query(owner_query(db, number)?).await?, number)
}

/// The query of [`owner`], to run in a batch; [`owner_in`] reads its result.
pub fn owner_query(db: &D1Database, number: &str) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "SELECT account_id, ring_targets, ring_timeout_secs, carrier FROM phone_numbers WHERE phone_number = ?1",
        &[text(number)],
    )
}

/// The owner of `number` in the result of its [`owner_query`].
pub fn owner_in(result: &Reply, number: &str) -> Result<Option<Owner>, EdgeError> {
    crate::store::row! {
        struct Row {
            account_id: String,
            ring_targets: String,
            ring_timeout_secs: i64,
            carrier: Option<String>,
        }
    }
    let Some(r) = db::rows::<Row>(result)?.into_iter().next() else { return Ok(None) };
    // A column that is not a JSON list of numbers is an error where it is read. Plans are checked
    // when a number is saved; a stored list that a later rule refuses rings nobody rather than
    // guessing whom.
    let targets: Vec<String> = serde_json::from_str(&r.ring_targets)
        .map_err(|e| EdgeError::unavailable("store", format!("the ring targets of {number} do not read: {e}")))?;
    Ok(Some(Owner {
        account_id: r.account_id,
        plan: RingPlan::new(targets).ok(),
        ring_timeout_secs: u32::try_from(r.ring_timeout_secs)
            .map_err(|_| EdgeError::unavailable("store", format!("the ring timeout of {number} is out of range")))?,
        carrier_known: r.carrier.is_some(),
    }))
}

/// What an inbound message needs of its number's owner.
#[derive(Clone, Debug)]
pub struct Recipient {
    /// The owning account.
    pub account_id: String,
    /// Whether the number's carrier was recorded when it was read: once set it stays set, so a
    /// remembered `false` costs only a [`learn_carrier`] that changes nothing.
    pub carrier_known: bool,
}

thread_local! {
    /// Recipients read in this isolate, by number. A number's owner never changes: no statement
    /// updates `phone_numbers.account_id` or deletes a row (edge/tests/layout.rs checks it), so
    /// a remembered owner is the owner. Only found owners are remembered: a number no account
    /// has may be assigned at any time.
    static RECIPIENTS: std::cell::RefCell<std::collections::HashMap<String, Recipient>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The most recipients an isolate remembers; past it the memory starts again empty.
const RECIPIENTS_MAX: usize = 4096;

/// Remembers the owner of `number`, read from `phone_numbers`.
pub fn remember(number: &str, owner: &Owner) {
    RECIPIENTS.with(|r| {
        let mut r = r.borrow_mut();
        if r.len() >= RECIPIENTS_MAX {
            r.clear();
        }
        r.insert(
            number.to_owned(),
            Recipient { account_id: owner.account_id.clone(), carrier_known: owner.carrier_known },
        );
    });
}

/// After a batch with [`learn_carrier`] for `number` committed: its carrier is recorded now.
pub fn learned(number: &str) {
    RECIPIENTS.with(|r| {
        if let Some(recipient) = r.borrow_mut().get_mut(number) {
            recipient.carrier_known = true;
        }
    });
}

/// The owner of `number` as this isolate read it before, if it did.
pub fn remembered(number: &str) -> Option<Recipient> {
    RECIPIENTS.with(|r| r.borrow().get(number).cloned())
}

/// The statement that sets a number's carrier, unless it is set: the one its messages come from.
pub fn learn_carrier(db: &D1Database, number: &str, carrier: Provider) -> Result<D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "UPDATE phone_numbers SET carrier = ?2 WHERE phone_number = ?1 AND carrier IS NULL",
        &[text(number), text(carrier.as_str())],
    )
}

/// Whether `account_id` owns `number`.
pub async fn owned_by(db: &D1Database, number: &PhoneNumber, account_id: &str) -> Result<bool, EdgeError> {
    crate::store::row! {
        struct Id {
            #[allow(dead_code)]
            id: String,
        }
    }
    let row: Option<Id> = db::first(db::stmt(
        db,
        "SELECT id FROM phone_numbers WHERE phone_number = ?1 AND account_id = ?2",
        &[text(number.as_str()), text(account_id)],
    )?)
    .await?;
    Ok(row.is_some())
}

/// A number to assign.
pub struct NewNumber<'a> {
    pub id: &'a str,
    pub account_id: &'a str,
    pub number: &'a PhoneNumber,
    pub targets: &'a [String],
    pub ring_timeout_secs: u32,
    /// The carrier its messages are sent through; `None` until its first message says.
    pub carrier: Option<&'a str>,
}

/// Assigns a number to an account with its ring targets, unless another has it. Returns whether
/// it was assigned.
pub async fn create(db: &D1Database, new: NewNumber<'_>, now: Timestamp) -> Result<bool, EdgeError> {
    Ok(db::run(create_stmt(db, new, now, false)?).await? == 1)
}

/// The insert of [`create`]. `claimed`: only if `number_routes` in the same database holds the
/// number for this account, for the batch that claims it there
/// ([`crate::store::routes::claim_number`]).
pub fn create_stmt(
    db: &D1Database,
    new: NewNumber<'_>,
    now: Timestamp,
    claimed: bool,
) -> Result<D1PreparedStatement, EdgeError> {
    let NewNumber { id, account_id, number, targets, ring_timeout_secs, carrier } = new;
    let targets = serde_json::to_string(targets).map_err(|e| EdgeError::platform("encode", e))?;
    let guard = match claimed {
        true => "WHERE EXISTS (SELECT 1 FROM number_routes WHERE phone_number = ?3 AND account_id = ?2)",
        false => "WHERE true",
    };
    db::stmt(
        db,
        &format!(
            "INSERT INTO phone_numbers (id, account_id, phone_number, ring_targets, ring_timeout_secs, carrier, created_at)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7 {guard}
             ON CONFLICT (phone_number) DO NOTHING"
        ),
        &[
            text(id),
            text(account_id),
            text(number.as_str()),
            text(&targets),
            int(i64::from(ring_timeout_secs)),
            db::opt_text(carrier),
            time(now),
        ],
    )
}

/// Erasure: the next page of the account's (or every account's) numbers that ring `number`, after
/// row `after` (`store::erasures::window`).
pub async fn erasure_page(
    db: &D1Database,
    number: &str,
    account: Option<&str>,
    after: i64,
) -> Result<crate::store::erasures::Found, EdgeError> {
    crate::store::erasures::window(
        db,
        crate::store::erasures::Table::PhoneNumbers,
        "SELECT rowid AS row_no, id, NULL AS body FROM phone_numbers
         WHERE rowid > ?1 AND rowid <= ?2
           AND EXISTS (SELECT 1 FROM json_each(ring_targets) WHERE value = ?3) AND (?4 IS NULL OR account_id = ?4)
         ORDER BY rowid LIMIT 25",
        &[text(number), crate::store::opt_text(account)],
        after,
    )
    .await
}

/// Erasure: `number` leaves the ring plans of the numbers `ids` (a JSON array); the other targets
/// keep their order. How many plans rang it.
pub async fn drop_target(db: &D1Database, number: &str, ids: &str) -> Result<usize, EdgeError> {
    db::run(db::stmt(
        db,
        "UPDATE phone_numbers SET ring_targets =
             (SELECT json_group_array(t.value) FROM json_each(phone_numbers.ring_targets) t WHERE t.value != ?1)
         WHERE id IN (SELECT value FROM json_each(?2))
           AND EXISTS (SELECT 1 FROM json_each(ring_targets) WHERE value = ?1)",
        &[text(number), text(ids)],
    )?)
    .await
}

/// Which of `numbers` (a JSON array) `account` owns.
pub async fn owned_of(db: &D1Database, account: &str, numbers: &str) -> Result<Vec<String>, EdgeError> {
    crate::store::row! {
        struct Owned {
            phone_number: String,
        }
    }
    let owned: Vec<Owned> = db::all(db::stmt(
        db,
        "SELECT phone_number FROM phone_numbers
         WHERE account_id = ?1 AND phone_number IN (SELECT value FROM json_each(?2))",
        &[text(account), text(numbers)],
    )?)
    .await?;
    Ok(owned.into_iter().map(|o| o.phone_number).collect())
}
