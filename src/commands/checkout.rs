//! `pipe checkout RUN` and `pipe apply RUN`: a recorded run's outputs, and
//! for apply its params too, back in the workspace. Both render the same
//! refusals (a record the pipeline does not bear out, results the cache
//! lacks, files only the workspace holds).

use std::path::{Path, PathBuf};

use pipe_engine::apply::{self, Applied, AppliedRun, ApplyReport};
use pipe_engine::checkout::{self, CheckedOut, CheckoutReport, CheckoutRequest};
use pipe_engine::pipefile::ProjectWorkers;
use pipe_engine::plan::Freshness;
use pipe_engine::project::Project;
use pipe_engine::runs::RunId;
use pipe_engine::{ExitCode, Result};

use crate::here;
use crate::output::{errln, outln};
use crate::run_setup::default_pipeline_file;

fn request(run: String, file: Option<PathBuf>, link: Vec<String>, force: bool) -> CheckoutRequest {
    CheckoutRequest {
        run,
        file,
        found_here: default_pipeline_file().ok(),
        link,
        force,
    }
}

/// `pipe checkout RUN`: the flags as a request to `checkout::checkout_run`,
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
        checkout::checkout_run(&project, &request, &ProjectWorkers, &mut |notice| {
            errln!("{notice}")
        })?;
    match report {
        CheckoutReport::Done {
            restored,
            unchanged,
        } => {
            errln!("restored {restored} outputs of run #{id} ({unchanged} already in place)");
            Ok(ExitCode::Ok)
        }
        refused => Ok(not_restored(&project, id, refused)),
    }
}

/// A checkout that changed nothing, said with what to do.
fn not_restored(project: &Project, id: RunId, report: CheckoutReport) -> ExitCode {
    match report {
        CheckoutReport::Refused(problems) => {
            for problem in &problems {
                errln!("error: {problem}");
            }
            errln!(
                "hint: run #{id}'s record names what the pipeline does not write; nothing was changed (a record from another commit: check that commit out first, or pass its pipeline with -f)"
            );
            ExitCode::CorruptCache
        }
        CheckoutReport::Missing(problems) => {
            for problem in &problems {
                errln!("error: cannot restore {problem}");
            }
            errln!("hint: nothing was changed; `pipe cache pull {id}` fetches the results from a remote, or rerun the pipeline at that commit to recreate them");
            ExitCode::Environment
        }
        CheckoutReport::WouldLoseFiles(lost) => {
            errln!(
                "error: bringing back run #{id} would overwrite or delete {} file(s) that the cache does not hold:",
                lost.len()
            );
            for file in &lost {
                let shown = file.strip_prefix(&project.root).unwrap_or(file);
                errln!("  {}", shown.display());
            }
            errln!("hint: move or commit them elsewhere first, or rerun with `--force` to overwrite them");
            ExitCode::WouldLoseFiles
        }
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
    let AppliedRun { run: id, report } = apply::apply_run(
        &project,
        &request,
        row.as_deref(),
        &ProjectWorkers,
        &mut |notice| errln!("{notice}"),
        &argv,
        &|event| progress.on_event(event),
    )?;
    match report {
        ApplyReport::NotRestored(report) => Ok(not_restored(&project, id, report)),
        ApplyReport::ChooseRow { given, rows } => {
            match given {
                Some(row) => errln!("error: `--row {row}` names no combination of sweep run #{id}; nothing was changed"),
                None => errln!("error: run #{id} is a sweep; name the combination to bring back with `--row`; nothing was changed"),
            }
            errln!("its combinations (`pipe compare {id}` shows their metrics):");
            for row in &rows {
                let pairs: Vec<String> = row
                    .iter()
                    .map(|setting| match setting.split_once('=') {
                        Some((path, value)) => {
                            let key = path.rsplit('.').next().unwrap_or(path);
                            format!("{key}={value}")
                        }
                        None => setting.clone(),
                    })
                    .collect();
                errln!("  pipe apply {id} --row {}", pairs.join(","));
            }
            Ok(ExitCode::InvalidInput)
        }
        ApplyReport::Unwritable(params) => {
            for param in &params {
                errln!("error: cannot apply {param}");
            }
            errln!("hint: nothing was changed");
            Ok(ExitCode::InvalidInput)
        }
        ApplyReport::UncommittedEdits(files) => {
            for file in &files {
                errln!(
                    "error: {} has edits git has not committed, which applying run #{id} would overwrite",
                    shown(&project, file).display()
                );
            }
            errln!("hint: nothing was changed; commit or stash them first (`git stash`), or rerun with `--force`");
            Ok(ExitCode::WouldLoseFiles)
        }
        ApplyReport::Done(applied) => Ok(applied_lines(&project, id, &applied)),
    }
}

fn applied_lines(project: &Project, id: RunId, applied: &Applied) -> ExitCode {
    if applied.edits.is_empty() {
        outln!("params: the project's files already hold run #{id}'s");
    }
    for edit in &applied.edits {
        outln!(
            "{}:{}: {} {} -> {}",
            shown(project, &edit.file).display(),
            edit.line,
            edit.param,
            edit.before,
            edit.after
        );
    }
    outln!(
        "outputs: restored {} of run #{id} ({} already in place)",
        applied.restored,
        applied.unchanged
    );
    if applied.not_fresh.is_empty() {
        match applied.reports_made {
            Some(made) => outln!(
                "status: all {} stages fresh (the sweep's report showed every combination: run #{made} made this one's)",
                applied.stages
            ),
            None => outln!("status: all {} stages fresh", applied.stages),
        }
        return ExitCode::Ok;
    }
    outln!(
        "status: {} of {} stages not fresh:",
        applied.not_fresh.len(),
        applied.stages
    );
    for (stage, freshness) in &applied.not_fresh {
        let state = match freshness {
            Freshness::Fresh => "fresh",
            Freshness::Restorable => "restorable",
            Freshness::Stale => "stale",
            Freshness::Running => "running",
        };
        outln!("  {stage}  {state}");
    }
    outln!("hint: `pipe status` says why; run #{id} did not run every stage, or the pipeline changed since");
    ExitCode::Ok
}

fn shown<'p>(project: &Project, file: &'p Path) -> &'p Path {
    file.strip_prefix(&project.root).unwrap_or(file)
}
