//! `pipe stages`: the catalog listed, and `--check` of the built-in workers.

use pipe_engine::{check_builtin_workers, find_stages, ExitCode, Result, WorkerCheck};

use crate::here;
use crate::output::{jsonln, out};
use crate::progress::Progress;
use crate::views::stages_text;

/// `pipe stages --check`: each built-in worker against the catalog built
/// into pipe.
pub(super) fn check_stages(quiet: bool) -> Result<ExitCode> {
    let progress = Progress::new(false, quiet, 0);
    let checks = check_builtin_workers(&|event| progress.on_event(event))?;
    out!("{}", stages_text::worker_checks(&checks));
    if checks.iter().all(WorkerCheck::agrees) {
        Ok(ExitCode::Ok)
    } else {
        Ok(ExitCode::InvalidInput)
    }
}

/// `pipe stages [NAME]`: the catalog entries `find_stages`
/// finds, listed, in detail or as JSON.
pub(super) fn stages(name: Option<&str>, json: bool) -> Result<ExitCode> {
    let entries = find_stages(&here::project()?, name)?;
    if json {
        let infos: Vec<&pipe_protocol::StageInfo> =
            entries.iter().map(|entry| &entry.info).collect();
        jsonln!(serde_json::to_string_pretty(&infos).unwrap_or_default());
    } else if name.is_none() {
        out!("{}", stages_text::stage_list(&entries));
    } else {
        for entry in &entries {
            out!("{}", stages_text::stage_detail(entry));
        }
    }
    Ok(ExitCode::Ok)
}
