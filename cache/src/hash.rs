//! Hashing files and directory trees, in parallel, consulting the stat
//! cache per file.

use std::cell::RefCell;
use std::ffi::OsString;
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rayon::prelude::*;

use crate::stat::FileStamp;
use crate::tree::{self, TreeEntry};
use crate::{Artifact, ArtifactKind, CacheError, ObjectDigest, Result, StatCache};

/// From this size on, a file is memory-mapped and hashed by several threads
/// (as `b3sum` does); below it, one read into a reused buffer is cheaper
/// and files are spread across threads instead.
pub(crate) const MMAP_THRESHOLD: u64 = 1 << 20;

/// A hashed file or directory, with what `store` needs to copy it.
pub(crate) enum Node {
    File {
        artifact: Artifact,
        /// `stat` when hashed, to notice a file changing while stored.
        stamp: FileStamp,
    },
    Dir {
        artifact: Artifact,
        /// The tree listing, stored as an object by `store`.
        listing: Vec<u8>,
        children: Vec<(OsString, Node)>,
    },
}

impl Node {
    pub fn artifact(&self) -> &Artifact {
        match self {
            Node::File { artifact, .. } | Node::Dir { artifact, .. } => artifact,
        }
    }
}

/// The owner execute bit decides, as in git.
pub(crate) fn is_executable(metadata: &Metadata) -> bool {
    metadata.permissions().mode() & 0o100 != 0
}

