//! The executor of one stage: hash its dependencies, compute its key,
//! reuse a cached result or run it, check and store its outputs, and
//! return its record.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pipe_cache::remote::Pulled;
use pipe_cache::{ActionKey, ActionResult, Artifact, CacheError};
use serde_json::Value;

use std::sync::atomic::{AtomicBool, Ordering};

use super::context::{failed_record, Context, StageOutcome};
use super::executors::{executor_for, Execution, StageCommand};
use super::failure::StageFailure;
use super::log_follower;
use super::process::{check_exit, command_process};
use super::slurm::Placement;
use super::worker_client::run_worker;
use crate::key::DepDigests;
use crate::pipeline::{Stage, StageKind};
use crate::project_files::paths::{check_output_after_command, check_output_location};
use crate::project_files::ProjectPath;
use crate::runs::{self, RunId, StageRecord, StageStatus};
use crate::workspace::{
    check_action_fits, check_restore_target, declared_outputs, outputs_differing, read_metrics,
    remove_path, DepProblem,
};
use crate::{key, run_input};

/// The outcome of stage `index`, run with `gpus` unless its result is
/// cached; on the cluster, its record says which job ran it and where.
pub(super) fn execute_stage(
    context: &Context<'_>,
    index: usize,
    forced: bool,
    gpus: &[String],
) -> StageOutcome {
    let (mut outcome, placement) = execute(context, index, forced, gpus);
    if let Some(placement) = placement {
        outcome.record.job = Some(placement.job_id);
        outcome.record.node = placement.node;
    }
    outcome
}

/// One stage, step by step: hash its dependencies and compute its key,
/// reuse a cached result, else run it and store what it made; and where
/// it ran, when it ran on the cluster.
fn execute(
    context: &Context<'_>,
    index: usize,
    forced: bool,
    gpus: &[String],
) -> (StageOutcome, Option<Placement>) {
    let mut attempt = Attempt {
        context,
        index,
        stage: &context.pipeline.stages[index],
        started: Instant::now(),
        waited: Duration::ZERO,
    };
    let stage = attempt.stage;
    let dep_digests = match context.hash_deps(stage) {
        Ok(digests) => digests,
        Err(problem) => {
            return (
                attempt.failed(None, dependency_failure(stage, problem), None),
                None,
            )
        }
    };
    let manifest = keyed_manifest(context, index, stage, &dep_digests);
    let key = key::key_of(&manifest);

    // A forced stage, or one whose cached result turned out unusable, may
    // be rerun because an object is corrupt: its store must not trust
    // objects by their size.
    let mut rehash_existing = forced;
    if !forced {
        match attempt.look_up_cache(key) {
            CacheLookup::Reused { record, compute_ms } => {
                let reused = StageOutcome {
                    index,
                    record: *record,
                    manifest: Some(manifest),
                    compute_ms: Some(compute_ms),
                };
                return (reused, None);
            }
            CacheLookup::Unusable => rehash_existing = true,
            CacheLookup::Miss => {}
        }
    }

    context.prebuild.stage_runs(index);
    let ran = run_command(context, index, stage, &key, gpus, &mut attempt.waited);
    attempt.waited += ran
        .placement
        .as_ref()
        .and_then(|placement| placement.queued)
        .unwrap_or_default();
    let outcome = match ran.result {
        Ok(()) => attempt.store(key, manifest, rehash_existing),
        Err(detail) => attempt.failed(Some(&key), detail, Some(manifest)),
    };
    (outcome, ran.placement)
}

/// What the steps of one stage's execution share: the stage, and the
/// clock its record's duration is read from.
struct Attempt<'c> {
    context: &'c Context<'c>,
    index: usize,
    stage: &'c Stage,
    started: Instant,
    /// Time the stage waited without running: for its worker to be built,
    /// for its Slurm job to leave the queue. What the result cost is what
    /// is left; a first build or a busy cluster is not the stage's.
    waited: Duration,
}

/// What the caches offer for a stage's key.
enum CacheLookup {
    /// The cached result is in the workspace, or was restored there.
    Reused {
        record: Box<StageRecord>,
        compute_ms: u64,
    },
    /// No cached result, or one that does not fit the stage.
    Miss,
    /// A cached result fits but could not be reused: the stage runs, and
    /// its store checks every object again.
    Unusable,
}

