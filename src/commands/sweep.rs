//! `pipe run -m`: parse, load every combination, run them, render what
//! each came to (`pipe_engine::sweep`).

use std::path::Path;

use pipe_engine::{
    load_sweep, run_sweep, ExitCode, ProjectWorkers, Result, ResultsHeld, RunStatus, SweepOutcome,
    SweepPlan, SweepRun,
};

use crate::cli::RunArgs;
use crate::output::errln;
use crate::progress::Progress;
use crate::run_setup::{dry_run, print_report_locations, print_run_summary, run_request, settings};

pub fn sweep(
    args: &RunArgs,
    targets: Vec<String>,
    file: Option<&Path>,
    quiet: bool,
) -> Result<ExitCode> {
    let settings = settings(file, &args.pipeline, true)?;
    let sweep = load_sweep(&settings.file, &settings.overrides, &ProjectWorkers)?;
    let combinations = &sweep.combinations;
    for combination in combinations {
        pipe_engine::check_inputs(&combination.loaded.pipeline)?;
    }
    // Every combination warns of the same file: once is enough.
    if let Some(first) = combinations.first() {
        for warning in &first.loaded.warnings {
            errln!("{warning}");
        }
    }
    match &sweep.plan {
        SweepPlan::OneRun(merged) if !merged.pipeline.workspaces.is_empty() => errln!(
            "sweep: {} combinations as one run, each in a work tree of its own under .pipe/workspaces/ (your files are not touched): {}",
            combinations.len(),
            expanded_stages(&merged.pipeline)
        ),
        SweepPlan::OneRun(merged) => errln!(
            "sweep: {} combinations as one run: {}",
            combinations.len(),
            expanded_stages(&merged.pipeline)
        ),
        SweepPlan::Apart { why } => errln!(
            "note: the sweep runs its {} combinations one run each, in turn: {why}",
            combinations.len()
        ),
    }
    if args.dry_run {
        if let SweepPlan::OneRun(merged) = &sweep.plan {
            return dry_run(&merged.pipeline, &merged.dag, &targets, args);
        }
        for (index, combination) in combinations.iter().enumerate() {
            errln!(
                "sweep {}/{}: {}",
                index + 1,
                combinations.len(),
                combination.swept_shown().join(" ")
            );
            dry_run(
                &combination.loaded.pipeline,
                &combination.loaded.dag,
                &targets,
                args,
            )?;
        }
        return Ok(ExitCode::Ok);
    }
    let progress = Progress::new(args.json, quiet, args.output_lines);
    let request = run_request(args, targets, &progress, quiet);
    // Where and how stages run is the pipeline's, whatever its params.
    let options = request.options(&combinations[0].loaded.pipeline)?;
    let outcome = run_sweep(&sweep, &options, &|event| progress.on_event(event))?;
    for run in &outcome.runs {
        if let Some(remote) = &run.outcome.remote {
            print_run_summary(remote, args.json, quiet);
        }
    }
    // The work tree holds the last run's pages; each is named once.
    if let (Some(last), false) = (outcome.runs.last(), quiet || args.json) {
        let pipeline = match &sweep.plan {
            SweepPlan::OneRun(merged) => &merged.pipeline,
            SweepPlan::Apart { .. } => &combinations[outcome.runs.len() - 1].loaded.pipeline,
        };
        print_report_locations(pipeline, &last.outcome);
    }
    if !args.json {
        print_summary(&outcome, combinations.len());
    }
    Ok(match outcome.status() {
        RunStatus::Succeeded => ExitCode::Ok,
        RunStatus::Interrupted => ExitCode::Interrupted,
        RunStatus::Failed | RunStatus::Running => ExitCode::StageFailed,
    })
}

/// The stages the sweep expands, by base name: `train ×4, evaluate ×4`.
fn expanded_stages(pipeline: &pipe_engine::Pipeline) -> String {
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
fn print_summary(outcome: &SweepOutcome, combinations: usize) {
    if let [run] = outcome.runs.as_slice() {
        if run.swept.is_empty() {
            print_one_run_summary(run, combinations);
            return;
        }
    }
    errln!("sweep: {} of {} runs", outcome.runs.len(), outcome.planned);
    for run in &outcome.runs {
        let swept = run.swept.join(" ");
        match run.outcome.recorded {
            Some(run_id) => errln!(
                "  {:<6} {:<11} {swept}",
                format!("#{run_id}"),
                run.outcome.status.as_str()
            ),
            None => errln!(
                "  {:<6} {:<11} {swept}  ({})",
                "-",
                "fresh",
                nothing_to_do(&run.results_of)
            ),
        }
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
        errln!("compare them: pipe compare {}", ids.join(" "));
    }
}

/// The sweep as one run: the run, or, when it found every result in
/// place and recorded nothing, the run that holds them.
fn print_one_run_summary(run: &SweepRun, combinations: usize) {
    if let Some(run_id) = run.outcome.recorded {
        errln!(
            "sweep: {combinations} combinations in run #{run_id}, {}",
            run.outcome.status.as_str()
        );
        errln!("compare them: pipe compare {run_id}");
        return;
    }
    errln!(
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
        errln!("compare them: pipe compare {}", ids.join(" "));
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
