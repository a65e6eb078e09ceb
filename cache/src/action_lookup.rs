//! Looking up the results of many keys at once (`pipe status` of a large
//! matrix): a miss costs a failed `open` each, about as much as the rest
//! of a stage's status together. A shard of `actions/` that is asked about
//! often is listed once instead, and its misses are answered from the
//! listing; one asked about a few times costs those few opens, so a small
//! pipeline never pays for listing a large cache.

use std::collections::HashSet;
use std::ffi::OsString;

use crate::digest::ActionKey;
use crate::store::Cache;
use crate::ActionResult;

/// Lookups in one shard before it is listed: a listing reads every entry
/// of the shard, so it pays off only for a shard asked about this often.
const LIST_AFTER: u32 = 64;

enum Shard {
    /// Not listed yet: how many lookups it has had.
    Asked(u32),
    /// The file names it held when listed.
    Listed(HashSet<OsString>),
}

/// `Cache::get_action` for many keys in a row. A result written after its
/// shard was listed is not seen, as a result written after a lookup would
/// not be: each answer is the cache as it was at some moment of the walk.
pub struct ActionLookup<'c> {
    cache: &'c Cache,
    shards: Vec<Shard>,
}

impl<'c> ActionLookup<'c> {
    pub fn new(cache: &'c Cache) -> ActionLookup<'c> {
        ActionLookup {
            cache,
            shards: (0..256).map(|_| Shard::Asked(0)).collect(),
        }
    }

    /// As `Cache::get_action`.
    pub fn get(&mut self, key: &ActionKey) -> Option<ActionResult> {
        let path = self.cache.action_path(key);
        let shard = &mut self.shards[usize::from(key.as_bytes()[0])];
        if let Shard::Asked(count) = shard {
            *count += 1;
            if *count >= LIST_AFTER {
                if let Some(dir) = path.parent() {
                    *shard = match std::fs::read_dir(dir) {
                        Ok(entries) => Shard::Listed(
                            entries
                                .filter_map(|entry| entry.ok().map(|entry| entry.file_name()))
                                .collect(),
                        ),
                        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                            Shard::Listed(HashSet::new())
                        }
                        // Unreadable: every lookup opens its file, and says why.
                        Err(_) => Shard::Asked(0),
                    };
                }
            }
        }
        if let (Shard::Listed(names), Some(name)) = (&*shard, path.file_name()) {
            if !names.contains(name) {
                return None;
            }
        }
        self.cache.get_action(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_shard_answers_as_the_files_do() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let stored = ActionResult {
            key: ActionKey::of(b"stored"),
            outputs: Default::default(),
            manifest: crate::manifest_of(&serde_json::json!({ "outs": {}, "metrics": [] })),
            created_unix_ms: 0,
            duration_ms: 0,
        };
        cache.put_action(&stored).unwrap();
        let shard = stored.key.as_bytes()[0];
        let mut lookup = ActionLookup::new(&cache);
        let mut asked = 0;
        for index in 0u32.. {
            let key = ActionKey::of(&index.to_le_bytes());
            if key.as_bytes()[0] != shard {
                continue;
            }
            assert!(lookup.get(&key).is_none());
            asked += 1;
            if asked == LIST_AFTER + 5 {
                break;
            }
        }
        assert!(matches!(
            lookup.shards[usize::from(shard)],
            Shard::Listed(_)
        ));
        assert_eq!(
            lookup.get(&stored.key).map(|found| found.key),
            Some(stored.key)
        );
    }
}
