//! `pipe status --remote`: the plain status, with each stale stage's
//! answer from the remote cache (pipe_engine::remote_status).

use std::fmt::Write as _;

use pipe_engine::{Freshness, RemoteStatus, RemoteVerdict, StageState};
use serde_json::{json, Value};

use crate::output::{jsonln, out};

/// Prints the status with the remote's answers.
pub fn show(status: &RemoteStatus, states: &[StageState], json: bool) {
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
        return;
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
        status.url,
        match status.asked {
            1 => "1 stage".to_string(),
            asked => format!("{asked} stages"),
        }
    );
    out!("{text}");
}

/// `pipe status --remote` whose remote could not answer: the plain
/// status follows.
pub fn unreachable(reason: &pipe_cache::RemoteError) -> String {
    format!("warning: {reason}; showing the local status only\n")
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
