//! `pipe cache verify`: rehashing every object, checking every action
//! result, and (with repair) removing what is bad.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;

use super::cache_dir::{Cache, STALE_TMP_AGE};
use super::objects::OnCorrupt;
use crate::fsutil;
use crate::hash;
use crate::{ActionKey, CacheError, ObjectDigest, Result};

#[derive(Debug, Default, Clone, Serialize)]
pub struct VerifyReport {
    pub objects_checked: u64,
    pub bytes_checked: u64,
    /// Corrupt objects by hex digest, or by path for a stray file.
    pub corrupt: Vec<String>,
    /// The same objects with what is known about them.
    pub corrupt_objects: Vec<CorruptObject>,
    pub actions_checked: u64,
    pub corrupt_actions: Vec<String>,
    /// With repair: how many of the above were removed.
    pub objects_removed: u64,
    pub actions_removed: u64,
}

/// A bad entry of `objects/`, as `verify` found it (before any repair).
#[derive(Debug, Clone, Serialize)]
pub struct CorruptObject {
    /// The hex digest it is filed under, or its path for a stray file.
    pub name: String,
    pub path: PathBuf,
    pub reason: String,
    /// Device and inode: a project file with the same pair is a hard link
    /// to this object and is what wrote into it.
    pub dev: u64,
    pub ino: u64,
    /// More than one means a hard link outside the cache shares its bytes.
    pub links: u64,
}

impl CorruptObject {
    fn new(
        name: String,
        path: &Path,
        reason: String,
        metadata: Option<&std::fs::Metadata>,
    ) -> CorruptObject {
        CorruptObject {
            name,
            path: path.to_path_buf(),
            reason,
            dev: metadata.map(|metadata| metadata.dev()).unwrap_or(0),
            ino: metadata.map(|metadata| metadata.ino()).unwrap_or(0),
            links: metadata.map(|metadata| metadata.nlink()).unwrap_or(0),
        }
    }
}

/// The outcome of rehashing one object in `verify`.
struct ObjectCheck {
    bytes: u64,
    /// What to report, if bad.
    corrupt: Option<CorruptObject>,
    /// Its digest if it is bad, so actions reaching it are flagged.
    digest: Option<ObjectDigest>,
}

impl Cache {
    /// Rehashes every object and checks every action result; changes nothing.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_with(false)
    }

    /// Like `verify`, then removes what it found bad: corrupt objects, stray
    /// files, and the action results that need them (the stages they
    /// describe run again next time).
    pub fn verify_and_repair(&self) -> Result<VerifyReport> {
        self.verify_with(true)
    }

    fn verify_with(&self, repair: bool) -> Result<VerifyReport> {
        self.clean_tmp(STALE_TMP_AGE)?;
        let objects = self.list_objects()?;
        let checked: Vec<ObjectCheck> = objects
            .par_iter()
            .map(|(path, digest)| {
                let metadata = std::fs::symlink_metadata(path).ok();
                let Some(digest) = digest else {
                    // A stray file: nothing names it, report it by path.
                    return ObjectCheck {
                        bytes: 0,
                        corrupt: Some(CorruptObject::new(
                            path.display().to_string(),
                            path,
                            "not named by a digest".to_string(),
                            metadata.as_ref(),
                        )),
                        digest: None,
                    };
                };
                let (bytes, problem) = match hash::hash_object(path) {
                    Ok((actual, len)) if actual == *digest => (len, None),
                    Ok((actual, len)) => (len, Some(format!("content hashes to {actual}"))),
                    Err(error) => (0, Some(error.to_string())),
                };
                match problem {
                    None => ObjectCheck {
                        bytes,
                        corrupt: None,
                        digest: None,
                    },
                    Some(reason) => {
                        tracing::warn!(path = %path.display(), reason, "corrupt cache object");
                        ObjectCheck {
                            bytes,
                            corrupt: Some(CorruptObject::new(
                                digest.to_hex(),
                                path,
                                reason,
                                metadata.as_ref(),
                            )),
                            digest: Some(*digest),
                        }
                    }
                }
            })
            .collect();

        let mut report = VerifyReport {
            objects_checked: objects.len() as u64,
            ..VerifyReport::default()
        };
        let mut corrupt_digests = HashSet::new();
        let mut corrupt_objects = Vec::new();
        for check in checked {
            report.bytes_checked += check.bytes;
            corrupt_objects.extend(check.corrupt);
            corrupt_digests.extend(check.digest);
        }
        corrupt_objects.sort_by(|a, b| a.name.cmp(&b.name));

        let actions = self.list_actions()?;
        report.actions_checked = actions.len() as u64;
        let mut corrupt_actions: Vec<(String, &PathBuf)> = actions
            .par_iter()
            .filter_map(|(path, key)| {
                let name = key
                    .map(|key| key.to_hex())
                    .unwrap_or_else(|| path.display().to_string());
                let problem = self.action_problem(path, key.as_ref(), &corrupt_digests);
                problem.map(|reason| {
                    tracing::warn!(path = %path.display(), reason, "bad action result");
                    (name, path)
                })
            })
            .collect();
        corrupt_actions.sort();

        if repair {
            // Actions first: an action whose objects are gone is a miss
            // anyway, but one left behind would keep pointing at them.
            for (_, path) in &corrupt_actions {
                fsutil::remove_any(path).map_err(|error| CacheError::io(*path, error))?;
                report.actions_removed += 1;
            }
            for object in &corrupt_objects {
                fsutil::remove_any(&object.path)
                    .map_err(|error| CacheError::io(&object.path, error))?;
                report.objects_removed += 1;
            }
        }
        report.corrupt = corrupt_objects
            .iter()
            .map(|object| object.name.clone())
            .collect();
        report.corrupt_objects = corrupt_objects;
        report.corrupt_actions = corrupt_actions.into_iter().map(|(name, _)| name).collect();
        Ok(report)
    }

    /// Why an action file cannot be used, if it cannot.
    fn action_problem(
        &self,
        path: &Path,
        key: Option<&ActionKey>,
        corrupt_digests: &HashSet<ObjectDigest>,
    ) -> Option<String> {
        let Some(key) = key else {
            return Some("not named by a key".to_string());
        };
        let result = match Self::read_action_file(path, key) {
            Ok(result) => result,
            Err(error) => return Some(error),
        };
        for artifact in result.outputs.values() {
            if let Err(reason) = self.check_present(artifact, OnCorrupt::Keep) {
                return Some(reason);
            }
            let mut reachable = HashSet::new();
            if let Err(error) = self.mark_reachable(artifact, &mut reachable) {
                return Some(error.to_string());
            }
            if let Some(bad) = reachable.intersection(corrupt_digests).next() {
                return Some(format!("references corrupt object {bad}"));
            }
        }
        None
    }
}
