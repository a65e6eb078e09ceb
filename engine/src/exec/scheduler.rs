//! The run loop: starts the ready stages that fit (`readiness`, `slots`)
//! on a fixed pool of threads, takes their outcomes as they come, skips
//! what is below a failure, records every stage, and stops on Ctrl-C.

use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::context::{failed_record, nothing_done, Context, StageOutcome};
use super::executors::executor_for;
use super::failure::StageFailure;
use super::fresh_probe::fresh_without_reading;
use super::gpus::available_gpus;
use super::readiness::Readiness;
use super::slots::{Grant, Request, Slots};
use super::stage::{execute_stage, log_name, read_tail};
use crate::dag::Dag;
use crate::events::Event;
use crate::pipeline::{Stage, StageKind};
use crate::run_input;
use crate::runs::{RunStatus, StageRecord, StageStatus};
use crate::{interrupt, EngineError, Result};

/// A stage handed to a thread of the pool.
struct Job {
    index: usize,
    forced: bool,
    gpus: Vec<String>,
}

pub(super) fn schedule(
    context: &Context<'_>,
    dag: &Dag,
    selected: &[usize],
    is_forced: &[bool],
    jobs: usize,
) -> Result<(Vec<StageRecord>, RunStatus)> {
    let stages = &context.pipeline.stages;
    // A stage on the cluster gets its GPUs from Slurm, not from this machine.
    let runs_here = |index: usize| executor_for(context, &stages[index]).runs_here();
    let gpus = if selected
        .iter()
        .any(|&index| runs_here(index) && stages[index].resources.gpus > 0)
    {
        available_gpus()
    } else {
        Vec::new()
    };
    let mut readiness = Readiness::new(dag, selected);
    let mut slots = Slots::new(jobs, gpus);
    let mut recorder = Recorder::default();
    let mut stop = Stop::default();

    let (job_sender, job_receiver) = mpsc::channel::<Job>();
    let job_receiver = Mutex::new(job_receiver);
    std::thread::scope(|scope| -> Result<()> {
        // Dropped last, when this closure returns: what still builds then
        // is stopped before the scope waits for its threads.
        let _prebuilds = context.prebuild.serve(scope, context.observer);
        let (sender, receiver) = mpsc::channel::<StageOutcome>();
        // A fixed pool of `jobs` workers: slot accounting never lets more
        // stages run at once, and a no-op rerun of many stages should not
        // pay for a thread per stage.
        // Moved in, so it is dropped when this closure returns and the
        // workers see the channel close before the scope joins them.
        let job_sender = job_sender;
        // Started on the first stage handed to the pool: a rerun whose
        // stages are all found fresh here starts none.
        let mut workers = 0;
        let mut probed = vec![false; stages.len()];
        let pool_size = jobs.min(selected.len());
        let start_worker = || spawn_worker(scope, context, &job_receiver, sender.clone());
        while !readiness.done() {
            if stop.poll(context) {
                readiness.close();
            }
            if stop.interrupted && slots.idle() {
                break;
            }
            // Launch every ready stage that fits, in declaration order.
            let mut waiting = Vec::new();
            for index in readiness.take_ready() {
                let stage = &stages[index];
                // Once: a stage left waiting for slots is not probed again.
                if !is_forced[index]
                    && !stop.interrupted
                    && !std::mem::replace(&mut probed[index], true)
                {
                    if let Some(outcome) = fresh_without_reading(context, index) {
                        sender
                            .send(outcome)
                            .map_err(|_| EngineError::Internal("stage outcomes lost".into()))?;
                        continue;
                    }
                }
                match slots.take(index, Request::of(&stage.resources, runs_here(index))) {
                    Grant::Start { gpus } => {
                        let job = Job {
                            index,
                            forced: is_forced[index],
                            gpus,
                        };
                        if workers < pool_size {
                            start_worker();
                            workers += 1;
                        }
                        job_sender
                            .send(job)
                            .map_err(|_| EngineError::Internal("stage workers vanished".into()))?;
                    }
                    Grant::Wait => waiting.push(index),
                    Grant::Never { needed, available } => {
                        let detail = StageFailure::NotEnoughGpus { needed, available };
                        sender
                            .send(StageOutcome {
                                index,
                                record: failed_record(stage, None, detail, 0),
                                manifest: None,
                                compute_ms: None,
                            })
                            .ok();
                    }
                }
            }
            readiness.put_back(waiting);

            // What has finished already is taken without a timed wait: a
            // no-op's hundred fresh stages never wait at all.
            let next = match receiver.try_recv() {
                Ok(outcome) => Ok(outcome),
                Err(mpsc::TryRecvError::Empty) => receiver.recv_timeout(Duration::from_millis(100)),
                Err(mpsc::TryRecvError::Disconnected) => Err(mpsc::RecvTimeoutError::Disconnected),
            };
            let outcome = match next {
                Ok(outcome) => outcome,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // A stage is taking its time: what finished before it
                    // is written now, so that `pipe status` and `pipe show`
                    // see the run so far (a run that did nothing yet has
                    // nothing to write: its rows are not written to be
                    // deleted).
                    if recorder.did_something {
                        recorder.save(context)?;
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(EngineError::Internal("stage threads vanished".into()))
                }
            };
            slots.release(outcome.index);
            settle(context, &mut readiness, &mut recorder, outcome)?;
        }
        Ok(())
    })?;
    // A signal may arrive after the last stage was launched: the stage sees
    // it and stops, and the loop ends before its next check of the flag.
    let status = if stop.interrupted || interrupt::requested() {
        RunStatus::Interrupted
    } else if recorder.failed {
        RunStatus::Failed
    } else {
        RunStatus::Succeeded
    };
    // A run of fresh stages only is discarded (`exec::run`): its rows are
    // not written to be deleted.
    if !nothing_done(status, &recorder.records) {
        recorder.save(context)?;
    }
    Ok((recorder.records, status))
}

