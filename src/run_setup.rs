//! What `pipe run` and the commands that read a pipeline share: which
//! pipeline file, loading it, a run's request from the flags, its plan
//! (`--dry-run`), where its report pages are, and what its remote did.

use std::path::{Path, PathBuf};

use pipe_engine::{
    last_run_pipeline_file, settings_of_run, Dag, DirtySettler, DryRun, EngineError, ExecutorKind,
    ExitCode, Forced, Loaded, ParamOverride, Pipeline, Project, ProjectWorkers, RemoteSummary,
    Result, RunOutcome, RunRequest, UsageError,
};

use crate::cli::{ExecutorArg, PipelineArg, RunArgs};
use crate::output::{err, jsonln, out};
use crate::progress::Progress;
use crate::transfers;
use crate::views::json_results::RunRemote;
use crate::views::{notice_text, run_setup_text};

/// `pipe.yaml` here or in the nearest directory above that has one, up
/// to the project root (`Project::find_pipeline_file`).
pub fn default_pipeline_file() -> Result<PathBuf> {
    let cwd = std::env::current_dir().map_err(|e| EngineError::io(".", e))?;
    Project::find_pipeline_file(&cwd).ok_or(UsageError::NoPipelineFile.into())
}
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
        (None, None) => match default_pipeline_file() {
            Ok(file) => file,
            Err(none_here) => {
                let root = crate::here::root()?;
                let Some((run, file)) = last_run_pipeline_file(&root) else {
                    return Err(none_here);
                };
                err!(
                    "{}",
                    run_setup_text::last_run_file_line(&crate::here::relative_to_cwd(&file), run)
                );
                file
            }
        },
    };
    if let Some(problem) =
        pipe_engine::pipeline_file_problem(&file, run_setup_text::PIPELINE_FILE_HINT)
    {
        return Err(problem);
    }
    Ok(file)
}

/// The pipeline file and `-S` settings a command loads: with `--run RUN`,
/// that run's file (unless one is named) and settings, then those given
/// here. `multirun`: `pipe run -m`, whose `-S` values list a sweep's.
pub fn settings(file: Option<&Path>, arg: &PipelineArg, multirun: bool) -> Result<Settings> {
    // Read once, here: a malformed `-S` is refused before anything else.
    let given = parsed_settings(&arg.set, multirun)?;
    let Some(run) = &arg.run else {
        return Ok(Settings {
            file: pipeline_file(file, arg)?,
            overrides: given,
            sweep: false,
        });
    };
    let project = crate::here::project()?;
    let named = file.or(arg.file.as_deref()).is_some();
    let found_here = default_pipeline_file().ok();
    let recorded = settings_of_run(&project, run, found_here.as_deref(), &mut |notice| {
        err!("{}", notice_text::line(&notice))
    })?;
    let file = if named {
        pipeline_file(file, arg)?
    } else {
        recorded.file
    };
    let mut overrides = recorded.overrides;
    err!(
        "{}",
        run_setup_text::as_run_line(
            recorded.run,
            &crate::here::relative_to_cwd(&file),
            recorded.sweep,
            &overrides
        )
    );
    // A sweep run's settings take more values as a sweep's.
    let given = match recorded.sweep && !multirun {
        true => parsed_settings(&arg.set, true)?,
        false => given,
    };
    overrides.extend(given);
    Ok(Settings {
        file,
        overrides,
        sweep: recorded.sweep,
    })
}

/// `-S` arguments as settings: each one value, or under `pipe run -m` a
/// sweep's values.
fn parsed_settings(arguments: &[String], multirun: bool) -> Result<Vec<ParamOverride>> {
    arguments
        .iter()
        .map(|argument| match multirun {
            true => ParamOverride::parse_swept(argument),
            false => ParamOverride::parse(argument),
        })
        .collect::<std::result::Result<_, _>>()
        .map_err(EngineError::from)
}

/// The pipeline file and `-S` settings a command loads.
pub struct Settings {
    pub file: PathBuf,
    pub overrides: Vec<ParamOverride>,
    /// The values are a sweep run's (`--run` of one): loaded as a sweep.
    pub sweep: bool,
}

/// Loads and validates the pipeline a command names, with the `-S` values
/// it was given ([`settings`]), which it returns too.
pub fn load_with_overrides(
    file: Option<&Path>,
    arg: &PipelineArg,
) -> Result<(Pipeline, Dag, Settings)> {
    let settings = settings(file, arg, false)?;
    let Loaded {
        pipeline,
        dag,
        warnings,
    } = pipe_engine::load_recorded_pipeline(
        &settings.file,
        &settings.overrides,
        settings.sweep,
        &ProjectWorkers,
    )?;
    for warning in &warnings {
        err!("{}", notice_text::line(warning));
    }
    Ok((pipeline, dag, settings))
}

