//! Putting stored outputs back into the workspace: link modes, the
//! staged restore swapped in by rename, and the files a restore would
//! lose.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::cache_dir::{corrupt, Cache};
use super::objects::OnCorrupt;
use crate::artifact::{Artifact, ArtifactKind};
use crate::fsutil::{self, TempPath};
use crate::hash;
use crate::{CacheError, ObjectDigest, Result, StatCache};

/// How a cached output is put back into the workspace; tried in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkMode {
    /// A copy-on-write clone: a private, writable copy that shares blocks.
    Reflink,
    /// The workspace file becomes a read-only hard link to the object.
    /// Opt-in: a process that ignores the mode (root) writes straight into
    /// the cache, and into every project that links the same object.
    Hardlink,
    /// The workspace file becomes a symlink to the object. Opt-in, with the
    /// same risk as `Hardlink`.
    Symlink,
    Copy,
}

impl LinkMode {
    /// Only private copies by default: nothing written in the workspace can
    /// reach the cache.
    pub const DEFAULT_ORDER: [LinkMode; 2] = [LinkMode::Reflink, LinkMode::Copy];

    pub fn parse(text: &str) -> Option<LinkMode> {
        match text {
            "reflink" => Some(LinkMode::Reflink),
            "hardlink" => Some(LinkMode::Hardlink),
            "symlink" => Some(LinkMode::Symlink),
            "copy" => Some(LinkMode::Copy),
            _ => None,
        }
    }
}

/// What `restore` puts in place, after every object has been verified.
enum Plan {
    File {
        digest: ObjectDigest,
        executable: bool,
    },
    Dir(Vec<(OsString, Plan)>),
}

/// One file to link during a restore.
struct LinkJob {
    digest: ObjectDigest,
    executable: bool,
    staged: PathBuf,
    final_path: PathBuf,
}

/// Link modes that failed for a reason that applies to every file of the
/// restore (no reflink support, another device), so they are not retried.
struct LinkState {
    reflink: AtomicBool,
    hardlink: AtomicBool,
}

impl Cache {
    /// Puts `artifact` at `dest` (replacing what is there), trying `modes`
    /// in order. Verifies content first: corruption is `CacheError::Corrupt`
    /// and leaves `dest` absent rather than half-written.
    pub fn restore(
        &self,
        artifact: &Artifact,
        dest: &Path,
        modes: &[LinkMode],
        stat: &StatCache,
    ) -> Result<()> {
        let invalid = |message: &str| {
            CacheError::io(
                dest,
                io::Error::new(io::ErrorKind::InvalidInput, message.to_string()),
            )
        };
        if modes.is_empty() {
            return Err(invalid("no link mode to restore with"));
        }
        let Some(name) = dest.file_name() else {
            return Err(invalid("restore destination has no file name"));
        };
        let parent = match dest.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };

        let plan = match self.verified_plan(artifact, 0) {
            Ok(plan) => plan,
            Err(error @ CacheError::Corrupt { .. }) => {
                // The caller reruns the stage; a stale output left in place
                // could be mistaken for the restored one.
                fsutil::remove_any(dest)
                    .map_err(|remove_error| CacheError::io(dest, remove_error))?;
                return Err(error);
            }
            Err(error) => return Err(error),
        };

        std::fs::create_dir_all(parent).map_err(|error| CacheError::io(parent, error))?;
        // Named for `dest`, so a run after a killed restore finds it
        // (`RestoreSites`).
        let staging_dir = tempfile::Builder::new()
            .prefix(&crate::staging::prefix(name))
            .tempdir_in(parent)
            .map_err(|error| CacheError::io(parent, error))?;
        // Our own removal handles read-only directories, TempDir's does not.
        let staging = TempPath::new(staging_dir.keep());
        let staged_root = staging.path().join("new");

        let mut jobs = Vec::new();
        create_staged_dirs(&plan, &staged_root, dest, &mut jobs)?;
        let state = LinkState {
            reflink: AtomicBool::new(true),
            hardlink: AtomicBool::new(true),
        };
        jobs.par_iter().try_for_each(|job| {
            let object = self.object_path(&job.digest);
            link_file(&object, &job.staged, job.executable, modes, &state)
                .map_err(|error| CacheError::io(&job.final_path, error))
        })?;