/// A thread of the pool: runs the stages handed to it until the run ends.
fn spawn_worker<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    context: &'scope Context<'_>,
    jobs: &'scope Mutex<mpsc::Receiver<Job>>,
    outcomes: mpsc::Sender<StageOutcome>,
) {
    scope.spawn(move || loop {
        let job = jobs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .recv();
        let Ok(job) = job else {
            break;
        };
        let outcome = execute_stage(context, job.index, job.forced, &job.gpus);
        if outcomes.send(outcome).is_err() {
            break;
        }
    });
}

/// A stage's outcome taken in: reported, told to the stages that read the
/// run, its downstream stages made ready or skipped, and recorded.
fn settle(
    context: &Context<'_>,
    readiness: &mut Readiness<'_>,
    recorder: &mut Recorder,
    outcome: StageOutcome,
) -> Result<()> {
    let stages = &context.pipeline.stages;
    let status = outcome.record.status;
    report_finished(context, outcome.index, &outcome.record);
    if let (Some(run_so_far), true) = (&context.run_so_far, status.succeeded()) {
        let stage = &stages[outcome.index];
        let made = run_input::Made {
            stage,
            outputs: &outcome.record.outputs,
            compute_ms: outcome.compute_ms,
        };
        run_so_far.finished(
            outcome.index,
            run_input::run_stage(
                stage,
                outcome.compute_ms,
                outcome.record.metrics.clone(),
                context.root_of(stage),
            ),
            run_input::keyed_stage(&made),
        );
    }
    if status.succeeded() {
        readiness.succeeded(outcome.index);
    } else {
        recorder.failed = true;
        for (down, up) in readiness.failed(outcome.index) {
            let mut record = skipped_record(&stages[down], &stages[up]);
            record.identity.position = down;
            report_finished(context, down, &record);
            recorder.push(record, None);
        }
    }
    let mut record = outcome.record;
    // Its place in the pipeline: records are saved as stages finish, and
    // readers show them in the pipeline's order.
    record.identity.position = outcome.index;
    recorder.push(record, outcome.manifest);
    // Persist after real work so a killed pipe keeps its history;
    // cheap cache checks are batched to keep no-op runs fast.
    if status == StageStatus::Ran {
        recorder.save(context)?;
    }
    Ok(())
}

