//! `pipe show --json`: the run record with what `show_run` found beside
//! it, and `pipe show --open --json`: what was opened.

use std::path::Path;

use pipe_engine::{InProgress, OutputInWorkspace, RunId, RunRecord, RunShown};

/// A run record as `show --json` prints it: the record, the runs whose
/// results it restored when it ran nothing, whether the workspace holds
/// each of its outputs, and what it is doing while it is going.
#[derive(serde::Serialize)]
struct ShownRun<'a> {
    #[serde(flatten)]
    record: &'a RunRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    restored_from: Option<Vec<RunId>>,
    outputs_in_workspace: &'a [OutputInWorkspace],
    #[serde(skip_serializing_if = "Option::is_none")]
    in_progress: Option<&'a InProgress>,
}

pub fn shown_run(shown: &RunShown) -> String {
    let record = ShownRun {
        record: &shown.record,
        restored_from: shown.restored.only_restored(),
        outputs_in_workspace: &shown.outputs,
        in_progress: shown.in_progress.as_ref(),
    };
    serde_json::to_string_pretty(&record).unwrap_or_default()
}

/// The run and output brought out of the cache, and the path opened.
pub fn opened(run: RunId, output: &str, path: &Path) -> String {
    let shown = serde_json::json!({
        "run": run,
        "output": output,
        "path": path,
    });
    serde_json::to_string_pretty(&shown).unwrap_or_default()
}