/// Loads and validates the pipeline named by a positional file or `-f`.
pub fn load(file: Option<&Path>, arg: &PipelineArg) -> Result<(Pipeline, Dag)> {
    let (pipeline, dag, _) = load_with_overrides(file, arg)?;
    Ok((pipeline, dag))
}

/// [`load`], for a command that says what a run would do: inputs that no
/// stage makes must be there (`pipefile::check_inputs`).
pub fn load_checked(file: Option<&Path>, arg: &PipelineArg) -> Result<(Pipeline, Dag)> {
    let (pipeline, dag) = load(file, arg)?;
    pipe_engine::check_inputs(&pipeline)?;
    Ok((pipeline, dag))
}

/// This binary, through its hidden `__settle-git-dirty`, settles a run's
/// dirty flag after the run; `None` when the binary cannot be named (the
/// run then waits for the flag itself).
fn git_settler() -> Option<DirtySettler> {
    let program = std::env::current_exe().ok()?;
    Some(DirtySettler {
        program,
        args: vec!["__settle-git-dirty".into()],
    })
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
        sweep: false,
        // Transfer bars share the stages' live display.
        transfers: transfers::sink(args.json, quiet, progress.bars()),
        git_settler: git_settler(),
        name: args.name.clone(),
        remove_orphans: args.remove_orphans,
    }
}
/// Where the pages of the run's reports are, once they are in place: the
/// last thing a run prints, as a path to open.
pub fn print_report_locations(pipeline: &Pipeline, summary: &RunOutcome) {
    for record in &summary.stages {
        let Some(stage) = pipeline.stage(&record.stage) else {
            continue;
        };
        if !record.status.succeeded() {
            continue;
        }
        for page in stage.pages() {
            if pipeline.root.join(&page).is_file() {
                err!(
                    "{}",
                    run_setup_text::report_location_line(&stage.name, &page)
                );
            }
        }
    }
}
pub fn dry_run(
    pipeline: &Pipeline,
    dag: &Dag,
    targets: &[String],
    args: &RunArgs,
) -> Result<ExitCode> {
    let forced = Forced {
        stages: &args.force,
        all: args.force_all,
    };
    let DryRun { stages, states } = pipe_engine::dry_run(pipeline, dag, targets, &forced)?;
    let command_of = |position: usize| pipeline.stages[stages[position]].shown_command();
    crate::views::status_text::status_text(
        &states,
        Some(&command_of),
        crate::views::status_text::Shown::All,
        |piece| out!("{piece}"),
    );
    let orphans = pipe_engine::orphaned_outputs(pipeline);
    if !orphans.is_empty() {
        out!(
            "{}",
            crate::views::orphans_text::dry_run_orphans_line(&orphans, args.remove_orphans)
        );
    }
    Ok(ExitCode::Ok)
}

/// What `pipe run` says about the remote at its end: one line on stderr,
/// or a `remote` event with `--json`.
pub fn print_run_summary(summary: &RemoteSummary, json_events: bool, quiet: bool) {
    if json_events {
        jsonln!(serde_json::to_string(&RunRemote::of(summary)).unwrap_or_default());
    }
    if !quiet {
        err!("{}", run_setup_text::remote_summary_text(summary));
    }
}

/// `pipe run`'s targets, less its first when that names the pipeline
/// file rather than a stage, and that file: what a run and a sweep
/// (`-m`) both start from.
pub fn file_and_targets(args: &RunArgs) -> (Option<PathBuf>, Vec<String>) {
    let mut targets = args.targets.clone();
    let positional_file = match targets.first() {
        Some(first) if looks_like_pipeline_file(first) => Some(PathBuf::from(targets.remove(0))),
        // `pipe run pipelines/quickstart`: a file without its extension,
        // not a stage.
        Some(first) if pipe_engine::with_extension(Path::new(first)).is_some() => {
            Some(PathBuf::from(targets.remove(0)))
        }
        _ => None,
    };
    (positional_file, targets)
}

/// Whether `pipe run`'s first argument names the pipeline rather than a
/// stage. A trailing `/` is a directory (no stage name has one), said to be
/// one by the loader; a bare directory name may well be a stage's (`data`).
fn looks_like_pipeline_file(argument: &str) -> bool {
    argument.ends_with(".yaml")
        || argument.ends_with(".yml")
        || argument.ends_with('/')
        || Path::new(argument).is_file()
}
