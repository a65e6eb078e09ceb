//! `pipe run -m`: parse, load every combination, run them, render what
//! each came to (`pipe_engine::sweep`).

use std::path::Path;

use pipe_engine::pipefile::ProjectWorkers;
use pipe_engine::runs::RunStatus;
use pipe_engine::sweep::{self, SweepOutcome};
use pipe_engine::{ExitCode, Result};

use crate::cli::RunArgs;
use crate::output::errln;
use crate::progress::Progress;
use crate::remote_commands;
use crate::run_setup::{dry_run, print_report_locations, run_request, settings};

pub fn sweep(
    args: &RunArgs,
    targets: Vec<String>,
    file: Option<&Path>,
    quiet: bool,
) -> Result<ExitCode> {
    let (file, overrides) = settings(file, &args.pipeline)?;
    let combinations = sweep::load(&file, &overrides, &ProjectWorkers)?;
    for combination in &combinations {
        pipe_engine::pipefile::check_inputs(&combination.loaded.pipeline)?;
    }
    // Every combination warns of the same file: once is enough.
    if let Some(first) = combinations.first() {
        for warning in &first.loaded.warnings {
            errln!("{warning}");
        }
    }
    if args.dry_run {
        for (index, combination) in combinations.iter().enumerate() {
            errln!(
                "sweep {}/{}: {}",
                index + 1,
                combinations.len(),
                combination.swept.join(" ")
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
    let progress = Progress::new(args.json, quiet);
    let request = run_request(args, targets, &progress, quiet);
    // Where and how stages run is the pipeline's, whatever its params.
    let options = request.options(&combinations[0].loaded.pipeline)?;
    let outcome = sweep::run(&combinations, &options, &|event| progress.on_event(event))?;
    for (_, run) in &outcome.runs {
        if let Some(remote) = &run.remote {
            remote_commands::print_run_summary(remote, args.json, quiet);
        }
    }
    // The work tree holds the last run's pages; each is named once.
    if let (Some((_, run)), false) = (outcome.runs.last(), quiet || args.json) {
        let combination = &combinations[outcome.runs.len() - 1];
        print_report_locations(&combination.loaded.pipeline, run);
    }
    if !args.json {
        print_summary(&outcome);
    }
    Ok(match outcome.status() {
        RunStatus::Succeeded => ExitCode::Ok,
        RunStatus::Interrupted => ExitCode::Interrupted,
        RunStatus::Failed | RunStatus::Running => ExitCode::StageFailed,
    })
}

/// One line per run, then how to compare them.
fn print_summary(outcome: &SweepOutcome) {
    errln!("sweep: {} of {} runs", outcome.runs.len(), outcome.planned);
    for (swept, run) in &outcome.runs {
        let id = if run.recorded {
            format!("#{}", run.run_id)
        } else {
            "(nothing to do)".to_string()
        };
        errln!("  {id:<6} {:<11} {}", run.status.as_str(), swept.join(" "));
    }
    let recorded = outcome.recorded();
    if recorded.len() > 1 {
        let ids: Vec<String> = recorded.iter().map(|id| id.to_string()).collect();
        errln!("compare them: pipe compare {}", ids.join(" "));
    }
}
