//! One function per subcommand (`pipe compare`'s in compare_command.rs).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use pipe_engine::cache_admin::{self, GcOutcome, GcRequest};
use pipe_engine::compare::DiffRequest;
use pipe_engine::dag::DagFormat;
use pipe_engine::exec::{self, RunRequest};
use pipe_engine::history::History;
use pipe_engine::plan::{self};
use pipe_engine::runs::{RunId, RunStatus};
use pipe_engine::show::RunGoing;
use pipe_engine::{catalog, compare, ExitCode, Result};
use pipe_protocol::format::format_bytes;

use crate::cli::{CacheCommand, Cli, Command, DagFormatArg, DirectionArgs, PipelineArg, RunArgs};
use crate::here;
use crate::output::{errln, jsonln, out, outln};
use crate::progress::Progress;
use crate::remote_commands::{self, Shown};
use crate::remote_status;
use crate::render;
use crate::run_setup::{
    default_pipeline_file, dry_run, load, load_checked, load_with_overrides,
    print_report_locations, print_run_summary, run_request,
};
use crate::style::Style;

pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    let quiet = cli.quiet;
    match cli.command {
        Command::Run(args) => run(args, quiet),
        Command::Status {
            path,
            pipeline,
            json,
            stale,
            remote,
        } => status(path, pipeline, json, stale, remote.as_deref()),
        Command::Why {
            targets,
            pipeline,
            json,
        } => why(&targets, pipeline, json),
        Command::Dag {
            path,
            pipeline,
            format,
        } => dag(path.as_deref(), &pipeline, format),
        Command::Validate { path, pipeline } => validate(path.as_deref(), &pipeline),
        Command::Runs {
            action: Some(action),
            ..
        } => crate::labels_command::runs_action(action),
        Command::Runs { limit, json, .. } => runs(limit, json),
        Command::Tag { run, tags, rm } => crate::labels_command::tag(&run, &tags, rm),
        Command::Show { run, json, open } => crate::show_command::show(&run, json, open.as_deref()),
        Command::Compare(args) => crate::compare_command::compare_command(args),
        Command::Diff {
            a,
            b,
            pipeline,
            json,
            md,
            all,
            directions,
        } => diff(a, b, pipeline, directions, Shape { json, md, all }),
        Command::Checkout {
            run,
            file,
            link,
            force,
        } => crate::checkout_command::checkout(run, file, link, force),
        Command::Apply {
            run,
            row,
            file,
            link,
            force,
        } => crate::checkout_command::apply(run, row, file, link, force),
        Command::Cache { command } => cache(command, quiet),
        Command::Stages { check: true, .. } => check_stages(quiet),
        Command::Stages { name, json, .. } => stages(name.as_deref(), json),
        Command::Init {
            path,
            from_dvc: true,
            ..
        } => crate::init_from_dvc::init_from_dvc(path.as_deref()),
        Command::Init { path, template, .. } => crate::init::init(path.as_deref(), template),
        Command::Completions { shell } => {
            let script = crate::complete::registration(shell);
            out!("{}", String::from_utf8_lossy(&script));
            Ok(ExitCode::Ok)
        }
        Command::SettleGitDirty {
            runs_db,
            run_id,
            work_tree,
        } => {
            pipe_engine::runs::settle_git_dirty(&runs_db, RunId(run_id), &work_tree)?;
            Ok(ExitCode::Ok)
        }
    }
}

fn cache(command: CacheCommand, quiet: bool) -> Result<ExitCode> {
    match command {
        CacheCommand::Verify { json, repair } => verify(json, repair),
        CacheCommand::Gc {
            pipeline,
            keep_runs,
            grace_secs,
            remote,
        } => gc(&pipeline, keep_runs, grace_secs, &remote),
        CacheCommand::Push {
            run,
            all,
            file,
            remote,
            json,
        } => remote_commands::push(
            run.as_deref(),
            all,
            file.as_deref(),
            &remote,
            Shown { json, quiet },
        ),
        CacheCommand::Pull {
            run,
            all,
            file,
            remote,
            json,
        } => remote_commands::pull(
            run.as_deref(),
            all,
            file.as_deref(),
            &remote,
            Shown { json, quiet },
        ),
        CacheCommand::Status {
            run,
            file,
            remote,
            json,
        } => remote_commands::status(run.as_deref(), file.as_deref(), &remote, json),
    }
}

