//! The scheduler: runs the selected stages in dependency order, in
//! parallel within `-j` and each stage's resources, reusing cached
//! results, and records the run.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use pipe_cache::remote::{Remote, RemoteConfig, TransferReport};
use pipe_cache::{ActionKey, Cache, CacheError, LinkMode, RemoteError, StatCache};
use pipe_protocol::redact::redact_text;
use serde_json::Value;

use crate::dag::Dag;
use crate::executor::Executor;
use crate::pipeline::{Pipeline, Stage};
use crate::project::{Project, RunLock};
use crate::runs::{GitProbe, RunDb, RunEnd, RunStart, RunStatus, StageRecord, StageStatus};
use crate::{EngineError, Result, UsageError};
use run_so_far::RunSoFar;

mod failure;
mod gpus;
mod process;
mod progress_text;
mod readiness;
mod run_so_far;
mod scheduler;
mod slots;
mod slurm;
mod stage;
mod worker_client;

pub use failure::StageFailure;
pub use gpus::available_gpus;
pub use progress_text::{progress_interval, ProgressText, Reading, PROGRESS_INTERVAL_VAR};

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Stage names to bring up to date (with what they depend on); a base
    /// name selects all its matrix expansions. Empty: every stage.
    pub targets: Vec<String>,
    /// Stages to run even on a cache hit.
    pub force: Vec<String>,
    pub force_all: bool,
    /// Parallel CPU slots.
    pub jobs: usize,
    pub link: Vec<LinkMode>,
    /// The command line, for the run record.
    pub argv: Vec<String>,
    /// The `-S KEY=VALUE` settings the pipeline was loaded with, as given:
    /// recorded as data with the run.
    pub overrides: Vec<String>,
    /// The remote cache behind the local one (`remote::resolve`).
    pub remote: Option<RemoteConfig>,
    /// Where stages that miss the cache run (`executor::resolve`).
    pub executor: Executor,
}

/// Progress, as it happens, for the CLI to render.
#[derive(Debug)]
pub enum Event<'a> {
    /// Another `pipe run` holds this project; waiting for it.
    WaitingForLock {
        holder: Option<u32>,
    },
    RunStarted {
        run_id: i64,
        stages: usize,
    },
    /// A stage's command started (cache misses only).
    StageRunning {
        stage: &'a str,
        log: &'a Path,
    },
    StageFinished {
        stage: &'a str,
        status: StageStatus,
        duration: Duration,
        detail: Option<&'a str>,
        /// The command as it ran, credentials masked, when it ran and
        /// failed (`Stage::shown_command`).
        command: Option<&'a str>,
        log_tail: Option<&'a str>,
        /// The command's full output, when it ran and failed.
        log: Option<&'a Path>,
    },
    /// A built-in stage's progress in one phase (`download`, `tokenize`).
    StageProgress {
        stage: &'a str,
        phase: &'a str,
        done: u64,
        total: Option<u64>,
        unit: &'a str,
        /// A live figure from the stage (`loss 0.4521`), shown beside the bar.
        detail: Option<&'a str>,
    },
    /// A line a built-in stage wants the user to see.
    StageMessage {
        stage: &'a str,
        text: &'a str,
    },
    RunFinished {
        run_id: i64,
        status: RunStatus,
        /// False when every stage was fresh: then no run is recorded, and
        /// `run_id` names none.
        recorded: bool,
    },
    /// In a source checkout, pipe builds its workers (first use, or their
    /// sources changed) while loading the pipeline; cargo's own output
    /// follows on stderr.
    WorkerBuildStarted {
        workers: &'a [&'a str],
        /// libtorch is installed first (`pipe-stage-train`), unless
        /// `LIBTORCH` names one.
        libtorch: bool,
        target_dir: &'a Path,
    },
    WorkerBuildFinished {
        workers: &'a [&'a str],
        succeeded: bool,
        duration: Duration,
    },
}

