//! One run's connection to the cluster: the threads that submit and poll,
//! a stage's job from its script to its exit status, and the reaper that
//! cancels the jobs if pipe is killed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use super::job_end;
use super::jobs::{write_script, JobFiles};
use super::placement::{JobOutput, Placement};
use super::queue::Queue;
use super::script;
use super::srun_tasks;
use super::submit::{Submission, SubmitContext};
use super::tail::{append_file, TailReader};
use crate::exec::failure::StageFailure;
use crate::executor::SlurmSettings;
use crate::pipeline::Stage;
use crate::runs::RunId;
use crate::{interrupt, EngineError, Result};

/// The run's cluster, connected when the first stage needs a job: a run
/// whose stages are all cached starts no thread and no process for Slurm.
pub(crate) struct LazyCluster {
    settings: SlurmSettings,
    root: PathBuf,
    state_dir: PathBuf,
    run_id: RunId,
    cell: std::sync::OnceLock<Result<Cluster>>,
}

impl LazyCluster {
    pub(crate) fn new(
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

    pub(crate) fn get(&self) -> std::result::Result<&Cluster, StageFailure> {
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

    pub(crate) fn cancel_all(&self) {
        if let Some(cluster) = self.started() {
            cluster.cancel_all();
        }
    }

    pub(crate) fn finish(&self) {
        if let Some(cluster) = self.started() {
            cluster.finish();
        }
    }
}

/// One run's connection to the cluster.
pub(crate) struct Cluster {
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
    pub(crate) fn run(
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
    /// Waits for the job to end (`job_end::wait`), cancelling the run's
    /// jobs on Ctrl-C.
    fn wait(
        &self,
        job_id: &str,
        files: &JobFiles,
        resources: &crate::pipeline::Resources,
        slot: &Mutex<Option<Placement>>,
        submitted_ms: u64,
    ) -> std::result::Result<ExitStatus, StageFailure> {
        job_end::wait(
            &self.queue,
            &|| self.cancel_all(),
            job_id,
            files,
            resources,
            slot,
            submitted_ms,
        )
    }

    /// Cancels every queued and running job of the run (Ctrl-C, SIGTERM).
    pub(crate) fn cancel_all(&self) {
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
    pub(crate) fn finish(&self) {
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