fn dag(path: Option<&Path>, pipeline: &PipelineArg, format: DagFormatArg) -> Result<ExitCode> {
    let (pipeline, dag) = load(path, pipeline)?;
    let format = match format {
        DagFormatArg::Ascii if !crate::human_reporter::every_stage() => {
            out!("{}", ensure_newline(dag.render_by_matrix(&pipeline)));
            return Ok(ExitCode::Ok);
        }
        DagFormatArg::Ascii => DagFormat::Ascii,
        DagFormatArg::Dot => DagFormat::Dot,
        DagFormatArg::Mermaid => DagFormat::Mermaid,
    };
    out!("{}", ensure_newline(dag.render(&pipeline, format)));
    Ok(ExitCode::Ok)
}

fn validate(path: Option<&Path>, pipeline: &PipelineArg) -> Result<ExitCode> {
    let (pipeline, _) = load_checked(path, pipeline)?;
    errln!(
        "`{}` is valid: {} stages",
        pipeline.file.display(),
        pipeline.stages.len()
    );
    Ok(ExitCode::Ok)
}

fn runs(limit: usize, json: bool) -> Result<ExitCode> {
    let Some(history) = History::open_existing(&here::root()?)? else {
        return no_runs(json);
    };
    let listing = history.listing(limit)?;
    if json {
        jsonln!(serde_json::to_string_pretty(&listing.runs).unwrap_or_default());
    } else {
        out!("{}", crate::runs_table::runs_table(&listing));
    }
    Ok(ExitCode::Ok)
}

/// `pipe diff [A] [B]`: the flags as a request to `compare::diff`, and
/// its diff shown as text, Markdown or JSON.
/// How `pipe diff` shows what it found.
struct Shape {
    json: bool,
    md: bool,
    /// Every changed metric, not only the key ones.
    all: bool,
}

fn diff(
    a: Option<String>,
    b: Option<String>,
    pipeline: Option<String>,
    directions: DirectionArgs,
    Shape { json, md, all }: Shape,
) -> Result<ExitCode> {
    let mut history = here::history()?;
    let request = DiffRequest {
        a,
        b,
        pipeline,
        directions: directions.rules(),
    };
    let diff = compare::diff(&mut history, &request, &mut |notice| errln!("{notice}"))?;
    if json {
        jsonln!(serde_json::to_string_pretty(&diff).unwrap_or_default());
    } else if md {
        out!("{}", render::diff_markdown(&diff, all));
    } else {
        out!("{}", render::diff_text(&diff, all, Style::for_stdout()));
    }
    Ok(ExitCode::Ok)
}