pub type Observer<'a> = &'a (dyn Fn(Event<'_>) + Sync);

#[derive(Debug)]
pub struct RunSummary {
    pub run_id: i64,
    /// `succeeded`, `failed` or `interrupted`.
    pub status: RunStatus,
    /// Whether the run is in the history: not when every selected stage
    /// was fresh (then `run_id` was given back).
    pub recorded: bool,
    pub stages: Vec<StageRecord>,
    /// What went to and from the remote cache, when there is one.
    pub remote: Option<RemoteSummary>,
}

#[derive(Debug)]
pub struct RemoteSummary {
    pub url: String,
    pub read_only: bool,
    pub transfers: TransferReport,
    /// Whether the run's record reached the remote, or why not.
    pub record: std::result::Result<(), RecordNotPushed>,
}

/// Why a run's record did not reach the remote.
#[derive(Debug, thiserror::Error)]
pub enum RecordNotPushed {
    /// The run neither pulled nor made a result: its record is there.
    #[error("nothing new to record")]
    NothingNew,
    #[error("no run {0}")]
    NoSuchRun(i64),
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// The run database could not give the record.
    #[error(transparent)]
    History(Box<EngineError>),
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
}

/// Opens the remote cache of `config` for the local cache at `cache_dir`;
/// a configuration mistake is the user's to fix (exit 2).
pub fn open_remote(config: &RemoteConfig, cache_dir: &Path) -> Result<Remote> {
    Remote::new(config, cache_dir).map_err(|error| match error {
        CacheError::Remote(remote) if remote.is_configuration() => {
            UsageError::BadRemote(remote).into()
        }
        other => EngineError::Cache(other),
    })
}

/// Resolves stage names given on the command line to indices.
pub fn select_stages(pipeline: &Pipeline, names: &[String]) -> Result<Vec<usize>> {
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (index, stage) in pipeline.stages.iter().enumerate() {
        by_name.entry(stage.name.as_str()).or_default().push(index);
        if stage.base_name != stage.name {
            by_name
                .entry(stage.base_name.as_str())
                .or_default()
                .push(index);
        }
    }
    let mut selected = Vec::new();
    for name in names {
        match by_name.get(name.as_str()) {
            Some(indices) => selected.extend(indices),
            None => {
                let mut known: Vec<&str> = pipeline
                    .stages
                    .iter()
                    .map(|s| s.base_name.as_str())
                    .collect();
                known.dedup();
                let suggestion = crate::spec::suggest::did_you_mean(name, known.iter().copied())
                    .or_else(|| crate::spec::suggest::did_you_mean(name, by_name.keys().copied()));
                return Err(UsageError::UnknownStage {
                    name: name.clone(),
                    file: pipeline.file.clone(),
                    suggestion: suggestion.map(str::to_string),
                    known: known.iter().map(|name| name.to_string()).collect(),
                }
                .into());
            }
        }
    }
    selected.sort_unstable();
    selected.dedup();
    Ok(selected)
}

struct Context<'a> {
    pipeline: &'a Pipeline,
    cache: Cache,
    stat: StatCache,
    link: &'a [LinkMode],
    run_id: i64,
    /// Where `.pipe/` keeps logs, scratch directories and the records of
    /// running stages' process groups.
    project: Project,
    observer: Observer<'a>,
    /// The run's `-j`.
    jobs: usize,
    /// Process groups of running commands, by stage index, for Ctrl-C.
    running: Mutex<HashMap<usize, u32>>,
    /// What a stage reporting on the run is told (`StageInfo::reads_run`);
    /// `None` when no selected stage reads the run, so that other runs
    /// collect nothing.
    run_so_far: Option<RunSoFar>,
    /// The second cache level: pulled from on a local miss, pushed to
    /// after a stage runs.
    remote: Option<Remote>,
    /// The cluster that runs the stages not marked `local`, under
    /// `executor: slurm`.
    cluster: Option<slurm::LazyCluster>,
}

impl Context<'_> {
    /// The cluster, when `stage` runs on it.
    fn cluster_for(&self, stage: &Stage) -> Option<&slurm::LazyCluster> {
        self.cluster.as_ref().filter(|_| !stage.local)
    }
}

struct StageOutcome {
    index: usize,
    record: StageRecord,
    manifest: Option<Value>,
    /// What making the outputs took when they were made: this run for a
    /// stage that ran, the original run for a cache hit.
    compute_ms: Option<u64>,
}

