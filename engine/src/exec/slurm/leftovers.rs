//! Jobs a killed run left in the queue, cancelled before the next run.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::jobs::{cancel_job, CANCEL_WAIT};
use super::queue;

/// Jobs of an earlier run of this project that are still queued or
/// running: a `pipe` killed together with its reaper (a lost login node)
/// leaves them. They would write into outputs this run is about to make,
/// so they are cancelled, and waited for, before anything starts; the
/// local executor does the same with the process groups of a killed run.
/// A run that ended leaves no job directory unless a stage failed, so
/// Slurm is asked only when there is one.
pub(crate) fn settle_leftover_jobs(state_dir: &Path) {
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
