//! Stat cache: (path, inode, size, mtime, ctime) -> content digest, so
//! unchanged inputs are never rehashed.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

use crate::{CacheError, ObjectDigest, Result};

/// A file modified less than this long before its content was read may
/// still change without its mtime changing (coarse timestamps, or a write in
/// the same clock tick): the "racy git" problem. Such entries are not kept.
pub(crate) const RACY_WINDOW: Duration = Duration::from_secs(2);

/// Long enough for a concurrent `pipe` to finish its flush transaction.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The part of `stat` that changes whenever content can have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl FileStamp {
    pub fn of(metadata: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            ino: metadata.ino(),
            size: metadata.size(),
            mtime_ns: metadata
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(metadata.mtime_nsec()),
            ctime_ns: metadata
                .ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(metadata.ctime_nsec()),
        }
    }

    /// Same file, same content as far as `stat` can tell. ctime is left out
    /// on purpose: it moves on chmod and on every new hard link, which do
    /// not change content (the stat cache itself still compares it).
    pub fn same_content_as(&self, other: &FileStamp) -> bool {
        self.ino == other.ino && self.size == other.size && self.mtime_ns == other.mtime_ns
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    stamp: FileStamp,
    digest: ObjectDigest,
    dirty: bool,
}

struct Db {
    path: PathBuf,
    conn: Mutex<Connection>,
    entries: Mutex<HashMap<PathBuf, Entry>>,
}