pub fn run(
    pipeline: &Pipeline,
    dag: &Dag,
    options: &RunOptions,
    observer: Observer<'_>,
) -> Result<RunSummary> {
    let project = Project::open(&pipeline.root)?;
    let targets = select_stages(pipeline, &options.targets)?;
    let forced: Vec<usize> = select_stages(pipeline, &options.force)?;
    let lock = RunLock::acquire(&project, |holder| {
        observer(Event::WaitingForLock { holder })
    })?;
    lock.remove_restore_leftovers(&pipeline.root, &pipeline.restore_sites());

    if let Executor::Slurm(settings) = &options.executor {
        let selected = if targets.is_empty() {
            dag.order.clone()
        } else {
            dag.closure(&targets)
        };
        let on_cluster: Vec<&Stage> = selected
            .iter()
            .map(|&index| &pipeline.stages[index])
            .filter(|stage| !stage.local)
            .collect();
        slurm::check_requests(settings, &on_cluster)?;
    }
    check_local_requests(pipeline, dag, &targets, &options.executor)?;
    let root = pipeline.root.clone();
    // The commit is read beside the opening of the stores; the dirty flag
    // is worked out only by a run that will be recorded (below).
    let git = std::thread::spawn(move || GitProbe::start(&root));
    let cache = Cache::open(&project.cache_dir)?;
    let remote = match &options.remote {
        Some(config) => Some(open_remote(config, &project.cache_dir)?),
        None => None,
    };
    let stat = StatCache::open(&project.stat_db())?;
    let mut db = RunDb::open(&project.runs_db())?;
    let git = git.join().ok().flatten();
    let file = pipeline_file_in_project(pipeline);
    let run_id = db.start_run(&RunStart {
        pipeline: &pipeline.name,
        file: file.as_deref(),
        argv: &options.argv,
        overrides: &options.overrides,
        params: &pipeline.params,
        directions: &pipeline.directions,
        git_commit: git.as_ref().map(GitProbe::commit),
    })?;

    let selected = if targets.is_empty() {
        dag.order.clone()
    } else {
        dag.closure(&targets)
    };
    observer(Event::RunStarted {
        run_id,
        stages: selected.len(),
    });
    let run_so_far = RunSoFar::of(pipeline, dag, &selected);
    // The first stage that is not fresh makes this a run to record: the
    // work tree's comparison with HEAD starts then, in the background,
    // beside the stages, and is waited for when the record is finished. A
    // no-op never starts it.
    let observe = |event: Event<'_>| {
        if let (Some(git), true) = (&git, does_something(&event)) {
            git.check_dirty();
        }
        observer(event)
    };
    let observer: Observer<'_> = &observe;
    let cluster = match &options.executor {
        Executor::Local => None,
        Executor::Slurm(settings) => Some({
            slurm::settle_leftover_jobs(&project.state_dir);
            slurm::LazyCluster::new(settings, &pipeline.root, &project.state_dir, run_id)
        }),
    };
    let mut is_forced = vec![options.force_all; pipeline.stages.len()];
    for index in forced {
        is_forced[index] = true;
    }
    let context = Context {
        pipeline,
        cache,
        stat,
        link: &options.link,
        run_id,
        project,
        observer,
        jobs: options.jobs.max(1),
        running: Mutex::new(HashMap::new()),
        run_so_far,
        remote,
        cluster,
    };
    let outcome = scheduler::schedule(
        &context,
        dag,
        &selected,
        &is_forced,
        options.jobs.max(1),
        &mut db,
    );
    tracing::info!(
        "{} files hashed; every other file was answered by the stat cache",
        context.stat.files_hashed()
    );
    // The stat cache only speeds things up: failing to save it loses nothing.
    if let Err(error) = context.stat.flush() {
        tracing::warn!("could not save the stat cache: {error}");
    }
    if let Some(cluster) = &context.cluster {
        cluster.finish();
    }
    // Pushes still in flight finish before the run is called done.
    let transfers = context.remote.as_ref().map(Remote::finish);
    let (records, status) = outcome?;
    // Nothing ran, was restored, failed or was skipped: the run changed
    // nothing and is not history (`pipe runs`, `pipe diff` and `pipe show
    // last` never see it), and it does not wait for the dirty flag.
    let recorded = !nothing_done(status, &records);
    if recorded {
        let git_dirty = git.as_ref().and_then(|git| git.finish().dirty);
        db.finish_run(run_id, &RunEnd { status, git_dirty })?;
    } else {
        db.discard_run(run_id)?;
    }
    let remote = match (context.remote.as_ref(), transfers) {
        (Some(remote), Some(transfers)) => {
            // A run that neither pulled nor made a result is a rerun of one
            // already recorded: it leaves the remote alone, so a no-op run
            // costs no request at all.
            let touched = transfers.results_pulled
                + transfers.results_pushed
                + transfers.results_already_present
                + transfers.results_not_pushed
                > 0;
            let record = if touched && recorded {
                push_run_record(remote, &db, run_id)
            } else {
                Err(RecordNotPushed::NothingNew)
            };
            Some(RemoteSummary {
                url: remote.url().to_string(),
                read_only: remote.read_only(),
                transfers,
                record,
            })
        }
        _ => None,
    };
    observer(Event::RunFinished {
        run_id,
        status,
        recorded,
    });
    Ok(RunSummary {
        run_id,
        status,
        recorded,
        stages: records,
        remote,
    })
}