        // Swap in with renames only, so a reader sees the old output, no
        // output, or the whole new one.
        let rename = |from: &Path, to: &Path| {
            std::fs::rename(from, to).map_err(|error| CacheError::io(to, error))
        };
        match std::fs::symlink_metadata(dest) {
            Err(error) if error.kind() == io::ErrorKind::NotFound => rename(&staged_root, dest)?,
            Err(error) => return Err(CacheError::io(dest, error)),
            // rename(2) atomically replaces a file with a file.
            Ok(existing) if !existing.is_dir() && matches!(plan, Plan::File { .. }) => {
                rename(&staged_root, dest)?
            }
            Ok(_) => {
                rename(dest, &staging.path().join("old"))?;
                rename(&staged_root, dest)?;
            }
        }
        drop(staging);

        // The content of every restored file is known: record it so the
        // next run does not hash it (racily fresh copies excepted).
        let read_at = SystemTime::now();
        for job in &jobs {
            if let Ok(metadata) = std::fs::symlink_metadata(&job.final_path) {
                stat.record_read_at(&job.final_path, &metadata, job.digest, read_at);
            }
        }
        tracing::debug!(dest = %dest.display(), digest = %artifact.digest.short(), files = jobs.len(), "restored");
        Ok(())
    }

    /// Whether `artifact` can be restored: every object it needs present
    /// and hashing to its name. `pipe checkout` asks this of every output
    /// before it writes the first, so that it completes or changes nothing.
    pub fn verify_restorable(&self, artifact: &Artifact) -> Result<()> {
        self.verified_plan(artifact, 0).map(|_| ())
    }

    /// Rehashes every object `artifact` needs and returns what to create.
    fn verified_plan(&self, artifact: &Artifact, depth: usize) -> Result<Plan> {
        if depth > crate::tree::MAX_TREE_DEPTH {
            return Err(corrupt(
                &artifact.digest,
                format!(
                    "the tree nests more than {} levels deep",
                    crate::tree::MAX_TREE_DEPTH
                ),
            ));
        }
        match artifact.kind {
            ArtifactKind::File => {
                self.verify_file_object(&artifact.digest, artifact.size)?;
                Ok(Plan::File {
                    digest: artifact.digest,
                    executable: artifact.executable,
                })
            }
            ArtifactKind::Dir => {
                let entries = self.read_tree_checked(artifact, OnCorrupt::Discard)?;
                let children = entries
                    .into_par_iter()
                    .map(|entry| {
                        let plan = self.verified_plan(&entry.artifact, depth + 1)?;
                        Ok((OsString::from_vec(entry.name), plan))
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Plan::Dir(children))
            }
        }
    }

    /// Workspace files under `dest` that restoring `artifact` there would
    /// overwrite or delete and that the cache could not give back: neither
    /// equal to what `artifact` puts there, nor stored as an object (a file
    /// pipe restored or stored and nobody edited is always an object).
    pub fn files_lost_by_restore(
        &self,
        artifact: &Artifact,
        dest: &Path,
        stat: &StatCache,
    ) -> Result<Vec<PathBuf>> {
        let mut lost = Vec::new();
        self.collect_lost(Some(artifact), dest, stat, &mut lost, 0)?;
        lost.sort();
        Ok(lost)
    }

    fn collect_lost(
        &self,
        wanted: Option<&Artifact>,
        path: &Path,
        stat: &StatCache,
        lost: &mut Vec<PathBuf>,
        depth: usize,
    ) -> Result<()> {
        if depth > crate::tree::MAX_TREE_DEPTH {
            return Err(CacheError::TooDeep {
                path: path.to_path_buf(),
                max: crate::tree::MAX_TREE_DEPTH,
            });
        }
        let metadata = match std::fs::symlink_metadata(path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(CacheError::io(path, error)),
        };
        if metadata.file_type().is_symlink() {
            // A link pipe made into the cache holds nothing of its own.
            if !hash::links_to_object(path, &self.objects_dir) {
                lost.push(path.to_path_buf());
            }
            return Ok(());
        }
        if !metadata.is_file() && !metadata.is_dir() {
            lost.push(path.to_path_buf());
            return Ok(());
        }
        // The whole file or tree is what the run recorded, or is in the cache
        // (a present tree implies everything below it was stored).
        if let Ok(node) = hash::hash_node(path, stat, &self.objects_dir) {
            let current = node.artifact();
            let recorded = wanted.is_some_and(|wanted| {
                wanted.digest == current.digest && wanted.kind == current.kind
            });
            if recorded || self.check_present(current, OnCorrupt::Keep).is_ok() {
                return Ok(());
            }
        }
        if metadata.is_file() {
            lost.push(path.to_path_buf());
            return Ok(());
        }
        let wanted_children: BTreeMap<Vec<u8>, Artifact> = match wanted {
            Some(wanted) if wanted.kind == ArtifactKind::Dir => self
                .read_tree_checked(wanted, OnCorrupt::Keep)
                .map(|entries| {
                    entries
                        .into_iter()
                        .map(|entry| (entry.name, entry.artifact))
                        .collect()
                })
                .unwrap_or_default(),
            _ => BTreeMap::new(),
        };
        let listing = std::fs::read_dir(path).map_err(|error| CacheError::io(path, error))?;
        for entry in listing {
            let entry = entry.map_err(|error| CacheError::io(path, error))?;
            let name = entry.file_name().into_vec();
            let child = wanted_children.get(&name);
            self.collect_lost(child, &entry.path(), stat, lost, depth + 1)?;
        }
        Ok(())
    }
}

