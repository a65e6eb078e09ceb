//! Run history in SQLite (`.pipe/runs.db`, WAL): one row per `pipe run`,
//! one per stage in it, and the key manifests those stages had.
//!
//! The record's vocabulary (statuses, matrix combinations, stage roles)
//! is `pipe_protocol::record`'s; this module stores it. Columns are read by
//! name, and a value that does not parse is an error naming the run and
//! the column ([`EngineError::CorruptRecord`]), never a default: a damaged
//! `outputs` column must not make `pipe checkout` restore nothing and
//! succeed.

mod compare_query;
mod git;
mod migrate;
mod read;
mod record;
mod resolve;
mod select;
mod summary;
mod write;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::Connection;

pub use compare_query::{ComparedRun, ComparedStage, RunSelection};
pub use git::{git_commit_of, git_state, GitProbe, GitState};
#[cfg(test)]
pub(crate) use migrate::legacy_identity;
pub use pipe_protocol::record::{RunStatus, StageStatus};
pub use record::{RunEnd, RunExport, RunRecord, RunStart, StageRecord};
pub use resolve::resolve_run;
pub use summary::{RunSummary, StageMetric};

use crate::{EngineError, Result};

pub struct RunDb {
    connection: Connection,
    path: PathBuf,
}

impl RunDb {
    pub fn open(path: &Path) -> Result<RunDb> {
        let connection = Connection::open(path).map_err(|e| db_error(path, e))?;
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
        migrate::to_current(&mut db)?;
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

    fn error(&self, source: rusqlite::Error) -> EngineError {
        db_error(&self.path, source)
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

fn db_error(path: &Path, source: rusqlite::Error) -> EngineError {
    EngineError::Database {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn process_alive(pid: i64) -> bool {
    if pid <= 0 || pid > i32::MAX as i64 {
        return false;
    }
    if pid as u32 == std::process::id() {
        return true;
    }
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

/// A run id unique across machines: 20 hex digits of blake3 over a
/// kernel-made random UUID, the process, the time and a counter.
fn new_uid() -> String {
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