impl Attempt<'_> {
    fn elapsed_ms(&self) -> u64 {
        self.started
            .elapsed()
            .saturating_sub(self.waited)
            .as_millis() as u64
    }

    fn failed(
        &self,
        key: Option<&ActionKey>,
        detail: StageFailure,
        manifest: Option<Value>,
    ) -> StageOutcome {
        StageOutcome {
            index: self.index,
            record: failed_record(self.stage, key, detail, self.elapsed_ms()),
            manifest,
            compute_ms: None,
        }
    }

    /// The result of `key` from the local cache, else the remote one, put
    /// in the workspace.
    fn look_up_cache(&self, key: ActionKey) -> CacheLookup {
        let (context, stage) = (self.context, self.stage);
        let Some((result, pulled_from)) = fitting_cached_result(context, stage, &key) else {
            return CacheLookup::Miss;
        };
        // Either failure is only worth a warning, so one message.
        let reused = read_metrics(&context.cache, stage, &result)
            .map_err(|bad| bad.to_string())
            .and_then(|metrics| {
                let status = reuse_cached(context, self.stage, &result)
                    .map_err(|error| error.to_string())?;
                Ok((status, metrics))
            });
        match reused {
            Ok((status, metrics)) => {
                // A state an interrupted attempt left is never resumed once
                // the result is here (pulled from the remote, say).
                if let StageKind::Worker(_) = stage.kind {
                    context.project.remove_resume_dir(&key);
                }
                CacheLookup::Reused {
                    record: Box::new(StageRecord {
                        key: Some(key),
                        duration_ms: self.elapsed_ms(),
                        outputs: result.outputs.clone(),
                        metrics,
                        detail: pulled_from,
                        ..StageRecord::new(&stage.name, stage.identity(), status)
                    }),
                    compute_ms: result.duration_ms,
                }
            }
            Err(error) => {
                tracing::warn!(
                    "stage `{}`: cached result unusable ({error}); running it again",
                    stage.name
                );
                CacheLookup::Unusable
            }
        }
    }

    /// What the stage made, checked and stored under `key`, and sent on to
    /// the remote cache.
    fn store(&self, key: ActionKey, manifest: Value, rehash_existing: bool) -> StageOutcome {
        let (context, stage) = (self.context, self.stage);
        match store_outputs(
            context,
            stage,
            key,
            &manifest,
            self.elapsed_ms(),
            rehash_existing,
        ) {
            Ok((result, metrics)) => {
                // Only now: a kill before the result was stored must still
                // leave the next attempt something to resume from.
                if let StageKind::Worker(_) = stage.kind {
                    context.project.remove_resume_dir(&key);
                }
                // Also a stage that runs every time, whose key no run will
                // ask for again: the run's record names its result, and a
                // teammate's `pipe checkout` of the run restores from it.
                if let Some(remote) = &context.remote {
                    remote.push_in_background(result.clone());
                }
                let compute_ms = Some(result.duration_ms);
                let record = StageRecord {
                    key: Some(key),
                    duration_ms: self.elapsed_ms(),
                    outputs: result.outputs.clone(),
                    metrics,
                    ..StageRecord::new(&stage.name, stage.identity(), StageStatus::Ran)
                };
                StageOutcome {
                    index: self.index,
                    record,
                    manifest: Some(manifest),
                    compute_ms,
                }
            }
            Err(detail) => self.failed(Some(&key), detail, Some(manifest)),
        }
    }
}

/// A dependency that cannot be hashed, with what to do when it is a file
/// no stage writes.
fn dependency_failure(stage: &Stage, problem: DepProblem) -> StageFailure {
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
    StageFailure::Dependency(detail)
}

/// The stage's manifest: its definition and dependencies, what it reads of
/// the run, and for a stage that runs every time a nonce.
pub(super) fn keyed_manifest(
    context: &Context<'_>,
    index: usize,
    stage: &Stage,
    dep_digests: &DepDigests,
) -> Value {
    let nonce = stage
        .always_run
        .then(|| format!("process {} {}", std::process::id(), runs::now_ms()));
    let mut manifest = key::manifest(stage, dep_digests, nonce.as_deref());
    if let (Some(run_so_far), true) = (&context.run_so_far, stage.reads_run()) {
        let (_, keyed) = run_so_far.input_of(context.pipeline, index);
        key::add_field(&mut manifest, run_input::MANIFEST_FIELD, keyed);
    }
    manifest
}

/// The cached result of `key`, local or pulled, with where it came from;
/// one that does not fit the stage is dropped (and distrusted on the
/// remote it came from).
fn fitting_cached_result(
    context: &Context<'_>,
    stage: &Stage,
    key: &ActionKey,
) -> Option<(ActionResult, Option<String>)> {
    let cached = match context.cache.get_action(key) {
        Some(result) => Some((result, None)),
        None => pull_from_remote(context, stage, key),
    };
    cached.filter(
        |(result, pulled_from)| match check_action_fits(stage, result) {
            Ok(()) => true,
            Err(problem) => {
                tracing::warn!("{problem}; running the stage, and its result replaces this one");
                if let (Some(remote), Some(_)) = (&context.remote, pulled_from) {
                    remote.distrust(key);
                }
                false
            }
        },
    )
}

