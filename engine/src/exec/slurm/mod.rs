//! The Slurm executor: a stage that misses the cache runs as a batch job
//! on a node instead of as a child of pipe (docs/scale-out.md).
//!
//! Everything else is the local executor's: pipe hashes the inputs, keys
//! and looks up the stage on the head, the job runs the same command or
//! worker in the project directory (which the nodes must share), and pipe
//! stores the outputs once the job has ended. A job is judged by two
//! witnesses that cannot lie about success: the exit file its script
//! writes after the command (seen within a tenth of a second on the
//! shared filesystem), and the job's state in `squeue` (one query for the
//! whole run, by job name), which alone knows about time limits, memory,
//! cancellations and failed nodes. `sbatch --wait` is not used: it
//! returns 0 for a job cancelled before it ran.

mod jobs;
mod queue;
mod script;
mod srun_tasks;
mod submit;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use pipe_protocol::format::format_seconds;

use jobs::{cancel_job, write_script, JobFiles, UNREACHABLE_LIMIT};
pub(crate) use queue::Partitions;
use queue::{JobState, Queue};
use submit::{Submission, SubmitContext};

use super::failure::StageFailure;
use crate::executor::SlurmSettings;
use crate::pipeline::{Resources, Stage};
use crate::runs::RunId;
use crate::{interrupt, EngineError, Result};

/// Refuses, before anything is submitted or recorded, a stage whose
/// request no node of the partition can meet.
pub(super) fn check_requests(settings: &SlurmSettings, stages: &[&Stage]) -> Result<()> {
    if stages.is_empty() {
        return Ok(());
    }
    match Partitions::query() {
        Ok(partitions) => {
            let partition = settings.partition.clone().or_else(|| {
                std::env::var("SBATCH_PARTITION")
                    .ok()
                    .filter(|p| !p.is_empty())
            });
            partitions.check(partition.as_deref(), stages)
        }
        // The controller may only be slow; sbatch says what is wrong later.
        Err(error) => {
            tracing::warn!("cannot check the stages' requests against Slurm's partitions: {error}");
            Ok(())
        }
    }
}

/// Where a stage's job ran, for the run record and `pipe show`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub job_id: String,
    pub node: Option<String>,
    /// From submission to the job's start on its node, when the job said
    /// when it started: the queue's time, not the stage's.
    pub queued: Option<Duration>,
}

/// What the job's command does with its output.
pub(super) enum JobOutput<'a> {
    /// stdout and stderr to the stage's log (a `run:` stage).
    Log,
    /// stdout is the worker's event stream, read as it grows by `read`;
    /// stderr is appended to the log once the job has ended.
    Events(&'a mut dyn FnMut(&mut dyn Read) -> std::result::Result<(), StageFailure>),
}

/// The run's cluster, connected when the first stage needs a job: a run
/// whose stages are all cached starts no thread and no process for Slurm.
pub(super) struct LazyCluster {
    settings: SlurmSettings,
    root: PathBuf,
    state_dir: PathBuf,
    run_id: RunId,
    cell: std::sync::OnceLock<Result<Cluster>>,
}

impl LazyCluster {
    pub(super) fn new(
        settings: &SlurmSettings,
        root: &Path,
        state_dir: &Path,
        run_id: RunId,
    ) -> Self {
        LazyCluster {
            settings: settings.clone(),
            root: root.to_path_buf(),
            state_dir: state_dir.to_path_buf(),
            run_id,
            cell: std::sync::OnceLock::new(),
        }
    }

    pub(super) fn get(&self) -> std::result::Result<&Cluster, StageFailure> {
        let started = self.cell.get_or_init(|| {
            Cluster::start(&self.settings, &self.root, &self.state_dir, self.run_id)
        });
        started
            .as_ref()
            .map_err(|error| StageFailure::Submit(error.to_string()))
    }

    fn started(&self) -> Option<&Cluster> {
        self.cell.get().and_then(|started| started.as_ref().ok())
    }

    pub(super) fn cancel_all(&self) {
        if let Some(cluster) = self.started() {
            cluster.cancel_all();
        }
    }

    pub(super) fn finish(&self) {
        if let Some(cluster) = self.started() {
            cluster.finish();
        }
    }
}

/// One run's connection to the cluster.
pub(super) struct Cluster {
    /// Every job of the run carries it: one `squeue --name` sees them all,
    /// one `scancel --name` stops them all.
    job_name: String,
    /// `.pipe/jobs/RUN/`: scripts, exit files, event streams, Slurm's own
    /// output; on the filesystem the nodes share.
    dir: PathBuf,
    queue: Arc<Queue>,
    submitter: Mutex<Option<mpsc::Sender<Submission>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Cancels the run's jobs if pipe dies without saying goodbye.
    reaper: Mutex<Option<std::process::Child>>,
}

