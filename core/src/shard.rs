//! Where a carrier event's dedupe row lives (docs/scaling.md, "The dedupe log across databases").
//!
//! The key `(carrier, carrier_event_id)` hashes to one of [`VIRTUAL_SHARDS`] virtual shards; the
//! shard map (`EVENT_SHARDS`) assigns every virtual shard to one D1 binding. A duplicate hashes
//! to the same virtual shard as its first delivery, so it meets the unique index that first
//! delivery wrote. Moving a virtual shard to another database moves whole shards, never a part.
//!
//! A row's id carries its virtual shard and the database that wrote it, under a flag bit that
//! tells it from the ids written before the log was sharded, and stays below 2^53 so D1 (which
//! binds numbers as doubles) keeps it exact: `2^52 | sequence << 16 | vshard << 6 | tag`. The
//! sequence counts up per database and never goes back (the database keeps a floor under it when
//! rows are deleted), so a database's own rows stay in insertion order by id (what retention
//! walks), rows copied from one database into another never take an id the other gives out, and
//! the virtual shard of any id is known without its key.

use sha2::{Digest, Sha256};

/// How many virtual shards the key space has. Fixed: changing it would move every key.
pub const VIRTUAL_SHARDS: u16 = 1024;

/// The binding of the one database of an unsharded deployment.
pub const DEFAULT_BINDING: &str = "DB";

/// The virtual shard of a carrier event key: the first eight bytes of
/// `SHA-256(carrier || 0x00 || carrier_event_id)`, big-endian, modulo [`VIRTUAL_SHARDS`].
pub fn virtual_shard(carrier: &str, carrier_event_id: &str) -> u16 {
    let mut hash = Sha256::new();
    hash.update(carrier.as_bytes());
    hash.update([0]);
    hash.update(carrier_event_id.as_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(VIRTUAL_SHARDS)) as u16
}

/// Set in every id written since the log was sharded; ids written before are smaller.
pub const ID_FLAG: i64 = 1 << 52;
/// Where the sequence starts in an id.
pub const SEQ_SHIFT: u32 = 16;
/// Where the virtual shard starts in an id.
pub const SHARD_SHIFT: u32 = 6;
/// The most dedupe databases: tags 0 (`DB`) to 63.
pub const MAX_TAG: u8 = 63;

/// The id of sequence number `seq` of database `tag` in virtual shard `vshard`.
pub fn id(seq: i64, vshard: u16, tag: u8) -> i64 {
    ID_FLAG | (seq << SEQ_SHIFT) | (i64::from(vshard) << SHARD_SHIFT) | i64::from(tag)
}

/// The virtual shard an id was written in; `None` for an id written before sharding.
pub fn shard_of_id(id: i64) -> Option<u16> {
    (ID_FLAG..2 * ID_FLAG).contains(&id).then(|| ((id >> SHARD_SHIFT) & i64::from(VIRTUAL_SHARDS - 1)) as u16)
}

/// The tag of the database that wrote an id; `None` for an id written before sharding.
pub fn tag_of_id(id: i64) -> Option<u8> {
    (ID_FLAG..2 * ID_FLAG).contains(&id).then(|| (id & i64::from(MAX_TAG)) as u8)
}

/// The tag of a dedupe binding: `DB` is 0, `EVENTS_<n>` is `n + 1` (`n` at most 62).
pub fn binding_tag(binding: &str) -> Option<u8> {
    if binding == DEFAULT_BINDING {
        return Some(0);
    }
    let n = binding.strip_prefix("EVENTS_")?;
    if n.is_empty() || n.len() > 2 || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0')) {
        return None;
    }
    let n: u8 = n.parse().ok()?;
    (n < MAX_TAG).then_some(n + 1)
}

/// The shard map: the binding of every virtual shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMap {
    /// The distinct bindings, in the order the map names them.
    bindings: Vec<String>,
    /// Index into `bindings`, per virtual shard.
    owner: Vec<u8>,
}

/// Why a shard map was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapError(pub String);

impl std::fmt::Display for MapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl ShardMap {
    /// Every virtual shard in `DB`: the unsharded default.
    pub fn single() -> Self {
        ShardMap { bindings: vec![DEFAULT_BINDING.to_owned()], owner: vec![0; usize::from(VIRTUAL_SHARDS)] }
    }