/// Whether a run did nothing at all: it succeeded and every stage in it
/// was fresh. Such a run is not recorded, as DVC records none: a rerun
/// with nothing changed must not push the run it repeats out of `pipe diff`.
/// The pipeline file relative to the project root, as the run record
/// keeps it; `None` when it lies outside the project (`-f /elsewhere`).
fn pipeline_file_in_project(pipeline: &Pipeline) -> Option<String> {
    let file = std::path::absolute(&pipeline.file).ok()?;
    let relative = match file.strip_prefix(&pipeline.root) {
        Ok(relative) => relative.to_path_buf(),
        // One of the two reached through a symbolic link.
        Err(_) => {
            let file = file.canonicalize().ok()?;
            let root = pipeline.root.canonicalize().ok()?;
            file.strip_prefix(root).ok()?.to_path_buf()
        }
    };
    relative.to_str().map(str::to_string)
}

fn nothing_done(status: RunStatus, records: &[StageRecord]) -> bool {
    status == RunStatus::Succeeded
        && records
            .iter()
            .all(|record| record.status == StageStatus::Fresh)
}

/// Whether `event` shows the run doing something: a stage that runs, or
/// ends other than fresh.
fn does_something(event: &Event<'_>) -> bool {
    match event {
        Event::StageRunning { .. } => true,
        Event::StageFinished { status, .. } => *status != StageStatus::Fresh,
        _ => false,
    }
}

/// Sends run `run_id`'s record to the remote, so that `pipe compare` on
/// another machine shows it.
pub fn push_run_record(
    remote: &Remote,
    db: &RunDb,
    run_id: i64,
) -> std::result::Result<(), RecordNotPushed> {
    if remote.read_only() {
        return Err(RemoteError::ReadOnly.into());
    }
    let export = db
        .export_run(run_id)
        .map_err(|error| RecordNotPushed::History(Box::new(error)))?
        .ok_or(RecordNotPushed::NoSuchRun(run_id))?;
    let json = serde_json::to_vec_pretty(&export)?;
    let uid = export.run.uid.as_deref().unwrap_or_default();
    Ok(remote.put_run_record(export.run.git_commit.as_deref(), uid, json)?)
}

fn failed_record(
    stage: &Stage,
    key: Option<&ActionKey>,
    failure: StageFailure,
    duration_ms: u64,
) -> StageRecord {
    StageRecord {
        key: key.copied(),
        duration_ms,
        detail: Some(redact_text(&failure.to_string()).into_owned()),
        ..StageRecord::new(&stage.name, stage.identity(), StageStatus::Failed)
    }
}

/// A stage that runs on this machine cannot span nodes: refused, at its
/// place in the pipeline, before anything runs.
fn check_local_requests(
    pipeline: &Pipeline,
    dag: &Dag,
    targets: &[usize],
    executor: &Executor,
) -> Result<()> {
    let selected = if targets.is_empty() {
        dag.order.clone()
    } else {
        dag.closure(targets)
    };
    let on_slurm = matches!(executor, Executor::Slurm(_));
    let diagnostics: Vec<crate::diagnostic::Diagnostic> = selected
        .iter()
        .map(|&index| &pipeline.stages[index])
        .filter(|stage| stage.resources.nodes > 1 && (!on_slurm || stage.local))
        .map(|stage| {
            crate::diagnostic::Diagnostic::new(
                "nodes-need-slurm",
                format!(
                    "stage `{}` asks for {} nodes, but it runs on this machine",
                    stage.name, stage.resources.nodes
                ),
            )
            .at(stage.location.clone())
            .with_hint(if stage.local {
                "a `local: true` stage never goes to Slurm; drop `local`, or ask for `resources.nodes: 1`"
            } else {
                "run it on Slurm (`pipe run --executor slurm`, or `executor: slurm` in the pipeline), or ask for `resources.nodes: 1`"
            })
        })
        .collect();
    if diagnostics.is_empty() {
        Ok(())
    } else {
        Err(EngineError::Spec(diagnostics))
    }
}
