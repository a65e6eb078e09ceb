//! What a run and a worker build report as they happen: the engine's one
//! event type, which the CLI renders (as terminal lines or JSON) and which
//! nothing in the engine reads back.

use std::path::Path;
use std::time::Duration;

use crate::runs::RunId;
use crate::runs::{RunStatus, StageStatus};

/// Progress, as it happens, for the CLI to render.
#[derive(Debug)]
pub enum Event<'a> {
    /// Another `pipe run` holds this project; waiting for it.
    WaitingForLock {
        holder: Option<u32>,
    },
    RunStarted {
        run_id: RunId,
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
        /// The command as it ran, credentials masked, when it ran and
        /// failed (`Stage::shown_command`).
        command: Option<&'a str>,
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
    /// The newest line a running command stage wrote to its log, as it
    /// wrote it (a few times a second at most; cut to 200 characters, not
    /// made safe for a terminal).
    StageOutput {
        stage: &'a str,
        line: &'a str,
    },
    /// A line a built-in stage wants the user to see.
    StageMessage {
        stage: &'a str,
        text: &'a str,
    },
    /// A sweep (`pipe run -m`) starts its run `index` (from 0) of `total`,
    /// with these swept `-S` values.
    SweepRunStarting {
        index: usize,
        total: usize,
        swept: &'a [String],
    },
    /// `params.yaml` holds the run's `-S` values of `params` while its
    /// commands run (`crate::params_override`).
    ParamsFileWritten {
        file: &'a Path,
        params: &'a [&'a str],
    },
    /// The run put `params.yaml` back; `kept`: someone changed it during
    /// the run, so it was left as they made it, and its bytes before the
    /// run are there.
    ParamsFileRestored {
        file: &'a Path,
        kept: Option<&'a Path>,
    },
    RunFinished {
        run_id: RunId,
        status: RunStatus,
        /// False when every stage was fresh: then no run is recorded, and
        /// `run_id` names none.
        recorded: bool,
    },
    /// In a source checkout, pipe builds its workers (first use, or their
    /// sources changed) while loading the pipeline; cargo's own output
    /// follows on stderr.
    WorkerBuildStarted {
        workers: &'a [&'a str],
        /// libtorch is installed first (`pipe-stage-train`), unless
        /// `LIBTORCH` names one.
        libtorch: bool,
        target_dir: &'a Path,
    },
    WorkerBuildFinished {
        workers: &'a [&'a str],
        succeeded: bool,
        duration: Duration,
    },
}

pub type Observer<'a> = &'a (dyn Fn(Event<'_>) + Sync);
