//! What every stage of one run shares while the scheduler runs it.

use std::collections::HashMap;
use std::sync::Mutex;

use pipe_cache::remote::Remote;
use pipe_cache::{ActionKey, Cache, LinkMode, StatCache};
use pipe_protocol::redact::redact_text;
use serde_json::Value;

use super::failure::StageFailure;
use super::run_so_far::RunSoFar;
use super::slurm;
use crate::events::Observer;
use crate::pipeline::{Pipeline, Stage};
use crate::project::Project;
use crate::runs::RunId;
use crate::runs::{RunStatus, StageRecord, StageStatus};

pub(super) struct Context<'a> {
    pub(super) pipeline: &'a Pipeline,
    pub(super) cache: Cache,
    pub(super) stat: StatCache,
    pub(super) link: &'a [LinkMode],
    pub(super) run_id: RunId,
    /// Where `.pipe/` keeps logs, scratch directories and the records of
    /// running stages' process groups.
    pub(super) project: Project,
    pub(super) observer: Observer<'a>,
    /// The run's `-j`.
    pub(super) jobs: usize,
    /// Process groups of running commands, by stage index, for Ctrl-C.
    pub(super) running: Mutex<HashMap<usize, u32>>,
    /// What a stage reporting on the run is told (`StageInfo::reads_run`);
    /// `None` when no selected stage reads the run, so that other runs
    /// collect nothing.
    pub(super) run_so_far: Option<RunSoFar>,
    /// The second cache level: pulled from on a local miss, pushed to
    /// after a stage runs.
    pub(super) remote: Option<Remote>,
    /// The cluster that runs the stages not marked `local`, under
    /// `executor: slurm`.
    pub(super) cluster: Option<slurm::LazyCluster>,
}

pub(super) struct StageOutcome {
    pub(super) index: usize,
    pub(super) record: StageRecord,
    pub(super) manifest: Option<Value>,
    /// What making the outputs took when they were made: this run for a
    /// stage that ran, the original run for a cache hit.
    pub(super) compute_ms: Option<u64>,
}

pub(super) fn nothing_done(status: RunStatus, records: &[StageRecord]) -> bool {
    status == RunStatus::Succeeded
        && records
            .iter()
            .all(|record| record.status == StageStatus::Fresh)
}

pub(super) fn failed_record(
    stage: &Stage,
    key: Option<&ActionKey>,
    failure: StageFailure,
    duration_ms: u64,
) -> StageRecord {
    // A stage that stops while the user stops the run was interrupted,
    // whatever its process said on the way out (a worker exits 130).
    let status = if matches!(failure, StageFailure::Interrupted) || crate::interrupt::requested() {
        StageStatus::Interrupted
    } else {
        StageStatus::Failed
    };
    StageRecord {
        key: key.copied(),
        duration_ms,
        detail: Some(redact_text(&failure.to_string()).into_owned()),
        ..StageRecord::new(&stage.name, stage.identity(), status)
    }
}
