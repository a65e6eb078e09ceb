//! Garbage collection: removing the actions nobody keeps and the objects
//! no kept action reaches.

use std::collections::HashSet;
use std::io;
use std::time::SystemTime;

use serde::Serialize;

use super::{Artifact, ArtifactKind, Cache, STALE_TMP_AGE};
use crate::fsutil;
use crate::tree;
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
    /// Unreadable trees are skipped: gc then keeps less, never more wrong.
    pub(super) fn mark_reachable(
        &self,
        artifact: &Artifact,
        reachable: &mut HashSet<ObjectDigest>,
    ) {
        if !reachable.insert(artifact.digest) || artifact.kind != ArtifactKind::Dir {
            return;
        }
        let Ok(bytes) = std::fs::read(self.object_path(&artifact.digest)) else {
            return;
        };
        let Ok(entries) = tree::decode(&bytes) else {
            return;
        };
        for entry in entries {
            self.mark_reachable(&entry.artifact, reachable);
        }
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
                if let Some(Ok(result)) = key.map(|key| Self::read_action_file(&path, &key)) {
                    for artifact in result.outputs.values() {
                        self.mark_reachable(artifact, &mut reachable);
                    }
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
