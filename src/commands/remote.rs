//! `pipe cache push|pull|status`: the flags as a request to
//! `pipe_engine::cache_sync`, its reports rendered
//! (`views/cache_sync_text.rs`, `views/json_results.rs`).

use std::path::Path;

use pipe_cache::remote::TransferReport;
use pipe_engine::{
    pull_results, push_results, run_in_remote, transfer_failure, EngineError, ExitCode, PullReport,
    Result, Runs,
};

use crate::cli::RemoteArgs;
use crate::here;
use crate::output::{err, jsonln, out};
use crate::remote_flags::{choice, Shown};
use crate::views::cache_sync_text;
use crate::views::json_results::{
    PullCounts, PulledRecords, PulledResults, Pushed, RunStatusInRemote,
};
use crate::views::notice_text;

pub fn push(
    run: Option<&str>,
    all: bool,
    file: Option<&Path>,
    args: &RemoteArgs,
    shown: Shown,
) -> Result<ExitCode> {
    let project = here::project()?;
    let runs = if all {
        Runs::All
    } else {
        Runs::One(run.unwrap_or("last"))
    };
    let report = push_results(
        &project,
        &choice(file, args, Some(shown)),
        runs,
        &mut |notice| err!("{}", notice_text::line(&notice)),
    )?;
    err!("{}", cache_sync_text::records_not_pushed(&report));
    if shown.json {
        jsonln!(json_line(&Pushed::of(&report)));
    }
    err!("{}", cache_sync_text::pushed(&report));
    Ok(exit_for(&report.transfers))
}

pub fn pull(
    run: Option<&str>,
    all: bool,
    file: Option<&Path>,
    args: &RemoteArgs,
    shown: Shown,
) -> Result<ExitCode> {
    let project = here::project()?;
    let runs = match (run, all) {
        (None, false) => None,
        (_, true) => Some(Runs::All),
        (Some(query), false) => Some(Runs::One(query)),
    };
    let report = pull_results(
        &project,
        &choice(file, args, Some(shown)),
        runs,
        &mut |notice| err!("{}", notice_text::line(&notice)),
    )?;
    match report {
        PullReport::Records {
            url,
            listed,
            new,
            transfers,
        } => {
            if shown.json {
                jsonln!(json_line(&PulledRecords::of(&url, listed, new, &transfers)));
            }
            err!("{}", cache_sync_text::records_pulled(&url, listed, new));
            Ok(exit_for(&transfers))
        }
        PullReport::Results {
            url,
            runs,
            pulled,
            already_here,
            not_in_remote,
            corrupt,
            transfers,
        } => {
            err!("{}", cache_sync_text::corrupt(&corrupt));
            let counts = PullCounts {
                pulled,
                already_here,
                not_in_remote,
                corrupt: corrupt.len(),
            };
            if shown.json {
                jsonln!(json_line(&PulledResults::of(&url, &counts, &transfers)));
            }
            err!(
                "{}",
                cache_sync_text::results_pulled(&url, &runs, &counts, &transfers)
            );
            Ok(exit_for(&transfers))
        }
    }
}

pub fn status(
    run: Option<&str>,
    file: Option<&Path>,
    args: &RemoteArgs,
    json_output: bool,
) -> Result<ExitCode> {
    let project = here::project()?;
    let choice = choice(file, args, None);
    let found = run_in_remote(&project, &choice, run.unwrap_or("last"), &mut |notice| {
        err!("{}", notice_text::line(&notice))
    });
    let found = match found {
        Ok(found) => found,
        Err(EngineError::RemoteUnavailable(reason)) => {
            err!("{}", cache_sync_text::unavailable(&reason));
            return Ok(ExitCode::RemoteUnavailable);
        }
        Err(other) => return Err(other),
    };
    if json_output {
        jsonln!(serde_json::to_string_pretty(&RunStatusInRemote::of(&found)).unwrap_or_default());
    } else {
        out!("{}", cache_sync_text::run_in_remote(&found));
    }
    Ok(ExitCode::Ok)
}

fn exit_for(report: &TransferReport) -> ExitCode {
    match transfer_failure(report) {
        Some(reason) => {
            err!("{}", cache_sync_text::unavailable(reason));
            ExitCode::RemoteUnavailable
        }
        None => ExitCode::Ok,
    }
}

/// One `--json` line, compact.
fn json_line(line: &impl serde::Serialize) -> String {
    serde_json::to_string(line).unwrap_or_default()
}
