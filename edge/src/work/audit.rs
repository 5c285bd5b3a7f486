//! The running audit (docs/contract.md, "The running audit"): a part of the cron's tick in each
//! account database that reads the rows written since its last run and checks the product's
//! promises against them, with the same rules the product applies:
//!
//! - `status_order`: every move of a message's status is one the lattice allows from the
//!   status before it ([`exactly_core::message::transition`]), so no status went back and no
//!   fact was applied twice; and a move to `sent` has its charge beside it.
//! - `charges`: every charge matches what it bills: a message's segments (one unit for an MMS)
//!   once it was sent, a call's billed minutes. A charge whose message or call is gone (an
//!   erasure) has nothing left to compare and is passed.
//! - `one_success`: no delivery succeeded twice, so its endpoint received it under one webhook
//!   id once.
//!
//! Each check reads one page ([`audit::PAGE`] rows) after its position per run; a full page
//! goes on at once with the next, up to the cron's `MAX_ROUNDS` a tick. Each finding raises
//! `audit.violation` once, naming the rows.

use exactly_core::message::{transition, MessageStatus, Transition};

use crate::error::EdgeError;
use crate::platform::now;
use crate::store::audit::{self, PAGE};
use crate::store::signals::{self, Finding};
use crate::store::usage::Kind;
use crate::store::AccountDb;

/// What one run did: rows read, findings raised, and whether a check's page was full.
#[derive(Debug, Default)]
pub struct Report {
    pub checked: usize,
    pub found: usize,
    pub more: bool,
}

/// Runs one page of every check in `account`'s database, the binding `database`.
pub async fn run(account: &AccountDb, database: &str) -> Result<Report, EdgeError> {
    let db = account.db();
    let at = now();
    let mut report = Report::default();
    let mut raised = Vec::new();
    for standing in audit::standings(db).await? {
        let (last, findings, read) = match Check::from_name(&standing.name) {
            Some(Check::StatusOrder) => {
                let rows = audit::moves(db, standing.position).await?;
                (rows.last().map(|r| r.id), rows.iter().filter_map(status_order).collect::<Vec<_>>(), rows.len())
            }
            Some(Check::Charges) => {
                let rows = audit::charges(db, standing.position).await?;
                (rows.last().map(|r| r.id), rows.iter().filter_map(charge).collect(), rows.len())
            }
            Some(Check::OneSuccess) => {
                let rows = audit::successes(db, standing.position).await?;
                (rows.last().map(|r| r.id), rows.iter().filter_map(one_success).collect(), rows.len())
            }
            None => continue,
        };
        let Some(last) = last else { continue };
        let mut found = 0;
        for finding in &findings {
            let ids = signals::audit_violation(db, finding, database, at).await?;
            found += usize::from(!ids.is_empty());
            raised.extend(ids);
        }
        // A run that moved it first read the same rows; their findings are raised once.
        audit::advance(db, &standing.name, standing.position, last, read, found, at).await?;
        report.checked += read;
        report.found += found;
        report.more |= read as i64 == PAGE;
    }
    crate::queues::deliver_many(account, crate::store::outbox::to_enqueue_for(db, &raised).await?).await?;
    Ok(report)
}

exactly_core::text_enum! {
    /// The audit's checks, by the names their rows in `audit_checks` have.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Check {
        StatusOrder = "status_order",
        Charges = "charges",
        OneSuccess = "one_success",
    }
}

/// A message's move that the lattice does not allow from the status before it, or a move to
/// `sent` without its charge.
fn status_order(row: &audit::Moved) -> Option<Finding> {
    let name = || format!("message_status_history:{}", row.id);
    let Some(to) = MessageStatus::from_name(&row.status) else {
        return Some(finding(
            Check::StatusOrder,
            name(),
            format!("message {} has the unknown status {}", row.message_id, row.status),
        ));
    };
    if let Some(previous) = &row.previous {
        let allowed =
            MessageStatus::from_name(previous).map(|from| matches!(transition(from, to), Transition::Move { .. }));
        if allowed != Some(true) {
            let detail = format!("message {} went from {previous} to {}", row.message_id, row.status);
            return Some(finding(Check::StatusOrder, name(), detail));
        }
    }
    (to == MessageStatus::Sent && row.charges != 1).then(|| {
        let detail = format!("message {} was sent with {} charges, not one", row.message_id, row.charges);
        finding(Check::StatusOrder, name(), detail)
    })
}