/// How long a job that Slurm calls COMPLETED may take to show its exit
/// file on the head: attribute caches of network filesystems lag.
const EXIT_FILE_GRACE: Duration = Duration::from_secs(30);
/// After Ctrl-C, how long to wait for Slurm to confirm the cancellation.
const CANCEL_WAIT: Duration = Duration::from_secs(15);

impl Cluster {
    fn start(
        settings: &SlurmSettings,
        root: &Path,
        state_dir: &Path,
        run_id: RunId,
    ) -> Result<Cluster> {
        let dir = state_dir.join("jobs").join(run_id.to_string());
        std::fs::create_dir_all(&dir).map_err(|e| EngineError::io(&dir, e))?;
        let token = format!(
            "{:x}",
            crate::runs::now_ms() ^ (u64::from(std::process::id()) << 20)
        );
        let job_name = format!("pipe-r{run_id}-{}", &token[token.len().saturating_sub(6)..]);
        let queue = Arc::new(Queue::new(job_name.clone(), settings.poll));
        let reaper = spawn_reaper(&job_name);
        let (sender, receiver) = mpsc::channel::<Submission>();
        let mut threads = Vec::new();
        {
            let queue = Arc::clone(&queue);
            threads.push(std::thread::spawn(move || queue.poll_until_stopped()));
        }
        {
            let queue = Arc::clone(&queue);
            let submit = SubmitContext {
                settings: settings.clone(),
                job_name: job_name.clone(),
                dir: dir.clone(),
                root: root.to_path_buf(),
            };
            threads.push(std::thread::spawn(move || submit.serve(&receiver, &queue)));
        }
        Ok(Cluster {
            job_name,
            dir,
            queue,
            submitter: Mutex::new(Some(sender)),
            threads: Mutex::new(threads),
            reaper: Mutex::new(reaper),
        })
    }

