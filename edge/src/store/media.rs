//! The `message_media` table: the media items of a message (MMS), and the copy of each inbound
//! item in the R2 bucket `MEDIA` (the only object storage of the worker, kept here beside the
//! rows that say what it holds).
//!
//! Items are inserted in the batch that records their message, only if that batch inserted it.
//! A copy is claimed with a lease (a guarded UPDATE) before the carrier's link is fetched, and
//! recorded once (`stored_at IS NULL` in the WHERE), so duplicate deliveries, a second job and
//! a redelivered job copy an item once.

use exactly_core::media::MediaItem;
use exactly_core::Timestamp;
use serde_json::{json, Value};
use worker::{Bucket, D1Database, D1PreparedStatement, Env, HttpMetadata, Object};

use crate::error::EdgeError;
use crate::store::{self as db, int, opt_text, text, time};

crate::store::row! {
    /// One media item of a message, as the message's rows carry it.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Media {
        /// Its place in the message, from 0.
        pub position: u32,
        /// The carrier's link (inbound) or the sender's URL (outbound).
        pub url: String,
        pub content_type: Option<String>,
        pub size: Option<u64>,
        /// Where the copy goes (inbound only).
        pub r2_key: Option<String>,
        /// When the copy was stored.
        pub stored_at: Option<Timestamp>,
    }
}

impl Media {
    /// The item as the API and customer events show it. `path` is the stable route that serves
    /// the copy (with an API key); the signed `url` is minted by the API when it answers, never
    /// stored in an event, where it would expire.
    pub fn to_json(&self, message_id: &str) -> Value {
        json!({
            "position": self.position,
            "content_type": self.content_type,
            "size": self.size,
            "source_url": self.url,
            "stored": self.stored_at.is_some(),
            "path": self.r2_key.as_ref().map(|_| format!("/v1/messages/{message_id}/media/{}", self.position)),
            "url": null,
            "url_expires_at": null,
        })
    }

    /// Items of a new message, before anything is stored. Inbound items get their storage key.
    pub fn new_items(message_id: &str, items: &[MediaItem], copied: bool) -> Vec<Media> {
        items
            .iter()
            .zip(0u32..)
            .map(|(item, position)| Media {
                position,
                url: item.url.clone(),
                content_type: item.content_type.clone(),
                size: item.size,
                r2_key: copied.then(|| exactly_core::media::object_key(message_id, position)),
                stored_at: None,
            })
            .collect()
    }
}

/// The `media` column of a `messages` SELECT: text holding a JSON array of items, each read
/// as a row; NULL for none.
impl db::row::Column for Vec<Media> {
    fn read(cell: db::row::Cell) -> Result<Self, String> {
        let Some(text) = Option::<String>::read(cell)? else { return Ok(Vec::new()) };
        let items: Vec<Value> = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        items.iter().map(|item| <Media as db::FromRow>::from_row(item)).collect()
    }
}

/// Inserts the items of message `message_id`, only if that message exists, i.e. only if the
/// batch that created its (new, random) id inserted it: a message recorded before under another
/// id keeps the items it has.
pub fn insert_if_message(
    db: &D1Database,
    message_id: &str,
    items: &[Media],
    now: Timestamp,
) -> Result<D1PreparedStatement, EdgeError> {
    let items: Vec<Value> = items
        .iter()
        .map(|m| json!({"url": m.url, "content_type": m.content_type, "size": m.size, "r2_key": m.r2_key}))
        .collect();
    db::stmt(
        db,
        "INSERT INTO message_media (message_id, position, url, content_type, size, r2_key, created_at)
         SELECT ?1, CAST(i.key AS INTEGER), json_extract(i.value, '$.url'), json_extract(i.value, '$.content_type'),
                json_extract(i.value, '$.size'), json_extract(i.value, '$.r2_key'), ?3
         FROM json_each(?2) i
         WHERE EXISTS (SELECT 1 FROM messages WHERE id = ?1)
         ON CONFLICT (message_id, position) DO NOTHING",
        &[text(message_id), text(&Value::Array(items).to_string()), time(now)],
    )
}

crate::store::row! {
    /// An item a copier claimed: where to fetch it and where to put it.
    #[derive(Clone, Debug)]
    pub struct Claimed {
        pub url: String,
        pub r2_key: String,
        pub content_type: Option<String>,
        /// Claims taken so far, this one included.
        pub copy_attempts: u32,
    }
}