/// Creates the directories of `plan` under `staged` and lists the files.
fn create_staged_dirs(
    plan: &Plan,
    staged: &Path,
    final_path: &Path,
    jobs: &mut Vec<LinkJob>,
) -> Result<()> {
    match plan {
        Plan::File { digest, executable } => jobs.push(LinkJob {
            digest: *digest,
            executable: *executable,
            staged: staged.to_path_buf(),
            final_path: final_path.to_path_buf(),
        }),
        Plan::Dir(children) => {
            std::fs::create_dir(staged).map_err(|error| CacheError::io(staged, error))?;
            for (name, child) in children {
                create_staged_dirs(child, &staged.join(name), &final_path.join(name), jobs)?;
            }
        }
    }
    Ok(())
}

fn writable_mode(executable: bool) -> std::fs::Permissions {
    std::fs::Permissions::from_mode(if executable { 0o755 } else { 0o644 })
}

/// Puts one verified object at `target` with the first mode that works.
fn link_file(
    object: &Path,
    target: &Path,
    executable: bool,
    modes: &[LinkMode],
    state: &LinkState,
) -> io::Result<()> {
    let mut last_error = None;
    for mode in modes {
        match mode {
            LinkMode::Reflink => {
                if !state.reflink.load(Ordering::Relaxed) {
                    continue;
                }
                match reflink_copy::reflink(object, target) {
                    // A reflink is a private copy: it may be writable.
                    Ok(()) => return std::fs::set_permissions(target, writable_mode(executable)),
                    Err(error) => {
                        tracing::debug!(%error, "reflink failed; not trying it again in this restore");
                        state.reflink.store(false, Ordering::Relaxed);
                        last_error = Some(error);
                    }
                }
            }
            LinkMode::Hardlink => {
                // Objects are shared by content and kept 0444; a link
                // cannot carry an executable bit of its own.
                if executable {
                    last_error = Some(io::Error::other(
                        "an executable file cannot be restored as a hard link",
                    ));
                    continue;
                }
                if !state.hardlink.load(Ordering::Relaxed) {
                    continue;
                }
                match std::fs::hard_link(object, target) {
                    Ok(()) => return Ok(()),
                    Err(error) => {
                        let whole_restore = error.kind() == io::ErrorKind::CrossesDevices
                            || error.kind() == io::ErrorKind::Unsupported
                            || matches!(
                                error.raw_os_error(),
                                Some(libc::EXDEV | libc::EPERM | libc::EOPNOTSUPP)
                            );
                        if whole_restore {
                            state.hardlink.store(false, Ordering::Relaxed);
                        }
                        tracing::debug!(%error, "hard link failed");
                        last_error = Some(error);
                    }
                }
            }
            LinkMode::Symlink => {
                // The link shows the object's read-only, non-executable mode.
                if executable {
                    last_error = Some(io::Error::other(
                        "an executable file cannot be restored as a symlink",
                    ));
                    continue;
                }
                match std::os::unix::fs::symlink(object, target) {
                    Ok(()) => return Ok(()),
                    Err(error) => {
                        tracing::debug!(%error, "symlink failed");
                        last_error = Some(error);
                    }
                }
            }
            LinkMode::Copy => {
                // `target` is inside the staging directory: nobody sees it
                // until the final rename, so a plain copy is safe.
                match std::fs::copy(object, target) {
                    Ok(_) => return std::fs::set_permissions(target, writable_mode(executable)),
                    Err(error) => {
                        let _ = std::fs::remove_file(target);
                        last_error = Some(error);
                    }
                }
            }
        }
    }
    Err(last_error
        .unwrap_or_else(|| io::Error::other("none of the link modes could restore the file")))
}
