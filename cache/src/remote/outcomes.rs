//! What the remote answers: a pull, a presence, a run's transfers, a
//! record refused, a sweep of its temporaries.

use crate::RemoteError;

/// A result as the remote has it, or why not.
#[derive(Debug)]
pub enum Pulled {
    /// The result and every object it names are now in the local cache.
    Hit { objects: u64, bytes: u64 },
    /// The remote has no result under that key.
    Miss,
    /// The remote's entry is corrupt or incomplete; reported, and it is
    /// overwritten when this key is pushed again.
    Corrupt(String),
    /// The remote is down or refused; reported once per process.
    Unavailable,
}

/// What the remote has of one result (`pipe cache status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    Complete,
    /// The action is there, some of its objects are not.
    Incomplete,
    Absent,
}

/// Totals for one process's transfers, for the end-of-run summary.
#[derive(Debug, Default, Clone)]
pub struct TransferReport {
    pub results_pulled: u64,
    pub objects_pulled: u64,
    pub bytes_pulled: u64,
    pub results_pushed: u64,
    pub objects_pushed: u64,
    pub bytes_pushed: u64,
    /// Objects a push found already in the remote.
    pub objects_present: u64,
    /// Results written by another process first (their If-None-Match put lost).
    pub results_already_present: u64,
    /// Results that were not pushed because the remote failed or is read-only.
    pub results_not_pushed: u64,
    pub corrupt_found: u64,
    /// Why the remote was given up on, if it was.
    pub unavailable: Option<RemoteError>,
    /// Why pushing was given up on (the remote refused writes).
    pub push_refused: Option<RemoteError>,
    /// How long at least one push was under way (busy::BusyClock): not
    /// the stages that ran between pushes, nor overlapping pushes twice.
    pub push_seconds: f64,
}

/// Why a run record was not read.
#[derive(Debug, Clone)]
pub enum RecordError {
    /// The record is not one pipe reads (too large, not a regular file,
    /// gone): skip it, say why.
    Refused(RemoteError),
    /// The remote failed; reported once.
    Unavailable(RemoteError),
}

/// The stale temporaries `Remote::remove_stale_temporaries` removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TmpSwept {
    pub files: u64,
    pub bytes: u64,
}