/// Claims the copy of one inbound item until `lease_until`: only an item not stored, not given
/// up on, and not held by a live claim. `None` when this caller does not own the copy.
pub async fn claim(
    db: &D1Database,
    message_id: &str,
    position: u32,
    now: Timestamp,
    lease_until: Timestamp,
) -> Result<Option<Claimed>, EdgeError> {
    db::first(db::stmt(
        db,
        "UPDATE message_media SET copying_until = ?4, copy_attempts = copy_attempts + 1
         WHERE message_id = ?1 AND position = ?2 AND r2_key IS NOT NULL AND stored_at IS NULL AND copy_error IS NULL
           AND copying_until < ?3
         RETURNING url, r2_key, content_type, copy_attempts",
        &[text(message_id), int(i64::from(position)), time(now), time(lease_until)],
    )?)
    .await
}

crate::store::row! {
    /// Where an item's copy stands, for a job that could not claim it.
    #[derive(Clone, Debug)]
    pub struct CopyState {
        pub r2_key: Option<String>,
        pub stored_at: Option<Timestamp>,
        pub copy_error: Option<String>,
        pub copying_until: Timestamp,
    }
}

/// The copy state of one item.
pub async fn copy_state(db: &D1Database, message_id: &str, position: u32) -> Result<Option<CopyState>, EdgeError> {
    db::first(db::stmt(
        db,
        "SELECT r2_key, stored_at, copy_error, copying_until FROM message_media WHERE message_id = ?1 AND position = ?2",
        &[text(message_id), int(i64::from(position))],
    )?)
    .await
}

/// Records the stored copy, once. Returns whether this call recorded it.
pub async fn record_stored(
    db: &D1Database,
    message_id: &str,
    position: u32,
    stored_size: u64,
    content_type: Option<&str>,
    now: Timestamp,
) -> Result<bool, EdgeError> {
    let changed = db::run(db::stmt(
        db,
        "UPDATE message_media SET stored_at = ?3, stored_size = ?4, content_type = COALESCE(content_type, ?5),
             copying_until = 0
         WHERE message_id = ?1 AND position = ?2 AND stored_at IS NULL",
        &[text(message_id), int(i64::from(position)), time(now), int(stored_size as i64), opt_text(content_type)],
    )?)
    .await?;
    Ok(changed == 1)
}

/// Whether item `position` of message `message_id` is still recorded (an erasure deletes it).
pub async fn exists(db: &D1Database, message_id: &str, position: u32) -> Result<bool, EdgeError> {
    crate::store::row! {
        struct Found {
            n: i64,
        }
    }
    let found: Option<Found> = db::first(db::stmt(
        db,
        "SELECT COUNT(*) AS n FROM message_media WHERE message_id = ?1 AND position = ?2",
        &[text(message_id), int(i64::from(position))],
    )?)
    .await?;
    Ok(found.is_some_and(|f| f.n > 0))
}

/// Gives up claim `claim` (its `copy_attempts`) after a transient failure, so the next try can
/// claim at once; a lapsed claim taken again since is left to its new owner.
pub async fn release(db: &D1Database, message_id: &str, position: u32, claim: u32) -> Result<(), EdgeError> {
    db::run(db::stmt(
        db,
        "UPDATE message_media SET copying_until = 0
         WHERE message_id = ?1 AND position = ?2 AND stored_at IS NULL AND copy_attempts = ?3",
        &[text(message_id), int(i64::from(position)), int(i64::from(claim))],
    )?)
    .await?;
    Ok(())
}

/// Gives up the copy of an item visibly (`copy_error`), unless it was stored meanwhile; whether
/// it did. By the owner of claim `claim` (its `copy_attempts`): a copier whose claim lapsed and
/// was taken again leaves the decision to the newer one. Without a claim (a dead-lettered job),
/// only while no live claim holds the item.
pub async fn record_failed(
    db: &D1Database,
    message_id: &str,
    position: u32,
    claim: Option<u32>,
    error: &str,
    now: Timestamp,
) -> Result<bool, EdgeError> {
    let changed = db::run(db::stmt(
        db,
        "UPDATE message_media SET copy_error = ?3, copying_until = 0
         WHERE message_id = ?1 AND position = ?2 AND stored_at IS NULL AND copy_error IS NULL
           AND (copy_attempts = ?4 OR (?4 IS NULL AND copying_until < ?5))",
        &[
            text(message_id),
            int(i64::from(position)),
            text(error),
            claim.map_or(wasm_bindgen::JsValue::NULL, |c| int(i64::from(c))),
            time(now),
        ],
    )?)
    .await?;
    Ok(changed == 1)
}

crate::store::row! {
    /// An inbound item whose copy is not done: (message id, position).
    #[derive(Clone, Debug)]
    pub struct Uncopied {
        pub message_id: String,
        pub position: u32,
    }
}

