//! Run history in SQLite (`.pipe/runs.db`, WAL): one row per `pipe run`,
//! one per stage in it, and the key manifests those stages had.
//!
//! The record's vocabulary (statuses, matrix combinations, stage roles)
//! is `pipe_protocol::record`'s; this module stores it. Columns are read by
//! name, and a value that does not parse is an error naming the run and
//! the column ([`EngineError::CorruptRecord`]), never a default: a damaged
//! `outputs` column must not make `pipe checkout` restore nothing and
//! succeed.

mod ci_ref;
mod db;
mod git;
mod held;
mod labels;
mod migrate;
mod query;
mod read;
mod record;
mod resolve;
mod restored;
mod select;
mod summary;
mod write;

pub use crate::run_id::RunId;
pub use db::{now_ms, RunDb};
pub use git::{
    files_with_uncommitted_edits, git_can_answer, git_output, refs_at, settle_git_dirty,
    DirtySettler, GitProbe, DIRTY_GRACE,
};
pub use held::ResultsHeld;
pub use labels::{check_label, RunLabels};
#[cfg(test)]
pub(crate) use migrate::legacy_identity;
pub use pipe_protocol::record::{RunStatus, StageStatus};
pub use query::RunSelection;
pub use record::{RunEnd, RunExport, RunRecord, RunStart, StageRecord};
pub(crate) use record::{NOT_IN_REMOTE, SUPERSEDED};
pub use resolve::resolve_run;
pub use restored::RestoredFrom;
pub use summary::StageMetric;