/// Thread-safe; loaded whole at open, written back in one transaction by
/// `flush`. Entries are validated against a fresh `stat` before use.
pub struct StatCache {
    db: Option<Db>,
    files_hashed: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the map inconsistent
    // (every update is a single insert), so poisoning is not fatal.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn nanos_since_epoch(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

impl StatCache {
    /// Opens (creating) the SQLite database at `db_path` (WAL mode).
    pub fn open(db_path: &Path) -> Result<StatCache> {
        let db_error = |source| CacheError::StatDb {
            path: db_path.to_path_buf(),
            source,
        };
        if let Some(parent) = db_path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent).map_err(|error| CacheError::io(parent, error))?;
        }
        let conn = Connection::open(db_path).map_err(db_error)?;
        // Set before anything that takes a lock, so a concurrent writer makes
        // us wait instead of failing with SQLITE_BUSY.
        conn.busy_timeout(BUSY_TIMEOUT).map_err(db_error)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .map_err(db_error)?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(path = %db_path.display(), mode, "stat cache could not switch to WAL mode");
        }
        // Losing the last transactions on power loss only costs a rehash.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(db_error)?;
        // For the same reason no close checkpoints the write-ahead log
        // (an fsync of the log and one of the database, four with the
        // log's re-creation, in a run that stored one stamp): the log stays
        // and is checkpointed when it outgrows SQLite's 1,000 pages.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )
        .map_err(db_error)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS stat_v1 (
                path BLOB PRIMARY KEY NOT NULL,
                ino INTEGER NOT NULL,
                size INTEGER NOT NULL,
                mtime_ns INTEGER NOT NULL,
                ctime_ns INTEGER NOT NULL,
                digest BLOB NOT NULL
            ) WITHOUT ROWID;",
        )
        .map_err(db_error)?;

        let mut entries = HashMap::new();
        {
            let mut statement = conn
                .prepare("SELECT path, ino, size, mtime_ns, ctime_ns, digest FROM stat_v1")
                .map_err(db_error)?;
            let rows = statement
                .query_map([], |row| {
                    Ok((
                        row.get::<_, Vec<u8>>(0)?,
                        row.get::<_, i64>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, i64>(3)?,
                        row.get::<_, i64>(4)?,
                        row.get::<_, Vec<u8>>(5)?,
                    ))
                })
                .map_err(db_error)?;
            for row in rows {
                let (path, ino, size, mtime_ns, ctime_ns, digest) = row.map_err(db_error)?;
                let Ok(digest) = <[u8; 32]>::try_from(digest.as_slice()) else {
                    tracing::debug!("skipping stat cache row with a malformed digest");
                    continue;
                };
                entries.insert(
                    PathBuf::from(OsStr::from_bytes(&path)),
                    Entry {
                        // SQLite integers are signed; the casts round-trip bit for bit.
                        stamp: FileStamp {
                            ino: ino as u64,
                            size: size as u64,
                            mtime_ns,
                            ctime_ns,
                        },
                        digest: ObjectDigest::from_bytes(digest),
                        dirty: false,
                    },
                );
            }
        }
        tracing::debug!(path = %db_path.display(), entries = entries.len(), "stat cache loaded");
        Ok(StatCache {
            db: Some(Db {
                path: db_path.to_path_buf(),
                conn: Mutex::new(conn),
                entries: Mutex::new(entries),
            }),
            files_hashed: AtomicU64::new(0),
        })
    }

    /// A stat cache that remembers nothing (for `--no-stat-cache` and tests).
    pub fn disabled() -> StatCache {
        StatCache {
            db: None,
            files_hashed: AtomicU64::new(0),
        }
    }

    /// The digest recorded for `path` if its metadata still matches.
    pub fn lookup(&self, path: &Path, metadata: &std::fs::Metadata) -> Option<ObjectDigest> {
        let db = self.db.as_ref()?;
        let stamp = FileStamp::of(metadata);
        let entries = lock(&db.entries);
        let entry = entries.get(path)?;
        (entry.stamp == stamp).then_some(entry.digest)
    }

    /// Remembers that `path`, as described by `metadata`, has content
    /// `digest`, the content having been read just now.
    pub fn record(&self, path: &Path, metadata: &std::fs::Metadata, digest: ObjectDigest) {
        self.record_read_at(path, metadata, digest, SystemTime::now());
    }

    /// Like `record`, for content read (or written by us) no earlier than
    /// `read_at`. Racily clean entries, modified within `RACY_WINDOW` of
    /// `read_at`, are dropped: a write in the same timestamp tick would go
    /// unnoticed.
    pub(crate) fn record_read_at(
        &self,
        path: &Path,
        metadata: &std::fs::Metadata,
        digest: ObjectDigest,
        read_at: SystemTime,
    ) {
        let Some(db) = self.db.as_ref() else { return };
        let stamp = FileStamp::of(metadata);
        let read_at_ns = nanos_since_epoch(read_at);
        let racy_ns = i64::try_from(RACY_WINDOW.as_nanos()).unwrap_or(i64::MAX);
        let mut entries = lock(&db.entries);
        if stamp.mtime_ns.saturating_add(racy_ns) > read_at_ns {
            tracing::trace!(path = %path.display(), "not recording racily clean file");
            // An older entry cannot match the new stamp; dropping it keeps
            // the map from growing with entries that can never answer.
            entries.remove(path);
            return;
        }
        match entries.get(path) {
            Some(entry) if entry.stamp == stamp && entry.digest == digest => {}
            _ => {
                entries.insert(
                    path.to_path_buf(),
                    Entry {
                        stamp,
                        digest,
                        dirty: true,
                    },
                );
            }
        }
    }

    /// Counts one file whose content was read and hashed.
    pub(crate) fn note_hashed(&self) {
        self.files_hashed.fetch_add(1, Ordering::Relaxed);
    }

    /// Number of files hashed (not answered from the cache) since open.
    pub fn files_hashed(&self) -> u64 {
        self.files_hashed.load(Ordering::Relaxed)
    }

    /// Writes new and changed entries back. Safe with concurrent processes.
    pub fn flush(&self) -> Result<()> {
        let Some(db) = self.db.as_ref() else {
            return Ok(());
        };
        let dirty: Vec<(PathBuf, Entry)> = lock(&db.entries)
            .iter()
            .filter(|(_, entry)| entry.dirty)
            .map(|(path, entry)| (path.clone(), *entry))
            .collect();
        if dirty.is_empty() {
            return Ok(());
        }
        let db_error = |source| CacheError::StatDb {
            path: db.path.clone(),
            source,
        };
        {
            let mut conn = lock(&db.conn);
            // IMMEDIATE takes the write lock up front, so a concurrent
            // writer makes us wait (busy_timeout) rather than fail mid-way.
            let transaction = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(db_error)?;
            {
                let mut statement = transaction
                    .prepare_cached(
                        "INSERT OR REPLACE INTO stat_v1 (path, ino, size, mtime_ns, ctime_ns, digest)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )
                    .map_err(db_error)?;
                for (path, entry) in &dirty {
                    statement
                        .execute(rusqlite::params![
                            path.as_os_str().as_bytes(),
                            entry.stamp.ino as i64,
                            entry.stamp.size as i64,
                            entry.stamp.mtime_ns,
                            entry.stamp.ctime_ns,
                            entry.digest.as_bytes().as_slice(),
                        ])
                        .map_err(db_error)?;
                }
            }
            transaction.commit().map_err(db_error)?;
        }
        // Only clear entries that were not re-recorded while we wrote.
        let mut entries = lock(&db.entries);
        for (path, written) in &dirty {
            if let Some(entry) = entries.get_mut(path) {
                if entry.stamp == written.stamp && entry.digest == written.digest {
                    entry.dirty = false;
                }
            }
        }
        tracing::debug!(path = %db.path.display(), rows = dirty.len(), "stat cache flushed");
        Ok(())
    }
}

impl Drop for StatCache {
    fn drop(&mut self) {
        // A forgotten flush only costs rehashing next time, but there is no
        // reason to lose the work.
        if let Err(error) = self.flush() {
            tracing::warn!(%error, "could not save the stat cache");
        }
    }
}

impl std::fmt::Debug for StatCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatCache")
            .field("path", &self.db.as_ref().map(|db| &db.path))
            .field("files_hashed", &self.files_hashed())
            .finish()
    }
}
