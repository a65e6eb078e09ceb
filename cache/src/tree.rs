//! The canonical, length-prefixed binary listing of a directory (a tree
//! object). See docs/cache-format.md; changing it changes every digest.

use crate::{Artifact, ArtifactKind, ObjectDigest};

pub(crate) const TREE_MAGIC: &[u8] = b"pipe-tree-v1\n";

/// How many directory levels pipe hashes, stores, checks and restores.
/// Every walk of a tree recurses once per level, on threads with a few
/// MiB of stack; a tree from a remote or a damaged cache could otherwise
/// nest deep enough to overflow one and abort pipe. No real output comes
/// near it (Linux's PATH_MAX allows about 2,000 levels of one-letter
/// names).
pub const MAX_TREE_DEPTH: usize = 128;

const KIND_FILE: u8 = b'f';
const KIND_EXECUTABLE: u8 = b'x';
const KIND_DIR: u8 = b'd';

/// Fixed part of an entry: kind, digest, size, files, name length.
const ENTRY_HEADER_LEN: usize = 1 + 32 + 8 + 8 + 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeEntry {
    /// A single path component, as raw bytes.
    pub name: Vec<u8>,
    pub artifact: Artifact,
}

/// A name that cannot escape the directory it is restored into.
pub(crate) fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

/// `entries` must be sorted by name bytes, without duplicates (a directory
/// listing read from the file system and sorted satisfies this).
pub(crate) fn encode(entries: &[TreeEntry]) -> Vec<u8> {
    debug_assert!(entries.windows(2).all(|pair| pair[0].name < pair[1].name));
    let capacity = TREE_MAGIC.len()
        + entries
            .iter()
            .map(|entry| ENTRY_HEADER_LEN + entry.name.len())
            .sum::<usize>();
    let mut bytes = Vec::with_capacity(capacity);
    bytes.extend_from_slice(TREE_MAGIC);
    for entry in entries {
        let artifact = &entry.artifact;
        bytes.push(match (artifact.kind, artifact.executable) {
            (ArtifactKind::File, false) => KIND_FILE,
            (ArtifactKind::File, true) => KIND_EXECUTABLE,
            (ArtifactKind::Dir, _) => KIND_DIR,
        });
        bytes.extend_from_slice(artifact.digest.as_bytes());
        bytes.extend_from_slice(&artifact.size.to_le_bytes());
        bytes.extend_from_slice(&artifact.files.to_le_bytes());
        // A file name is at most a few hundred bytes on every file system.
        let name_len = u32::try_from(entry.name.len()).unwrap_or(u32::MAX);
        bytes.extend_from_slice(&name_len.to_le_bytes());
        bytes.extend_from_slice(&entry.name);
    }
    bytes
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < len {
            return Err("tree listing is truncated".to_string());
        }
        let (head, tail) = self.bytes.split_at(len);
        self.bytes = tail;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut buffer = [0u8; 8];
        buffer.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(buffer))
    }

    fn u32(&mut self) -> Result<u32, String> {
        let mut buffer = [0u8; 4];
        buffer.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(buffer))
    }
}

/// Parses a tree listing, rejecting anything `encode` would not produce, so
/// a tampered tree cannot name `..` or list a path twice.
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<TreeEntry>, String> {
    let Some(body) = bytes.strip_prefix(TREE_MAGIC) else {
        return Err("not a pipe-tree-v1 listing".to_string());
    };
    let mut reader = Reader { bytes: body };
    let mut entries: Vec<TreeEntry> = Vec::new();
    while !reader.bytes.is_empty() {
        let kind_byte = reader.take(1)?[0];
        let mut digest = [0u8; 32];
        digest.copy_from_slice(reader.take(32)?);
        let size = reader.u64()?;
        let files = reader.u64()?;
        let name_len = reader.u32()? as usize;
        let name = reader.take(name_len)?.to_vec();
        if !valid_name(&name) {
            return Err(format!(
                "tree entry has an invalid name {:?}",
                String::from_utf8_lossy(&name)
            ));
        }
        if let Some(previous) = entries.last() {
            if previous.name >= name {
                return Err("tree entries are not sorted and unique".to_string());
            }
        }
        let (kind, executable) = match kind_byte {
            KIND_FILE => (ArtifactKind::File, false),
            KIND_EXECUTABLE => (ArtifactKind::File, true),
            KIND_DIR => (ArtifactKind::Dir, false),
            other => return Err(format!("tree entry has unknown kind byte {other:#04x}")),
        };
        if kind == ArtifactKind::File && files != 1 {
            return Err("file entry does not count exactly one file".to_string());
        }
        entries.push(TreeEntry {
            name,
            artifact: Artifact {
                kind,
                digest: ObjectDigest::from_bytes(digest),
                size,
                files,
                executable,
            },
        });
    }
    Ok(entries)
}

/// Totals (bytes, files) of a listing, `None` on overflow.
pub(crate) fn totals(entries: &[TreeEntry]) -> Option<(u64, u64)> {
    entries
        .iter()
        .try_fold((0u64, 0u64), |(size, files), entry| {
            Some((
                size.checked_add(entry.artifact.size)?,
                files.checked_add(entry.artifact.files)?,
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, content: &[u8], executable: bool) -> TreeEntry {
        TreeEntry {
            name: name.as_bytes().to_vec(),
            artifact: Artifact {
                kind: ArtifactKind::File,
                digest: ObjectDigest::of(content),
                size: content.len() as u64,
                files: 1,
                executable,
            },
        }
    }

    #[test]
    fn round_trip() {
        let entries = vec![file("a", b"hello", false), file("b", b"", true)];
        let bytes = encode(&entries);
        assert_eq!(decode(&bytes), Ok(entries));
        assert_eq!(decode(&encode(&[])), Ok(vec![]));
    }

    #[test]
    fn rejects_non_canonical_listings() {
        let unsorted = encode(&[file("b", b"", false)]);
        let mut twice = unsorted.clone();
        twice.extend_from_slice(&unsorted[TREE_MAGIC.len()..]);
        assert!(decode(&twice).is_err());
        let bytes = encode(&[file("a", b"x", false)]);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&bytes[1..]).is_err());
        let escape = TreeEntry {
            name: b"..".to_vec(),
            ..file("a", b"", false)
        };
        assert!(decode(&encode(&[escape])).is_err());
    }
}
