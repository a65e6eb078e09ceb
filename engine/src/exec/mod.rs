//! The scheduler: runs the selected stages in dependency order, in
//! parallel within `-j` and each stage's resources, reusing cached
//! results, and records the run.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::path::Path;
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pipe_cache::remote::{Remote, RemoteConfig, TransferReport};
use pipe_cache::{ActionKey, Cache, CacheError, LinkMode, StatCache};
use pipe_protocol::redact::{redact_text, redacted_json};
use pipe_protocol::{RunContext, RunStage};
use serde_json::Value;

use crate::dag::Dag;
use crate::executor::Executor;
use crate::pipeline::{Pipeline, Stage, StageKind};
use crate::project::{Project, RunLock};
use crate::runs::{self, RunDb, RunStart, RunStatus, StageRecord, StageStatus};
use crate::{interrupt, EngineError, Result};

mod failure;
mod gpus;
mod process;
mod slurm;
mod stage;
mod worker_client;

pub use failure::StageFailure;
pub use gpus::available_gpus;
use stage::{execute_stage, log_name, read_tail};

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
    },
}

pub type Observer<'a> = &'a (dyn Fn(Event<'_>) + Sync);

#[derive(Debug)]
pub struct RunSummary {
    pub run_id: i64,
    /// `succeeded`, `failed` or `interrupted`.
    pub status: RunStatus,
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
    pub record: std::result::Result<(), String>,
}

/// Opens the remote cache of `config` for the local cache at `cache_dir`;
/// a configuration mistake is the user's to fix (exit 2).
pub fn open_remote(config: &RemoteConfig, cache_dir: &Path) -> Result<Remote> {
    Remote::new(config, cache_dir).map_err(|error| match error {
        CacheError::RemoteConfig(message) => EngineError::usage(
            message,
            "see docs/remote-cache.md for the URL forms and settings",
        ),
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
                return Err(EngineError::usage(
                    format!("no stage named `{name}` in `{}`", pipeline.file.display()),
                    format!("stages: {}", known.join(", ")),
                ));
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
    /// Where each stage's job ran, by stage index, until its record is made.
    placements: Mutex<HashMap<usize, slurm::Placement>>,
}

impl Context<'_> {
    /// The cluster, when `stage` runs on it.
    fn cluster_for(&self, stage: &Stage) -> Option<&slurm::LazyCluster> {
        self.cluster.as_ref().filter(|_| !stage.local)
    }
}

/// The run as far as it has gone, for the stages that report on it.
struct RunSoFar {
    /// The run, its `stages` empty.
    run: RunContext,
    /// The stages finished so far, by index: a report lists them in the
    /// pipeline's order, not in the order parallel stages happened to end.
    finished: Mutex<BTreeMap<usize, RunStage>>,
}

impl RunSoFar {
    fn finished(&self, index: usize, stage: RunStage) {
        self.finished
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(index, stage);
    }

    fn context(&self) -> RunContext {
        let stages = self
            .finished
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .values()
            .cloned()
            .collect();
        RunContext {
            stages,
            ..self.run.clone()
        }
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
    let git = std::thread::spawn(move || runs::git_state(&root));
    let cache = Cache::open(&project.cache_dir)?;
    let remote = match &options.remote {
        Some(config) => Some(open_remote(config, &project.cache_dir)?),
        None => None,
    };
    let stat = StatCache::open(&project.stat_db())?;
    let mut db = RunDb::open(&project.runs_db())?;
    let git = git.join().ok().flatten();
    let started_ms = runs::now_ms();
    let git_commit = git.as_ref().map(|git| git.commit.clone());
    let git_dirty = git.as_ref().map(|git| git.dirty);
    let run_id = db.start_run(&RunStart {
        pipeline: &pipeline.name,
        argv: &options.argv,
        params: &pipeline.params,
        directions: &pipeline.directions,
        git,
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
    let run_so_far = selected
        .iter()
        .any(|&index| pipeline.stages[index].reads_run())
        .then(|| RunSoFar {
            run: RunContext {
                pipeline: pipeline.name.clone(),
                run_id,
                started_ms,
                git_commit,
                git_dirty,
                params: redacted_json(&pipeline.params),
                stages: Vec::new(),
            },
            finished: Mutex::new(BTreeMap::new()),
        });
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
        placements: Mutex::new(HashMap::new()),
    };
    let outcome = schedule(
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
    db.finish_run(run_id, status)?;
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
            let record = if touched {
                push_run_record(remote, &db, run_id)
            } else {
                Err("nothing new to record".to_string())
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
    observer(Event::RunFinished { run_id, status });
    Ok(RunSummary {
        run_id,
        status,
        stages: records,
        remote,
    })
}

/// Sends run `run_id`'s record to the remote, so that `pipe compare` on
/// another machine shows it.
pub fn push_run_record(
    remote: &Remote,
    db: &RunDb,
    run_id: i64,
) -> std::result::Result<(), String> {
    if remote.read_only() {
        return Err("the remote is read-only".to_string());
    }
    let export = db
        .export_run(run_id)
        .map_err(|error| error.to_string())?
        .ok_or_else(|| format!("no run {run_id}"))?;
    let json = serde_json::to_vec_pretty(&export).map_err(|error| error.to_string())?;
    let uid = export.run.uid.as_deref().unwrap_or_default();
    remote.put_run_record(export.run.git_commit.as_deref(), uid, json)
}

fn schedule(
    context: &Context<'_>,
    dag: &Dag,
    selected: &[usize],
    is_forced: &[bool],
    jobs: usize,
    db: &mut RunDb,
) -> Result<(Vec<StageRecord>, RunStatus)> {
    let stages = &context.pipeline.stages;
    let mut in_selection = vec![false; stages.len()];
    for &index in selected {
        in_selection[index] = true;
    }
    let mut waiting_on: Vec<usize> = (0..stages.len())
        .map(|index| {
            dag.upstream[index]
                .iter()
                .filter(|&&up| in_selection[up])
                .count()
        })
        .collect();
    let mut ready: BinaryHeap<Reverse<usize>> = selected
        .iter()
        .copied()
        .filter(|&index| waiting_on[index] == 0)
        .map(Reverse)
        .collect();
    // A stage on the cluster gets its GPUs from Slurm, not from this machine.
    let runs_here = |index: usize| context.cluster_for(&stages[index]).is_none();
    let gpu_pool = if selected
        .iter()
        .any(|&index| runs_here(index) && stages[index].resources.gpus > 0)
    {
        available_gpus()
    } else {
        Vec::new()
    };
    let mut free_gpus: Vec<String> = gpu_pool.clone();
    let mut free_slots = jobs;
    let mut held: HashMap<usize, (usize, Vec<String>)> = HashMap::new();
    let mut settled = vec![false; stages.len()];
    let mut records: Vec<StageRecord> = Vec::with_capacity(selected.len());
    let mut unsaved: Vec<(StageRecord, Option<Value>)> = Vec::new();
    let mut failed = false;
    let mut interrupted = false;
    let mut killed_at: Option<Instant> = None;

    let (job_sender, job_receiver) = mpsc::channel::<(usize, bool, Vec<String>)>();
    let job_receiver = Mutex::new(job_receiver);
    std::thread::scope(|scope| -> Result<()> {
        let (sender, receiver) = mpsc::channel::<StageOutcome>();
        // A fixed pool of `jobs` workers: slot accounting never lets more
        // stages run at once, and a no-op rerun of many stages should not
        // pay for a thread per stage.
        // Moved in, so it is dropped when this closure returns and the
        // workers see the channel close before the scope joins them.
        let job_sender = job_sender;
        for _ in 0..jobs.min(selected.len()) {
            let sender = sender.clone();
            let job_receiver = &job_receiver;
            scope.spawn(move || loop {
                let job = job_receiver
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .recv();
                let Ok((index, forced, assigned)) = job else {
                    break;
                };
                let outcome = execute_stage(context, index, forced, &assigned);
                if sender.send(outcome).is_err() {
                    break;
                }
            });
        }
        let mut remaining = selected.len();
        while remaining > 0 {
            if interrupt::requested() && !interrupted {
                interrupted = true;
                ready.clear();
                terminate_running(context, libc::SIGTERM);
                if let Some(cluster) = &context.cluster {
                    cluster.cancel_all();
                }
                killed_at = Some(Instant::now());
            }
            if interrupted && held.is_empty() {
                break;
            }
            if let Some(at) = killed_at {
                if at.elapsed() > Duration::from_secs(5) {
                    terminate_running(context, libc::SIGKILL);
                    killed_at = None;
                }
            }
            // Launch every ready stage that fits, in declaration order.
            let mut deferred = Vec::new();
            while let Some(Reverse(index)) = ready.pop() {
                let stage = &stages[index];
                let here = runs_here(index);
                let gpus = if here {
                    stage.resources.gpus as usize
                } else {
                    0
                };
                if gpus > gpu_pool.len() {
                    let detail = StageFailure::NotEnoughGpus {
                        needed: gpus,
                        available: gpu_pool.len(),
                    };
                    sender
                        .send(StageOutcome {
                            index,
                            record: failed_record(stage, None, detail, 0),
                            manifest: None,
                            compute_ms: None,
                        })
                        .ok();
                    continue;
                }
                // A stage wider than -j still runs, alone; one on the
                // cluster costs this machine a waiting thread.
                let slots = if here {
                    (stage.resources.cpus as usize).clamp(1, jobs)
                } else {
                    1
                };
                if slots > free_slots || gpus > free_gpus.len() {
                    deferred.push(Reverse(index));
                    continue;
                }
                free_slots -= slots;
                let assigned: Vec<String> = free_gpus.drain(..gpus).collect();
                held.insert(index, (slots, assigned.clone()));
                job_sender
                    .send((index, is_forced[index], assigned))
                    .map_err(|_| EngineError::Internal("stage workers vanished".into()))?;
            }
            ready.extend(deferred);

            let mut outcome = match receiver.recv_timeout(Duration::from_millis(100)) {
                Ok(outcome) => outcome,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(EngineError::Internal("stage threads vanished".into()))
                }
            };
            if let Some((slots, gpus)) = held.remove(&outcome.index) {
                free_slots += slots;
                free_gpus.extend(gpus);
            }
            remaining -= 1;
            settled[outcome.index] = true;
            let placement = context
                .placements
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .remove(&outcome.index);
            if let Some(placement) = placement {
                outcome.record.job = Some(placement.job_id);
                outcome.record.node = placement.node;
            }
            let status = outcome.record.status;
            report_finished(context, &outcome.record);
            if let Some(run_so_far) = &context.run_so_far {
                run_so_far.finished(
                    outcome.index,
                    run_stage(
                        &stages[outcome.index],
                        &outcome.record,
                        outcome.compute_ms,
                        &context.pipeline.root,
                    ),
                );
            }
            if status.succeeded() {
                for &down in &dag.downstream[outcome.index] {
                    if in_selection[down] {
                        waiting_on[down] -= 1;
                        if waiting_on[down] == 0 && !interrupted {
                            ready.push(Reverse(down));
                        }
                    }
                }
            } else {
                failed = true;
                // Everything downstream is skipped; independent branches go on.
                let mut stack = vec![outcome.index];
                while let Some(index) = stack.pop() {
                    for &down in &dag.downstream[index] {
                        if in_selection[down] && !settled[down] {
                            settled[down] = true;
                            remaining -= 1;
                            let upstream = &stages[index].name;
                            let record = StageRecord {
                                stage: stages[down].name.clone(),
                                key: None,
                                status: StageStatus::Skipped,
                                duration_ms: 0,
                                outputs: BTreeMap::new(),
                                metrics: BTreeMap::new(),
                                detail: Some(format!(
                                    "upstream stage `{upstream}` did not succeed"
                                )),
                                job: None,
                                node: None,
                            };
                            report_finished(context, &record);
                            records.push(record.clone());
                            unsaved.push((record, None));
                            stack.push(down);
                        }
                    }
                }
            }
            let ran = status == StageStatus::Ran;
            records.push(outcome.record.clone());
            unsaved.push((outcome.record, outcome.manifest));
            // Persist after real work so a killed pipe keeps its history;
            // cheap cache checks are batched to keep no-op runs fast.
            if ran {
                save(db, context.run_id, &mut unsaved)?;
            }
        }
        Ok(())
    })?;
    save(db, context.run_id, &mut unsaved)?;
    // A signal may arrive after the last stage was launched: the stage sees
    // it and stops, and the loop ends before its next check of the flag.
    let status = if interrupted || interrupt::requested() {
        RunStatus::Interrupted
    } else if failed {
        RunStatus::Failed
    } else {
        RunStatus::Succeeded
    };
    Ok((records, status))
}

/// A finished stage as a report reads it: its outputs by name, absolute.
fn run_stage(
    stage: &Stage,
    record: &StageRecord,
    compute_ms: Option<u64>,
    root: &Path,
) -> RunStage {
    let uses = match &stage.kind {
        StageKind::Worker(worker) => Some(format!("{}@{}", worker.uses, worker.version)),
        _ => None,
    };
    RunStage {
        name: stage.name.clone(),
        base_name: stage.base_name.clone(),
        matrix: stage
            .matrix
            .iter()
            .map(|(key, value)| (key.to_string(), value.clone()))
            .collect(),
        uses,
        status: record.status.as_str().to_string(),
        duration_ms: record.duration_ms,
        compute_ms,
        outputs: stage
            .outs
            .iter()
            .map(|out| (out.name.clone(), root.join(&out.path)))
            .collect(),
        metrics: record.metrics.clone(),
    }
}

fn save(
    db: &mut RunDb,
    run_id: i64,
    unsaved: &mut Vec<(StageRecord, Option<Value>)>,
) -> Result<()> {
    if unsaved.is_empty() {
        return Ok(());
    }
    let batch: Vec<(StageRecord, Option<&Value>)> = unsaved
        .iter()
        .map(|(record, manifest)| (record.clone(), manifest.as_ref()))
        .collect();
    db.record_stages(run_id, &batch)?;
    unsaved.clear();
    Ok(())
}

fn report_finished(context: &Context<'_>, record: &StageRecord) {
    let log = context
        .project
        .log_dir(context.run_id)
        .join(log_name(&record.stage));
    let failed_with_log = record.status == StageStatus::Failed && log.is_file();
    let log_tail = failed_with_log.then(|| read_tail(&log, 20)).flatten();
    (context.observer)(Event::StageFinished {
        stage: &record.stage,
        status: record.status,
        duration: Duration::from_millis(record.duration_ms),
        detail: record.detail.as_deref(),
        log_tail: log_tail.as_deref(),
        log: failed_with_log.then_some(log.as_path()),
    });
}

fn terminate_running(context: &Context<'_>, signal: libc::c_int) {
    let running = context
        .running
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for &group in running.values() {
        // SAFETY: signals the process group we created for the stage.
        unsafe {
            libc::kill(-(group as libc::pid_t), signal);
        }
    }
}

fn failed_record(
    stage: &Stage,
    key: Option<&ActionKey>,
    failure: StageFailure,
    duration_ms: u64,
) -> StageRecord {
    StageRecord {
        stage: stage.name.clone(),
        key: key.map(|key| key.to_hex()),
        status: StageStatus::Failed,
        duration_ms,
        outputs: BTreeMap::new(),
        metrics: BTreeMap::new(),
        detail: Some(redact_text(&failure.to_string()).into_owned()),
        job: None,
        node: None,
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