    /// Runs `argv` for `stage` as a job and waits for it to end.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &self,
        index: usize,
        stage: &Stage,
        root: &Path,
        run_id: RunId,
        argv: &[String],
        log_path: &Path,
        output: JobOutput<'_>,
        placement: &Mutex<Option<Placement>>,
    ) -> std::result::Result<ExitStatus, StageFailure> {
        let files = JobFiles::new(&self.dir, index);
        let events = matches!(output, JobOutput::Events(_));
        let text = script::task_script(&script::Task {
            root,
            stage,
            run_id,
            argv,
            log: log_path,
            events: events.then_some(files.events.as_path()),
            stderr: events.then_some(files.stderr.as_path()),
            exit: &files.exit,
        });
        files.remove();
        write_script(&files.script, &text).map_err(|e| {
            StageFailure::io(format!("cannot write `{}`", files.script.display()), e)
        })?;
        if events {
            std::fs::File::create(&files.events).map_err(|e| {
                StageFailure::io(format!("cannot create `{}`", files.events.display()), e)
            })?;
        }
        let submitted_ms = crate::runs::now_ms();
        let (reply, answer) = mpsc::channel();
        let submission = Submission {
            index,
            // Expansions of one matrix stage may share an array.
            group: (!stage.matrix.is_empty()).then(|| stage.base_name.clone()),
            resources: stage.resources,
            secret_env: stage
                .secret_env
                .iter()
                .filter_map(|name| {
                    stage
                        .env
                        .get(name)
                        .map(|value| (name.clone(), value.clone()))
                })
                .collect(),
            reply,
        };
        {
            let submitter = self.submitter.lock().unwrap_or_else(|p| p.into_inner());
            let Some(submitter) = submitter.as_ref() else {
                return Err(StageFailure::Interrupted);
            };
            submitter
                .send(submission)
                .map_err(|_| StageFailure::Submit("the submitting thread stopped".to_string()))?;
        }
        let job_id = answer
            .recv()
            .map_err(|_| StageFailure::Submit("the submitting thread stopped".to_string()))?
            .map_err(|error| StageFailure::Submit(error.to_string()))?;
        tracing::info!("stage `{}`: Slurm job {job_id}", stage.name);
        *placement.lock().unwrap_or_else(|p| p.into_inner()) = Some(Placement {
            job_id: job_id.clone(),
            node: None,
            queued: None,
        });
        if interrupt::requested() {
            self.cancel_all();
        }

        let ended = match output {
            JobOutput::Log => self.wait(&job_id, &files, &stage.resources, placement, submitted_ms),
            JobOutput::Events(read) => {
                let finished = AtomicBool::new(false);
                // The events are read here, as they grow; the job is
                // watched beside, and its end tells the reader to stop.
                std::thread::scope(|scope| {
                    let watcher = scope.spawn(|| {
                        let ended =
                            self.wait(&job_id, &files, &stage.resources, placement, submitted_ms);
                        finished.store(true, Ordering::SeqCst);
                        ended
                    });
                    let mut tail = TailReader {
                        path: &files.events,
                        file: None,
                        offset: 0,
                        finished: &finished,
                    };
                    let read = read(&mut tail);
                    let ended = watcher.join().unwrap_or_else(|_| {
                        Err(StageFailure::Submit(
                            "the thread watching the job panicked".to_string(),
                        ))
                    });
                    ended.and_then(|end| read.map(|()| end))
                })
            }
        };
        if events {
            append_file(&files.stderr, log_path);
        }
        match &ended {
            // What is left to read is in the log; the job files of a
            // failed stage stay for a look (docs/scale-out.md).
            Ok(status) if status.success() => files.remove(),
            _ => append_file(&files.slurm_out, log_path),
        }
        match ended {
            // A step of several tasks: name the rank that brought it down,
            // as the local launcher does, not rank 0's SIGTERM.
            Ok(status) if !status.success() => match srun_tasks::culprit(log_path) {
                Some(message) => Err(StageFailure::Reported {
                    message,
                    hint: Some(
                        "its last lines are in the stage log, with [rankN] in front".to_string(),
                    ),
                }),
                None => Ok(status),
            },
            other => other,
        }
    }

    /// Waits until the job's exit file appears or Slurm says it ended.
    fn wait(
        &self,
        job_id: &str,
        files: &JobFiles,
        resources: &Resources,
        slot: &Mutex<Option<Placement>>,
        submitted_ms: u64,
    ) -> std::result::Result<ExitStatus, StageFailure> {
        let mut completed_at: Option<Instant> = None;
        let mut cancel_sent_at: Option<Instant> = None;
        loop {
            let seen = self.queue.job(job_id);
            let node = seen.as_ref().and_then(|job| job.node.clone());
            if let Some(node) = &node {
                if let Some(placement) = slot.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                    placement.node = Some(node.clone());
                }
            }
            if let Some(exit) = read_exit_file(&files.exit) {
                log_timing(job_id, submitted_ms, &exit);
                let code = exit.code;
                let node = exit.node.or(node);
                // The node's clock against the head's: a skew between them
                // shows here, but a start before submission is no wait.
                let queued = exit
                    .started_ms
                    .map(|started| Duration::from_millis(started.saturating_sub(submitted_ms)));
                let placement = Placement {
                    job_id: job_id.to_string(),
                    node,
                    queued,
                };
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(placement);
                // The code as a wait status, so that it reads as a local one.
                return Ok(std::os::unix::process::ExitStatusExt::from_raw(
                    (code & 0xff) << 8,
                ));
            }
            let where_ = || match &node {
                Some(node) => format!("Slurm job {job_id} on {node}"),
                None => format!("Slurm job {job_id}"),
            };
            match seen.as_ref().map(|job| &job.state) {
                Some(JobState::Completed) => {
                    let since = *completed_at.get_or_insert_with(Instant::now);
                    if since.elapsed() > EXIT_FILE_GRACE {
                        return Err(StageFailure::Job {
                            job: where_(),
                            what: format!(
                                "completed, but its exit file `{}` never appeared here; the nodes must share the project directory with this machine (docs/scale-out.md)",
                                files.exit.display()
                            ),
                        });
                    }
                }
                Some(JobState::Ended { state, reason }) => {
                    // The exit file may have landed between the two looks.
                    if read_exit_file(&files.exit).is_some() {
                        continue;
                    }
                    if interrupt::requested() || self.queue.is_cancelled() {
                        return Err(StageFailure::Interrupted);
                    }
                    return Err(StageFailure::Job {
                        job: where_(),
                        what: describe_end(state, reason.as_deref(), resources),
                    });
                }
                Some(JobState::Vanished) => {
                    if read_exit_file(&files.exit).is_some() {
                        continue;
                    }
                    if interrupt::requested() {
                        return Err(StageFailure::Interrupted);
                    }
                    return Err(StageFailure::Job {
                        job: where_(),
                        what: "left the queue without an exit file (purged from Slurm's memory before pipe saw it end); run again".to_string(),
                    });
                }
                _ => {}
            }
            if interrupt::requested() {
                let at = *cancel_sent_at.get_or_insert_with(|| {
                    self.cancel_all();
                    Instant::now()
                });
                if at.elapsed() > CANCEL_WAIT {
                    return Err(StageFailure::Interrupted);
                }
            }
            if let Some(silent_for) = self.queue.unreachable_for() {
                if silent_for > UNREACHABLE_LIMIT {
                    return Err(StageFailure::Job {
                        job: where_(),
                        what: format!(
                            "has not been heard of for {}: Slurm's controller does not answer ({}); the job may still run: `scancel {job_id}`",
                            format_seconds(silent_for.as_secs_f64().round()),
                            self.queue
                                .last_error()
                                .map(|error| error.to_string())
                                .unwrap_or_default()
                        ),
                    });
                }
            }
            self.queue.wait_for_change(Duration::from_millis(100));
        }
    }

    /// Cancels every queued and running job of the run (Ctrl-C, SIGTERM).
    pub(super) fn cancel_all(&self) {
        if self.queue.cancel() {
            return;
        }
        // Nothing submitted after this point.
        self.submitter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        match Command::new("scancel")
            .arg(format!("--name={}", self.job_name))
            .stdin(Stdio::null())
            .output()
        {
            Ok(output) if output.status.success() => {
                tracing::info!("cancelled the run's Slurm jobs ({})", self.job_name)
            }
            Ok(output) => tracing::warn!(
                "scancel --name={} failed: {}",
                self.job_name,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
            Err(error) => tracing::warn!("cannot run scancel: {error}"),
        }
        self.queue.wake();
    }

    /// Stops the threads; the reaper leaves the jobs alone.
    pub(super) fn finish(&self) {
        self.submitter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.queue.stop();
        for thread in self
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            let _ = thread.join();
        }
        if let Some(mut reaper) = self.reaper.lock().unwrap_or_else(|p| p.into_inner()).take() {
            if let Some(mut stdin) = reaper.stdin.take() {
                let _ = stdin.write_all(b"done\n");
            }
            let _ = reaper.wait();
        }
        // Empty unless a stage failed and left its job files for a look.
        if std::fs::remove_dir(&self.dir).is_ok() {
            if let Some(parent) = self.dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Jobs of an earlier run of this project that are still queued or
/// running: a `pipe` killed together with its reaper (a lost login node)
/// leaves them. They would write into outputs this run is about to make,
/// so they are cancelled, and waited for, before anything starts; the
/// local executor does the same with the process groups of a killed run.
/// A run that ended leaves no job directory unless a stage failed, so
/// Slurm is asked only when there is one.
pub(super) fn settle_leftover_jobs(state_dir: &Path) {
    let prefix = state_dir.join("jobs");
    if std::fs::read_dir(&prefix).map_or(true, |mut entries| entries.next().is_none()) {
        return;
    }
    let prefix = prefix.to_string_lossy();
    let look = || -> Vec<String> {
        let mut squeue = Command::new("squeue");
        squeue.args(["--noheader", "--me", "--format=%i|%T|%o"]);
        let Ok(text) = queue::run_with_timeout(squeue, Duration::from_secs(60)) else {
            return Vec::new();
        };
        text.lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.trim().splitn(3, '|').collect();
                let [id, state, script] = fields.as_slice() else {
                    return None;
                };
                let active = !matches!(
                    *state,
                    "COMPLETED"
                        | "FAILED"
                        | "CANCELLED"
                        | "TIMEOUT"
                        | "OUT_OF_MEMORY"
                        | "NODE_FAIL"
                        | "BOOT_FAIL"
                        | "PREEMPTED"
                        | "DEADLINE"
                );
                (active && script.starts_with(&*prefix)).then(|| id.to_string())
            })
            .collect()
    };
    let leftovers = look();
    if leftovers.is_empty() {
        return;
    }
    tracing::warn!(
        "Slurm jobs of an earlier run of this project are still in the queue ({}); cancelling them before this run starts",
        leftovers.join(", ")
    );
    for job in &leftovers {
        cancel_job(job);
    }
    let started = Instant::now();
    while !look().is_empty() && started.elapsed() < CANCEL_WAIT * 8 {
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// How long the job waited and how soon pipe saw it end (`PIPE_LOG=info`;
/// scripts/bench/slurm_overhead.sh reads it).
fn log_timing(job_id: &str, submitted_ms: u64, exit: &ExitFile) {
    let (Some(started), Some(ended)) = (exit.started_ms, exit.ended_ms) else {
        return;
    };
    let seconds = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1000.0;
    tracing::info!(
        "Slurm job {job_id}: {:.3} s from submission to start, ran {:.3} s, seen {:.3} s after its end",
        seconds(submitted_ms, started),
        seconds(started, ended),
        seconds(ended, crate::runs::now_ms()),
    );
}

/// What the job's script wrote after its command: `CODE NODE STARTED
/// ENDED` (the two times in ms since the epoch), renamed into place so that
/// it is never read half-written.
struct ExitFile {
    code: i32,
    node: Option<String>,
    started_ms: Option<u64>,
    ended_ms: Option<u64>,
}

fn read_exit_file(path: &Path) -> Option<ExitFile> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut words = text.split_whitespace();
    let code = words.next()?.parse::<i32>().ok()?;
    let node = words.next().map(str::to_string);
    let mut time = || words.next().and_then(|word| word.parse::<u64>().ok());
    Some(ExitFile {
        code,
        node,
        started_ms: time(),
        ended_ms: time(),
    })
}

/// What a job's end state means, in the user's terms.
fn describe_end(state: &str, reason: Option<&str>, resources: &Resources) -> String {
    let reason = reason
        .filter(|reason| !reason.is_empty() && *reason != "None")
        .map(|reason| format!(" (Slurm: {reason})"))
        .unwrap_or_default();
    match state {
        "TIMEOUT" | "DEADLINE" => format!(
            "timed out: it ran past its time limit{}{reason}; raise `resources.time`",
            resources
                .time_s
                .map(|s| format!(" of {}", crate::pipeline::slurm_time(s)))
                .unwrap_or_default()
        ),
        "CANCELLED" => format!(
            "was cancelled{reason} (scancel, an administrator, or a dependency that failed)"
        ),
        "OUT_OF_MEMORY" => format!(
            "ran out of memory{}{reason}; raise `resources.mem`",
            resources
                .mem_mb
                .map(|mb| format!(" (asked for {mb} MiB)"))
                .unwrap_or_default()
        ),
        "NODE_FAIL" | "BOOT_FAIL" => {
            format!("failed because its node failed{reason}; run again")
        }
        "PREEMPTED" => format!("was preempted by a job of higher priority{reason}; run again"),
        "FAILED" => format!(
            "failed before its command finished{reason}; a node that cannot see the project directory fails so, and nothing of the job reaches this machine: the nodes must share it (docs/scale-out.md)"
        ),
        other => format!("ended as {other}{reason}"),
    }
}

/// A reader of a file that another machine is still writing: at its end
/// it waits for more until the job is over, then reads what is left.
struct TailReader<'a> {
    path: &'a Path,
    file: Option<std::fs::File>,
    offset: u64,
    finished: &'a AtomicBool,
}