fn ensure_newline(mut text: String) -> String {
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

fn run(args: RunArgs, quiet: bool) -> Result<ExitCode> {
    let mut targets = args.targets.clone();
    let positional_file = match targets.first() {
        Some(first) if looks_like_pipeline_file(first) => Some(PathBuf::from(targets.remove(0))),
        // `pipe run pipelines/quickstart`: a file without its extension,
        // not a stage.
        Some(first) if pipe_engine::pipefile::with_extension(Path::new(first)).is_some() => {
            Some(PathBuf::from(targets.remove(0)))
        }
        _ => None,
    };
    if args.multirun {
        return crate::sweep_command::sweep(&args, targets, positional_file.as_deref(), quiet);
    }
    let (pipeline, dag, settings) =
        load_with_overrides(positional_file.as_deref(), &args.pipeline)?;
    pipe_engine::pipefile::check_inputs(&pipeline)?;
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
    let summary = exec::run(&pipeline, &dag, &options, &|event| progress.on_event(event))?;
    if let Some(remote) = &summary.remote {
        print_run_summary(remote, args.json, quiet);
    }
    if !quiet && !args.json {
        print_report_locations(&pipeline, &summary);
    }
    if let (Some(name), false) = (&args.name, summary.recorded) {
        errln!(
            "note: no run was recorded, so none is named `{name}`; the run that made these results takes it with `pipe runs name RUN {name}`"
        );
    }
    Ok(match summary.status {
        RunStatus::Succeeded => ExitCode::Ok,
        RunStatus::Interrupted => ExitCode::Interrupted,
        RunStatus::Failed | RunStatus::Running => ExitCode::StageFailed,
    })
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

fn status(
    file: Option<PathBuf>,
    arg: PipelineArg,
    json: bool,
    only_stale: bool,
    remote: Option<&str>,
) -> Result<ExitCode> {
    // While a run is going, the status is that run's: its pipeline as it
    // runs it (a sweep's merged), as `--run` loads it, below what it has
    // done so far.
    let going = going_to_describe(file.as_deref(), &arg)?;
    let arg = match &going {
        Some(going) => PipelineArg {
            run: Some(going.record.id.to_string()),
            ..arg
        },
        None => arg,
    };
    let (pipeline, dag) = load_checked(file.as_deref(), &arg)?;
    if let (Some(going), false) = (&going, json) {
        out!("{}", crate::status_text::run_going_text(going));
    }
    let report = pipe_engine::remote_status::status(&pipeline, &dag, remote)?;
    let mut states = report.states;
    if only_stale && json {
        states.retain(|state| state.freshness != pipe_engine::plan::Freshness::Fresh);
    }
    match report.remote {
        Some(Ok(remote)) => {
            remote_status::show(&remote, &states, json);
            return Ok(ExitCode::Ok);
        }
        // The plain status follows the warning.
        Some(Err(reason)) => errln!("warning: {reason}; showing the local status only"),
        None => {}
    }
    if json {
        // Streamed: a million stages' JSON is never one string in memory.
        let mut out = std::io::BufWriter::with_capacity(64 * 1024, crate::output::DataStdout);
        let _ = serde_json::to_writer_pretty(&mut out, &states);
        let _ = writeln!(out);
        let _ = out.flush();
    } else {
        let shown = match only_stale {
            true => crate::status_text::Shown::NotFresh,
            false => crate::status_text::Shown::All,
        };
        crate::status_text::status_text(&states, None, shown, |piece| out!("{piece}"));
        let orphans = pipe_engine::orphans::orphans(&pipeline);
        if !orphans.is_empty() {
            out!("{}\n", crate::orphans_text::orphans_line(&orphans, false));
        }
    }
    Ok(ExitCode::Ok)
}

/// The run going now, when `pipe status` is to describe it: it was given
/// no `--run` and no `-S`, and names no pipeline file or the one that run
/// runs.
fn going_to_describe(file: Option<&Path>, arg: &PipelineArg) -> Result<Option<RunGoing>> {
    if arg.run.is_some() || !arg.set.is_empty() {
        return Ok(None);
    }
    let root = here::root()?;
    let Some(going) = pipe_engine::show::going_now(&root)? else {
        return Ok(None);
    };
    let same_file = |named: &Path, recorded: &Path| match (
        std::fs::canonicalize(named),
        std::fs::canonicalize(recorded),
    ) {
        (Ok(named), Ok(recorded)) => named == recorded,
        _ => false,
    };
    let described = match (file.or(arg.file.as_deref()), &going.record.file) {
        (None, _) => true,
        (Some(named), Some(recorded)) => same_file(named, &root.join(recorded)),
        (Some(_), None) => false,
    };
    Ok(described.then_some(going))
}

/// `pipe why [FILE] STAGE`.
fn why(targets: &[String], arg: PipelineArg, json: bool) -> Result<ExitCode> {
    let (file, stage) = match targets {
        [file, stage] => (Some(Path::new(file.as_str())), stage.as_str()),
        [stage, ..] => (None, stage.as_str()),
        // clap asks for the stage; an empty list is said, not a panic.
        [] => return Err(pipe_engine::UsageError::NoStageNamed.into()),
    };
    let (pipeline, dag) = load_checked(file, &arg)?;
    for why in plan::why_stages(&pipeline, &dag, stage)? {
        if json {
            jsonln!(serde_json::to_string_pretty(&why).unwrap_or_default());
        } else {
            out!("{}", render::why_text(&why));
        }
    }
    Ok(ExitCode::Ok)
}

fn no_runs(json: bool) -> Result<ExitCode> {
    if json {
        outln!("[]");
    } else {
        errln!("no runs recorded yet; `pipe run` records one");
    }
    Ok(ExitCode::Ok)
}

fn verify(json: bool, repair: bool) -> Result<ExitCode> {
    let project = here::project()?;
    let outcome = cache_admin::verify(&project, repair)?;
    let (report, linked_files) = (&outcome.report, &outcome.linked_files);
    if json {
        jsonln!(serde_json::to_string_pretty(&outcome).unwrap_or_default());
    } else {
        outln!(
            "checked {} objects ({}) and {} actions",
            report.objects_checked,
            format_bytes(report.bytes_checked as f64),
            report.actions_checked
        );
        for object in &report.corrupt_objects {
            match linked_files.get(&object.name) {
                Some(files) => outln!(
                    "corrupt object {} (changed through {})",
                    object.name,
                    files
                        .iter()
                        .map(|file| format!("`{file}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => outln!("corrupt object {}", object.name),
            }
        }
        for action in &report.corrupt_actions {
            outln!("corrupt action {action}");
        }
    }
    if report.corrupt.is_empty() && report.corrupt_actions.is_empty() {
        return Ok(ExitCode::Ok);
    }
    if !linked_files.is_empty() {
        errln!("hint: those project files are hard links or symlinks into the cache and were written to; `--link reflink,copy` (the default) restores private copies");
    }
    if repair {
        errln!(
            "removed {} corrupt objects and {} action results; `pipe run` reruns the stages that needed them",
            report.objects_removed, report.actions_removed
        );
        Ok(ExitCode::Ok)
    } else {
        errln!("hint: `pipe run` ignores corrupt entries (it reruns the stage); `pipe cache verify --repair` removes them");
        Ok(ExitCode::CorruptCache)
    }
}

/// `pipe cache gc`: the pipeline file given or found here, loaded, and
/// the flags as a request to `cache_admin::gc`; what it removed here and
/// in the remote said.
fn gc(
    arg: &PipelineArg,
    keep_runs: usize,
    grace_secs: u64,
    remote: &crate::cli::RemoteArgs,
) -> Result<ExitCode> {
    let project = here::project()?;
    let pipeline_file = match &arg.file {
        Some(file) => Some(file.clone()),
        None => default_pipeline_file().ok(),
    };
    let loaded = match pipeline_file {
        Some(file) => Some(load(Some(&file), arg)?),
        None => None,
    };
    let request = GcRequest {
        pipeline: loaded.as_ref().map(|(pipeline, dag)| (pipeline, dag)),
        keep_runs,
        grace: std::time::Duration::from_secs(grace_secs),
        remote: remote_commands::choice(arg.file.as_deref(), remote, None),
    };
    let GcOutcome {
        local,
        resume,
        remote,
    } = cache_admin::gc(&project, &request)?;
    outln!(
        "removed {} objects ({}) and {} actions; kept {} objects and {} actions",
        local.objects_removed,
        format_bytes(local.bytes_removed as f64),
        local.actions_removed,
        local.objects_kept,
        local.actions_kept
    );
    if resume.dirs > 0 {
        outln!(
            "removed {} resume state{} ({}) of interrupted stages the pipeline no longer has",
            resume.dirs,
            if resume.dirs == 1 { "" } else { "s" },
            format_bytes(resume.bytes as f64)
        );
    }
    if let Some((url, swept)) = remote? {
        outln!(
            "{url}: removed {} temporary files ({}) that killed pushes left in tmp/",
            swept.files,
            format_bytes(swept.bytes as f64)
        );
    }
    Ok(ExitCode::Ok)
}

/// `pipe stages --check`: each built-in worker against the catalog built
/// into pipe.
fn check_stages(quiet: bool) -> Result<ExitCode> {
    let progress = Progress::new(false, quiet, 0);
    let checks = catalog::check_builtin_workers(&|event| progress.on_event(event))?;
    for check in &checks {
        match &check.outcome {
            Ok(stages) => outln!(
                "{}: {stages} stages, as the catalog built into pipe describes them",
                check.path.display()
            ),
            Err(problem) => outln!("{}: {problem}", check.path.display()),
        }
    }
    if checks.iter().all(catalog::WorkerCheck::agrees) {
        Ok(ExitCode::Ok)
    } else {
        Ok(ExitCode::InvalidInput)
    }
}

/// `pipe stages [NAME]`: the catalog entries `catalog::find_stages`
/// finds, listed, in detail or as JSON.
fn stages(name: Option<&str>, json: bool) -> Result<ExitCode> {
    let entries = catalog::find_stages(&here::project()?, name)?;
    if json {
        let infos: Vec<&pipe_protocol::StageInfo> =
            entries.iter().map(|entry| &entry.info).collect();
        jsonln!(serde_json::to_string_pretty(&infos).unwrap_or_default());
    } else if name.is_none() {
        out!("{}", render::stage_list(&entries));
    } else {
        for entry in &entries {
            out!("{}", render::stage_detail(entry));
        }
    }
    Ok(ExitCode::Ok)
}