/// A charge that does not match what it bills.
fn charge(row: &audit::Charge) -> Option<Finding> {
    let wrong = match Kind::from_name(&row.kind) {
        Some(Kind::SmsSegments) if row.message_found => (row.sent_at.is_none() || row.segments != Some(row.quantity))
            .then(|| {
                let segments = row.segments.map_or("no".to_owned(), |s| s.to_string());
                let sent = if row.sent_at.is_some() { "sent" } else { "never sent" };
                format!(
                    "{} segments charged for message {} ({sent}, {segments} segments)",
                    row.quantity, row.resource_id
                )
            }),
        Some(Kind::Mms) if row.message_found => (row.sent_at.is_none() || row.quantity != 1).then(|| {
            let sent = if row.sent_at.is_some() { "sent" } else { "never sent" };
            format!("{} units charged for MMS {} ({sent}, one unit each)", row.quantity, row.resource_id)
        }),
        Some(Kind::CallMinutes) if row.call_found => (row.billed_minutes != Some(row.quantity)).then(|| {
            let billed = row.billed_minutes.map_or("no".to_owned(), |m| m.to_string());
            format!("{} minutes charged for call {} ({billed} minutes billed)", row.quantity, row.resource_id)
        }),
        // The resource is gone (an erasure): nothing left to compare.
        Some(_) => None,
        None => Some(format!("charge of the unknown kind {} for {}", row.kind, row.resource_id)),
    };
    wrong.map(|detail| finding(Check::Charges, format!("usage:{}", row.id), detail))
}

/// A success of a delivery that had already succeeded.
fn one_success(row: &audit::Success) -> Option<Finding> {
    row.earlier.map(|earlier| {
        let detail =
            format!("delivery {} succeeded at attempt {earlier} and again at attempt {}", row.delivery_id, row.attempt);
        finding(Check::OneSuccess, format!("webhook_attempts:{}", row.id), detail)
    })
}

fn finding(check: Check, row: String, detail: String) -> Finding {
    Finding { check: check.as_str(), rows: vec![row], detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moved(id: i64, status: &str, previous: Option<&str>, charges: i64) -> audit::Moved {
        audit::Moved {
            id,
            message_id: "msg_1".to_owned(),
            status: status.to_owned(),
            previous: previous.map(str::to_owned),
            charges,
        }
    }

    #[test]
    fn moves_the_lattice_allows_pass_and_others_are_named() {
        for (to, from, charges) in [
            ("queued", None, 0),
            ("sending", Some("queued"), 0),
            ("sent", Some("sending"), 1),
            ("delivered", Some("sent"), 0),
            ("delivered", Some("sending"), 0),
            ("canceled", Some("scheduled"), 0),
        ] {
            assert!(status_order(&moved(7, to, from, charges)).is_none(), "{from:?} -> {to}");
        }
        for (to, from, charges, says) in [
            ("sent", Some("delivered"), 1, "went from delivered to sent"),
            ("delivered", Some("delivered"), 0, "went from delivered to delivered"),
            ("sent", Some("sending"), 0, "with 0 charges"),
            ("sent", Some("sending"), 2, "with 2 charges"),
            ("bogus", Some("sent"), 0, "unknown status"),
        ] {
            let f = status_order(&moved(7, to, from, charges)).expect("a finding");
            assert_eq!((f.check, f.rows.as_slice()), ("status_order", &["message_status_history:7".to_owned()][..]));
            assert!(f.detail.contains(says), "{}", f.detail);
        }
    }

    fn charged(kind: &str, quantity: i64) -> audit::Charge {
        audit::Charge {
            id: 3,
            kind: kind.to_owned(),
            quantity,
            resource_id: "msg_1".to_owned(),
            segments: Some(2),
            sent_at: Some(1),
            message_found: true,
            billed_minutes: Some(4),
            call_found: true,
        }
    }

    #[test]
    fn charges_match_what_they_bill() {
        assert!(charge(&charged("sms_segments", 2)).is_none());
        assert!(charge(&charged("mms", 1)).is_none());
        assert!(charge(&charged("call_minutes", 4)).is_none());
        for (row, says) in [
            (charged("sms_segments", 3), "3 segments charged"),
            (audit::Charge { sent_at: None, ..charged("sms_segments", 2) }, "never sent"),
            (charged("mms", 2), "2 units charged"),
            (charged("call_minutes", 5), "5 minutes charged"),
            (charged("minutes", 5), "unknown kind"),
        ] {
            let f = charge(&row).expect("a finding");
            assert_eq!(f.rows, ["usage:3"]);
            assert!(f.detail.contains(says), "{}", f.detail);
        }
        let gone = audit::Charge { message_found: false, segments: None, sent_at: None, ..charged("sms_segments", 9) };
        assert!(charge(&gone).is_none(), "an erased message leaves nothing to compare");
    }

    #[test]
    fn a_second_success_is_named() {
        let first = audit::Success { id: 9, delivery_id: "dlv_1".to_owned(), attempt: 1, earlier: None };
        assert!(one_success(&first).is_none());
        let again = audit::Success { earlier: Some(1), attempt: 3, ..first };
        let f = one_success(&again).expect("a finding");
        assert_eq!(f.rows, ["webhook_attempts:9"]);
        assert!(f.detail.contains("succeeded at attempt 1 and again at attempt 3"), "{}", f.detail);
    }
}