/// Items recorded before `before`, neither stored nor given up on, whose claim (if any) lapsed:
/// their copy job was lost. Oldest first.
pub async fn uncopied(db: &D1Database, before: Timestamp, limit: u32) -> Result<Vec<Uncopied>, EdgeError> {
    db::all(db::stmt(
        db,
        "SELECT message_id, position FROM message_media
         WHERE r2_key IS NOT NULL AND stored_at IS NULL AND copy_error IS NULL
           AND created_at < ?1 AND copying_until < ?1
         ORDER BY created_at LIMIT ?2",
        &[time(before), int(i64::from(limit))],
    )?)
    .await
}

crate::store::row! {
    /// A stored copy: its key and what to answer with.
    #[derive(Clone, Debug)]
    pub struct Stored {
        pub r2_key: String,
        pub content_type: Option<String>,
    }
}

/// The stored copy of one item, if it is stored.
pub async fn stored(db: &D1Database, message_id: &str, position: u32) -> Result<Option<Stored>, EdgeError> {
    db::first(db::stmt(
        db,
        "SELECT r2_key, content_type FROM message_media
         WHERE message_id = ?1 AND position = ?2 AND stored_at IS NOT NULL AND r2_key IS NOT NULL",
        &[text(message_id), int(i64::from(position))],
    )?)
    .await
}

/// The bucket, for one call: each counts as a subrequest.
fn bucket(env: &Env) -> Result<Bucket, EdgeError> {
    crate::quotas::subrequest(crate::bindings::MEDIA)?;
    env.bucket(crate::bindings::MEDIA).map_err(|e| EdgeError::platform("MEDIA binding", e))
}

/// Puts the copy of an item under `key`: its bytes, or a stream of a known length that the bucket
/// stores as it comes, never whole in the worker's memory. The key names the item, so a second
/// put of the same item replaces the object with the same bytes, never adds one.
pub async fn put_copy(
    env: &Env,
    key: &str,
    body: impl Into<worker::Data>,
    content_type: Option<&str>,
) -> Result<(), EdgeError> {
    let metadata = HttpMetadata { content_type: content_type.map(str::to_owned), ..HttpMetadata::default() };
    bucket(env)?
        .put(key, body)
        .http_metadata(metadata)
        .execute()
        .await
        .map(|_| ())
        .map_err(|e| EdgeError::platform("r2 put", e))
}

/// The stored copy under `key`, with its body, if the bucket has it.
pub async fn open_copy(env: &Env, key: &str) -> Result<Option<Object>, EdgeError> {
    bucket(env)?.get(key).execute().await.map_err(|e| EdgeError::platform("r2 get", e))
}

/// The stored copies' keys of the media of the messages `ids` (a JSON array), to delete from the
/// bucket before [`erase`] forgets them.
pub async fn keys_of(db: &D1Database, ids: &str) -> Result<Vec<String>, EdgeError> {
    crate::store::row! {
        struct Key {
            r2_key: String,
        }
    }
    let keys: Vec<Key> = db::all(db::stmt(
        db,
        "SELECT r2_key FROM message_media WHERE message_id IN (SELECT value FROM json_each(?1)) AND r2_key IS NOT NULL",
        &[text(ids)],
    )?)
    .await?;
    Ok(keys.into_iter().map(|k| k.r2_key).collect())
}

/// The statement that deletes the media rows of the messages `ids` (a JSON array): an erasure.
/// It returns the copies the rows named when deleted ([`erased_keys`] reads them): a copy
/// recorded after the erasure read the keys is among them.
pub fn erase(db: &D1Database, ids: &str) -> Result<worker::D1PreparedStatement, EdgeError> {
    db::stmt(
        db,
        "DELETE FROM message_media WHERE message_id IN (SELECT value FROM json_each(?1)) RETURNING r2_key",
        &[text(ids)],
    )
}

/// The stored copies named by the rows [`erase`] deleted.
pub fn erased_keys(result: &db::Reply) -> Result<Vec<String>, EdgeError> {
    crate::store::row! {
        struct Deleted {
            r2_key: Option<String>,
        }
    }
    Ok(db::rows::<Deleted>(result)?.into_iter().filter_map(|d| d.r2_key).collect())
}

/// Deletes the stored copy under `key` (nothing when there is none).
pub async fn delete_copy(env: &Env, key: &str) -> Result<(), EdgeError> {
    bucket(env)?.delete(key).await.map_err(|e| EdgeError::platform("r2 delete", e))
}
