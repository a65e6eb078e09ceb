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
    WaitingForLock { holder: Option<u32> },
    /// The run's id is not known yet: its row is written when it first
    /// does something (`RunFinished` names it).
    RunStarted { stages: usize },
    /// A stage's command started (cache misses only).
    StageRunning { stage: &'a str, log: &'a Path },
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
    StageOutput { stage: &'a str, line: &'a str },
    /// A line a built-in stage wants the user to see.
    StageMessage { stage: &'a str, text: &'a str },
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
    /// The run added these lines to the project's `.gitignore` (made
    /// when there was none): outputs of command stages, which pipe's
    /// cache holds (`crate::gitignore`).
    OutputsIgnored { file: &'a Path, lines: &'a [String] },
    /// Outputs of stages no longer in the pipeline, still in the work
    /// tree (`crate::orphans`): removed, with `--remove-orphans`, or left.
    Orphans { paths: &'a [String], removed: bool },
    RunFinished {
        status: RunStatus,
        /// The run as recorded; `None` when every stage was fresh: then no
        /// run is recorded.
        recorded: Option<RunId>,
    },
    /// In a source checkout, pipe builds its workers (first use, or their
    /// sources changed) when a stage that needs one must run. The tools'
    /// own output (cargo's, pip's) goes to `log`, not to the terminal.
    WorkerBuildStarted {
        workers: &'a [&'a str],
        /// libtorch is installed first (`pipe-stage-train`), unless
        /// `LIBTORCH` names one.
        libtorch: bool,
        target_dir: &'a Path,
        /// The cargo profile (`dev`, `release`, or a custom one's name).
        profile: &'a str,
        log: &'a Path,
    },
    /// A step of a worker build as it goes: sent when the step starts,
    /// when what it counts changes, and about once a second between, so
    /// that a reporter can show the time it has taken without a clock of
    /// its own.
    WorkerBuildProgress {
        workers: &'a [&'a str],
        step: BuildStep,
        /// libtorch: bytes pip has downloaded; cargo: crates compiled or
        /// found up to date.
        done: u64,
        /// cargo: the crates `cargo metadata` resolves for the workers, an
        /// estimate (a few crates more than cargo builds, where another
        /// member of the workspace enables an optional dependency).
        total: Option<u64>,
        /// libtorch: what pip is doing, from its latest line.
        detail: Option<&'a str>,
        /// Since the step started.
        elapsed: Duration,
    },
    WorkerBuildFinished {
        workers: &'a [&'a str],
        succeeded: bool,
        /// It was stopped unfinished: started ahead of the stages that
        /// need it, it is not needed by the run after all.
        stopped: bool,
        duration: Duration,
        log: &'a Path,
        /// On failure: the log's last lines, where the cause usually is.
        log_tail: Option<&'a str>,
    },
}

/// The steps of a worker build, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildStep {
    /// `scripts/bootstrap-libtorch.sh`: torch into `.venv/` with pip.
    Libtorch,
    /// `cargo build` of the workers.
    Cargo,
}

impl BuildStep {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildStep::Libtorch => "libtorch",
            BuildStep::Cargo => "cargo",
        }
    }
}

pub type Observer<'a> = &'a (dyn Fn(Event<'_>) + Sync);