thread_local! {
    static READ_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// blake3 of a file's bytes (equal to `b3sum`) and how many bytes that was.
/// `size_hint` chooses the strategy; the file may have changed since.
pub(crate) fn hash_file_content(
    path: &Path,
    size_hint: u64,
) -> std::io::Result<(ObjectDigest, u64)> {
    if size_hint >= MMAP_THRESHOLD {
        let mut hasher = blake3::Hasher::new();
        hasher.update_mmap_rayon(path)?;
        return Ok((
            ObjectDigest::from_bytes(*hasher.finalize().as_bytes()),
            hasher.count(),
        ));
    }
    hash_read(File::open(path)?, size_hint)
}

/// blake3 of a cache object, opened without following a link and only if
/// it is a regular file (`untrusted::open_regular`): a link to
/// `/dev/zero` or a FIFO in `objects/` is an error, not a read that never
/// ends.
pub(crate) fn hash_object(path: &Path) -> std::io::Result<(ObjectDigest, u64)> {
    let (file, metadata) = crate::untrusted::open_regular(path)?;
    if metadata.len() >= MMAP_THRESHOLD {
        // SAFETY: the map lives while the file is open. A truncation while
        // it is read (through a hard-linked output) would fault, the same
        // risk as blake3's `update_mmap_rayon`, which hashed objects before.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        let mut hasher = blake3::Hasher::new();
        hasher.update_rayon(&map);
        return Ok((
            ObjectDigest::from_bytes(*hasher.finalize().as_bytes()),
            map.len() as u64,
        ));
    }
    hash_read(file, metadata.len())
}

/// Reads `file` to its end into a reused buffer and hashes it.
fn hash_read(mut file: File, size_hint: u64) -> std::io::Result<(ObjectDigest, u64)> {
    READ_BUFFER.with(|buffer| {
        let mut buffer = buffer.borrow_mut();
        buffer.clear();
        // One spare byte so a file that did not grow is read in one go
        // plus the zero-length read that proves the end.
        buffer.reserve(size_hint as usize + 1);
        file.read_to_end(&mut buffer)?;
        let digest = ObjectDigest::of(&buffer);
        let len = buffer.len() as u64;
        // Do not let one large file pin memory in every pool thread.
        if buffer.capacity() > 2 * MMAP_THRESHOLD as usize {
            *buffer = Vec::new();
        }
        Ok((digest, len))
    })
}

/// Hashes a file or directory. A symlink given as `path` itself is
/// followed; inside a directory, only symlinks to objects under
/// `objects_dir` (restored with the `symlink` link mode) are followed, and
/// any other is `CacheError::Unsupported`.
pub(crate) fn hash_node(path: &Path, stat: &StatCache, objects_dir: &Path) -> Result<Node> {
    let metadata = std::fs::metadata(path).map_err(|error| CacheError::io(path, error))?;
    if metadata.is_file() {
        hash_file(path, &metadata, stat)
    } else if metadata.is_dir() {
        hash_dir(path, stat, objects_dir, 0)
    } else {
        Err(CacheError::Unsupported {
            path: path.to_path_buf(),
        })
    }
}

/// The artifact of the regular file at `path` when the stat cache knows
/// its content: what [`hash_node`] gives without reading a byte. `None`
/// for anything else (a file to hash, a directory, nothing there).
pub(crate) fn known_file(path: &Path, stat: &StatCache) -> Option<Artifact> {
    let metadata = std::fs::metadata(path).ok()?;
    if !metadata.is_file() {
        return None;
    }
    let digest = stat.lookup(path, &metadata)?;
    Some(file_artifact(&metadata, digest, metadata.len()))
}

fn file_artifact(metadata: &Metadata, digest: ObjectDigest, size: u64) -> Artifact {
    Artifact {
        kind: ArtifactKind::File,
        digest,
        size,
        files: 1,
        executable: is_executable(metadata),
    }
}

fn hash_file(path: &Path, metadata: &Metadata, stat: &StatCache) -> Result<Node> {
    let stamp = FileStamp::of(metadata);
    let file_artifact = |digest, size| file_artifact(metadata, digest, size);
    if let Some(digest) = stat.lookup(path, metadata) {
        return Ok(Node::File {
            artifact: file_artifact(digest, stamp.size),
            stamp,
        });
    }
    let read_at = SystemTime::now();
    let (digest, size) =
        hash_file_content(path, stamp.size).map_err(|error| CacheError::io(path, error))?;
    stat.note_hashed();
    if size == stamp.size {
        stat.record_read_at(path, metadata, digest, read_at);
    } else {
        tracing::debug!(path = %path.display(), "file changed size while being hashed; not recording it");
    }
    Ok(Node::File {
        artifact: file_artifact(digest, size),
        stamp,
    })
}

/// Whether `link` is a symlink to a file directly under `objects_dir/ab/`.
pub(crate) fn links_to_object(link: &Path, objects_dir: &Path) -> bool {
    std::fs::read_link(link).is_ok_and(|target| {
        target.is_absolute()
            && target
                .strip_prefix(objects_dir)
                .is_ok_and(|rest| rest.components().count() == 2)
    })
}

fn hash_dir(path: &Path, stat: &StatCache, objects_dir: &Path, depth: usize) -> Result<Node> {
    if depth > crate::tree::MAX_TREE_DEPTH {
        return Err(CacheError::TooDeep {
            path: path.to_path_buf(),
            max: crate::tree::MAX_TREE_DEPTH,
        });
    }
    let io_error = |error| CacheError::io(path, error);
    let mut listing: Vec<(OsString, PathBuf, std::fs::FileType)> = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io_error)? {
        let entry = entry.map_err(io_error)?;
        let child_path = entry.path();
        let file_type = entry
            .file_type()
            .map_err(|error| CacheError::io(&child_path, error))?;
        listing.push((entry.file_name(), child_path, file_type));
    }
    listing.sort_unstable_by(|left, right| left.0.as_bytes().cmp(right.0.as_bytes()));

    let children: Vec<(OsString, Node)> = listing
        .into_par_iter()
        .map(|(name, child_path, file_type)| {
            let node = if file_type.is_dir() {
                hash_dir(&child_path, stat, objects_dir, depth + 1)?
            } else if file_type.is_symlink() && links_to_object(&child_path, objects_dir) {
                let metadata = std::fs::metadata(&child_path)
                    .map_err(|error| CacheError::io(&child_path, error))?;
                if !metadata.is_file() {
                    return Err(CacheError::Unsupported { path: child_path });
                }
                hash_file(&child_path, &metadata, stat)?
            } else if file_type.is_file() {
                let metadata = std::fs::symlink_metadata(&child_path)
                    .map_err(|error| CacheError::io(&child_path, error))?;
                // Replaced by something else since the listing was read.
                if !metadata.is_file() {
                    return Err(CacheError::Unsupported { path: child_path });
                }
                hash_file(&child_path, &metadata, stat)?
            } else {
                return Err(CacheError::Unsupported { path: child_path });
            };
            Ok((name, node))
        })
        .collect::<Result<_>>()?;

    let entries: Vec<TreeEntry> = children
        .iter()
        .map(|(name, node)| TreeEntry {
            name: name.as_bytes().to_vec(),
            artifact: node.artifact().clone(),
        })
        .collect();
    let (size, files) = tree::totals(&entries).ok_or_else(|| {
        CacheError::io(
            path,
            std::io::Error::other("directory size overflows 64 bits"),
        )
    })?;
    let listing = tree::encode(&entries);
    if listing.len() as u64 > crate::untrusted::TREE_OBJECT.bytes {
        return Err(CacheError::TooManyEntries {
            path: path.to_path_buf(),
            size: listing.len() as u64,
            limit: crate::untrusted::human(crate::untrusted::TREE_OBJECT.bytes),
        });
    }
    let artifact = Artifact {
        kind: ArtifactKind::Dir,
        digest: ObjectDigest::of(&listing),
        size,
        files,
        executable: false,
    };
    Ok(Node::Dir {
        artifact,
        listing,
        children,
    })
}
