//! Garbage collection: removing the actions nobody keeps and the objects
//! no kept action reaches.

use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::time::SystemTime;

use serde::Serialize;

use super::cache_dir::{Cache, STALE_TMP_AGE};
use crate::action;
use crate::artifact::{Artifact, ArtifactKind};
use crate::fsutil;
use crate::tree;
use crate::untrusted;
use crate::{ActionKey, CacheError, ObjectDigest, Result};

#[derive(Debug, Default, Clone, Serialize)]
pub struct GcReport {
    pub objects_removed: u64,
    pub bytes_removed: u64,
    pub actions_removed: u64,
    pub objects_kept: u64,
    pub actions_kept: u64,
}

impl Cache {
    /// Adds `artifact`'s object and, through trees, everything below it.
    /// A tree that is missing or damaged keeps nothing below it (its
    /// result is a miss anyway); one that cannot be read, or that is not a
    /// regular file within its limit (`untrusted`), is an error, as
    /// skipping it would delete the objects of a result that is kept.
    pub(super) fn mark_reachable(
        &self,
        artifact: &Artifact,
        reachable: &mut HashSet<ObjectDigest>,
    ) -> Result<()> {
        self.mark_reachable_below(artifact, reachable, 0)
    }

    /// A tree deeper than any pipe restores is damaged: what lies below
    /// the limit is reached by nothing usable.
    fn mark_reachable_below(
        &self,
        artifact: &Artifact,
        reachable: &mut HashSet<ObjectDigest>,
        depth: usize,
    ) -> Result<()> {
        if depth > crate::tree::MAX_TREE_DEPTH {
            return Ok(());
        }
        if !reachable.insert(artifact.digest) || artifact.kind != ArtifactKind::Dir {
            return Ok(());
        }
        let object = self.object_path(&artifact.digest);
        let bytes = match untrusted::read(&object, untrusted::TREE_OBJECT) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            // Refused by the reader (a link, a FIFO, past the limit) is an
            // error too, naming it, never a reason to delete below it;
            // `pipe cache verify --repair` removes it.
            Err(error) => return Err(CacheError::io(&object, error)),
        };
        let Ok(entries) = tree::decode(&bytes) else {
            return Ok(());
        };
        for entry in entries {
            self.mark_reachable_below(&entry.artifact, reachable, depth + 1)?;
        }
        Ok(())
    }

    /// Marks what the action file at `path` reaches. A damaged action is a
    /// miss and keeps nothing; one that cannot be read is an error, as for
    /// a tree.
    fn mark_reachable_from_action(
        &self,
        path: &Path,
        key: &ActionKey,
        reachable: &mut HashSet<ObjectDigest>,
    ) -> Result<()> {
        let bytes = match untrusted::read(path, untrusted::ACTION_FILE) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(CacheError::io(path, error)),
        };
        let Ok(result) = action::decode(&bytes, key) else {
            return Ok(());
        };
        for artifact in result.outputs.values() {
            self.mark_reachable(artifact, reachable)?;
        }
        Ok(())
    }

    /// Removes actions not in `keep` and objects they do not reach; entries
    /// younger than `grace` survive so a concurrent run is never robbed.
    pub fn gc(&self, keep: &HashSet<ActionKey>, grace: std::time::Duration) -> Result<GcReport> {
        let now = SystemTime::now();
        let mut report = GcReport::default();
        let mut reachable = HashSet::new();
        for (path, key) in self.list_actions()? {
            let metadata = match std::fs::symlink_metadata(&path) {
                Ok(metadata) => metadata,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(CacheError::io(&path, error)),
            };
            let wanted = key.is_some_and(|key| keep.contains(&key));
            if wanted || !fsutil::older_than(&metadata, grace, now) {
                report.actions_kept += 1;
                // Young actions of a concurrent run keep their objects too.
                if let Some(key) = key {
                    self.mark_reachable_from_action(&path, &key, &mut reachable)?;
                }
            } else {
                fsutil::remove_any(&path).map_err(|error| CacheError::io(&path, error))?;
                report.actions_removed += 1;
            }
        }
        for (path, digest) in self.list_objects()? {
            if digest.is_some_and(|digest| reachable.contains(&digest)) {
                report.objects_kept += 1;
                continue;
            }
            let metadata = match std::fs::symlink_metadata(&path) {
                Ok(metadata) => metadata,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(CacheError::io(&path, error)),
            };
            if fsutil::older_than(&metadata, grace, now) {
                fsutil::remove_any(&path).map_err(|error| CacheError::io(&path, error))?;
                report.objects_removed += 1;
                report.bytes_removed += metadata.len();
            } else {
                report.objects_kept += 1;
            }
        }
        self.clean_tmp(STALE_TMP_AGE.max(grace))?;
        tracing::debug!(?report, "gc done");
        Ok(report)
    }
}
