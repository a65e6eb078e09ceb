//! The client side of the stage protocol (docs/stage-protocol.md): the
//! invocation built from the resolved stage, the worker's events turned
//! into progress, its outputs published only on success.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pipe_protocol::redact::redact_text;

use super::context::Context;
use super::executors::{executor_for, Execution, StageCommand};
use super::failure::StageFailure;
use super::process::check_exit;
use super::progress_text::{progress_interval, ProgressText, Reading};
use crate::events::Event;
use crate::pipeline::{Stage, WorkerStage};
use crate::project::partial_output_dir;
use crate::runs::RunId;
use crate::workspace::remove_path;

/// How often a running stage's progress is written to its log, so that
/// `tail -f` on it shows a long stage moving.
const LOG_PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

/// Runs a built-in stage through its worker: writes the invocation, turns
/// the worker's events into progress, and moves the output directory into
/// place only when the worker reports success.
pub(super) fn run_worker(
    job: &StageCommand<'_>,
    worker_stage: &WorkerStage,
    log: File,
    build_wait: &mut Duration,
) -> Execution<()> {
    let (context, stage) = (job.context, job.stage);
    let prepared = prepare_worker(job, worker_stage, &log, build_wait);
    let (dirs, command) = match prepared {
        Ok(prepared) => prepared,
        Err(failure) => return Execution::not_started(failure),
    };
    let mut events = WorkerEvents::new(context, stage, log);
    let ran = executor_for(context, stage).execute(
        job,
        command,
        Some(&mut |stdout: &mut dyn Read| events.read(stdout)),
    );
    let outcome = events.outcome;
    Execution {
        result: dirs.publish(verdict(ran.result, outcome)),
        placement: ran.placement,
    }
}

/// The worker ready to start: built if it is built from source, its
/// directories cleared, its invocation written.
fn prepare_worker(
    job: &StageCommand<'_>,
    worker_stage: &WorkerStage,
    log: &File,
    build_wait: &mut Duration,
) -> Result<(WorkerDirs, Command), StageFailure> {
    let (context, stage) = (job.context, job.stage);
    ensure_worker(context, worker_stage, build_wait)?;
    let dirs = WorkerDirs::cleared(context, stage, worker_stage, job.run_id)?;
    let run = write_run_so_far(context, job.index, worker_stage, &dirs.scratch_dir)?;
    let resume = resume_dir(context, stage, job.key);
    let invocation = invocation(context, stage, worker_stage, job.gpus, &dirs, run, resume);
    let invocation_path = write_invocation(&invocation, &dirs.scratch_dir)?;
    let mut command = Command::new(&worker_stage.worker);
    worker_stage.launch.apply(&mut command);
    command.arg("run").arg("--invocation").arg(&invocation_path);
    let stderr_log = log
        .try_clone()
        .map_err(|e| StageFailure::io("cannot open log", e))?;
    command.stdout(Stdio::piped()).stderr(stderr_log);
    Ok((dirs, command))
}

/// The worker is there to run: it is available on this machine, and built
/// when it is built from source.
fn ensure_worker(
    context: &Context<'_>,
    worker_stage: &WorkerStage,
    build_wait: &mut Duration,
) -> Result<(), StageFailure> {
    if let Some(unavailable) = &worker_stage.launch.unavailable {
        return Err(StageFailure::Reported {
            message: format!("`{}` {}", worker_stage.uses, unavailable.reason),
            hint: Some(unavailable.hint.clone()),
        });
    }
    if let Some(build) = &worker_stage.launch.build {
        // Building the worker, or waiting on a parallel stage's build of
        // it, is not the stage's time: a 5-minute first build would
        // otherwise be recorded as what the result cost to compute.
        let build_started = Instant::now();
        let built = build.ensure(context.observer);
        *build_wait = build_started.elapsed();
        built.map_err(|error| match error {
            crate::EngineError::Usage(usage) => StageFailure::Reported {
                message: usage.to_string(),
                hint: Some(usage.hint()),
            },
            other => StageFailure::Reported {
                message: other.to_string(),
                hint: None,
            },
        })?;
    }
    Ok(())
}

/// Where a worker's outputs go: it writes them into `partial_dir`, which
/// becomes `final_dir` only on success; `scratch_dir` holds the invocation
/// and goes in every case.
struct WorkerDirs {
    final_dir: PathBuf,
    partial_dir: PathBuf,
    scratch_dir: PathBuf,
}

