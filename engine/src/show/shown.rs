//! Everything `pipe show` says of one run, gathered.

use crate::history::History;
use crate::project::Project;
use crate::runs::{RestoredFrom, RunId, RunRecord};
use crate::Result;

use super::combinations::{combinations, swept_params, CombinationShown};
use super::in_progress::{in_progress, InProgress};
use super::outputs::{outputs_in_workspace, OutputInWorkspace};

/// A run as `pipe show` shows it.
#[derive(Debug, Clone)]
pub struct RunShown {
    pub record: RunRecord,
    /// The runs whose results it restored.
    pub restored: RestoredFrom,
    /// Each output it recorded, and whether the workspace holds it.
    pub outputs: Vec<OutputInWorkspace>,
    /// Its combinations (a sweep's, a matrix's); empty for a plain run.
    pub combinations: Vec<CombinationShown>,
    /// The params a sweep run swept.
    pub swept: Vec<String>,
    /// What it is doing now, while it is going.
    pub in_progress: Option<InProgress>,
}

/// Run `id` of `history`, as `pipe show` shows it.
pub fn show_run(history: &History, id: RunId) -> Result<RunShown> {
    let record = history.db.resolved_run(id)?;
    let project = Project::open(&history.root)?;
    Ok(RunShown {
        restored: history.db.restored_from(&record)?,
        outputs: outputs_in_workspace(&project, &history.db, &record)?,
        combinations: combinations(&record),
        swept: swept_params(&record),
        in_progress: in_progress(&project, &record),
        record,
    })
}
