//! What Slurm says about the run's jobs: one `squeue` for all of them per
//! look, more often while things change, backing off while the controller
//! does not answer; and the partitions' largest nodes, to refuse a request
//! no node can satisfy before it waits in the queue forever.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use pipe_protocol::format::format_seconds;

use crate::pipeline::Stage;
use crate::{Diagnostic, EngineError, Result, UsageError};

/// A job as the last look at the queue saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SeenJob {
    pub state: JobState,
    pub node: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum JobState {
    /// Pending, running, completing, suspended...
    Active,
    Completed,
    /// Failed, cancelled, timed out, out of memory, node failure: Slurm's
    /// state name and its reason.
    Ended {
        state: String,
        reason: Option<String>,
    },
    /// Seen before, missing from a later answer: purged.
    Vanished,
}

const FASTEST: Duration = Duration::from_millis(500);
const SLOWEST_WHEN_FAILING: Duration = Duration::from_secs(60);
const SQUEUE_TIMEOUT: Duration = Duration::from_secs(60);

pub(super) struct Queue {
    job_name: String,
    /// The run's jobs were cancelled: a job submitted after that must be
    /// cancelled on its own.
    cancelled: std::sync::atomic::AtomicBool,
    slowest: Duration,
    view: Mutex<View>,
    changed: Condvar,
}

#[derive(Default)]
struct View {
    jobs: HashMap<String, SeenJob>,
    /// Jobs submitted: the queue is read only while there are some.
    submitted: usize,
    /// Poll soon: a job was just submitted, or cancelled.
    woken: bool,
    stop: bool,
    failing_since: Option<Instant>,
    last_error: Option<SlurmError>,
}

