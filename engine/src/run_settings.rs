//! The pipeline file and `-S` values a recorded run was loaded with, for
//! the commands that look at that variant again without the `-S` list
//! typed anew: `pipe status --run 7`, `pipe why train --run 7`, `pipe run
//! --run 7`, and `pipe checkout`.

use std::path::{Path, PathBuf};

use pipe_protocol::excerpt as shown;

use crate::history::{History, Notice, Pull};
use crate::project::Project;
use crate::runs::{RunId, RunRecord, RunSelection};
use crate::{Result, UsageError};

/// What a run was loaded with.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub run: RunId,
    /// The pipeline file it names (when it is a plain path in the
    /// project and still there), else the one found here.
    pub file: PathBuf,
    /// Its `-S` settings, in order.
    pub overrides: Vec<crate::overrides::ParamOverride>,
    /// They are a sweep's, run as one run (`RunRecord::sweep`).
    pub sweep: bool,
}

/// The pipeline file of the newest run recorded in the project at
/// `root`, when it names one (inside the project, as its type holds) that
/// is still there: what a command uses when none is named and none is
/// found here.
pub fn last_run_pipeline_file(root: &Path) -> Option<(RunId, PathBuf)> {
    let history = History::open_existing(root).ok()??;
    let record = history
        .db
        .newest_runs(RunSelection::default(), 1)
        .ok()?
        .into_iter()
        .next()?;
    let path = root.join(record.file.as_ref()?);
    path.is_file().then_some((record.id, path))
}

/// The settings of the run `query` names (`7`, `last`, a git ref), pulled
/// from the remote when configured; `found_here` is the pipeline file the
/// command would use without a run.
pub fn settings_of_run(
    project: &Project,
    query: &str,
    found_here: Option<&Path>,
    notify: &mut dyn FnMut(Notice),
) -> Result<RunSettings> {
    let mut history = History::require(&project.root)?;
    let run = history.resolve_noting(query, Pull::IfConfigured, notify)?;
    let record = history.db.resolved_run(run)?;
    Ok(RunSettings {
        run,
        file: recorded_pipeline_file(project, &record, found_here)?,
        overrides: record.overrides,
        sweep: record.sweep,
    })
}

/// The pipeline file a run record names (a plain path inside the project,
/// as its type holds); else the one found where the command was started.
pub(crate) fn recorded_pipeline_file(
    project: &Project,
    record: &RunRecord,
    found_here: Option<&Path>,
) -> Result<PathBuf> {
    match &record.file {
        Some(file) => {
            let path = project.root.join(file);
            if path.is_file() {
                return Ok(path);
            }
            Err(UsageError::RecordedFileGone {
                run: record.id,
                file: shown(file),
            }
            .into())
        }
        None => found_here
            .map(Path::to_path_buf)
            .ok_or(UsageError::NoPipelineFile.into()),
    }
}
