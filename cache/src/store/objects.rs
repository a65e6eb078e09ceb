//! Content-addressed objects: storing files and trees, checking that they
//! are present, and reading them back checked against their digests.

use std::collections::HashSet;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use rayon::prelude::*;

use super::cache_dir::{corrupt, list_sharded, Cache};
use crate::artifact::{Artifact, ArtifactKind};
use crate::fsutil::{self, TempPath};
use crate::hash::{self, Node};
use crate::stat::FileStamp;
use crate::tree::{self, TreeEntry};
use crate::untrusted;
use crate::{CacheError, ObjectDigest, Result, StatCache};

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
pub(super) enum OnCorrupt {
    /// Remove it, so the next `store` of that directory writes a good one
    /// (a present object of the right size would otherwise be kept).
    Discard,
    /// Leave it (verify reports before it repairs).
    Keep,
}

impl Cache {
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
        match hash::hash_object(object) {
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
                && untrusted::read(&object, untrusted::TREE_OBJECT)
                    .is_ok_and(|stored| stored == bytes);
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

    /// True when the tree object of directory `artifact` is present and
    /// matches its digest. A corrupt one is removed, so that it is fetched
    /// or stored again instead of failing every read of it.
    pub(crate) fn has_good_tree(&self, artifact: &Artifact) -> bool {
        self.read_tree_checked(artifact, OnCorrupt::Discard).is_ok()
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
    pub(super) fn check_present(
        &self,
        artifact: &Artifact,
        on_corrupt: OnCorrupt,
    ) -> std::result::Result<(), String> {
        self.check_present_below(artifact, on_corrupt, 0)
    }

    fn check_present_below(
        &self,
        artifact: &Artifact,
        on_corrupt: OnCorrupt,
        depth: usize,
    ) -> std::result::Result<(), String> {
        if depth > crate::tree::MAX_TREE_DEPTH {
            return Err(format!(
                "tree {} nests more than {} levels deep",
                artifact.digest.short(),
                crate::tree::MAX_TREE_DEPTH
            ));
        }
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
                entries.par_iter().try_for_each(|entry| {
                    self.check_present_below(&entry.artifact, on_corrupt, depth + 1)
                })
            }
        }
    }

    /// Reads a tree object, checks its digest, its encoding and that its
    /// totals match `artifact`.
    pub(super) fn read_tree_checked(
        &self,
        artifact: &Artifact,
        on_corrupt: OnCorrupt,
    ) -> Result<Vec<TreeEntry>> {
        let digest = &artifact.digest;
        let object = self.object_path(digest);
        let bytes = match untrusted::read(&object, untrusted::TREE_OBJECT) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(corrupt(digest, "tree object is missing"))
            }
            // A link, a FIFO, a file past the limit: damage, so a miss.
            Err(error) if error.kind() == io::ErrorKind::InvalidData => {
                if on_corrupt == OnCorrupt::Discard {
                    self.discard_corrupt_object(&object);
                }
                return Err(corrupt(digest, format!("tree object {error}")));
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

    pub(super) fn verify_file_object(&self, digest: &ObjectDigest, size: u64) -> Result<()> {
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
        let (actual, _) =
            hash::hash_object(&object).map_err(|error| CacheError::io(&object, error))?;
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
        let limit = untrusted::Limit {
            bytes: artifact.size,
            what: "this object",
        };
        let bytes = match untrusted::read(&object, limit) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Err(corrupt(digest, "object is missing"))
            }
            Err(error) if error.kind() == io::ErrorKind::InvalidData => {
                self.discard_corrupt_object(&object);
                return Err(corrupt(digest, format!("object {error}")));
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

    /// Every `objects/ab/cdef…` file, with the digest its name spells
    /// (`None` for a stray file).
    pub(super) fn list_objects(&self) -> Result<Vec<(PathBuf, Option<ObjectDigest>)>> {
        list_sharded(&self.objects_dir, "")
    }
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