/// On a local miss, the remote cache's result for `key`, brought into the
/// local cache (every object checked against its digest on the way), with
/// where it came from. A stage that runs every time is never looked up.
fn pull_from_remote(
    context: &Context<'_>,
    stage: &Stage,
    key: &ActionKey,
) -> Option<(ActionResult, Option<String>)> {
    let remote = context.remote.as_ref()?;
    if stage.always_run {
        return None;
    }
    match remote.pull_result(key) {
        Pulled::Hit { objects, bytes } => {
            tracing::info!(
                "stage `{}`: pulled from {} ({objects} objects, {bytes} bytes)",
                stage.name,
                remote.url()
            );
            let result = context.cache.get_action(key)?;
            Some((result, Some(format!("from {}", remote.url()))))
        }
        Pulled::Corrupt(reason) => {
            tracing::warn!(
                "stage `{}`: the remote cache's result is corrupt ({reason}); running the stage, and its result replaces the bad one",
                stage.name
            );
            None
        }
        Pulled::Miss | Pulled::Unavailable => None,
    }
}

/// Fresh when the workspace already holds the outputs, else restores them.
pub(super) fn reuse_cached(
    context: &Context<'_>,
    stage: &Stage,
    result: &ActionResult,
) -> std::result::Result<StageStatus, CacheError> {
    let root = context.root_of(stage);
    let differing = outputs_differing(root, result, &context.cache, &context.stat);
    if differing.is_empty() {
        return Ok(StageStatus::Fresh);
    }
    for path in differing {
        let artifact = &result.outputs[path];
        let destination = root.join(path);
        check_restore_target(root, path)
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

/// Runs the stage's command where its executor puts it, after clearing
/// its old outputs and opening its log.
pub(super) fn run_command(
    context: &Context<'_>,
    index: usize,
    stage: &Stage,
    key: &ActionKey,
    gpus: &[String],
    build_wait: &mut Duration,
) -> Execution<()> {
    let root = context.root_of(stage);
    if let Err(failure) = context.stage_in(stage) {
        return Execution::not_started(failure);
    }
    // A stage that runs makes the run one to record: its row, and its id
    // for the log, the stage's environment and its marker.
    let run_id = match context.run.id_for_stage() {
        Ok(run_id) => run_id,
        Err(failure) => return Execution::not_started(failure),
    };
    let (log, log_path) = match clear_outputs_and_open_log(context, stage, run_id) {
        Ok(opened) => opened,
        Err(failure) => return Execution::not_started(failure),
    };
    // Until the stage ends, `pipe status` in another process says it runs.
    let _running = crate::running::Marker::create(
        &context.project.state_dir,
        run_id,
        &context.pipeline.name,
        &stage.name,
        index,
    );
    if let Some(command) = stage.shown_command() {
        tracing::info!("stage `{}`: > {command}", stage.name);
    }
    let job = StageCommand {
        context,
        index,
        stage,
        key,
        gpus,
        log_path: &log_path,
        run_id,
    };
    match &stage.kind {
        StageKind::Command { .. } | StageKind::Argv { .. } => {
            let process = command_process(&stage.kind, root).and_then(|mut process| {
                let log_for_stderr = log
                    .try_clone()
                    .map_err(|e| StageFailure::io("cannot open log", e))?;
                process.stdout(log).stderr(log_for_stderr);
                Ok(process)
            });
            match process {
                Ok(process) => {
                    let done = AtomicBool::new(false);
                    std::thread::scope(|scope| {
                        let follower = scope.spawn(|| {
                            log_follower::follow(context.observer, stage, &log_path, &done)
                        });
                        let execution = executor_for(context, stage).execute(&job, process, None);
                        done.store(true, Ordering::Relaxed);
                        follower.thread().unpark();
                        execution
                    })
                    .then(|status| check_exit(status, "command"))
                }
                Err(failure) => Execution::not_started(failure),
            }
        }
        StageKind::Worker(worker) => run_worker(&job, worker, log, build_wait),
    }
}

/// Stale outputs must not survive into a new result, and restored ones
/// may be read-only links into the cache that a command must not write
/// through: each is removed, its directory made. Then the stage's log.
fn clear_outputs_and_open_log(
    context: &Context<'_>,
    stage: &Stage,
    run_id: RunId,
) -> Result<(File, PathBuf), StageFailure> {
    let root = context.root_of(stage);
    for out in declared_outputs(stage) {
        check_output_location(root, &out.path).map_err(StageFailure::OutputRefused)?;
        let path = root.join(&out.path);
        remove_path(&path)
            .map_err(|e| StageFailure::io(format!("cannot remove old output `{}`", out.path), e))?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                StageFailure::io(format!("cannot create `{}`", parent.display()), e)
            })?;
        }
    }
    let log_dir = context.project.log_dir(run_id);
    std::fs::create_dir_all(&log_dir).map_err(|e| {
        StageFailure::io(
            format!("cannot create log directory `{}`", log_dir.display()),
            e,
        )
    })?;
    let log_path = log_dir.join(log_name(&stage.name));
    let log = File::create(&log_path)
        .map_err(|e| StageFailure::io(format!("cannot create log `{}`", log_path.display()), e))?;
    Ok((log, log_path))
}

