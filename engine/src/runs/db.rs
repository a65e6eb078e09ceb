//! The run database's connection: opened in WAL mode, migrated to the
//! current schema, read in one transaction at a time.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::Connection;

use super::migrate;
use crate::{EngineError, Result};

pub struct RunDb {
    pub(super) connection: Connection,
    pub(super) path: PathBuf,
}

impl RunDb {
    pub fn open(path: &Path) -> Result<RunDb> {
        let connection = Connection::open(path).map_err(|e| EngineError::database(path, e))?;
        let path = path.to_path_buf();
        let mut db = RunDb { connection, path };
        db.connection
            .busy_timeout(Duration::from_secs(30))
            .map_err(|e| db.error(e))?;
        // A plan that does not depend on the values bound: with the bundled
        // SQLite's STAT4, a statement asked once per stage (`last_manifest`
        // for `pipe status`) was otherwise compiled again at every call.
        db.connection
            .set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(|e| db.error(e))?;
        db.connection
            .execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
            .map_err(|e| db.error(e))?;
        migrate::to_current(&mut db.connection, &db.path)?;
        Ok(db)
    }

    /// Opens the database only if it exists (read-only commands on a
    /// project that never ran).
    pub fn open_existing(path: &Path) -> Result<Option<RunDb>> {
        if path.exists() {
            RunDb::open(path).map(Some)
        } else {
            Ok(None)
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn error(&self, source: rusqlite::Error) -> EngineError {
        EngineError::database(&self.path, source)
    }

    /// Runs `read` inside one read transaction, so that many lookups in a
    /// row (one per stage of a large pipeline) share one snapshot and one
    /// lock of the write-ahead log instead of taking one each.
    pub fn reading<T>(&self, read: impl FnOnce() -> Result<T>) -> Result<T> {
        self.connection
            .execute_batch("BEGIN")
            .map_err(|e| self.error(e))?;
        let result = read();
        // Nothing was written: ending the transaction cannot lose anything.
        let _ = self.connection.execute_batch("COMMIT");
        result
    }
}

/// A run id unique across machines: 20 hex digits of blake3 over a
/// kernel-made random UUID, the process, the time and a counter.
pub(super) fn new_uid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    let random = std::fs::read_to_string("/proc/sys/kernel/random/uuid").unwrap_or_default();
    let seed = format!(
        "{random}/{}/{nanos}/{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    blake3::hash(seed.as_bytes()).to_hex()[..20].to_string()
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}