    /// Reads `EVENT_SHARDS`: entries `BINDING=lo-hi` (or `BINDING=n`), separated by commas or
    /// whitespace, that together name every virtual shard from 0 to 1023 exactly once.
    pub fn parse(text: &str) -> Result<Self, MapError> {
        let mut bindings: Vec<String> = Vec::new();
        let mut owner: Vec<Option<u8>> = vec![None; usize::from(VIRTUAL_SHARDS)];
        let entries = text.split(|c: char| c == ',' || c.is_whitespace()).filter(|e| !e.is_empty());
        for entry in entries {
            let (binding, range) =
                entry.split_once('=').ok_or_else(|| MapError(format!("`{entry}` is not BINDING=FIRST-LAST")))?;
            if binding_tag(binding).is_none() {
                return Err(MapError(format!("`{binding}` is not DB or EVENTS_<n> (n from 0 to 62)")));
            }
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            let bound = |s: &str| {
                s.parse::<u16>()
                    .ok()
                    .filter(|n| *n < VIRTUAL_SHARDS)
                    .ok_or_else(|| MapError(format!("`{s}` in `{entry}` is not a virtual shard (0 to 1023)")))
            };
            let (first, last) = (bound(first)?, bound(last)?);
            if first > last {
                return Err(MapError(format!("`{entry}` runs backwards")));
            }
            let index = match bindings.iter().position(|b| b == binding) {
                Some(i) => i,
                None => {
                    bindings.push(binding.to_owned());
                    bindings.len() - 1
                }
            };
            let index = u8::try_from(index).map_err(|_| MapError("more than 255 bindings".into()))?;
            for shard in first..=last {
                if owner[usize::from(shard)].replace(index).is_some() {
                    return Err(MapError(format!("virtual shard {shard} is named twice")));
                }
            }
        }
        if bindings.is_empty() {
            return Ok(Self::single());
        }
        let owner = owner
            .iter()
            .enumerate()
            .map(|(shard, o)| o.ok_or_else(|| MapError(format!("virtual shard {shard} has no database"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ShardMap { bindings, owner })
    }

    /// The binding virtual shard `vshard` is mapped to.
    pub fn binding(&self, vshard: u16) -> &str {
        let index = self.owner.get(usize::from(vshard)).copied().unwrap_or(0);
        &self.bindings[usize::from(index)]
    }

    /// Every binding the map names.
    pub fn bindings(&self) -> &[String] {
        &self.bindings
    }
}

/// The prefix of the account databases' bindings: `ACCOUNTS_0`, `ACCOUNTS_1`, ...
pub const ACCOUNTS_PREFIX: &str = "ACCOUNTS_";

/// Whether `binding` names an account database: `DB` or `ACCOUNTS_<n>` (`n` < 64, no leading
/// zero).
pub fn is_account_binding(binding: &str) -> bool {
    if binding == DEFAULT_BINDING {
        return true;
    }
    binding.strip_prefix(ACCOUNTS_PREFIX).is_some_and(|n| {
        !n.is_empty()
            && n.len() <= 2
            && n.bytes().all(|b| b.is_ascii_digit())
            && !(n.len() > 1 && n.starts_with('0'))
            && n.parse::<u8>().is_ok_and(|n| n < MAX_TAG)
    })
}

/// The databases new accounts are placed in (`ACCOUNT_SHARDS`): account bindings separated by
/// spaces or commas, each once.
pub fn parse_account_shards(text: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for name in text.split([' ', ',']).filter(|n| !n.is_empty()) {
        if !is_account_binding(name) {
            return Err(format!("{name} is not DB or ACCOUNTS_<n>"));
        }
        if out.iter().any(|o| o == name) {
            return Err(format!("{name} is named twice"));
        }
        out.push(name.to_owned());
    }
    if out.is_empty() {
        return Err("names no database".into());
    }
    Ok(out)
}

/// Which of `n` databases a new account with id `account_id` is placed in: SHA-256 of the id,
/// first 8 bytes, modulo `n` (0 when `n` is 0). The choice is recorded with the account, so
/// changing the list later moves no one.
pub fn place(account_id: &str, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let digest = Sha256::digest(account_id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % n as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_pinned() {
        // Fixed values, computed independently (Python's hashlib): a change here would send
        // duplicates of stored events to other shards than their first deliveries.
        assert_eq!(virtual_shard("telnyx", "0ccc7b54-4df3-4bca-a65a-3da1ecc777f0"), 98);
        assert_eq!(virtual_shard("twilio", "SM00000000000000000000000000000001"), 295);
        assert_eq!(virtual_shard("plivo", "abc"), 769);
        // The separator keeps the carrier and the id apart.
        assert_ne!(virtual_shard("telnyx", "abc"), virtual_shard("telnyxa", "bc"));
    }

    #[test]
    fn keys_spread_over_every_shard() {
        let mut seen = vec![0u32; usize::from(VIRTUAL_SHARDS)];
        for i in 0..100_000 {
            seen[usize::from(virtual_shard("telnyx", &format!("evt-{i}")))] += 1;
        }
        assert!(seen.iter().all(|n| *n > 40 && *n < 170), "min {:?} max {:?}", seen.iter().min(), seen.iter().max());
    }

    #[test]
    fn ids_carry_their_shard_and_database_and_stay_exact_as_doubles() {
        for (seq, shard, tag) in [(1, 0, 0), (7, 511, 2), ((1 << 36) - 1, 1023, MAX_TAG)] {
            let id = id(seq, shard, tag);
            assert_eq!(shard_of_id(id), Some(shard));
            assert_eq!(tag_of_id(id), Some(tag));
            assert!(id < 1 << 53 && (id as f64) as i64 == id);
            assert_eq!(format!("{id:016x}").len(), 16);
        }
        // Later sequence numbers sort later, whatever their shard.
        assert!(id(2, 0, 0) > id(1, 1023, MAX_TAG));
        // Two databases never write the same id.
        assert_ne!(id(5, 9, 1), id(5, 9, 2));
        for old in [1, 12345, ID_FLAG - 1] {
            assert_eq!(shard_of_id(old), None);
            assert_eq!(tag_of_id(old), None);
        }
        assert_eq!(shard_of_id(1 << 53), None);
        assert_eq!(shard_of_id(-5), None);
    }

    #[test]
    fn binding_tags() {
        assert_eq!(binding_tag("DB"), Some(0));
        assert_eq!(binding_tag("EVENTS_0"), Some(1));
        assert_eq!(binding_tag("EVENTS_62"), Some(63));
        for bad in ["EVENTS_63", "EVENTS_", "EVENTS_01", "EVENTS_x", "events_1", "OTHER", "EVENTS_-1", "EVENTS_100"] {
            assert_eq!(binding_tag(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_map_names_every_shard_once() {
        let map = ShardMap::parse("DB=0-511, EVENTS_1=512-1022 EVENTS_1=1023").unwrap();
        assert_eq!(map.binding(0), "DB");
        assert_eq!(map.binding(511), "DB");
        assert_eq!(map.binding(512), "EVENTS_1");
        assert_eq!(map.binding(1023), "EVENTS_1");
        assert_eq!(map.bindings(), ["DB", "EVENTS_1"]);
        assert_eq!(ShardMap::parse("  ").unwrap(), ShardMap::single());
        for bad in
            ["DB=0-511", "DB=0-1023,EVENTS_0=5", "DB=0-1024", "DB=511-0", "DB", "NOPE=0-1023", "DB=0-x", "DB=-1023"]
        {
            assert!(ShardMap::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn account_shards_parse_and_refuse() {
        assert_eq!(parse_account_shards("ACCOUNTS_0 ACCOUNTS_1").unwrap(), vec!["ACCOUNTS_0", "ACCOUNTS_1"]);
        assert_eq!(parse_account_shards("DB,ACCOUNTS_12").unwrap(), vec!["DB", "ACCOUNTS_12"]);
        for bad in
            ["", " ", "EVENTS_0", "ACCOUNTS_", "ACCOUNTS_01", "ACCOUNTS_64", "ACCOUNTS_0 ACCOUNTS_0", "accounts_0"]
        {
            assert!(parse_account_shards(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn placement_is_stable_and_spreads() {
        // SHA-256("acct_a") begins c1383c10f6fe17fb (sha256sum), which is 1 mod 2 and 1 mod 3.
        assert_eq!(place("acct_a", 2), 1);
        assert_eq!(place("acct_a", 3), 1);
        assert_eq!(place("anything", 0), 0);
        let mut counts = [0usize; 4];
        for i in 0..4000 {
            counts[place(&format!("acct_{i:024x}"), 4)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
    }
}
