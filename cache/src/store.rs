//! Objects, trees, action results, link strategies, verify and gc.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::action::{self, ActionResult};
use crate::digest::Digest;
use crate::fsutil::{self, TempPath};
use crate::hash::{self, Node};
use crate::stat::FileStamp;
use crate::tree::{self, TreeEntry};
use crate::{ActionKey, CacheError, ObjectDigest, Result, StatCache};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactKind {
    File,
    Dir,
}

/// A stored file or directory. For a directory, `digest` names its tree
/// object (a canonical listing of entries), `size` and `files` are totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub kind: ArtifactKind,
    pub digest: ObjectDigest,
    pub size: u64,
    pub files: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub executable: bool,
}

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

#[derive(Debug, Default, Clone, Serialize)]
pub struct GcReport {
    pub objects_removed: u64,
    pub bytes_removed: u64,
    pub actions_removed: u64,
    pub objects_kept: u64,
    pub actions_kept: u64,
}

/// The layout this code reads and writes; see docs/cache-format.md.
pub const LAYOUT_VERSION: &str = "pipe-cache-v1";

/// Temp files older than this are leftovers of a killed process.
const STALE_TMP_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// A cache directory: `objects/`, `actions/`, `tmp/` and a `VERSION` file.
pub struct Cache {
    root: PathBuf,
    objects_dir: PathBuf,
    actions_dir: PathBuf,
    tmp_dir: PathBuf,
    /// Cleared after the first failed reflink, so a file system without
    /// reflinks does not pay for a failed attempt per stored file.
    reflink_works: AtomicBool,
}

/// An object being received; see `Cache::incoming_object`. Dropped
/// unfinished, it leaves nothing behind.
pub struct IncomingObject<'a> {
    cache: &'a Cache,
    file: std::io::BufWriter<tempfile::NamedTempFile>,
    hasher: blake3::Hasher,
    size: u64,
    expected: ObjectDigest,
}

impl IncomingObject<'_> {
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        self.file
            .write_all(bytes)
            .map_err(|error| CacheError::io(&self.cache.tmp_dir, error))
    }

    /// Files the object under its digest when its bytes match it (and it
    /// has `size` bytes, when known); otherwise `CacheError::Corrupt` and
    /// nothing is kept.
    pub fn finish(self, size: Option<u64>) -> Result<()> {
        let digest = ObjectDigest::from_bytes(*self.hasher.finalize().as_bytes());
        if digest != self.expected || size.is_some_and(|size| size != self.size) {
            return Err(corrupt(
                &self.expected,
                format!("received {} bytes hashing to {}", self.size, digest.short()),
            ));
        }
        let file = self
            .file
            .into_inner()
            .map_err(|error| CacheError::io(&self.cache.tmp_dir, error.into_error()))?;
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o444))
            .map_err(|error| CacheError::io(file.path(), error))?;
        let dest = self.cache.object_path(&self.expected);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|error| CacheError::io(parent, error))?;
        }
        file.persist(&dest)
            .map_err(|error| CacheError::io(&dest, error.error))?;
        Ok(())
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

/// What `store` does with an object that is already in the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExistingObjects {
    /// Keep it when its size is right (and no hard link could have changed it).
    TrustBySize,
    /// Rehash it and replace it when its content does not match its name.
    Rehash,
}

/// What reading a tree does with one that does not match its digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnCorrupt {
    /// Remove it, so the next `store` of that directory writes a good one
    /// (a present object of the right size would otherwise be kept).
    Discard,
    /// Leave it (verify reports before it repairs).
    Keep,
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

