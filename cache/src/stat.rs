//! Stat cache: (path, inode, size, mtime, ctime) -> content digest, so
//! unchanged inputs are never rehashed.

use std::path::Path;

use crate::{ObjectDigest, Result};

/// Thread-safe; loaded whole at open, written back in one transaction by
/// `flush`. Entries are validated against a fresh `stat` before use.
pub struct StatCache {
    // implementation detail
}

impl StatCache {
    /// Opens (creating) the SQLite database at `db_path` (WAL mode).
    pub fn open(db_path: &Path) -> Result<StatCache> {
        let _ = db_path;
        todo!()
    }

    /// A stat cache that remembers nothing (for `--no-stat-cache` and tests).
    pub fn disabled() -> StatCache {
        todo!()
    }

    /// The digest recorded for `path` if its metadata still matches.
    pub fn lookup(&self, path: &Path, metadata: &std::fs::Metadata) -> Option<ObjectDigest> {
        let _ = (path, metadata);
        todo!()
    }

    pub fn record(&self, path: &Path, metadata: &std::fs::Metadata, digest: ObjectDigest) {
        let _ = (path, metadata, digest);
        todo!()
    }

    /// Number of files hashed (not answered from the cache) since open.
    pub fn files_hashed(&self) -> u64 {
        todo!()
    }

    /// Writes new and changed entries back. Safe with concurrent processes.
    pub fn flush(&self) -> Result<()> {
        todo!()
    }
}
