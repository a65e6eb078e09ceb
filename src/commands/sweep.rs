//! `pipe run -m`: parse, load every combination, run them, render what
//! each came to (`pipe_engine::sweep`).

use std::path::Path;

use pipe_engine::{load_sweep, run_sweep, ExitCode, ProjectWorkers, Result, RunStatus, SweepPlan};

use crate::cli::RunArgs;
use crate::output::err;
use crate::progress::Progress;
use crate::run_setup::{dry_run, print_report_locations, print_run_summary, run_request, settings};
use crate::views::sweep_text;

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
        err!("{}", sweep_text::warnings(&first.loaded.warnings));
    }
    err!("{}\n", sweep_text::plan(&sweep.plan, combinations.len()));
    if args.dry_run {
        if let SweepPlan::OneRun(merged) = &sweep.plan {
            return dry_run(&merged.pipeline, &merged.dag, &targets, args);
        }
        for (index, combination) in combinations.iter().enumerate() {
            err!(
                "{}",
                sweep_text::dry_run_of(index, combinations.len(), &combination.swept_shown())
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
        err!("{}", sweep_text::summary(&outcome, combinations.len()));
    }
    Ok(match outcome.status() {
        RunStatus::Succeeded => ExitCode::Ok,
        RunStatus::Interrupted => ExitCode::Interrupted,
        RunStatus::Failed | RunStatus::Running => ExitCode::StageFailed,
    })
}
