//! Whether the workspace holds a run's outputs: each output path the
//! record names, hashed where it is (the stat cache answers for a file
//! that did not change since it was last hashed, as for `status` and
//! `checkout`) and compared with the digest the record holds; when it
//! differs, the recorded run whose result it is, if one is.

use std::collections::HashMap;

use pipe_cache::{Artifact, Cache, StatCache};
use serde::Serialize;

use crate::project::Project;
use crate::project_files::ProjectPath;
use crate::runs::{RunDb, RunId, RunRecord, StageRecord};
use crate::{workspace, Result};

/// What the workspace holds at one output path of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum InWorkspace {
    /// This run's result.
    ThisRun,
    /// This run's result of another of its stages that wrote the same
    /// path (a sweep's combinations, each in a work tree of its own).
    AnotherStage { of: String },
    /// Another recorded run's result (the newest run that made it).
    AnotherRun { run: RunId },
    /// Something else: edited, or a result no run here recorded.
    Changed,
    /// Nothing, or a path that is no place in the project pipe writes.
    Missing,
}

/// One output of a run and what the workspace holds at its path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutputInWorkspace {
    pub stage: String,
    pub path: String,
    /// Whether the workspace holds this run's result there.
    pub holds: bool,
    #[serde(flatten)]
    pub state: InWorkspace,
}

/// Every output of `run` (in its stages' order), with what the workspace
/// holds at its path.
pub fn outputs_in_workspace(
    project: &Project,
    db: &RunDb,
    run: &RunRecord,
) -> Result<Vec<OutputInWorkspace>> {
    let cache = Cache::open(&project.cache_dir)?;
    let stat = StatCache::open(&project.stat_db())?;
    // Several stages of a sweep run in work trees name one path.
    let mut hashed: HashMap<&ProjectPath, Option<Artifact>> = HashMap::new();
    let mut stages: Vec<&StageRecord> = run.stages.iter().collect();
    stages.sort_by_key(|stage| stage.identity.position);
    let mut found = Vec::new();
    for stage in stages {
        for (path, recorded) in &stage.outputs {
            let current = hashed
                .entry(path)
                .or_insert_with(|| current_artifact(project, &cache, &stat, path));
            let state = match current {
                None => InWorkspace::Missing,
                Some(current)
                    if current.digest == recorded.digest && current.kind == recorded.kind =>
                {
                    InWorkspace::ThisRun
                }
                Some(current) => whose(db, run, stage, path, current)?,
            };
            found.push(OutputInWorkspace {
                stage: stage.stage.clone(),
                path: path.to_string(),
                holds: state == InWorkspace::ThisRun,
                state,
            });
        }
    }
    // Only speeds the next look up: losing it loses nothing.
    let _ = stat.flush();
    Ok(found)
}

/// Whose result `current`, at `path` of `stage`, is, when it is not the
/// stage's own: another stage's of the run, else the newest other run's
/// that made it, else nobody's.
fn whose(
    db: &RunDb,
    run: &RunRecord,
    stage: &StageRecord,
    path: &str,
    current: &Artifact,
) -> Result<InWorkspace> {
    let same_run = run.stages.iter().find(|other| {
        other.outputs.get(path).is_some_and(|artifact| {
            artifact.digest == current.digest && artifact.kind == current.kind
        })
    });
    if let Some(other) = same_run {
        return Ok(InWorkspace::AnotherStage {
            of: other.stage.clone(),
        });
    }
    let base = match stage.identity.base_name.as_str() {
        "" => stage.stage.as_str(),
        base => base,
    };
    Ok(
        match db.run_that_made_output(&run.pipeline, base, path, &current.digest, run.id)? {
            Some(other) => InWorkspace::AnotherRun { run: other },
            None => InWorkspace::Changed,
        },
    )
}

/// What the workspace holds at `path`, hashed; `None` when nothing is
/// there or the path is no place pipe writes (a record is not trusted to
/// name one).
fn current_artifact(
    project: &Project,
    cache: &Cache,
    stat: &StatCache,
    path: &ProjectPath,
) -> Option<Artifact> {
    workspace::check_restore_target(&project.root, path).ok()?;
    cache.hash_path(&project.root.join(path), stat).ok()
}

/// The output of `outputs` that holds `path` (the output itself, or a
/// directory output it lies in): how a report page or a plot file is
/// found among a run's outputs.
pub fn output_holding<'a>(
    outputs: &'a [OutputInWorkspace],
    path: &str,
) -> Option<&'a OutputInWorkspace> {
    outputs.iter().find(|output| {
        path == output.path
            || path
                .strip_prefix(output.path.trim_end_matches('/'))
                .is_some_and(|rest| rest.starts_with('/'))
    })
}