impl Read for TailReader<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        use std::io::{Seek, SeekFrom};
        loop {
            let last_look = self.finished.load(Ordering::SeqCst);
            if self.file.is_none() {
                if let Ok(file) = std::fs::File::open(self.path) {
                    self.file = Some(file);
                }
            }
            if let Some(file) = self.file.as_mut() {
                // Reopening is what makes a network filesystem show new data.
                file.seek(SeekFrom::Start(self.offset))?;
                let read = file.read(buffer)?;
                if read > 0 {
                    self.offset += read as u64;
                    return Ok(read);
                }
                self.file = None;
            }
            if last_look {
                return Ok(0);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Appends what the node wrote to `from` to the stage's log.
fn append_file(from: &Path, log: &Path) {
    let Ok(bytes) = std::fs::read(from) else {
        return;
    };
    if bytes.is_empty() {
        return;
    }
    if let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(log) {
        let _ = file.write_all(&bytes);
    }
}

/// A process that outlives pipe only to cancel the run's jobs when pipe
/// dies without writing `done` to it (kill -9, the OOM killer): its stdin
/// is a pipe from this process, which the kernel closes either way.
fn spawn_reaper(job_name: &str) -> Option<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let spawned = Command::new("sh")
        .args([
            "-c",
            r#"read -r line; [ "$line" = done ] || exec scancel --name="$1""#,
            "pipe-reaper",
            job_name,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own group: Ctrl-C in the terminal reaches pipe, which
        // cancels the jobs itself and then lets the reaper go.
        .process_group(0)
        .spawn();
    match spawned {
        Ok(child) => Some(child),
        Err(error) => {
            tracing::warn!("cannot start the process that cancels jobs if pipe is killed: {error}");
            None
        }
    }
}
