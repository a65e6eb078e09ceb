//! `pipe status`: each stage fresh or not, and the run going now.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use pipe_engine::{ExitCode, Result, RunGoing};

use crate::cli::PipelineArg;
use crate::here;
use crate::output::{err, out};
use crate::run_setup::load_checked;
use crate::views::remote_status;

pub(super) fn status(
    file: Option<PathBuf>,
    arg: PipelineArg,
    json: bool,
    only_stale: bool,
    remote: Option<&str>,
) -> Result<ExitCode> {
    // While a run is going, the status is that run's: its pipeline as it
    // runs it (a sweep's merged), as `--run` loads it, below what it has
    // done so far.
    let going = going_to_describe(file.as_deref(), &arg)?;
    let arg = match &going {
        Some(going) => PipelineArg {
            run: Some(going.record.id.to_string()),
            ..arg
        },
        None => arg,
    };
    let (pipeline, dag) = load_checked(file.as_deref(), &arg)?;
    if let (Some(going), false) = (&going, json) {
        out!("{}", crate::views::status_text::run_going_text(going));
    }
    let report = pipe_engine::status_report(&pipeline, &dag, remote)?;
    let mut states = report.states;
    if only_stale && json {
        states.retain(|state| state.freshness != pipe_engine::Freshness::Fresh);
    }
    match report.remote {
        Some(Ok(remote)) => {
            remote_status::show(&remote, &states, json);
            return Ok(ExitCode::Ok);
        }
        // The plain status follows the warning.
        Some(Err(reason)) => err!("{}", remote_status::unreachable(&reason)),
        None => {}
    }
    if json {
        // Streamed: a million stages' JSON is never one string in memory.
        let mut out = std::io::BufWriter::with_capacity(64 * 1024, crate::output::DataStdout);
        let _ = serde_json::to_writer_pretty(&mut out, &states);
        let _ = writeln!(out);
        let _ = out.flush();
    } else {
        let shown = match only_stale {
            true => crate::views::status_text::Shown::NotFresh,
            false => crate::views::status_text::Shown::All,
        };
        crate::views::status_text::status_text(&states, None, shown, |piece| out!("{piece}"));
        let orphans = pipe_engine::orphaned_outputs(&pipeline);
        if !orphans.is_empty() {
            out!(
                "{}\n",
                crate::views::orphans_text::orphans_line(&orphans, false)
            );
        }
    }
    Ok(ExitCode::Ok)
}

/// The run going now, when `pipe status` is to describe it: it was given
/// no `--run` and no `-S`, and names no pipeline file or the one that run
/// runs.
pub(super) fn going_to_describe(
    file: Option<&Path>,
    arg: &PipelineArg,
) -> Result<Option<RunGoing>> {
    if arg.run.is_some() || !arg.set.is_empty() {
        return Ok(None);
    }
    let root = here::root()?;
    let Some(going) = pipe_engine::run_going_now(&root)? else {
        return Ok(None);
    };
    let same_file = |named: &Path, recorded: &Path| match (
        std::fs::canonicalize(named),
        std::fs::canonicalize(recorded),
    ) {
        (Ok(named), Ok(recorded)) => named == recorded,
        _ => false,
    };
    let described = match (file.or(arg.file.as_deref()), &going.record.file) {
        (None, _) => true,
        (Some(named), Some(recorded)) => same_file(named, &root.join(recorded)),
        (Some(_), None) => false,
    };
    Ok(described.then_some(going))
}
