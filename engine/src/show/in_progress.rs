//! A run that is still going: the newest run of this project whose `pipe
//! run` is alive, and the stages it runs now (its markers,
//! `crate::running`). Its record holds the stages that finished so far,
//! written as they finish (`exec::scheduler`).

use serde::Serialize;

use crate::project::Project;
use crate::runs::{RunDb, RunRecord, RunSelection, RunStatus};
use crate::{running, Result};

/// What a run in progress is doing now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InProgress {
    /// The stages its `pipe run` runs now, in name order.
    pub running: Vec<String>,
    /// That `pipe run`'s process, when a running stage names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// What `run` is doing now, when it is still going (its status is
/// `running` only while its `pipe run` is alive).
pub fn in_progress(project: &Project, run: &RunRecord) -> Option<InProgress> {
    if run.status != RunStatus::Running {
        return None;
    }
    let mut markers: Vec<running::RunningStage> =
        running::running_stages(&project.state_dir, &run.pipeline)
            .into_values()
            .filter(|marker| marker.run == run.id)
            .collect();
    markers.sort_by(|a, b| a.stage.cmp(&b.stage));
    Some(InProgress {
        pid: markers.first().map(|marker| marker.pid),
        running: markers.into_iter().map(|marker| marker.stage).collect(),
    })
}

/// The run of this project that is going now, with the stages it
/// finished so far; `None` when none is. One run holds the run lock at a
/// time, so it is among the newest.
pub fn run_in_progress(db: &RunDb) -> Result<Option<RunRecord>> {
    const NEWEST: usize = 50;
    let running = RunSelection {
        statuses: Some(vec![RunStatus::Running]),
        ..RunSelection::default()
    };
    Ok(db
        .newest_runs(running, NEWEST)?
        .into_iter()
        .find(|run| run.status == RunStatus::Running && run.origin.is_none()))
}

/// A run going now, and what it is doing.
#[derive(Debug, Clone)]
pub struct RunGoing {
    /// Its record: the stages it finished so far.
    pub record: RunRecord,
    pub now: InProgress,
}

/// The run of the project at `root` that is going now, if one is: what
/// `pipe status` describes while a run is going.
pub fn going_now(root: &std::path::Path) -> Result<Option<RunGoing>> {
    let Some(db) = RunDb::open_existing(&crate::project::runs_db_of(root))? else {
        return Ok(None);
    };
    let Some(record) = run_in_progress(&db)? else {
        return Ok(None);
    };
    let project = Project::open(root)?;
    Ok(in_progress(&project, &record).map(|now| RunGoing { record, now }))
}
