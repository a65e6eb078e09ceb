//! What `pipe run -m` says of a sweep: its plan before it runs, and what
//! each run came to after.

use std::fmt::Write as _;

use pipe_engine::{Diagnostic, Pipeline, ResultsHeld, SweepOutcome, SweepPlan, SweepRun};

/// The line before a sweep runs: one run (in work trees or not) with the
/// stages it expands, or one run per combination and why.
pub fn plan(plan: &SweepPlan, combinations: usize) -> String {
    match plan {
        SweepPlan::OneRun(merged) if !merged.pipeline.workspaces.is_empty() => format!(
            "sweep: {combinations} combinations as one run, each in a work tree of its own under .pipe/workspaces/ (your files are not touched): {}",
            expanded_stages(&merged.pipeline)
        ),
        SweepPlan::OneRun(merged) => format!(
            "sweep: {combinations} combinations as one run: {}",
            expanded_stages(&merged.pipeline)
        ),
        SweepPlan::Apart { why } => format!(
            "note: the sweep runs its {combinations} combinations one run each, in turn: {why}"
        ),
    }
}

/// The loader's warnings about the pipeline file, one after another.
pub fn warnings(warnings: &[Diagnostic]) -> String {
    let mut text = String::new();
    for warning in warnings {
        let _ = writeln!(text, "{warning}");
    }
    text
}

/// The line above a combination's `--dry-run` plan (`index` from 0).
pub fn dry_run_of(index: usize, combinations: usize, swept: &[String]) -> String {
    format!("sweep {}/{combinations}: {}\n", index + 1, swept.join(" "))
}

/// The stages the sweep expands, by base name: `train ×4, evaluate ×4`.
fn expanded_stages(pipeline: &Pipeline) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for stage in pipeline
        .stages
        .iter()
        .filter(|stage| stage.name != stage.base_name)
    {
        match counts.iter_mut().find(|(name, _)| *name == stage.base_name) {
            Some((_, count)) => *count += 1,
            None => counts.push((&stage.base_name, 1)),
        }
    }
    if counts.is_empty() {
        return "no stage depends on the swept values".to_string();
    }
    counts
        .iter()
        .map(|(name, count)| format!("{name} ×{count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line per run, then how to compare them.
pub fn summary(outcome: &SweepOutcome, combinations: usize) -> String {
    let mut out = String::new();
    if let [run] = outcome.runs.as_slice() {
        if run.swept.is_empty() {
            one_run_summary(&mut out, run, combinations);
            return out;
        }
    }
    let _ = writeln!(
        out,
        "sweep: {} of {} runs",
        outcome.runs.len(),
        outcome.planned
    );
    for run in &outcome.runs {
        let swept = run.swept.join(" ");
        let _ = match run.outcome.recorded {
            Some(run_id) => writeln!(
                out,
                "  {:<6} {:<11} {swept}",
                format!("#{run_id}"),
                run.outcome.status.as_str()
            ),
            None => writeln!(
                out,
                "  {:<6} {:<11} {swept}  ({})",
                "-",
                "fresh",
                nothing_to_do(&run.results_of)
            ),
        };
    }
    // The runs to compare: those recorded, and those whose results the
    // combinations that did nothing found.
    let mut ids: Vec<String> = Vec::new();
    for run in &outcome.runs {
        let runs = match run.outcome.recorded {
            Some(run_id) => vec![run_id],
            None => run.results_of.runs.clone(),
        };
        for id in runs.iter().map(|id| id.to_string()) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    if ids.len() > 1 {
        let _ = writeln!(out, "compare them: pipe compare {}", ids.join(" "));
    }
    out
}

/// The sweep as one run: the run, or, when it found every result in
/// place and recorded nothing, the run that holds them.
fn one_run_summary(out: &mut String, run: &SweepRun, combinations: usize) {
    if let Some(run_id) = run.outcome.recorded {
        let _ = writeln!(
            out,
            "sweep: {combinations} combinations in run #{run_id}, {}",
            run.outcome.status.as_str()
        );
        let _ = writeln!(out, "compare them: pipe compare {run_id}");
        return;
    }
    let _ = writeln!(
        out,
        "sweep: {combinations} combinations, {}",
        nothing_to_do(&run.results_of)
    );
    let ids: Vec<String> = run
        .results_of
        .runs
        .iter()
        .map(|id| id.to_string())
        .collect();
    if !ids.is_empty() {
        let _ = writeln!(out, "compare them: pipe compare {}", ids.join(" "));
    }
}

/// `nothing to do: every result is run #4's`.
fn nothing_to_do(held: &ResultsHeld) -> String {
    let runs: Vec<String> = held.runs.iter().map(|id| format!("#{id}")).collect();
    match (runs.as_slice(), held.every) {
        ([], _) => "nothing to do: every result is in place".to_string(),
        ([one], true) => format!("nothing to do: every result is run {one}'s"),
        (_, true) => format!(
            "nothing to do: every result is in place, from runs {}",
            runs.join(", ")
        ),
        (_, false) => format!(
            "nothing to do: every result is in place, some of them from {} {}",
            if runs.len() == 1 { "run" } else { "runs" },
            runs.join(", ")
        ),
    }
}
