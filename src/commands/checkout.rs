//! `pipe checkout RUN` and `pipe apply RUN`: a recorded run's outputs, and
//! for apply its params too, back in the workspace. Both render the same
//! refusals (a record the pipeline does not bear out, results the cache
//! lacks, files only the workspace holds).

use std::path::PathBuf;

use pipe_engine::{
    apply_run, checkout_run, AppliedRun, ApplyReport, CheckedOut, CheckoutReport, CheckoutRequest,
    ExitCode, Project, ProjectWorkers, Result, RunId,
};

use crate::here;
use crate::output::{err, out};
use crate::run_setup::default_pipeline_file;
use crate::views::{checkout_text, notice_text};

fn request(run: String, file: Option<PathBuf>, link: Vec<String>, force: bool) -> CheckoutRequest {
    CheckoutRequest {
        run,
        file,
        found_here: default_pipeline_file().ok(),
        link,
        force,
    }
}

/// `pipe checkout RUN`: the flags as a request to `checkout_run`,
/// and its report as errors, hints and an exit code.
pub fn checkout(
    run: String,
    file: Option<PathBuf>,
    link: Vec<String>,
    force: bool,
) -> Result<ExitCode> {
    let project = here::project()?;
    let request = request(run, file, link, force);
    let CheckedOut { run: id, report } =
        checkout_run(&project, &request, &ProjectWorkers, &mut |notice| {
            err!("{}", notice_text::line(&notice))
        })?;
    match report {
        CheckoutReport::Done {
            restored,
            unchanged,
        } => {
            err!("{}", checkout_text::restored(id, restored, unchanged));
            Ok(ExitCode::Ok)
        }
        refused => Ok(not_restored(&project, id, refused)),
    }
}

/// A checkout that changed nothing: said with what to do, and its exit
/// code.
fn not_restored(project: &Project, id: RunId, report: CheckoutReport) -> ExitCode {
    err!(
        "{}",
        checkout_text::not_restored(&project.root, id, &report)
    );
    match report {
        CheckoutReport::Refused(_) => ExitCode::CorruptCache,
        CheckoutReport::Missing(_) => ExitCode::Environment,
        CheckoutReport::WouldLoseFiles(_) => ExitCode::WouldLoseFiles,
        CheckoutReport::Done { .. } => ExitCode::Ok,
    }
}

/// `pipe apply RUN`: the run's params written where the project sets
/// them and its outputs restored; what changed is printed, then whether
/// every stage is fresh.
pub fn apply(
    run: String,
    row: Option<String>,
    file: Option<PathBuf>,
    link: Vec<String>,
    force: bool,
) -> Result<ExitCode> {
    let project = here::project()?;
    let request = request(run, file, link, force);
    // A sweep's combination gets its own report, made as a run is.
    let progress = crate::progress::Progress::new(false, false, 0);
    let argv: Vec<String> = std::env::args().collect();
    let AppliedRun { run: id, report } = apply_run(
        &project,
        &request,
        row.as_deref(),
        &ProjectWorkers,
        &mut |notice| err!("{}", notice_text::line(&notice)),
        &argv,
        &|event| progress.on_event(event),
    )?;
    match report {
        ApplyReport::NotRestored(report) => Ok(not_restored(&project, id, report)),
        ApplyReport::ChooseRow { given, rows } => {
            err!("{}", checkout_text::choose_row(id, given.as_deref(), &rows));
            Ok(ExitCode::InvalidInput)
        }
        ApplyReport::Unwritable(params) => {
            err!("{}", checkout_text::unwritable(&params));
            Ok(ExitCode::InvalidInput)
        }
        ApplyReport::UncommittedEdits(files) => {
            err!(
                "{}",
                checkout_text::uncommitted_edits(&project.root, id, &files)
            );
            Ok(ExitCode::WouldLoseFiles)
        }
        ApplyReport::Done(applied) => {
            out!("{}", checkout_text::applied(&project.root, id, &applied));
            Ok(ExitCode::Ok)
        }
    }
}
