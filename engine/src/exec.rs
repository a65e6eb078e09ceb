//! The scheduler: runs the selected stages in dependency order, in
//! parallel within `-j` and each stage's resources, reusing cached
//! results, and records the run.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pipe_cache::{ActionKey, ActionResult, Artifact, Cache, CacheError, LinkMode, StatCache};
use pipe_protocol::redact::redact_text;
use serde_json::Value;

use crate::dag::Dag;
use crate::groups::{self, GroupRecord};
use crate::key;
use crate::pipeline::{Pipeline, Stage, StageKind, WorkerStage};
use crate::project::partial_output_dir;
use crate::project::{Project, RunLock};
use crate::runs::{self, RunDb, RunStart, StageRecord, StageStatus};
use crate::spec::paths::check_output_location;
use crate::workspace::{declared_outputs, hash_deps, outputs_differing, remove_path};
use crate::{interrupt, EngineError, Result};

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
        status: &'a str,
    },
}

pub type Observer<'a> = &'a (dyn Fn(Event<'_>) + Sync);

#[derive(Debug)]
pub struct RunSummary {
    pub run_id: i64,
    /// `succeeded`, `failed` or `interrupted`.
    pub status: String,
    pub stages: Vec<StageRecord>,
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
}

struct StageOutcome {
    index: usize,
    record: StageRecord,
    manifest: Option<Value>,
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
    let _lock = RunLock::acquire(&project, |holder| {
        observer(Event::WaitingForLock { holder })
    })?;

    let root = pipeline.root.clone();
    let git = std::thread::spawn(move || runs::git_state(&root));
    let cache = Cache::open(&project.cache_dir)?;
    let stat = StatCache::open(&project.stat_db())?;
    let mut db = RunDb::open(&project.runs_db())?;
    let git = git.join().ok().flatten();
    let run_id = db.start_run(&RunStart {
        pipeline: &pipeline.name,
        argv: &options.argv,
        params: &pipeline.params,
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
        project: project.clone(),
        observer,
        jobs: options.jobs.max(1),
        running: Mutex::new(HashMap::new()),
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
    let (records, status) = outcome?;
    db.finish_run(run_id, status)?;
    observer(Event::RunFinished { run_id, status });
    Ok(RunSummary {
        run_id,
        status: status.to_string(),
        stages: records,
    })
}

fn schedule(
    context: &Context<'_>,
    dag: &Dag,
    selected: &[usize],
    is_forced: &[bool],
    jobs: usize,
    db: &mut RunDb,
) -> Result<(Vec<StageRecord>, &'static str)> {
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
    let gpu_pool = if selected
        .iter()
        .any(|&index| stages[index].resources.gpus > 0)
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
                let gpus = stage.resources.gpus as usize;
                if gpus > gpu_pool.len() {
                    let detail = format!(
                        "stage needs {gpus} GPU(s) but {} are available; set PIPE_GPUS or lower `resources.gpus`",
                        gpu_pool.len()
                    );
                    sender
                        .send(StageOutcome {
                            index,
                            record: failed_record(stage, None, detail, 0),
                            manifest: None,
                        })
                        .ok();
                    continue;
                }
                // A stage wider than -j still runs, alone.
                let slots = (stage.resources.cpus as usize).clamp(1, jobs);
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

            let outcome = match receiver.recv_timeout(Duration::from_millis(100)) {
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
            let status = outcome.record.status;
            report_finished(context, &outcome.record);
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
        "interrupted"
    } else if failed {
        "failed"
    } else {
        "succeeded"
    };
    Ok((records, status))
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
    detail: String,
    duration_ms: u64,
) -> StageRecord {
    StageRecord {
        stage: stage.name.clone(),
        key: key.map(|key| key.to_hex()),
        status: StageStatus::Failed,
        duration_ms,
        outputs: BTreeMap::new(),
        metrics: BTreeMap::new(),
        detail: Some(redact_text(&detail).into_owned()),
    }
}

fn execute_stage(
    context: &Context<'_>,
    index: usize,
    forced: bool,
    gpus: &[String],
) -> StageOutcome {
    let started = Instant::now();
    let stage = &context.pipeline.stages[index];
    let root = &context.pipeline.root;
    let elapsed_ms = || started.elapsed().as_millis() as u64;
    let dep_digests = match hash_deps(root, stage, &context.cache, &context.stat) {
        Ok(digests) => digests,
        Err(problem) => {
            let detail = match (
                &problem.missing,
                stage.deps.iter().find(|d| d.name == problem.dep),
            ) {
                (true, Some(dep)) if dep.producer.is_none() => {
                    format!(
                        "{}; create it, or declare the stage that writes it",
                        problem.message
                    )
                }
                _ => problem.message,
            };
            return StageOutcome {
                index,
                record: failed_record(stage, None, detail, elapsed_ms()),
                manifest: None,
            };
        }
    };
    let nonce = stage
        .always_run
        .then(|| format!("run {} {}", context.run_id, runs::now_ms()));
    let manifest = key::manifest(stage, &dep_digests, nonce.as_deref());
    let key = key::key_of(&manifest);

    // A forced stage, or one whose cached result turned out unusable, may
    // be rerun because an object is corrupt: its store must not trust
    // objects by their size.
    let mut rehash_existing = forced;
    if !forced {
        if let Some(result) = context.cache.get_action(&key) {
            match reuse_cached(context, &result) {
                Ok(status) => {
                    let record = StageRecord {
                        stage: stage.name.clone(),
                        key: Some(key.to_hex()),
                        status,
                        duration_ms: elapsed_ms(),
                        outputs: result.outputs.clone(),
                        metrics: result.metrics.clone(),
                        detail: None,
                    };
                    return StageOutcome {
                        index,
                        record,
                        manifest: Some(manifest),
                    };
                }
                Err(error) => {
                    tracing::warn!(
                        "stage `{}`: cached result unusable ({error}); running it again",
                        stage.name
                    );
                    rehash_existing = true;
                }
            }
        }
    }

    match run_command(context, index, stage, gpus) {
        Ok(()) => {}
        Err(detail) => {
            return StageOutcome {
                index,
                record: failed_record(stage, Some(&key), detail, elapsed_ms()),
                manifest: Some(manifest),
            }
        }
    }
    match store_outputs(
        context,
        stage,
        key,
        &manifest,
        elapsed_ms(),
        rehash_existing,
    ) {
        Ok(result) => {
            let record = StageRecord {
                stage: stage.name.clone(),
                key: Some(key.to_hex()),
                status: StageStatus::Ran,
                duration_ms: elapsed_ms(),
                outputs: result.outputs,
                metrics: result.metrics,
                detail: None,
            };
            StageOutcome {
                index,
                record,
                manifest: Some(manifest),
            }
        }
        Err(detail) => StageOutcome {
            index,
            record: failed_record(stage, Some(&key), detail, elapsed_ms()),
            manifest: Some(manifest),
        },
    }
}

/// Fresh when the workspace already holds the outputs, else restores them.
fn reuse_cached(
    context: &Context<'_>,
    result: &ActionResult,
) -> std::result::Result<StageStatus, CacheError> {
    let root = &context.pipeline.root;
    let differing = outputs_differing(root, result, &context.cache, &context.stat);
    if differing.is_empty() {
        return Ok(StageStatus::Fresh);
    }
    for path in differing {
        let artifact = &result.outputs[path];
        let destination = root.join(path);
        check_output_location(root, path)
            .map_err(|message| CacheError::io(&destination, std::io::Error::other(message)))?;
        if let Some(parent) = destination.parent() {
            std::fs::create_dir_all(parent).map_err(|e| CacheError::io(parent, e))?;
        }
        context
            .cache
            .restore(artifact, &destination, context.link, &context.stat)?;
    }
    Ok(StageStatus::Restored)
}

fn log_name(stage: &str) -> String {
    // Matrix names carry `@`, `=` and `,`, which are fine in file names; `/` is not.
    format!("{}.log", stage.replace('/', "_"))
}

fn run_command(
    context: &Context<'_>,
    index: usize,
    stage: &Stage,
    gpus: &[String],
) -> std::result::Result<(), String> {
    let root = &context.pipeline.root;
    // Stale outputs must not survive into a new result, and restored ones
    // may be read-only links into the cache that a command must not write through.
    for out in declared_outputs(stage) {
        check_output_location(root, &out.path)?;
        let path = root.join(&out.path);
        remove_path(&path).map_err(|e| format!("cannot remove old output `{}`: {e}", out.path))?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create `{}`: {e}", parent.display()))?;
        }
    }
    std::fs::create_dir_all(context.project.log_dir(context.run_id)).map_err(|e| {
        format!(
            "cannot create log directory `{}`: {e}",
            context.project.log_dir(context.run_id).display()
        )
    })?;
    let log_path = context
        .project
        .log_dir(context.run_id)
        .join(log_name(&stage.name));
    let log = File::create(&log_path)
        .map_err(|e| format!("cannot create log `{}`: {e}", log_path.display()))?;
    match &stage.kind {
        StageKind::Command { .. } | StageKind::Argv { .. } => {
            let mut process = command_process(&stage.kind, root)?;
            let log_for_stderr = log
                .try_clone()
                .map_err(|e| format!("cannot open log: {e}"))?;
            process.stdout(log).stderr(log_for_stderr);
            let status =
                spawn_and_wait(context, index, stage, gpus, process, &log_path, |_| Ok(()))?;
            check_exit(status, "command")
        }
        StageKind::Worker(worker) => {
            run_worker(context, index, stage, worker, gpus, log, &log_path)
        }
    }
}

/// `run: "..."` runs under bash; `run: [...]` runs its program directly,
/// a relative program path (`./train.sh`) taken from the project root.
fn command_process(kind: &StageKind, root: &Path) -> std::result::Result<Command, String> {
    match kind {
        StageKind::Argv { argv } if !argv.is_empty() => {
            let program = Path::new(&argv[0]);
            let mut process = if program.is_relative() && argv[0].contains('/') {
                Command::new(root.join(program))
            } else {
                Command::new(program)
            };
            process.args(&argv[1..]);
            Ok(process)
        }
        StageKind::Command { command } => {
            let mut shell = Command::new("bash");
            shell.args(["-e", "-o", "pipefail", "-c", command]);
            Ok(shell)
        }
        _ => Err("the stage has no command to run".to_string()),
    }
}

/// Starts `command` for `stage` in its own process group with the stage's
/// environment, lets `read_output` consume the child (its stdout, if piped),
/// and waits for it and for every process it left in its group.
fn spawn_and_wait(
    context: &Context<'_>,
    index: usize,
    stage: &Stage,
    gpus: &[String],
    mut command: Command,
    log_path: &Path,
    read_output: impl FnOnce(&mut std::process::Child) -> std::result::Result<(), String>,
) -> std::result::Result<std::process::ExitStatus, String> {
    command
        .current_dir(&context.pipeline.root)
        .stdin(Stdio::null())
        .env("PIPE_STAGE", &stage.name)
        .env("PIPE_RUN_ID", context.run_id.to_string())
        .process_group(0);
    for (name, value) in &stage.env {
        command.env(name, value);
    }
    if !gpus.is_empty() {
        command.env("CUDA_VISIBLE_DEVICES", gpus.join(","));
    }
    let record = GroupRecord::for_stage(&context.project.state_dir, index);
    record
        .prepare()
        .map_err(|e| format!("cannot record the stage's process group in `.pipe/groups/`: {e}"))?;
    let record_in_child = record.clone();
    let pipe_pid = std::process::id();
    // SAFETY: the closure runs between fork and exec and makes only
    // async-signal-safe calls: prctl, getppid, and the record's raw I/O.
    unsafe {
        command.pre_exec(move || {
            // The stage's first process dies with pipe, however pipe dies
            // (kill -9, the OOM killer). The signal follows the thread that
            // forked, not the process: this thread waits for the child
            // below, so it lives as long as the stage.
            #[cfg(target_os = "linux")]
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // pipe may have died before the signal was armed.
            if libc::getppid() as u32 != pipe_pid {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            // Processes the stage starts do not die with pipe; the record
            // lets the next run find and stop them.
            record_in_child.write_from_child()
        });
    }
    (context.observer)(Event::StageRunning {
        stage: &stage.name,
        log: log_path,
    });
    let program = command.get_program().to_string_lossy().to_string();
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start `{program}`: {e}"))?;
    let group = child.id();
    {
        let mut running = context
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        running.insert(index, group);
    }
    if interrupt::requested() {
        // SAFETY: the group was just created by this spawn.
        unsafe {
            libc::kill(-(group as libc::pid_t), libc::SIGTERM);
        }
    }
    let read = read_output(&mut child);
    let status = child.wait();
    let leftovers = stop_leftovers(stage, group, log_path);
    context
        .running
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .remove(&index);
    leftovers?;
    record.remove();
    let status = status.map_err(|e| format!("waiting for `{program}` failed: {e}"))?;
    if interrupt::requested() {
        return Err("interrupted".to_string());
    }
    read?;
    Ok(status)
}

/// How long a process that a stage left behind gets to exit after SIGTERM.
const LEFTOVER_GRACE: Duration = Duration::from_secs(1);

/// A stage's outputs are stored only once none of its processes can still
/// write them: whatever its command left running in its group (`cmd &`
/// without `wait`) is stopped, and the user is told.
fn stop_leftovers(stage: &Stage, group: u32, log_path: &Path) -> std::result::Result<(), String> {
    let group = group as libc::pid_t;
    match groups::stop(group, libc::SIGTERM, LEFTOVER_GRACE) {
        Ok(found) if found.is_empty() || interrupt::requested() => Ok(()),
        Ok(found) => {
            let count = found.len();
            let message = format!(
                "the command left {count} process{} running after it exited (pid {}); \
                 pipe stopped {} before storing the outputs. \
                 Wait for background jobs in the command (`wait`)",
                if count == 1 { "" } else { "es" },
                found.iter().map(i32::to_string).collect::<Vec<_>>().join(", "),
                if count == 1 { "it" } else { "them" },
            );
            tracing::warn!("stage `{}`: {message}", stage.name);
            if let Ok(mut log) = std::fs::OpenOptions::new().append(true).open(log_path) {
                use std::io::Write;
                let _ = writeln!(log, "pipe: {message}");
            }
            Ok(())
        }
        Err(survivors) => Err(format!(
            "the command left processes running that survive SIGKILL (pid {survivors:?}); nothing was cached"
        )),
    }
}

fn check_exit(status: std::process::ExitStatus, what: &str) -> std::result::Result<(), String> {
    if let Some(code) = status.code() {
        if code != 0 {
            return Err(format!("{what} exited with code {code}"));
        }
    } else if let Some(signal) = status.signal() {
        return Err(format!("{what} was killed by signal {signal}"));
    }
    Ok(())
}

/// Runs a built-in stage through its worker: writes the invocation, turns
/// the worker's events into progress, and moves the output directory into
/// place only when the worker reports success.
fn run_worker(
    context: &Context<'_>,
    index: usize,
    stage: &Stage,
    worker_stage: &WorkerStage,
    gpus: &[String],
    mut log: File,
    log_path: &Path,
) -> std::result::Result<(), String> {
    let root = &context.pipeline.root;
    let final_dir = root.join(&worker_stage.output_dir);
    let partial_dir = partial_output_dir(root, &worker_stage.output_dir);
    let scratch_dir =
        context
            .project
            .scratch_dir(context.run_id, &context.pipeline.name, &stage.name);
    for directory in [&final_dir, &partial_dir, &scratch_dir] {
        remove_path(directory)
            .map_err(|e| format!("cannot clear `{}`: {e}", directory.display()))?;
    }
    std::fs::create_dir_all(&scratch_dir)
        .map_err(|e| format!("cannot create `{}`: {e}", scratch_dir.display()))?;

    let invocation = pipe_protocol::Invocation {
        protocol: pipe_protocol::PROTOCOL_VERSION,
        stage: stage.name.clone(),
        uses: worker_stage.uses.clone(),
        version: worker_stage.version,
        // What the key hashed, `path` params made absolute.
        params: worker_stage.invocation_params(root),
        output_dir: partial_dir.clone(),
        scratch_dir: scratch_dir.clone(),
        project_root: root.clone(),
        devices: gpus.to_vec(),
        // Built-in stages parallelise inside (tokenize, training): they may
        // use every slot of the run unless the pipeline sets their cpus.
        threads: if stage.resources.cpus > 1 {
            stage.resources.cpus as usize
        } else {
            context.jobs
        },
    };
    // The invocation holds the params unmasked (the worker needs the real
    // URL), so it lives only as long as the stage, readable by us alone,
    // in the scratch directory deleted below; never among the logs.
    let invocation_path = scratch_dir.join("invocation.json");
    let text = serde_json::to_vec_pretty(&invocation)
        .map_err(|e| format!("cannot write the invocation: {e}"))?;
    write_private(&invocation_path, &text)
        .map_err(|e| format!("cannot write `{}`: {e}", invocation_path.display()))?;

    let mut command = Command::new(&worker_stage.worker);
    command.arg("run").arg("--invocation").arg(&invocation_path);
    let stderr_log = log
        .try_clone()
        .map_err(|e| format!("cannot open log: {e}"))?;
    command.stdout(Stdio::piped()).stderr(stderr_log);
    let mut outcome: Option<std::result::Result<(), String>> = None;
    let status = spawn_and_wait(context, index, stage, gpus, command, log_path, |child| {
        use std::io::{BufRead, Write};
        let Some(stdout) = child.stdout.take() else {
            return Ok(());
        };
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            match serde_json::from_str::<pipe_protocol::Event>(&line) {
                Ok(pipe_protocol::Event::Progress {
                    phase,
                    done,
                    total,
                    unit,
                    detail,
                }) => {
                    (context.observer)(Event::StageProgress {
                        stage: &stage.name,
                        phase: &phase,
                        done,
                        total,
                        unit: &unit,
                        detail: detail.as_deref(),
                    });
                }
                Ok(pipe_protocol::Event::Message { text }) => {
                    // Our workers mask credentials themselves; a third-party one may not.
                    let text = redact_text(&text);
                    let _ = writeln!(log, "{text}");
                    (context.observer)(Event::StageMessage {
                        stage: &stage.name,
                        text: &text,
                    });
                }
                Ok(pipe_protocol::Event::Done) => outcome = Some(Ok(())),
                Ok(pipe_protocol::Event::Error { message, hint }) => {
                    let message = redact_text(&message).into_owned();
                    let hint = hint.map(|hint| redact_text(&hint).into_owned());
                    let _ = writeln!(log, "error: {message}");
                    outcome = Some(Err(match hint {
                        Some(hint) if !hint.is_empty() => format!("{message}\nhint: {hint}"),
                        _ => message,
                    }));
                }
                // Not an event: keep it for the log, as a command's output would be.
                Err(_) => {
                    let _ = writeln!(log, "{}", redact_text(&line));
                }
            }
        }
        Ok(())
    });
    let result = match (status, outcome) {
        (Err(detail), _) => Err(detail),
        (Ok(_), Some(Err(detail))) => Err(detail),
        (Ok(status), Some(Ok(()))) => check_exit(status, "the stage worker"),
        (Ok(status), None) => check_exit(status, "the stage worker").and(Err(
            "the stage worker exited without reporting success; nothing was kept".to_string(),
        )),
    };
    let _ = remove_path(&scratch_dir);
    if result.is_err() {
        let _ = remove_path(&partial_dir);
        return result;
    }
    std::fs::rename(&partial_dir, &final_dir)
        .map_err(|e| format!("cannot move outputs into `{}`: {e}", final_dir.display()))
}

/// Creates `path` readable and writable by the owner only, and writes `bytes`.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}

fn store_outputs(
    context: &Context<'_>,
    stage: &Stage,
    key: ActionKey,
    manifest: &Value,
    duration_ms: u64,
    rehash_existing: bool,
) -> std::result::Result<ActionResult, String> {
    let root = &context.pipeline.root;
    let mut outputs: BTreeMap<String, Artifact> = BTreeMap::new();
    for out in declared_outputs(stage) {
        let path = root.join(&out.path);
        if std::fs::symlink_metadata(&path).is_err() {
            return Err(format!(
                "the command succeeded but did not write its declared output `{}`; nothing was cached",
                out.path
            ));
        }
        let stored = if rehash_existing {
            context.cache.store_rehashing_existing(&path, &context.stat)
        } else {
            context.cache.store(&path, &context.stat)
        };
        let artifact =
            stored.map_err(|e| format!("cannot store output `{}` in the cache: {e}", out.path))?;
        outputs.insert(out.path.clone(), artifact);
    }
    let mut metrics = BTreeMap::new();
    if let StageKind::Worker(worker_stage) = &stage.kind {
        let path = root
            .join(&worker_stage.output_dir)
            .join(pipe_protocol::METRICS_FILE);
        if let Ok(text) = std::fs::read_to_string(&path) {
            let value: Value = serde_json::from_str(&text).map_err(|e| {
                format!("the stage wrote invalid metrics ({e}); nothing was cached")
            })?;
            metrics.extend(key::flatten(&value));
        }
    }
    for metric in &stage.metrics {
        let path = root.join(&metric.path);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read metrics `{}`: {e}", metric.path))?;
        let value: Value = serde_json::from_str(&text).map_err(|e| {
            format!(
                "metrics file `{}` is not valid JSON ({e}); nothing was cached",
                metric.path
            )
        })?;
        metrics.extend(key::flatten(&value));
    }
    let result = ActionResult {
        key,
        outputs,
        metrics,
        manifest: manifest.clone(),
        created_unix_ms: runs::now_ms(),
        duration_ms,
    };
    context
        .cache
        .put_action(&result)
        .map_err(|e| format!("cannot record the result in the cache: {e}"))?;
    Ok(result)
}

/// GPU indices: `PIPE_GPUS` (comma-separated, may be empty), else one per
/// line of `nvidia-smi -L`, else none.
pub fn available_gpus() -> Vec<String> {
    if let Ok(list) = std::env::var("PIPE_GPUS") {
        return list
            .split(',')
            .map(str::trim)
            .filter(|gpu| !gpu.is_empty())
            .map(String::from)
            .collect();
    }
    let Ok(output) = Command::new("nvidia-smi")
        .arg("-L")
        .stderr(Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.starts_with("GPU "))
        .enumerate()
        .map(|(index, _)| index.to_string())
        .collect()
}

fn read_tail(path: &Path, lines: usize) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let length = file.metadata().ok()?.len();
    let start = length.saturating_sub(16 * 1024);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    let tail = all[all.len().saturating_sub(lines)..].join("\n");
    (!tail.is_empty()).then_some(tail)
}
