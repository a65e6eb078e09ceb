//! `pipe run`: a pipeline run (with `-m`, its sweep: sweep.rs).

use std::path::PathBuf;

use pipe_engine::{run_pipeline, ExitCode, Result, RunRequest, RunStatus};

use crate::cli::RunArgs;
use crate::output::err;
use crate::progress::Progress;
use crate::run_setup::{
    dry_run, load_with_overrides, print_report_locations, print_run_summary, run_request,
};
use crate::views::labels_text;

pub(super) fn run(
    args: RunArgs,
    targets: Vec<String>,
    positional_file: Option<PathBuf>,
    quiet: bool,
) -> Result<ExitCode> {
    let (pipeline, dag, settings) =
        load_with_overrides(positional_file.as_deref(), &args.pipeline)?;
    pipe_engine::check_inputs(&pipeline)?;
    if args.dry_run {
        return dry_run(&pipeline, &dag, &targets, &args);
    }
    let progress = Progress::new(args.json, quiet, args.output_lines);
    let request = RunRequest {
        overrides: settings.overrides,
        sweep: settings.sweep,
        ..run_request(&args, targets, &progress, quiet)
    };
    let options = request.options(&pipeline)?;
    let summary = run_pipeline(&pipeline, &dag, &options, &|event| progress.on_event(event))?;
    if let Some(remote) = &summary.remote {
        print_run_summary(remote, args.json, quiet);
    }
    if !quiet && !args.json {
        print_report_locations(&pipeline, &summary);
    }
    if let (Some(name), None) = (&args.name, summary.recorded) {
        err!("{}", labels_text::not_named(name));
    }
    Ok(match summary.status {
        RunStatus::Succeeded => ExitCode::Ok,
        RunStatus::Interrupted => ExitCode::Interrupted,
        RunStatus::Failed | RunStatus::Running => ExitCode::StageFailed,
    })
}
