//! `pipe cache push|pull|status`: the flags as a request to
//! `pipe_engine::cache_sync`, its reports rendered.

use std::path::Path;

use pipe_cache::remote::TransferReport;
use pipe_engine::{
    pull_results, push_results, run_in_remote, transfer_failure, EngineError, ExitCode, PullReport,
    Result, Runs,
};
use pipe_protocol::format::format_bytes;

use crate::cli::RemoteArgs;
use crate::here;
use crate::output::{errln, jsonln, outln};
use crate::remote_flags::{choice, Shown};
use crate::views::json_results::{
    presence_text, PullCounts, PulledRecords, PulledResults, Pushed, RunStatusInRemote,
};

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
        &mut |notice| errln!("{notice}"),
    )?;
    for (id, reason) in &report.records_not_pushed {
        errln!("warning: the record of run #{id} was not pushed: {reason}");
    }
    let transfers = &report.transfers;
    if shown.json {
        jsonln!(json_line(&Pushed::of(&report)));
    }
    errln!(
        "{}: {} results ({} pushed, {} already there; {} objects, {} sent), {} run records",
        report.url,
        report.results,
        transfers.results_pushed,
        transfers.results_already_present,
        transfers.objects_pushed,
        format_bytes(transfers.bytes_pushed as f64),
        report.records_pushed,
    );
    if report.missing_locally > 0 {
        errln!(
            "warning: {} results of these runs are no longer in the local cache (removed by `pipe cache gc`) and were not pushed",
            report.missing_locally
        );
    }
    Ok(exit_for(transfers))
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
        &mut |notice| errln!("{notice}"),
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
            errln!("{url}: {listed} run records, {new} new here");
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
            for (key, reason) in &corrupt {
                errln!(
                    "warning: result {} in the remote is corrupt: {reason}",
                    key.short()
                );
            }
            let corrupt = corrupt.len();
            if shown.json {
                let counts = PullCounts {
                    pulled,
                    already_here,
                    not_in_remote,
                    corrupt,
                };
                jsonln!(json_line(&PulledResults::of(&url, &counts, &transfers)));
            }
            errln!(
                "{url}: {pulled} results pulled ({} objects, {}), {already_here} already here, {not_in_remote} not in the remote, {corrupt} corrupt",
                transfers.objects_pulled,
                format_bytes(transfers.bytes_pulled as f64),
            );
            if let [id] = runs.as_slice() {
                if transfers.unavailable.is_none() && not_in_remote + corrupt == 0 {
                    errln!("`pipe checkout {id}` puts run #{id}'s outputs in the workspace");
                }
            }
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
        errln!("{notice}")
    });
    let found = match found {
        Ok(found) => found,
        Err(EngineError::RemoteUnavailable(reason)) => {
            errln!("error: {reason}");
            return Ok(ExitCode::RemoteUnavailable);
        }
        Err(other) => return Err(other),
    };
    if json_output {
        jsonln!(serde_json::to_string_pretty(&RunStatusInRemote::of(&found)).unwrap_or_default());
    } else {
        outln!("run #{} in {}", found.id, found.url);
        for stage in &found.stages {
            outln!(
                "  {:<30} {}  local: {:<3}  remote: {}",
                stage.stage,
                stage.key.short(),
                if stage.local { "yes" } else { "no" },
                presence_text(&stage.remote)
            );
        }
        outln!(
            "  record: {}",
            if found.record_pushed {
                "in the remote"
            } else {
                "not pushed"
            }
        );
    }
    Ok(ExitCode::Ok)
}

fn exit_for(report: &TransferReport) -> ExitCode {
    match transfer_failure(report) {
        Some(reason) => {
            errln!("error: {reason}");
            ExitCode::RemoteUnavailable
        }
        None => ExitCode::Ok,
    }
}

/// One `--json` line, compact.
fn json_line(line: &impl serde::Serialize) -> String {
    serde_json::to_string(line).unwrap_or_default()
}
