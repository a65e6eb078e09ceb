//! What `pipe run` and the commands that read a pipeline share: which
//! pipeline file, loading it, a run's request from the flags, its plan
//! (`--dry-run`), and where its report pages are.

use std::path::{Path, PathBuf};

use pipe_engine::dag::Dag;
use pipe_engine::exec::{self, RunRequest};
use pipe_engine::pipefile::{Loaded, ProjectWorkers};
use pipe_engine::pipeline::{ExecutorKind, Pipeline};
use pipe_engine::plan::{self, DryRun};
use pipe_engine::project::Project;
use pipe_engine::{EngineError, ExitCode, Result, UsageError};

use crate::cli::{ExecutorArg, PipelineArg, RunArgs};
use crate::output::{errln, out};
use crate::progress::Progress;
use crate::render;
use crate::transfers;

/// `pipe.yaml` here or in the nearest directory above that has one, up
/// to the project root (`Project::find_pipeline_file`).
pub fn default_pipeline_file() -> Result<PathBuf> {
    let cwd = std::env::current_dir().map_err(|e| EngineError::io(".", e))?;
    Project::find_pipeline_file(&cwd).ok_or(UsageError::NoPipelineFile.into())
}
/// Loads and validates the pipeline named by a positional file or `-f`.
/// The pipeline file a command names: a positional file or `-f`, else
/// `pipe.yaml` here or above; checked to be a file that can be one.
pub fn pipeline_file(file: Option<&Path>, arg: &PipelineArg) -> Result<PathBuf> {
    let file = match (file, arg.file.as_deref()) {
        (Some(positional), Some(flag)) if positional != flag => {
            return Err(UsageError::TwoPipelineFiles {
                positional: positional.to_path_buf(),
                flag: flag.to_path_buf(),
            }
            .into())
        }
        (Some(file), _) | (None, Some(file)) => file.to_path_buf(),
        (None, None) => default_pipeline_file()?,
    };
    if let Some(problem) = pipe_engine::pipefile::pipeline_file_problem(
        &file,
        "check the path; pipeline files are YAML, e.g. `pipelines/quickstart.yaml`",
    ) {
        return Err(problem);
    }
    Ok(file)
}
/// Loads and validates the pipeline named by a positional file or `-f`.
pub fn load(file: Option<&Path>, arg: &PipelineArg) -> Result<(Pipeline, Dag)> {
    let file = pipeline_file(file, arg)?;
    let Loaded {
        pipeline,
        dag,
        warnings,
    } = pipe_engine::pipefile::load(&file, &arg.set, &ProjectWorkers)?;
    for warning in &warnings {
        errln!("{warning}");
    }
    Ok((pipeline, dag))
}
/// What `pipe run`'s flags ask of a run, but its `-S` values.
pub fn run_request(
    args: &RunArgs,
    targets: Vec<String>,
    progress: &Progress,
    quiet: bool,
) -> RunRequest {
    RunRequest {
        targets,
        force: args.force.clone(),
        force_all: args.force_all,
        jobs: args.jobs,
        executor: args.executor.map(|executor| match executor {
            ExecutorArg::Local => ExecutorKind::Local,
            ExecutorArg::Slurm => ExecutorKind::Slurm,
        }),
        link: args.link.clone(),
        remote: args.remote.remote.clone(),
        remote_read_only: args.remote.remote_read_only,
        argv: std::env::args().collect(),
        overrides: Vec::new(),
        // Transfer bars share the stages' live display.
        transfers: transfers::sink(args.json, quiet, progress.bars()),
    }
}
/// Where the pages of the run's reports are, once they are in place: the
/// last thing a run prints, as a path to open.
pub fn print_report_locations(pipeline: &Pipeline, summary: &exec::RunOutcome) {
    for record in &summary.stages {
        let Some(stage) = pipeline.stage(&record.stage) else {
            continue;
        };
        if !record.status.succeeded() {
            continue;
        }
        for page in stage.pages() {
            if pipeline.root.join(&page).is_file() {
                errln!("{}: {page}", stage.name);
            }
        }
    }
}
pub fn dry_run(pipeline: &Pipeline, dag: &Dag, targets: &[String]) -> Result<ExitCode> {
    let DryRun { stages, states } = plan::dry_run(pipeline, dag, targets)?;
    let command_of = |position: usize| pipeline.stages[stages[position]].shown_command();
    render::status_text(&states, Some(&command_of), |piece| out!("{piece}"));
    Ok(ExitCode::Ok)
}