impl Queue {
    pub(super) fn new(job_name: String, slowest: Duration) -> Queue {
        Queue {
            job_name,
            cancelled: std::sync::atomic::AtomicBool::new(false),
            slowest: slowest.max(FASTEST),
            view: Mutex::new(View::default()),
            changed: Condvar::new(),
        }
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn job(&self, id: &str) -> Option<SeenJob> {
        self.view().jobs.get(id).cloned()
    }

    pub(super) fn submitted(&self, count: usize) {
        let mut view = self.view();
        view.submitted += count;
        view.woken = true;
        self.changed.notify_all();
    }

    /// Marks the run cancelled; whether it already was.
    pub(super) fn cancel(&self) -> bool {
        self.cancelled
            .swap(true, std::sync::atomic::Ordering::SeqCst)
    }

    pub(super) fn is_cancelled(&self) -> bool {
        self.cancelled.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(super) fn wake(&self) {
        self.view().woken = true;
        self.changed.notify_all();
    }

    pub(super) fn stop(&self) {
        self.view().stop = true;
        self.changed.notify_all();
    }

    /// How long the controller has failed to answer, if it is failing.
    pub(super) fn unreachable_for(&self) -> Option<Duration> {
        self.view().failing_since.map(|since| since.elapsed())
    }

    pub(super) fn last_error(&self) -> Option<SlurmError> {
        self.view().last_error.clone()
    }

    pub(super) fn wait_for_change(&self, at_most: Duration) {
        let view = self.view();
        let _ = self.changed.wait_timeout(view, at_most);
    }

    /// The poller's loop, on a thread of its own.
    pub(super) fn poll_until_stopped(&self) {
        let mut interval = FASTEST;
        loop {
            {
                let mut view = self.view();
                let deadline = Instant::now() + interval;
                while !view.stop && !view.woken {
                    let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                        break;
                    };
                    view = self
                        .changed
                        .wait_timeout(view, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                if view.stop {
                    return;
                }
                if view.woken {
                    view.woken = false;
                    interval = FASTEST;
                }
                if view.submitted == 0 {
                    continue;
                }
            }
            let answer = self.look();
            let mut view = self.view();
            match answer {
                Ok(jobs) => {
                    let changed = merge(&mut view.jobs, jobs);
                    view.failing_since = None;
                    view.last_error = None;
                    interval = if changed {
                        FASTEST
                    } else {
                        (interval * 3 / 2).min(self.slowest)
                    };
                }
                Err(error) => {
                    if view.failing_since.is_none() {
                        tracing::warn!("Slurm's controller does not answer ({error}); pipe keeps asking, and a job that finishes is still seen by its exit file");
                        view.failing_since = Some(Instant::now());
                    }
                    view.last_error = Some(error);
                    interval = (interval * 2).min(SLOWEST_WHEN_FAILING);
                }
            }
            self.changed.notify_all();
        }
    }

    /// Every job of the run, by id (`123`, or `123_4` for a task of an array).
    fn look(&self) -> std::result::Result<HashMap<String, SeenJob>, SlurmError> {
        let mut squeue = Command::new("squeue");
        squeue.args([
            "--noheader",
            "--states=all",
            &format!("--name={}", self.job_name),
            "--format=%i|%T|%r|%N",
        ]);
        let text = run_with_timeout(squeue, SQUEUE_TIMEOUT)?;
        Ok(parse_squeue(&text))
    }
}

/// Folds a new answer into what was seen; whether anything changed.
fn merge(jobs: &mut HashMap<String, SeenJob>, answer: HashMap<String, SeenJob>) -> bool {
    let mut changed = false;
    for (id, job) in jobs.iter_mut() {
        if !answer.contains_key(id) && job.state != JobState::Vanished {
            // A finished job may drop out before its record was read: only
            // an unfinished one has truly vanished.
            if job.state == JobState::Active {
                job.state = JobState::Vanished;
                changed = true;
            }
        }
    }
    for (id, job) in answer {
        if jobs.get(&id) != Some(&job) {
            changed = true;
            jobs.insert(id, job);
        }
    }
    changed
}

pub(super) fn parse_squeue(text: &str) -> HashMap<String, SeenJob> {
    let mut jobs = HashMap::new();
    for line in text.lines() {
        let mut fields = line.trim().split('|');
        let (Some(id), Some(state)) = (fields.next(), fields.next()) else {
            continue;
        };
        let reason = fields.next().map(str::trim).filter(|r| !r.is_empty());
        let node = fields
            .next()
            .map(str::trim)
            .filter(|node| !node.is_empty() && *node != "(null)")
            .map(str::to_string);
        let state = match state.trim() {
            "COMPLETED" => JobState::Completed,
            ended @ ("FAILED" | "CANCELLED" | "TIMEOUT" | "OUT_OF_MEMORY" | "NODE_FAIL"
            | "BOOT_FAIL" | "PREEMPTED" | "DEADLINE" | "SPECIAL_EXIT") => JobState::Ended {
                state: ended.to_string(),
                reason: reason.map(str::to_string),
            },
            _ => JobState::Active,
        };
        for id in expand_array_ids(id.trim()) {
            jobs.insert(
                id,
                SeenJob {
                    state: state.clone(),
                    node: node.clone(),
                },
            );
        }
    }
    jobs
}

/// `123` -> [123]; `123_4` -> [123_4]; a pending array's `123_[4-6,9%2]`
/// -> [123_4, 123_5, 123_6, 123_9].
fn expand_array_ids(id: &str) -> Vec<String> {
    let Some((job, tasks)) = id.split_once("_[") else {
        return vec![id.to_string()];
    };
    let tasks = tasks.trim_end_matches(']');
    let tasks = tasks.split('%').next().unwrap_or_default();
    let mut ids = Vec::new();
    for part in tasks.split(',') {
        match part.split_once('-') {
            Some((low, high)) => {
                if let (Ok(low), Ok(high)) = (low.parse::<u64>(), high.parse::<u64>()) {
                    // A stage index: never more than the pipeline's stages.
                    for task in low..=high.min(low + 100_000) {
                        ids.push(format!("{job}_{task}"));
                    }
                }
            }
            None => ids.push(format!("{job}_{part}")),
        }
    }
    ids
}

/// Why a Slurm client command (`squeue`, `sinfo`, `sbatch`) gave no
/// answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SlurmError {
    #[error("`{program}` is not on PATH")]
    NotOnPath { program: String },
    /// `sbatch` is missing: this machine cannot submit jobs.
    #[error(
        "`sbatch` is not on PATH: run pipe on a machine that can submit to the cluster (a login \
         node), or use `--executor local`"
    )]
    NotASubmitHost,
    #[error("cannot run {program}: {detail}")]
    CannotRun { program: String, detail: String },
    #[error("{program} did not answer within {}", format_seconds(.timeout.as_secs_f64()))]
    TimedOut { program: String, timeout: Duration },
    #[error("waiting for {program}: {detail}")]
    Wait { program: String, detail: String },
    /// It exited with an error: the last line it wrote to stderr.
    #[error("{last_line}")]
    Failed { last_line: String },
    /// `sbatch` said no, for a reason that waiting does not cure.
    #[error("sbatch refused the job: {message}")]
    Refused { message: String },
    #[error("cannot write `{}`: {detail}", .path.display())]
    Script {
        path: std::path::PathBuf,
        detail: String,
    },
}

