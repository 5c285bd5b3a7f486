//! `/admin`: the operator's API, one file per resource. Bearer `ADMIN_TOKEN`.

use exactly_core::Timestamp;

pub mod accounts;
pub mod audit;
pub mod carrier_events;
pub mod deliveries;
pub mod metrics;
pub mod numbers;
pub mod shards;

/// One page, newest first, from the pages each account database answered for the same cursor:
/// the `limit` newest of them by (`created_at`, `id`).
fn newest_first<T>(mut rows: Vec<T>, limit: u32, key: impl Fn(&T) -> (Timestamp, &String)) -> Vec<T> {
    rows.sort_by(|a, b| key(b).cmp(&key(a)));
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    rows
}
