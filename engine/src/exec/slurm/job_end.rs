//! How a job's end is seen: its exit file, or Slurm's word for it, read
//! as the user's terms.

use std::path::Path;
use std::process::ExitStatus;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pipe_protocol::format::format_seconds;

use super::jobs::{JobFiles, CANCEL_WAIT, UNREACHABLE_LIMIT};
use super::placement::Placement;
use super::queue::{JobState, Queue};
use crate::exec::failure::StageFailure;
use crate::interrupt;
use crate::pipeline::Resources;

/// How long a job that Slurm calls COMPLETED may take to show its exit
/// file on the head: attribute caches of network filesystems lag.
const EXIT_FILE_GRACE: Duration = Duration::from_secs(30);

/// Waits until the job's exit file appears or Slurm says it ended;
/// `cancel_all` stops the run's jobs when the user interrupts.
pub(super) fn wait(
    queue: &Queue,
    cancel_all: &dyn Fn(),
    job_id: &str,
    files: &JobFiles,
    resources: &Resources,
    slot: &Mutex<Option<Placement>>,
    submitted_ms: u64,
) -> std::result::Result<ExitStatus, StageFailure> {
    let mut completed_at: Option<Instant> = None;
    let mut cancel_sent_at: Option<Instant> = None;
    loop {
        let seen = queue.job(job_id);
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
                if interrupt::requested() || queue.is_cancelled() {
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
                cancel_all();
                Instant::now()
            });
            if at.elapsed() > CANCEL_WAIT {
                return Err(StageFailure::Interrupted);
            }
        }
        if let Some(silent_for) = queue.unreachable_for() {
            if silent_for > UNREACHABLE_LIMIT {
                return Err(StageFailure::Job {
                    job: where_(),
                    what: format!(
                        "has not been heard of for {}: Slurm's controller does not answer ({}); the job may still run: `scancel {job_id}`",
                        format_seconds(silent_for.as_secs_f64().round()),
                        queue
                            .last_error()
                            .map(|error| error.to_string())
                            .unwrap_or_default()
                    ),
                });
            }
        }
        queue.wait_for_change(Duration::from_millis(100));
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