/// Runs a Slurm client command; its stdout, or why it failed.
pub(super) fn run_with_timeout(
    mut command: Command,
    timeout: Duration,
) -> std::result::Result<String, SlurmError> {
    use pipe_protocol::child::{output_within, ChildError};
    let program = command.get_program().to_string_lossy().to_string();
    let finished = output_within(&mut command, timeout).map_err(|error| match error {
        ChildError::Spawn(error) if error.kind() == std::io::ErrorKind::NotFound => {
            SlurmError::NotOnPath { program }
        }
        ChildError::Spawn(error) => SlurmError::CannotRun {
            program,
            detail: error.to_string(),
        },
        ChildError::TimedOut(_) => SlurmError::TimedOut { program, timeout },
        ChildError::Wait(error) => SlurmError::Wait {
            program,
            detail: error.to_string(),
        },
    })?;
    if finished.status.success() {
        Ok(String::from_utf8_lossy(&finished.stdout).into_owned())
    } else {
        Err(SlurmError::Failed {
            last_line: finished.last_stderr_line(),
        })
    }
}

/// The nodes of every partition, as `sinfo` lists them.
pub(crate) struct Partitions {
    nodes: Vec<NodeInfo>,
}

#[derive(Debug, Clone)]
struct NodeInfo {
    partition: String,
    default: bool,
    cpus: u32,
    mem_mb: u64,
    gpus: u32,
    /// The partition's time limit; `None` when unlimited.
    max_time_s: Option<u64>,
}

impl Partitions {
    pub(crate) fn query() -> std::result::Result<Partitions, SlurmError> {
        let mut sinfo = Command::new("sinfo");
        sinfo.args(["--noheader", "--Node", "--format=%N|%P|%c|%m|%G|%l"]);
        let text = run_with_timeout(sinfo, SQUEUE_TIMEOUT)?;
        Ok(Partitions::parse(&text))
    }

    fn parse(text: &str) -> Partitions {
        let nodes = text
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.trim().split('|').collect();
                let [_, partition, cpus, mem, gres, time] = fields.as_slice() else {
                    return None;
                };
                Some(NodeInfo {
                    default: partition.ends_with('*'),
                    partition: partition.trim_end_matches('*').to_string(),
                    cpus: cpus.trim().parse().ok()?,
                    mem_mb: mem.trim().trim_end_matches('+').parse().ok()?,
                    gpus: gpus_in_gres(gres),
                    max_time_s: match time.trim() {
                        "infinite" | "UNLIMITED" | "n/a" => None,
                        limit => crate::pipeline::parse_time_limit_s(limit),
                    },
                })
            })
            .collect();
        Partitions { nodes }
    }

    /// Refuses a stage that asks for more than any node of `partition`
    /// (the default one when `None`) has, or more time than it allows.
    pub(crate) fn check(&self, partition: Option<&str>, stages: &[&Stage]) -> Result<()> {
        let nodes: Vec<&NodeInfo> = self
            .nodes
            .iter()
            .filter(|node| match partition {
                Some(name) => node.partition == name,
                None => node.default,
            })
            .collect();
        let name = partition.map_or_else(
            || "the default partition".to_string(),
            |p| format!("partition `{p}`"),
        );
        if nodes.is_empty() {
            let mut known: Vec<String> = self.nodes.iter().map(|n| n.partition.clone()).collect();
            known.dedup();
            return Err(UsageError::NoPartition {
                partition: name,
                known,
            }
            .into());
        }
        let most = |pick: fn(&NodeInfo) -> u64| nodes.iter().map(|n| pick(n)).max().unwrap_or(0);
        let (cpus, mem, gpus) = (
            most(|n| u64::from(n.cpus)),
            most(|n| n.mem_mb),
            most(|n| u64::from(n.gpus)),
        );
        let max_time = nodes.iter().map(|n| n.max_time_s).max().flatten();
        let mut diagnostics = Vec::new();
        for stage in stages {
            let resources = &stage.resources;
            let mut problems = Vec::new();
            if u64::from(resources.cpus) > cpus {
                problems.push(format!(
                    "{} CPUs, but the largest node of {name} has {cpus}",
                    resources.cpus
                ));
            }
            if let Some(asked) = resources.mem_mb.filter(|&asked| asked > mem) {
                problems.push(format!(
                    "{asked} MiB of memory, but the largest node of {name} has {mem} MiB"
                ));
            }
            if u64::from(resources.gpus) > gpus {
                problems.push(format!(
                    "{} GPUs, but the most any node of {name} has is {gpus}",
                    resources.gpus
                ));
            }
            if resources.nodes > 1 {
                let fitting = nodes
                    .iter()
                    .filter(|node| {
                        node.cpus >= resources.cpus
                            && node.gpus >= resources.gpus
                            && resources.mem_mb.is_none_or(|mb| node.mem_mb >= mb)
                    })
                    .count();
                if fitting < resources.nodes as usize {
                    problems.push(format!(
                        "{} nodes, but {name} has {fitting} node(s) that can hold its share of it",
                        resources.nodes
                    ));
                }
            }
            if u64::from(resources.ranks_per_node) > cpus {
                problems.push(format!(
                    "{} tasks per node (one per replica), but the largest node of {name} has {cpus} CPUs",
                    resources.ranks_per_node
                ));
            }
            if let (Some(asked), Some(limit)) = (resources.time_s, max_time) {
                if asked > limit {
                    problems.push(format!(
                        "a time limit of {}, but {name} allows at most {}",
                        crate::pipeline::slurm_time(asked),
                        crate::pipeline::slurm_time(limit)
                    ));
                }
            }
            for problem in problems {
                diagnostics.push(
                    Diagnostic::new(
                        "impossible-request",
                        format!("stage `{}` asks for {problem}: its job would wait in the queue forever", stage.name),
                    )
                    .at(stage.location.clone())
                    .with_hint("lower the stage's `resources`, or choose a partition with larger nodes (`executor: { partition: NAME }`)"),
                );
            }
        }
        if diagnostics.is_empty() {
            Ok(())
        } else {
            Err(EngineError::Spec(diagnostics))
        }
    }
}

