//! `pipe why`'s text: whether a stage is fresh, and what changed its key.

use std::fmt::Write;

use pipe_engine::{Freshness, Why};

use crate::views::field_changes::field_lines;

pub fn why_text(why: &Why) -> String {
    let mut out = String::new();
    let state = &why.state;
    let verdict = match state.freshness {
        Freshness::Fresh => "is fresh",
        Freshness::Restorable => "is restorable from the cache",
        Freshness::Stale => "is stale",
        Freshness::Running => "is running",
    };
    let _ = writeln!(out, "stage `{}` {verdict}", state.stage);
    for reason in &state.reasons {
        let _ = writeln!(out, "  - {reason}");
    }
    match (&why.previous_run, &why.previous_key, why.key) {
        (Some(run), Some(_), Some(current)) if why.changes.is_empty() => {
            let _ = writeln!(
                out,
                "nothing it depends on changed since run #{run} (key {}…)",
                current.short()
            );
        }
        (Some(run), Some(previous), Some(current)) => {
            let _ = writeln!(
                out,
                "changed since run #{run} (key {}… then, {}… now):",
                previous.short(),
                current.short()
            );
            field_lines(&mut out, &why.changes, "  ");
        }
        // No key yet: it depends on outputs that do not exist yet, or on
        // a stage that runs now.
        (Some(run), Some(_), None) => {
            let waits = if state.freshness == Freshness::Running {
                "it is running"
            } else {
                "a stage before it has to run first"
            };
            let _ = writeln!(
                out,
                "its key is worked out once its inputs are there ({waits}); its last result was made in run #{run}"
            );
        }
        _ => {
            let _ = writeln!(out, "no earlier result of this stage is recorded");
        }
    }
    if let Some(run) = why.failed_run {
        // A failed run had no result: named only as failed.
        let how = if why.interrupted {
            "was interrupted"
        } else {
            "failed"
        };
        let _ = writeln!(out, "it {how} in run #{run}");
    }
    out
}
