//! Where a stage's command runs: here, in its own process group
//! (process.rs), or as a Slurm job (slurm/). The scheduler, a stage's
//! execution and the worker client ask [`executor_for`] and use the one
//! answer, so no other file tells the two apart.

use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::Mutex;

use pipe_cache::ActionKey;

use super::context::Context;
use super::failure::StageFailure;
use super::process::{spawn_and_wait, ReadEvents};
use super::slurm::{JobOutput, LazyCluster, Placement};
use crate::events::Event;
use crate::pipeline::Stage;
use crate::runs::RunId;

/// One stage's command, and what its run needs to know of the stage.
pub(super) struct StageCommand<'a> {
    pub(super) context: &'a Context<'a>,
    pub(super) index: usize,
    pub(super) stage: &'a Stage,
    /// The key it runs under, which names a worker's resume directory.
    pub(super) key: &'a ActionKey,
    pub(super) gpus: &'a [String],
    pub(super) log_path: &'a Path,
    /// The run's id: a stage that runs has its row written.
    pub(super) run_id: RunId,
}

/// What running a stage's command came to, and where it ran: a job's id,
/// node and time in the queue, for the stage's record, even when it failed.
pub(super) struct Execution<T> {
    pub(super) result: Result<T, StageFailure>,
    pub(super) placement: Option<Placement>,
}

impl<T> Execution<T> {
    /// Failed before anything was started: ran nowhere.
    pub(super) fn not_started(failure: StageFailure) -> Execution<T> {
        Execution {
            result: Err(failure),
            placement: None,
        }
    }

    /// The next step on what the command gave, where it ran kept.
    pub(super) fn then<U>(self, next: impl FnOnce(T) -> Result<U, StageFailure>) -> Execution<U> {
        Execution {
            result: self.result.and_then(next),
            placement: self.placement,
        }
    }
}

/// A place stages' commands run.
pub(super) trait StageExecutor: Sync {
    /// Whether a command run here takes this machine's `-j` slots and GPUs.
    fn runs_here(&self) -> bool;

    /// Runs `command` to its end; `read_events` is given its stdout when
    /// the caller piped it (a worker's events).
    fn execute(
        &self,
        job: &StageCommand<'_>,
        command: Command,
        read_events: Option<ReadEvents<'_>>,
    ) -> Execution<ExitStatus>;
}

/// This machine: the command in its own process group, dying with pipe.
struct Here;

/// The executor of `stage` in this run: the cluster under `executor:
/// slurm` unless the stage is marked `local`, else this machine.
pub(super) fn executor_for<'c>(context: &'c Context<'_>, stage: &Stage) -> &'c dyn StageExecutor {
    match &context.cluster {
        Some(cluster) if !stage.local => cluster,
        _ => &Here,
    }
}

impl StageExecutor for Here {
    fn runs_here(&self) -> bool {
        true
    }

    fn execute(
        &self,
        job: &StageCommand<'_>,
        command: Command,
        read_events: Option<ReadEvents<'_>>,
    ) -> Execution<ExitStatus> {
        Execution {
            result: spawn_and_wait(
                job.context,
                job.index,
                job.stage,
                job.gpus,
                command,
                job.log_path,
                read_events,
            ),
            placement: None,
        }
    }
}

impl StageExecutor for LazyCluster {
    fn runs_here(&self) -> bool {
        false
    }

    fn execute(
        &self,
        job: &StageCommand<'_>,
        command: Command,
        read_events: Option<ReadEvents<'_>>,
    ) -> Execution<ExitStatus> {
        let cluster = match self.get() {
            Ok(cluster) => cluster,
            Err(failure) => return Execution::not_started(failure),
        };
        (job.context.observer)(Event::StageRunning {
            stage: &job.stage.name,
            log: job.log_path,
        });
        let output = match read_events {
            Some(read) => JobOutput::Events(read),
            None => JobOutput::Log,
        };
        let seen = Mutex::new(None);
        let result = cluster.run(
            job.index,
            job.stage,
            job.context.root_of(job.stage),
            job.run_id,
            &job_argv(&command),
            job.log_path,
            output,
            &seen,
        );
        Execution {
            result,
            placement: seen.into_inner().unwrap_or_else(|p| p.into_inner()),
        }
    }
}

/// `command` as the job's script runs it: what the command sets for
/// itself (the training worker's library path) travels as `env
/// NAME=VALUE` before it, since the job's environment is the submitting
/// shell's.
fn job_argv(command: &Command) -> Vec<String> {
    let mut argv: Vec<String> = Vec::new();
    let own_env: Vec<String> = command
        .get_envs()
        .filter_map(|(name, value)| {
            Some(format!(
                "{}={}",
                name.to_string_lossy(),
                value?.to_string_lossy()
            ))
        })
        .collect();
    if !own_env.is_empty() {
        argv.push("env".to_string());
        argv.extend(own_env);
    }
    argv.push(command.get_program().to_string_lossy().into_owned());
    argv.extend(
        command
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned()),
    );
    argv
}