/// GPUs a node offers: `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:a100:2,gpu:v100:2`.
fn gpus_in_gres(gres: &str) -> u32 {
    gres.split(',')
        .filter(|item| item.starts_with("gpu"))
        .filter_map(|item| {
            let item = item.split('(').next().unwrap_or(item);
            item.rsplit(':').next()?.parse::<u32>().ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_lines_become_jobs() {
        let jobs = parse_squeue(
            "12|COMPLETED|None|node1\n13|TIMEOUT|TimeLimit|node1\n14_[3-4,7%2]|PENDING|Resources|\n15_2|RUNNING|None|node2\n",
        );
        assert_eq!(jobs["12"].state, JobState::Completed);
        assert_eq!(jobs["12"].node.as_deref(), Some("node1"));
        assert_eq!(
            jobs["13"].state,
            JobState::Ended {
                state: "TIMEOUT".into(),
                reason: Some("TimeLimit".into())
            }
        );
        for id in ["14_3", "14_4", "14_7"] {
            assert_eq!(jobs[id].state, JobState::Active, "{id}");
            assert_eq!(jobs[id].node, None);
        }
        assert!(!jobs.contains_key("14_5"));
        assert_eq!(jobs["15_2"].state, JobState::Active);
    }

    #[test]
    fn a_running_job_missing_from_the_answer_has_vanished() {
        let mut seen = parse_squeue("1|RUNNING|None|n\n2|COMPLETED|None|n\n");
        assert!(merge(&mut seen, HashMap::new()));
        assert_eq!(seen["1"].state, JobState::Vanished);
        assert_eq!(seen["2"].state, JobState::Completed);
    }

    #[test]
    fn gres_counts_gpus() {
        assert_eq!(gpus_in_gres("(null)"), 0);
        assert_eq!(gpus_in_gres("gpu:4"), 4);
        assert_eq!(gpus_in_gres("gpu:a100:4(S:0-1)"), 4);
        assert_eq!(gpus_in_gres("gpu:a100:2,gpu:v100:2,mps:100"), 4);
    }

    #[test]
    fn sinfo_lines_become_nodes() {
        let partitions = Partitions::parse(
            "n1|debug*|8|7000|(null)|infinite\nn2|gpu|64|512000|gpu:a100:4(S:0-1)|2-00:00:00\n",
        );
        assert_eq!(partitions.nodes.len(), 2);
        assert!(partitions.nodes[0].default);
        assert_eq!(partitions.nodes[0].max_time_s, None);
        assert_eq!(partitions.nodes[1].gpus, 4);
        assert_eq!(partitions.nodes[1].max_time_s, Some(172_800));
    }
}
