//! `pipe status --remote`: the plain status, with each stale stage's
//! answer from the remote cache (pipe_engine::remote_status).

use std::fmt::Write as _;

use pipe_cache::remote::Remote;
use pipe_engine::dag::Dag;
use pipe_engine::pipeline::Pipeline;
use pipe_engine::plan::{Freshness, StageState};
use pipe_engine::project::Project;
use pipe_engine::remote_status::{remote_status, RemoteVerdict};
use pipe_engine::{exec, Result, UsageError};
use serde_json::{json, Value};

use crate::output::{errln, jsonln, out};

/// The remote `pipe status --remote[=URL]` asks: `flag` is the URL given,
/// or empty for the configured one. None configured is a usage error.
pub fn open(pipeline: &Pipeline, flag: &str) -> Result<Remote> {
    let flag = Some(flag).filter(|url| !url.is_empty());
    // Read-only: a status never writes.
    let config =
        pipe_engine::remote::resolve(&pipeline.root, pipeline.remote.as_ref(), flag, true)?.ok_or(
            UsageError::NoRemote {
                flag: "--remote=s3://BUCKET/PREFIX",
            },
        )?;
    let project = Project::open(&pipeline.root)?;
    exec::open_remote(&config, &project.cache_dir)
}

/// Prints the status with the remote's answers; false (after one warning)
/// when the remote could not be asked, for the caller to print the plain
/// status instead.
pub fn show(
    remote: &Remote,
    pipeline: &Pipeline,
    dag: &Dag,
    states: &[StageState],
    json: bool,
) -> bool {
    let status = match remote_status(remote, pipeline, dag, states) {
        Ok(status) => status,
        Err(reason) => {
            errln!("warning: {reason}; showing the local status only");
            return false;
        }
    };
    if json {
        let rows: Vec<Value> = states
            .iter()
            .zip(&status.verdicts)
            .map(|(state, verdict)| {
                let mut row = serde_json::to_value(state).unwrap_or(Value::Null);
                match verdict {
                    Some(verdict) => {
                        if let (Value::Object(row), Ok(Value::Object(fields))) =
                            (&mut row, serde_json::to_value(verdict))
                        {
                            row.extend(fields);
                        }
                    }
                    None => row["remote"] = Value::Null,
                }
                row
            })
            .collect();
        jsonln!(serde_json::to_string_pretty(&json!(rows)).unwrap_or_default());
        return true;
    }
    let width = states
        .iter()
        .map(|state| state.stage.chars().count())
        .max()
        .unwrap_or(0);
    let mut text = String::new();
    for (state, verdict) in states.iter().zip(&status.verdicts) {
        let label = match (state.freshness, verdict) {
            (Freshness::Fresh, _) => "fresh".to_string(),
            (Freshness::Restorable, _) => "restorable".to_string(),
            (Freshness::Stale, Some(verdict)) => format!("stale — {}", describe(verdict)),
            (Freshness::Stale, None) => "stale".to_string(),
            (Freshness::Running, _) => "running".to_string(),
        };
        let reasons = if state.reasons.is_empty() {
            String::new()
        } else {
            format!("  {}", state.reasons.join("; "))
        };
        let _ = writeln!(text, "{:<width$}  {label}{reasons}", state.stage);
    }
    let (restores, runs, after) = status.counts();
    let stale = restores + runs + after;
    let count = |freshness: Freshness| {
        states
            .iter()
            .filter(|state| state.freshness == freshness)
            .count()
    };
    let (restorable, running) = (count(Freshness::Restorable), count(Freshness::Running));
    let _ = write!(
        text,
        "{} stages: {} fresh, {restorable} restorable, {stale} stale",
        states.len(),
        states.len() - stale - restorable - running,
    );
    if stale > 0 {
        let _ = write!(
            text,
            " ({restores} the remote has, {runs} run, {after} known after an upstream stage runs)"
        );
    }
    if running > 0 {
        let _ = write!(text, "; {running} running now");
    }
    let _ = writeln!(
        text,
        "\nremote {}: {} looked up",
        remote.url(),
        match status.asked {
            1 => "1 stage".to_string(),
            asked => format!("{asked} stages"),
        }
    );
    out!("{text}");
    true
}

fn describe(verdict: &RemoteVerdict) -> String {
    match verdict {
        RemoteVerdict::Restores => "the remote has it (restores in `pipe run`)".to_string(),
        RemoteVerdict::Runs => "runs (not in the remote)".to_string(),
        RemoteVerdict::Incomplete => {
            "runs (the remote's entry is incomplete; the run's push repairs it)".to_string()
        }
        RemoteVerdict::RunsEveryTime => "runs (every time; never looked up)".to_string(),
        RemoteVerdict::AfterUpstream { upstream } => {
            let names: Vec<String> = upstream.iter().map(|name| format!("`{name}`")).collect();
            format!(
                "known after {} {}",
                names.join(" and "),
                if names.len() == 1 { "runs" } else { "run" }
            )
        }
        RemoteVerdict::NoKey => "not looked up (its key cannot be computed now)".to_string(),
    }
}