impl WorkerDirs {
    /// The three directories, emptied of what an earlier attempt left,
    /// with the scratch directory created.
    fn cleared(
        context: &Context<'_>,
        stage: &Stage,
        worker_stage: &WorkerStage,
        run_id: RunId,
    ) -> Result<Self, StageFailure> {
        let root = &context.pipeline.root;
        let final_dir = root.join(&worker_stage.output_dir);
        let partial_dir = partial_output_dir(root, &worker_stage.output_dir);
        let scratch_dir = context
            .project
            .scratch_dir(run_id, &context.pipeline.name, &stage.name);
        for directory in [&final_dir, &partial_dir, &scratch_dir] {
            remove_path(directory).map_err(|e| {
                StageFailure::io(format!("cannot clear `{}`", directory.display()), e)
            })?;
        }
        std::fs::create_dir_all(&scratch_dir).map_err(|e| {
            StageFailure::io(format!("cannot create `{}`", scratch_dir.display()), e)
        })?;
        Ok(WorkerDirs {
            final_dir,
            partial_dir,
            scratch_dir,
        })
    }

    /// The outputs moved into place when the stage succeeded, dropped when
    /// it failed.
    fn publish(&self, result: Result<(), StageFailure>) -> Result<(), StageFailure> {
        let _ = remove_path(&self.scratch_dir);
        if result.is_err() {
            let _ = remove_path(&self.partial_dir);
            return result;
        }
        std::fs::rename(&self.partial_dir, &self.final_dir).map_err(|e| {
            StageFailure::io(
                format!("cannot move outputs into `{}`", self.final_dir.display()),
                e,
            )
        })
    }
}

/// A report is told the run so far, beside its invocation: the path of
/// that file, when the stage reads the run.
fn write_run_so_far(
    context: &Context<'_>,
    index: usize,
    worker_stage: &WorkerStage,
    scratch_dir: &Path,
) -> Result<Option<PathBuf>, StageFailure> {
    Ok(match (&context.run_so_far, worker_stage.reads_run) {
        (Some(run_so_far), true) => {
            let run_path = scratch_dir.join(pipe_protocol::RUN_FILE);
            let (told, _) = run_so_far.input_of(context.pipeline, index);
            let text = serde_json::to_vec_pretty(&told)
                .map_err(|e| StageFailure::io("cannot write the run's record", e.into()))?;
            std::fs::write(&run_path, text).map_err(|e| {
                StageFailure::io(format!("cannot write `{}`", run_path.display()), e)
            })?;
            Some(run_path)
        }
        _ => None,
    })
}

/// What the worker is asked to do: the stage's params, its directories,
/// and the devices and threads it may use where it runs.
fn invocation(
    context: &Context<'_>,
    stage: &Stage,
    worker_stage: &WorkerStage,
    gpus: &[String],
    dirs: &WorkerDirs,
    run: Option<PathBuf>,
    resume_dir: Option<PathBuf>,
) -> pipe_protocol::Invocation {
    let root = &context.pipeline.root;
    let on_cluster = !executor_for(context, stage).runs_here();
    pipe_protocol::Invocation {
        protocol: pipe_protocol::PROTOCOL_VERSION,
        stage: stage.name.clone(),
        uses: worker_stage.uses.clone(),
        version: worker_stage.version,
        // What the key hashed, `path` params made absolute.
        params: worker_stage.invocation_params(root),
        output_dir: dirs.partial_dir.clone(),
        scratch_dir: dirs.scratch_dir.clone(),
        project_root: root.clone(),
        // On the cluster, Slurm picks the GPUs and shows the job only
        // those (CUDA_VISIBLE_DEVICES): they are 0..N there.
        devices: if on_cluster {
            (0..stage.resources.gpus)
                .map(|gpu| gpu.to_string())
                .collect()
        } else {
            gpus.to_vec()
        },
        // Built-in stages parallelise inside (tokenize, training): here they
        // may use every slot of the run unless the pipeline sets their
        // cpus; on the cluster, the CPUs of their job.
        threads: if stage.resources.cpus > 1 || on_cluster {
            stage.resources.cpus.max(1) as usize
        } else if context.cluster.is_some() {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            context.jobs
        },
        run,
        resume_dir,
    }
}

