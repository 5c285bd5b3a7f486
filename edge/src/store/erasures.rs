//! The `erasures` table: the record of each erasure of a phone number's data, in `DB`
//! (docs/contract.md §5, "Erasure"). The number is kept only as a MAC.

use exactly_core::Timestamp;
use worker::D1Database;

use crate::error::EdgeError;
use crate::store::{self as db, opt_text, text, time};

/// Records an erasure.
pub async fn record(
    db: &D1Database,
    id: &str,
    number_mac: &str,
    account_id: Option<&str>,
    counts: &serde_json::Value,
    now: Timestamp,
) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "INSERT INTO erasures (id, number_mac, account_id, counts, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        &[text(id), text(number_mac), opt_text(account_id), text(&counts.to_string()), time(now)],
    )?)
    .await?;
    Ok(())
}
