//! What every stage of one run shares while the scheduler runs it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pipe_cache::remote::Remote;
use pipe_cache::{ActionKey, Cache, LinkMode, StatCache};
use pipe_protocol::redact::redact_text;
use serde_json::Value;

use super::failure::StageFailure;
use super::prebuild::Prebuild;
use super::run_row::RunRow;
use super::run_so_far::RunSoFar;
use super::slurm;
use super::workspaces::Workspaces;
use crate::events::Observer;
use crate::key::DepDigests;
use crate::pipeline::{Pipeline, Stage};
use crate::project::Project;
use crate::runs::{RunStatus, StageRecord, StageStatus};
use crate::workspace::{hash_deps_where, DepProblem};

pub(super) struct Context<'a> {
    pub(super) pipeline: &'a Pipeline,
    pub(super) cache: Cache,
    pub(super) stat: StatCache,
    pub(super) link: &'a [LinkMode],
    /// The run's row, written when the run first does something.
    pub(super) run: &'a RunRow<'a>,
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
    /// A sweep's work trees, one per combination, when its combinations
    /// cannot share the project's (`Pipeline::workspaces`).
    pub(super) workspaces: Option<Workspaces>,
    /// The workers' builds a stage that must run starts for the stages
    /// below it.
    pub(super) prebuild: Prebuild,
}

impl Context<'_> {
    /// Where `stage` runs and its outputs live: its combination's work
    /// tree in a sweep that has them, else the project.
    pub(super) fn root_of(&self, stage: &Stage) -> &Path {
        match (&self.workspaces, stage.workspace) {
            (Some(workspaces), Some(index)) => workspaces.dir(index).unwrap_or(&self.pipeline.root),
            _ => &self.pipeline.root,
        }
    }

    /// Where dependency `path` of `stage` is read: where the stage that
    /// makes it made it; a source, where the project has it, but for a
    /// work tree's own `params.yaml`.
    pub(super) fn dep_place(&self, stage: &Stage, path: &str, producer: Option<&str>) -> PathBuf {
        let Some(workspaces) = &self.workspaces else {
            return self.pipeline.root.join(path);
        };
        match producer.and_then(|name| workspaces.workspace_of(name)) {
            Some(index) => workspaces
                .dir(index)
                .unwrap_or(&self.pipeline.root)
                .join(path),
            None if producer.is_none() && workspaces.is_params_file(stage.workspace, path) => {
                self.root_of(stage).join(path)
            }
            None => self.pipeline.root.join(path),
        }
    }

    pub(super) fn hash_deps(&self, stage: &Stage) -> Result<DepDigests, DepProblem> {
        let place = |dep: &crate::pipeline::Dep| {
            let producer = dep
                .producer
                .as_ref()
                .map(|producer| producer.stage.as_str());
            self.dep_place(stage, &dep.path, producer)
        };
        hash_deps_where(place, stage, &self.cache, &self.stat, |_| None)
    }

    /// Before `stage` runs in a work tree, what it reads from stages of
    /// other trees appears in its own, as a link to where it was made.
    pub(super) fn stage_in(&self, stage: &Stage) -> Result<(), StageFailure> {
        let (Some(workspaces), Some(_)) = (&self.workspaces, stage.workspace) else {
            return Ok(());
        };
        let root = self.root_of(stage);
        for dep in &stage.deps {
            let Some(producer) = &dep.producer else {
                continue;
            };
            let made_in = workspaces.workspace_of(&producer.stage);
            if made_in.is_none() || made_in == stage.workspace {
                continue;
            }
            let from = self.dep_place(stage, &dep.path, Some(&producer.stage));
            let to = root.join(&dep.path);
            let staged = (|| {
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                match std::fs::symlink_metadata(&to) {
                    Ok(found) if found.is_dir() => std::fs::remove_dir_all(&to)?,
                    Ok(_) => std::fs::remove_file(&to)?,
                    Err(_) => {}
                }
                std::os::unix::fs::symlink(&from, &to)
            })();
            staged.map_err(|e| {
                StageFailure::io(
                    format!("cannot put `{}` in the sweep's work tree", dep.path),
                    e,
                )
            })?;
        }
        Ok(())
    }
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