/// The stage's resume directory, kept from an earlier attempt under the
/// same key or made now. Resuming is an optimisation: a directory that
/// cannot be made costs a warning, and the stage runs from the start.
fn resume_dir(
    context: &Context<'_>,
    stage: &Stage,
    key: &pipe_cache::ActionKey,
) -> Option<PathBuf> {
    match context.project.prepare_resume_dir(key) {
        Ok(dir) => Some(dir),
        Err(error) => {
            tracing::warn!(
                "stage `{}`: no resume directory ({error}); an interrupted attempt will start over",
                stage.name
            );
            None
        }
    }
}

/// The invocation's path in the scratch directory.
fn write_invocation(
    invocation: &pipe_protocol::Invocation,
    scratch_dir: &Path,
) -> Result<PathBuf, StageFailure> {
    // The invocation holds the params unmasked (the worker needs the real
    // URL), so it lives only as long as the stage, readable by us alone,
    // in the scratch directory deleted after it; never among the logs.
    let invocation_path = scratch_dir.join("invocation.json");
    let text = serde_json::to_vec_pretty(invocation)
        .map_err(|e| StageFailure::io("cannot write the invocation", e.into()))?;
    write_private(&invocation_path, &text).map_err(|e| {
        StageFailure::io(format!("cannot write `{}`", invocation_path.display()), e)
    })?;
    Ok(invocation_path)
}

/// What reading the worker's stdout keeps: its log, where progress is
/// written now and then, and the verdict the worker gave, if any.
struct WorkerEvents<'c> {
    context: &'c Context<'c>,
    stage: &'c Stage,
    log: File,
    progress_in_log: ProgressText,
    outcome: Option<Result<(), StageFailure>>,
}

impl<'c> WorkerEvents<'c> {
    fn new(context: &'c Context<'c>, stage: &'c Stage, log: File) -> Self {
        WorkerEvents {
            context,
            stage,
            log,
            progress_in_log: ProgressText::new(
                progress_interval(LOG_PROGRESS_INTERVAL),
                Instant::now(),
            ),
            outcome: None,
        }
    }

    fn read(&mut self, stdout: &mut dyn Read) -> Result<(), StageFailure> {
        // Read to the end whatever the worker writes: stopping at a byte
        // that is not UTF-8 would leave it blocked on a full pipe.
        for line in pipe_protocol::lines::TextLines::new(std::io::BufReader::new(stdout)) {
            self.line(&line);
        }
        Ok(())
    }

    fn line(&mut self, line: &str) {
        let context = self.context;
        let stage = self.stage;
        let log = &mut self.log;
        match serde_json::from_str::<pipe_protocol::Event>(line) {
            Ok(pipe_protocol::Event::Progress {
                phase,
                done,
                total,
                unit,
                detail,
            }) => {
                let reading = Reading {
                    phase: &phase,
                    done,
                    total,
                    unit: &unit,
                    detail: detail.as_deref(),
                };
                if let Some(text) = self.progress_in_log.observe(reading, Instant::now()) {
                    let _ = writeln!(log, "{}", redact_text(&text));
                }
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
            Ok(pipe_protocol::Event::Done) => self.outcome = Some(Ok(())),
            Ok(pipe_protocol::Event::Error { message, hint }) => {
                let message = redact_text(&message).into_owned();
                let hint = hint.map(|hint| redact_text(&hint).into_owned());
                let _ = writeln!(log, "error: {message}");
                self.outcome = Some(Err(StageFailure::Reported { message, hint }));
            }
            // Not an event: keep it for the log, as a command's output would be.
            Err(_) => {
                let _ = writeln!(log, "{}", redact_text(line));
            }
        }
    }
}

/// The stage's result from how the worker exited and what it said last.
fn verdict(
    status: Result<std::process::ExitStatus, StageFailure>,
    outcome: Option<Result<(), StageFailure>>,
) -> Result<(), StageFailure> {
    match (status, outcome) {
        (Err(detail), _) => Err(detail),
        (Ok(_), Some(Err(detail))) => Err(detail),
        (Ok(status), Some(Ok(()))) => check_exit(status, "the stage worker"),
        (Ok(status), None) => {
            check_exit(status, "the stage worker").and(Err(StageFailure::NoVerdict))
        }
    }
}

/// Creates `path` readable and writable by the owner only, and writes `bytes`.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}