fn corrupt(digest: &ObjectDigest, reason: impl Into<String>) -> CacheError {
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
        let version_path = root.join("VERSION");
        let found = match std::fs::read_to_string(&version_path) {
            Ok(text) => Some(text),
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => return Err(CacheError::io(&version_path, error)),
        };
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

    /// Hashes a file or directory without storing it (for dependencies).
    pub fn hash_path(&self, path: &Path, stat: &StatCache) -> Result<Artifact> {
        Ok(hash::hash_node(path, stat, &self.objects_dir)?
            .artifact()
            .clone())
    }

    /// Hashes and stores a file or directory (for outputs). An object
    /// already present with the right size is trusted without reading it,
    /// unless a hard link elsewhere could have written into it.
    pub fn store(&self, path: &Path, stat: &StatCache) -> Result<Artifact> {
        self.store_with(path, stat, ExistingObjects::TrustBySize)
    }

    /// Like `store`, but rehashes every object that is already present and
    /// replaces those whose content does not match their name. For a stage
    /// run with `--force`, or whose cached result could not be used.
    pub fn store_rehashing_existing(&self, path: &Path, stat: &StatCache) -> Result<Artifact> {
        self.store_with(path, stat, ExistingObjects::Rehash)
    }

    fn store_with(
        &self,
        path: &Path,
        stat: &StatCache,
        existing: ExistingObjects,
    ) -> Result<Artifact> {
        let node = hash::hash_node(path, stat, &self.objects_dir)?;
        let mut files = Vec::new();
        let mut trees = Vec::new();
        let mut seen = HashSet::new();
        collect_store_work(&node, path.to_path_buf(), &mut files, &mut trees, &mut seen);
        files.par_iter().try_for_each(|(source, artifact, stamp)| {
            self.store_file_object(source, artifact, stamp, existing)
        })?;
        // Trees go in after their files and children (post-order), so a
        // present tree object implies its content was stored.
        for (digest, listing) in trees {
            self.store_bytes_object(digest, listing)?;
        }
        tracing::debug!(
            path = %path.display(),
            digest = %node.artifact().digest.short(),
            files = node.artifact().files,
            "stored"
        );
        Ok(node.artifact().clone())
    }

    /// Whether an object already stored under `digest` with `size` bytes
    /// can be kept as it is.
    fn existing_object_is_good(
        &self,
        object: &Path,
        existing: &std::fs::Metadata,
        digest: &ObjectDigest,
        size: u64,
        source_stamp: &FileStamp,
        policy: ExistingObjects,
    ) -> bool {
        if !existing.is_file() || existing.len() != size {
            tracing::warn!(path = %object.display(), "replacing an object of the wrong size");
            return false;
        }
        // The source itself, hashed a moment ago.
        if existing.ino() == source_stamp.ino {
            return true;
        }
        // Another name for the object (a hard-linked output) may have been
        // written through; as root, its read-only mode does not stop that.
        let must_rehash = policy == ExistingObjects::Rehash || existing.nlink() > 1;
        if !must_rehash {
            return true;
        }
        match hash::hash_file_content(object, size) {
            Ok((actual, _)) if actual == *digest => true,
            Ok((actual, _)) => {
                tracing::warn!(path = %object.display(), %actual, "replacing a corrupt object");
                false
            }
            Err(error) => {
                tracing::warn!(path = %object.display(), %error, "replacing an unreadable object");
                false
            }
        }
    }

    fn store_file_object(
        &self,
        source: &Path,
        artifact: &Artifact,
        stamp: &FileStamp,
        policy: ExistingObjects,
    ) -> Result<()> {
        let object = self.object_path(&artifact.digest);
        if let Ok(existing) = std::fs::symlink_metadata(&object) {
            if self.existing_object_is_good(
                &object,
                &existing,
                &artifact.digest,
                artifact.size,
                stamp,
                policy,
            ) {
                // Touching a workspace hard link's own inode would change
                // its ctime and cost a rehash next run; it needs no grace.
                if existing.ino() != stamp.ino {
                    if let Err(error) = fsutil::touch(&object) {
                        tracing::debug!(path = %object.display(), %error, "could not touch object");
                    }
                }
                return Ok(());
            }
        }
        // A corrupt object is replaced by rename, never rewritten in place:
        // a project file hard-linked to it keeps its own (bad) bytes, and a
        // concurrent reader sees the old inode or the new one.
        let temp = TempPath::new(self.tmp_dir.join(fsutil::unique_name("object")));
        self.copy_for_store(source, temp.path())?;
        // The digest is only the name of these bytes if the source did not
        // change between hashing and copying.
        let changed = || {
            CacheError::io(
                source,
                io::Error::other("file changed while it was being stored in the cache"),
            )
        };
        let after = std::fs::metadata(source).map_err(|error| CacheError::io(source, error))?;
        if !FileStamp::of(&after).same_content_as(stamp) {
            return Err(changed());
        }
        let copied = std::fs::symlink_metadata(temp.path())
            .map_err(|error| CacheError::io(temp.path(), error))?;
        if copied.len() != artifact.size {
            return Err(changed());
        }
        std::fs::set_permissions(temp.path(), std::fs::Permissions::from_mode(0o444))
            .map_err(|error| CacheError::io(temp.path(), error))?;
        self.rename_into_objects(temp.path(), &object)?;
        temp.keep();
        Ok(())
    }

    fn copy_for_store(&self, source: &Path, temp: &Path) -> Result<()> {
        if self.reflink_works.load(Ordering::Relaxed) {
            match reflink_copy::reflink(source, temp) {
                Ok(()) => return Ok(()),
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::NotFound
                            | io::ErrorKind::PermissionDenied
                            | io::ErrorKind::AlreadyExists
                    ) =>
                {
                    return Err(CacheError::io(source, error));
                }
                Err(error) => {
                    tracing::debug!(%error, "reflink unsupported for the cache; copying instead");
                    self.reflink_works.store(false, Ordering::Relaxed);
                }
            }
        }
        std::fs::copy(source, temp).map_err(|error| CacheError::io(source, error))?;
        Ok(())
    }

    fn rename_into_objects(&self, temp: &Path, object: &Path) -> Result<()> {
        match std::fs::rename(temp, object) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                // The shard directory is created on first use only.
                if let Some(shard) = object.parent() {
                    std::fs::create_dir_all(shard).map_err(|error| CacheError::io(shard, error))?;
                }
                std::fs::rename(temp, object).map_err(|error| CacheError::io(object, error))
            }
            Err(error) => Err(CacheError::io(object, error)),
        }
    }

    fn store_bytes_object(&self, digest: &ObjectDigest, bytes: &[u8]) -> Result<()> {
        let object = self.object_path(digest);
        if let Ok(existing) = std::fs::symlink_metadata(&object) {
            // A listing is small and already in memory: comparing it costs
            // less than the directory walk that produced it, and catches a
            // corrupt tree of the right size.
            let same = existing.is_file()
                && existing.len() == bytes.len() as u64
                && std::fs::read(&object).is_ok_and(|stored| stored == bytes);
            if same {
                if let Err(error) = fsutil::touch(&object) {
                    tracing::debug!(path = %object.display(), %error, "could not touch object");
                }
                return Ok(());
            }
            tracing::warn!(path = %object.display(), "replacing a corrupt tree object");
        }
        self.write_atomic(&object, bytes, 0o444)
    }

    /// Writes `bytes` to a temp file in `tmp/` (same file system) and
    /// renames it to `dest`: readers see the old content or all of the new.
    fn write_atomic(&self, dest: &Path, bytes: &[u8], mode: u32) -> Result<()> {
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

    /// True when the object named `digest` is present with `size` bytes.
    /// Its content is not read (see `restore` and `verify`).
    pub fn has_object(&self, digest: &ObjectDigest, size: u64) -> bool {
        std::fs::symlink_metadata(self.object_path(digest))
            .is_ok_and(|metadata| metadata.is_file() && metadata.len() == size)
    }

    /// Starts writing the object named `digest`, arriving from elsewhere
    /// (a remote cache). Its bytes are hashed as they are written, and it
    /// enters the cache only if they hash to `digest`.
    pub fn incoming_object(&self, digest: &ObjectDigest) -> Result<IncomingObject<'_>> {
        let file = tempfile::NamedTempFile::new_in(&self.tmp_dir)
            .map_err(|error| CacheError::io(&self.tmp_dir, error))?;
        Ok(IncomingObject {
            cache: self,
            file: std::io::BufWriter::with_capacity(1 << 20, file),
            hasher: blake3::Hasher::new(),
            size: 0,
            expected: *digest,
        })
    }

    /// True when every object of `artifact` is present with the right size.
    pub fn contains(&self, artifact: &Artifact) -> bool {
        match self.check_present(artifact, OnCorrupt::Discard) {
            Ok(()) => true,
            Err(reason) => {
                tracing::debug!(digest = %artifact.digest.short(), reason, "artifact not in cache");
                false
            }
        }
    }

    /// Checks presence and sizes without reading file objects; tree
    /// objects (small) are read, checked against their digest and followed.
    fn check_present(
        &self,
        artifact: &Artifact,
        on_corrupt: OnCorrupt,
    ) -> std::result::Result<(), String> {
        let object = self.object_path(&artifact.digest);
        match artifact.kind {
            ArtifactKind::File => match std::fs::symlink_metadata(&object) {
                Ok(metadata) if metadata.is_file() && metadata.len() == artifact.size => Ok(()),
                Ok(metadata) => Err(format!(
                    "object {} has {} bytes, expected {}",
                    artifact.digest,
                    metadata.len(),
                    artifact.size
                )),
                Err(error) => Err(format!("object {}: {error}", artifact.digest)),
            },
            ArtifactKind::Dir => {
                let entries = self
                    .read_tree_checked(artifact, on_corrupt)
                    .map_err(|error| error.to_string())?;
                entries
                    .par_iter()
                    .try_for_each(|entry| self.check_present(&entry.artifact, on_corrupt))
            }
        }
    }

    /// Reads a tree object, checks its digest, its encoding and that its
    /// totals match `artifact`.
    fn read_tree_checked(
        &self,
        artifact: &Artifact,
        on_corrupt: OnCorrupt,
    ) -> Result<Vec<TreeEntry>> {
        let digest = &artifact.digest;
        let object = self.object_path(digest);
        let bytes = match std::fs::read(&object) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(corrupt(digest, "tree object is missing"))
            }
            Err(error) => return Err(CacheError::io(&object, error)),
        };
        if ObjectDigest::of(&bytes) != *digest {
            if on_corrupt == OnCorrupt::Discard {
                self.discard_corrupt_object(&object);
            }
            return Err(corrupt(digest, "tree object does not match its digest"));
        }
        let entries = tree::decode(&bytes).map_err(|reason| corrupt(digest, reason))?;
        if tree::totals(&entries) != Some((artifact.size, artifact.files)) {
            return Err(corrupt(digest, "tree totals do not match the artifact"));
        }
        Ok(entries)
    }

    /// The entries of a stored directory, for listings and diffs. Names
    /// that are not UTF-8 are converted lossily.
    pub fn read_tree(&self, artifact: &Artifact) -> Result<Vec<(String, Artifact)>> {
        Ok(self
            .read_tree_checked(artifact, OnCorrupt::Keep)?
            .into_iter()
            .map(|entry| {
                (
                    String::from_utf8_lossy(&entry.name).into_owned(),
                    entry.artifact,
                )
            })
            .collect())
    }

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

        let plan = match self.verified_plan(artifact) {
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

    /// Rehashes every object `artifact` needs and returns what to create.
    fn verified_plan(&self, artifact: &Artifact) -> Result<Plan> {
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
                        let plan = self.verified_plan(&entry.artifact)?;
                        Ok((OsString::from_vec(entry.name), plan))
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Plan::Dir(children))
            }
        }
    }

    fn verify_file_object(&self, digest: &ObjectDigest, size: u64) -> Result<()> {
        let object = self.object_path(digest);
        let metadata = match std::fs::symlink_metadata(&object) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(corrupt(digest, "object is missing"))
            }
            Err(error) => return Err(CacheError::io(&object, error)),
        };
        if !metadata.is_file() || metadata.len() != size {
            self.discard_corrupt_object(&object);
            return Err(corrupt(
                digest,
                format!("object has {} bytes, expected {size}", metadata.len()),
            ));
        }
        let (actual, _) = hash::hash_file_content(&object, size)
            .map_err(|error| CacheError::io(&object, error))?;
        if actual != *digest {
            self.discard_corrupt_object(&object);
            return Err(corrupt(
                digest,
                format!("object content hashes to {actual}"),
            ));
        }
        Ok(())
    }

    /// The bytes of a stored file (a metrics file), read once and checked
    /// against its digest: what is returned is exactly what was stored.
    /// A file over `max_bytes` is refused before it is read.
    pub fn read_file_object(&self, artifact: &Artifact, max_bytes: u64) -> Result<Vec<u8>> {
        let digest = &artifact.digest;
        if artifact.kind != ArtifactKind::File {
            return Err(corrupt(digest, "expected a file, found a directory"));
        }
        if artifact.size > max_bytes {
            return Err(corrupt(
                digest,
                format!("{} bytes, more than the {max_bytes} allowed", artifact.size),
            ));
        }
        let object = self.object_path(digest);
        let bytes = match std::fs::read(&object) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(corrupt(digest, "object is missing"))
            }
            Err(error) => return Err(CacheError::io(&object, error)),
        };
        if bytes.len() as u64 != artifact.size || ObjectDigest::of(&bytes) != *digest {
            self.discard_corrupt_object(&object);
            return Err(corrupt(digest, "object content does not match its digest"));
        }
        Ok(bytes)
    }

    /// A corrupt object would otherwise stay forever: `store` skips
    /// objects that are present with the right size.
    fn discard_corrupt_object(&self, object: &Path) {
        tracing::warn!(path = %object.display(), "removing corrupt cache object");
        if let Err(error) = fsutil::remove_any(object) {
            tracing::warn!(path = %object.display(), %error, "could not remove corrupt cache object");
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
        self.collect_lost(Some(artifact), dest, stat, &mut lost)?;
        lost.sort();
        Ok(lost)
    }

    fn collect_lost(
        &self,
        wanted: Option<&Artifact>,
        path: &Path,
        stat: &StatCache,
        lost: &mut Vec<PathBuf>,
    ) -> Result<()> {
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
            self.collect_lost(child, &entry.path(), stat, lost)?;
        }
        Ok(())
    }

    pub fn put_action(&self, result: &ActionResult) -> Result<()> {
        self.write_atomic(
            &self.action_path(&result.key),
            &action::encode(result),
            0o644,
        )
    }

    fn read_action_file(path: &Path, key: &ActionKey) -> std::result::Result<ActionResult, String> {
        let bytes = std::fs::read(path).map_err(|error| error.to_string())?;
        action::decode(&bytes, key)
    }

    /// `None` when absent, unreadable, damaged, not its key's, naming a
    /// path its manifest does not declare, or when an object it names is
    /// gone (see `action::decode`).
    pub fn get_action(&self, key: &ActionKey) -> Option<ActionResult> {
        let path = self.action_path(key);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return None,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read action result; treating it as a miss");
                return None;
            }
        };
        let result = match action::decode(&bytes, key) {
            Ok(result) => result,
            Err(reason) => {
                tracing::warn!(
                    "cached result {} ({}) cannot be used: {reason}; treating it as a miss",
                    key.short(),
                    path.display()
                );
                return None;
            }
        };
        for (output, artifact) in &result.outputs {
            if let Err(reason) = self.check_present(artifact, OnCorrupt::Discard) {
                tracing::debug!(key = %key.short(), output, reason, "action result names a missing object");
                return None;
            }
        }
        Some(result)
    }

    /// Every `objects/ab/cdef…` file, with the digest its name spells
    /// (`None` for a stray file).
    fn list_objects(&self) -> Result<Vec<(PathBuf, Option<ObjectDigest>)>> {
        list_sharded(&self.objects_dir, "")
    }

    /// Every `actions/ab/cdef….json` file, with the key its name spells.
    fn list_actions(&self) -> Result<Vec<(PathBuf, Option<ActionKey>)>> {
        list_sharded(&self.actions_dir, ".json")
    }

    /// Removes temp files left by killed processes.
    fn clean_tmp(&self, max_age: Duration) -> Result<()> {
        let now = SystemTime::now();
        let listing = match std::fs::read_dir(&self.tmp_dir) {
            Ok(listing) => listing,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(CacheError::io(&self.tmp_dir, error)),
        };
        for entry in listing {
            let entry = entry.map_err(|error| CacheError::io(&self.tmp_dir, error))?;
            let path = entry.path();
            let Ok(metadata) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if fsutil::older_than(&metadata, max_age, now) {
                tracing::debug!(path = %path.display(), "removing stale temp file");
                fsutil::remove_any(&path).map_err(|error| CacheError::io(&path, error))?;
            }
        }
        Ok(())
    }

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
                let size = metadata
                    .as_ref()
                    .map(|metadata| metadata.len())
                    .unwrap_or(0);
                let (bytes, problem) = match hash::hash_file_content(path, size) {
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
            self.mark_reachable(artifact, &mut reachable);
            if let Some(bad) = reachable.intersection(corrupt_digests).next() {
                return Some(format!("references corrupt object {bad}"));
            }
        }
        None
    }

    /// Adds `artifact`'s object and, through trees, everything below it.
    /// Unreadable trees are skipped: gc then keeps less, never more wrong.
    fn mark_reachable(&self, artifact: &Artifact, reachable: &mut HashSet<ObjectDigest>) {
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

/// Lists `dir/ab/cdef…{suffix}` files and parses the digest they spell.
fn list_sharded<K>(dir: &Path, suffix: &str) -> Result<Vec<(PathBuf, Option<Digest<K>>)>> {
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
fn parse_canonical<K>(shard: &str, file_name: &str, suffix: &str) -> Option<Digest<K>> {
    let hex = format!("{shard}{}", file_name.strip_suffix(suffix)?);
    let digest: Digest<K> = hex.parse().ok()?;
    (digest.to_hex() == hex).then_some(digest)
}

/// Files to copy (deduplicated by digest) and tree listings in post-order.
fn collect_store_work<'a>(
    node: &'a Node,
    path: PathBuf,
    files: &mut Vec<(PathBuf, &'a Artifact, &'a FileStamp)>,
    trees: &mut Vec<(&'a ObjectDigest, &'a [u8])>,
    seen: &mut HashSet<ObjectDigest>,
) {
    match node {
        Node::File { artifact, stamp } => {
            if seen.insert(artifact.digest) {
                files.push((path, artifact, stamp));
            }
        }
        Node::Dir {
            artifact,
            listing,
            children,
        } => {
            for (name, child) in children {
                collect_store_work(child, path.join(name), files, trees, seen);
            }
            trees.push((&artifact.digest, listing));
        }
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