pub(super) fn log_name(stage: &str) -> String {
    // Matrix names carry `@`, `=` and `,`, which are fine in file names; `/` is not.
    format!("{}.log", stage.replace('/', "_"))
}

/// Checks what the command left, stores every declared output (and a
/// built-in stage's `metrics.json`) and records the result under `key`.
/// Returns the result and its metrics, read back from the stored files.
pub(super) fn store_outputs(
    context: &Context<'_>,
    stage: &Stage,
    key: ActionKey,
    manifest: &Value,
    duration_ms: u64,
    rehash_existing: bool,
) -> Result<(ActionResult, BTreeMap<String, Value>), StageFailure> {
    let root = context.root_of(stage);
    // Everything is checked before anything is read: a command that made
    // an output (or a directory above it) a link to outside the project
    // gets nothing from there stored or pushed.
    let mut to_store: Vec<ProjectPath> = Vec::new();
    for out in declared_outputs(stage) {
        if std::fs::symlink_metadata(root.join(&out.path)).is_err() {
            return Err(StageFailure::Contract(format!(
                "the command succeeded but did not write its declared output `{}`; nothing was cached",
                out.path
            )));
        }
        to_store.push(out.path.clone());
    }
    if let StageKind::Worker(worker_stage) = &stage.kind {
        check_worker_output_dir(root, stage, &worker_stage.output_dir)?;
        if let Some(metrics) = stage.worker_metrics_path() {
            if std::fs::symlink_metadata(root.join(&metrics)).is_ok() {
                to_store.push(metrics);
            }
        }
    }
    for path in &to_store {
        check_output_after_command(root, path).map_err(StageFailure::OutputRefused)?;
    }
    let mut outputs: BTreeMap<ProjectPath, Artifact> = BTreeMap::new();
    for out_path in to_store {
        let path = root.join(&out_path);
        let stored = if rehash_existing {
            context.cache.store_rehashing_existing(&path, &context.stat)
        } else {
            context.cache.store(&path, &context.stat)
        };
        let artifact = stored.map_err(|e| {
            StageFailure::cache(format!("cannot store output `{out_path}` in the cache"), e)
        })?;
        outputs.insert(out_path, artifact);
    }
    let result = ActionResult {
        key,
        outputs,
        manifest: pipe_cache::manifest_of(manifest),
        created_unix_ms: runs::now_ms(),
        duration_ms,
    };
    let metrics = read_metrics(&context.cache, stage, &result).map_err(|problem| {
        StageFailure::Contract(format!(
            "the stage wrote bad metrics: {problem}; nothing was cached"
        ))
    })?;
    context
        .cache
        .put_action(&result)
        .map_err(|e| StageFailure::cache("cannot record the result in the cache", e))?;
    Ok((result, metrics))
}

/// A built-in stage's output directory holds its declared outputs and its
/// `metrics.json`, nothing else: a restore puts back exactly that, so a
/// run must leave exactly that too.
fn check_worker_output_dir(
    root: &Path,
    stage: &Stage,
    output_dir: &str,
) -> Result<(), StageFailure> {
    let dir = root.join(output_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => {
            return Err(StageFailure::io(
                format!("cannot list `{output_dir}`"),
                error,
            ))
        }
    };
    for entry in entries {
        let entry =
            entry.map_err(|e| StageFailure::io(format!("cannot list `{output_dir}`"), e))?;
        let name = entry.file_name();
        let path = format!("{output_dir}/{}", name.to_string_lossy());
        let known = declared_outputs(stage).any(|out| out.path == path)
            || name == pipe_protocol::METRICS_FILE;
        if !known {
            return Err(StageFailure::Contract(format!(
                "the stage wrote `{path}`, which is none of its outputs; nothing was cached"
            )));
        }
    }
    Ok(())
}

pub(super) fn read_tail(path: &Path, lines: usize) -> Option<String> {
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
