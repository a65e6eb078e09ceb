//! The cache directory: its layout, its paths and what every part of it
//! shares.

use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::artifact::Artifact;
use crate::digest::Digest;
use crate::fsutil;
use crate::hash;
use crate::{ActionKey, CacheError, ObjectDigest, Result, StatCache};

/// The layout this code reads and writes; see docs/cache-format.md.
pub const LAYOUT_VERSION: &str = "pipe-cache-v1";

/// Temp files older than this are leftovers of a killed process.
pub(crate) const STALE_TMP_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// A cache directory: `objects/`, `actions/`, `tmp/` and a `VERSION` file.
pub struct Cache {
    pub(super) root: PathBuf,
    pub(super) objects_dir: PathBuf,
    pub(super) actions_dir: PathBuf,
    pub(super) tmp_dir: PathBuf,
    /// Cleared after the first failed reflink, so a file system without
    /// reflinks does not pay for a failed attempt per stored file.
    pub(super) reflink_works: AtomicBool,
}

pub(super) fn corrupt(digest: &ObjectDigest, reason: impl Into<String>) -> CacheError {
    CacheError::Corrupt {
        digest: digest.to_hex(),
        reason: reason.into(),
    }
}

pub(crate) fn shard_and_rest(hex: &str) -> (&str, &str) {
    hex.split_at(2)
}

impl Cache {
    pub fn open(root: &Path) -> Result<Cache> {
        std::fs::create_dir_all(root).map_err(|error| CacheError::io(root, error))?;
        // Symlinked outputs point at objects by absolute path.
        let absolute = std::path::absolute(root).map_err(|error| CacheError::io(root, error))?;
        let root = absolute.as_path();
        let cache = Cache {
            root: root.to_path_buf(),
            objects_dir: root.join("objects"),
            actions_dir: root.join("actions"),
            tmp_dir: root.join("tmp"),
            reflink_works: AtomicBool::new(true),
        };
        fsutil::check_own_folders(
            root,
            "replace the link with a directory (to keep the cache on another disk, \
             set PIPE_CACHE_DIR to a directory there)",
        )?;
        let version_path = root.join("VERSION");
        let found = crate::untrusted::read_if_present(&version_path, crate::untrusted::STATE_FILE)
            .map_err(|error| CacheError::io(&version_path, error))?
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
        if let Some(found) = &found {
            if found.trim() != LAYOUT_VERSION {
                return Err(CacheError::Layout {
                    path: root.to_path_buf(),
                    found: found.trim().to_string(),
                    expected: LAYOUT_VERSION.to_string(),
                });
            }
        }
        for dir in [&cache.objects_dir, &cache.actions_dir, &cache.tmp_dir] {
            std::fs::create_dir_all(dir).map_err(|error| CacheError::io(dir, error))?;
        }
        if found.is_none() {
            // Written last and atomically: a VERSION file means a complete layout.
            cache.write_atomic(&version_path, LAYOUT_VERSION.as_bytes(), 0o644)?;
        }
        // A killed run leaves its partial objects in tmp/, and not every
        // project ever runs gc; listing an empty directory costs nothing.
        if let Err(error) = cache.clean_tmp(STALE_TMP_AGE) {
            tracing::debug!(%error, "could not remove stale temporaries");
        }
        Ok(cache)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the object named `digest` lives: `objects/ab/cdef…`.
    pub fn object_path(&self, digest: &ObjectDigest) -> PathBuf {
        let hex = digest.to_hex();
        let (shard, rest) = shard_and_rest(&hex);
        self.objects_dir.join(shard).join(rest)
    }

    /// Where the result of action `key` lives: `actions/ab/cdef….json`.
    pub fn action_path(&self, key: &ActionKey) -> PathBuf {
        let hex = key.to_hex();
        let (shard, rest) = shard_and_rest(&hex);
        self.actions_dir.join(shard).join(format!("{rest}.json"))
    }

    /// What [`Cache::hash_path`] gives for a regular file whose content
    /// the stat cache knows, without reading it; `None` where it would
    /// have to read (or `path` is not a regular file).
    pub fn known_file_artifact(&self, path: &Path, stat: &StatCache) -> Option<Artifact> {
        hash::known_file(path, stat)
    }

    /// Hashes a file or directory without storing it (for dependencies).
    pub fn hash_path(&self, path: &Path, stat: &StatCache) -> Result<Artifact> {
        Ok(hash::hash_node(path, stat, &self.objects_dir)?
            .artifact()
            .clone())
    }

    /// Writes `bytes` to a temp file in `tmp/` (same file system) and
    /// renames it to `dest`: readers see the old content or all of the new.
    pub(super) fn write_atomic(&self, dest: &Path, bytes: &[u8], mode: u32) -> Result<()> {
        let mut temp = tempfile::NamedTempFile::new_in(&self.tmp_dir)
            .map_err(|error| CacheError::io(&self.tmp_dir, error))?;
        let temp_path = temp.path().to_path_buf();
        temp.write_all(bytes)
            .map_err(|error| CacheError::io(&temp_path, error))?;
        temp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|error| CacheError::io(&temp_path, error))?;
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|error| CacheError::io(parent, error))?;
        }
        temp.persist(dest)
            .map_err(|error| CacheError::io(dest, error.error))?;
        Ok(())
    }

    /// Removes temp files left by killed processes.
    pub(super) fn clean_tmp(&self, max_age: Duration) -> Result<()> {
        fsutil::remove_stale(&self.tmp_dir, max_age)
            .map_err(|error| CacheError::io(&self.tmp_dir, error))?;
        Ok(())
    }
}

/// Lists `dir/ab/cdef…{suffix}` files and parses the digest they spell.
pub(super) fn list_sharded<K>(
    dir: &Path,
    suffix: &str,
) -> Result<Vec<(PathBuf, Option<Digest<K>>)>> {
    let mut found = Vec::new();
    let shards = match std::fs::read_dir(dir) {
        Ok(shards) => shards,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(error) => return Err(CacheError::io(dir, error)),
    };
    for shard in shards {
        let shard = shard.map_err(|error| CacheError::io(dir, error))?;
        let shard_path = shard.path();
        if !shard
            .file_type()
            .map_err(|error| CacheError::io(&shard_path, error))?
            .is_dir()
        {
            found.push((shard_path, None));
            continue;
        }
        let shard_name = shard.file_name();
        for entry in
            std::fs::read_dir(&shard_path).map_err(|error| CacheError::io(&shard_path, error))?
        {
            let entry = entry.map_err(|error| CacheError::io(&shard_path, error))?;
            let path = entry.path();
            if entry
                .file_type()
                .map_err(|error| CacheError::io(&path, error))?
                .is_dir()
            {
                continue;
            }
            let digest = match (shard_name.to_str(), entry.file_name().to_str()) {
                (Some(shard), Some(rest)) if shard.len() == 2 => {
                    parse_canonical(shard, rest, suffix)
                }
                _ => None,
            };
            found.push((path, digest));
        }
    }
    Ok(found)
}

/// The digest spelt by a shard and file name; only the canonical lowercase
/// spelling names an entry.
pub(super) fn parse_canonical<K>(shard: &str, file_name: &str, suffix: &str) -> Option<Digest<K>> {
    let hex = format!("{shard}{}", file_name.strip_suffix(suffix)?);
    let digest: Digest<K> = hex.parse().ok()?;
    (digest.to_hex() == hex).then_some(digest)
}