fn skipped_record(stage: &Stage, upstream: &Stage) -> StageRecord {
    StageRecord {
        detail: Some(format!(
            "upstream stage `{}` did not succeed",
            upstream.name
        )),
        ..StageRecord::new(&stage.name, stage.identity(), StageStatus::Skipped)
    }
}

/// The run's records, and those not yet in the run database.
#[derive(Default)]
struct Recorder {
    records: Vec<StageRecord>,
    unsaved: Vec<(StageRecord, Option<Value>)>,
    /// A stage failed (or was refused).
    failed: bool,
    /// A stage did something (it is not fresh): the run is recorded.
    did_something: bool,
}

impl Recorder {
    fn push(&mut self, record: StageRecord, manifest: Option<Value>) {
        self.did_something |= record.status != StageStatus::Fresh;
        self.records.push(record.clone());
        self.unsaved.push((record, manifest));
    }

    /// Writes the records not saved yet, and the run's row first if it is
    /// not written.
    fn save(&mut self, context: &Context<'_>) -> Result<()> {
        if self.unsaved.is_empty() {
            return Ok(());
        }
        let batch: Vec<(StageRecord, Option<&Value>)> = self
            .unsaved
            .iter()
            .map(|(record, manifest)| (record.clone(), manifest.as_ref()))
            .collect();
        context
            .run
            .with_db(|db, run_id| db.record_stages(run_id, &batch))?;
        self.unsaved.clear();
        Ok(())
    }
}

/// Ctrl-C: the running stages are sent SIGTERM and the cluster's jobs
/// cancelled at once, and SIGKILL follows 5 s later.
#[derive(Default)]
struct Stop {
    interrupted: bool,
    killed_at: Option<Instant>,
}

impl Stop {
    /// Acts on an interrupt; true the first time one is seen.
    fn poll(&mut self, context: &Context<'_>) -> bool {
        let first = interrupt::requested() && !self.interrupted;
        if first {
            self.interrupted = true;
            terminate_running(context, libc::SIGTERM);
            if let Some(cluster) = &context.cluster {
                cluster.cancel_all();
            }
            self.killed_at = Some(Instant::now());
        }
        if let Some(at) = self.killed_at {
            if at.elapsed() > Duration::from_secs(5) {
                terminate_running(context, libc::SIGKILL);
                self.killed_at = None;
            }
        }
        first
    }
}

fn report_finished(context: &Context<'_>, index: usize, record: &StageRecord) {
    // A stage's log is made right before its command starts, with the
    // run's row: a run without one has no logs, and a stage that failed
    // before its command (a missing dependency) shows neither.
    let log = context
        .run
        .written_id()
        .map(|run_id| {
            context
                .project
                .log_dir(run_id)
                .join(log_name(&record.stage))
        })
        .filter(|log| log.is_file());
    let failed = record.status == StageStatus::Failed && log.is_some();
    let stage = || context.pipeline.stages.get(index);
    let command = failed.then(|| stage()?.shown_command()).flatten();
    // What a command of the user's printed is theirs to see on success
    // too, as DVC shows it; a built-in stage's log is its own.
    let ran_command = record.status == StageStatus::Ran
        && stage().is_some_and(|stage| {
            matches!(
                stage.kind,
                StageKind::Command { .. } | StageKind::Argv { .. }
            )
        });
    // A log is pointed at only when it holds something: a worker that
    // could not start wrote nothing, and its reason is in `detail`.
    let log_tail = (failed || ran_command)
        .then(|| read_tail(log.as_deref()?, 20))
        .flatten()
        .map(|tail| match stage() {
            Some(stage) => stage.masked_output(&tail).into_owned(),
            None => pipe_protocol::redact::redact_text(&tail).into_owned(),
        });
    (context.observer)(Event::StageFinished {
        stage: &record.stage,
        status: record.status,
        duration: Duration::from_millis(record.duration_ms),
        detail: record.detail.as_deref(),
        command: command.as_deref(),
        log: log.as_deref().filter(|_| log_tail.is_some()),
        log_tail: log_tail.as_deref(),
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
