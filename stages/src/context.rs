//! What a running stage sees: its params, input paths, output directory,
//! and a way to report progress.

use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pipe_protocol::redact::redact_text;
use pipe_protocol::{Event, Invocation, RunContext};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Result, StageError};

pub struct StageContext {
    pub invocation: Invocation,
    last_progress: Mutex<Option<Instant>>,
    progress_interval: Duration,
}

/// Progress events are throttled to this interval (the final one of a
/// phase is always sent by `progress_done`).
const PROGRESS_INTERVAL: Duration = Duration::from_millis(200);

/// The engine's progress-line interval (seconds), shared so that a user
/// who asks for every reading (`0`) gets every one the stage makes, not
/// only those 200 ms apart: a phase shorter than that still shows moving.
const PROGRESS_INTERVAL_VAR: &str = "PIPE_PROGRESS_INTERVAL";

/// The worker's throttle: [`PROGRESS_INTERVAL`], or less when the user's
/// `PIPE_PROGRESS_INTERVAL` is shorter; never more, so a long interval
/// for log lines does not slow a terminal's live bar.
fn worker_progress_interval(setting: Option<&str>) -> Duration {
    setting
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
        .map_or(PROGRESS_INTERVAL, |seconds| {
            PROGRESS_INTERVAL.min(Duration::from_secs_f64(seconds.min(1.0)))
        })
}

impl StageContext {
    pub fn new(invocation: Invocation) -> StageContext {
        StageContext {
            invocation,
            last_progress: Mutex::new(None),
            progress_interval: worker_progress_interval(
                std::env::var(PROGRESS_INTERVAL_VAR).ok().as_deref(),
            ),
        }
    }

    /// The stage's params as its own `#[derive(Deserialize)]` struct, one
    /// field per `ParamSpec` (see `crate::params` for the errors).
    pub fn params<T: DeserializeOwned>(&self) -> Result<T> {
        crate::params::from_params(
            &self.invocation.params,
            &format!("{}@{}", self.invocation.uses, self.invocation.version),
        )
    }

    /// The run this stage reports on (a `reads_run` stage): the file the
    /// engine named in `Invocation::run`.
    pub fn run_context(&self) -> Result<RunContext> {
        let path = self.invocation.run.as_deref().ok_or_else(|| {
            StageError::input(
                format!(
                    "`{}` reports on its run, but the invocation names no run file (`run`)",
                    self.invocation.uses
                ),
                "run it through `pipe run`, whose engine writes the run file for stages that read \
                 their run; a hand-written invocation needs a `run` path to a RunContext JSON file",
            )
        })?;
        let text = std::fs::read_to_string(path).map_err(|e| StageError::io(path, e))?;
        serde_json::from_str(&text).map_err(|error| {
            StageError::input(
                format!(
                    "the run file `{}` is not a run context: {error}",
                    path.display()
                ),
                "pipe and its workers disagree on the run file; rebuild both from the same source",
            )
        })
    }

    /// Where output `name` goes.
    pub fn output(&self, name: &str) -> PathBuf {
        self.invocation.output_dir.join(name)
    }

    pub fn scratch_dir(&self) -> &Path {
        &self.invocation.scratch_dir
    }

    /// Where the stage keeps what it resumes from after an interrupted
    /// attempt (`Invocation::resume_dir`); None when the engine gives none.
    pub fn resume_dir(&self) -> Option<&Path> {
        self.invocation.resume_dir.as_deref()
    }

    pub fn threads(&self) -> usize {
        self.invocation.threads.max(1)
    }

    /// Reports progress, at most every 200 ms (or `PIPE_PROGRESS_INTERVAL`
    /// when shorter).
    pub fn progress(&self, phase: &str, done: u64, total: Option<u64>, unit: &str) {
        self.progress_with(phase, done, total, unit, || None);
    }

    /// As [`progress`](Self::progress), with a live figure beside the bar;
    /// `detail` is only called when the event is sent.
    pub fn progress_with(
        &self,
        phase: &str,
        done: u64,
        total: Option<u64>,
        unit: &str,
        detail: impl FnOnce() -> Option<String>,
    ) {
        let mut last = self.last_progress.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|at| at.elapsed() < self.progress_interval) {
            return;
        }
        *last = Some(Instant::now());
        emit(&Event::Progress {
            phase: phase.to_string(),
            done,
            total,
            unit: unit.to_string(),
            detail: detail(),
        });
    }

    /// Reports the final count of a phase, unthrottled.
    pub fn progress_done(&self, phase: &str, done: u64, unit: &str) {
        self.progress_done_with(phase, done, unit, None);
    }

    /// As [`progress_done`](Self::progress_done), with the phase's final
    /// live figure.
    pub fn progress_done_with(&self, phase: &str, done: u64, unit: &str, detail: Option<String>) {
        emit(&Event::Progress {
            phase: phase.to_string(),
            done,
            total: Some(done),
            unit: unit.to_string(),
            detail,
        });
    }

    pub fn message(&self, text: impl Into<String>) {
        emit(&Event::Message { text: text.into() });
    }

    /// Writes `metrics.json` in the output directory.
    pub fn write_metrics(&self, metrics: &Value) -> Result<()> {
        let path = self.invocation.output_dir.join(pipe_protocol::METRICS_FILE);
        let text =
            serde_json::to_string_pretty(metrics).map_err(|e| StageError::Other(e.to_string()))?;
        std::fs::write(&path, text).map_err(|e| StageError::io(&path, e))
    }
}

/// Set by [`events_to_stderr`].
static STDERR_EVENTS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// From now on, this process's events are lines on stderr with `prefix`
/// in front, not protocol on stdout: for the ranks of a multi-task Slurm
/// step other than rank 0, whose stdout srun merges into rank 0's event
/// stream. Progress is dropped; messages and errors stay readable in the
/// stage log.
pub fn events_to_stderr(prefix: String) {
    let _ = STDERR_EVENTS.set(prefix);
}

fn emit_to_stderr(prefix: &str, event: &Event) {
    let line = match event {
        Event::Progress { .. } => return,
        Event::Message { text } => redact_text(text).into_owned(),
        Event::Done => "done".to_string(),
        Event::Error { message, hint } => match hint {
            Some(hint) => format!("error: {} ({})", redact_text(message), redact_text(hint)),
            None => format!("error: {}", redact_text(message)),
        },
    };
    eprintln!("{prefix}{line}");
}

/// Writes one event line to stdout and flushes it, so the engine sees it now.
/// Credentials in URLs are masked here, once for every message a stage
/// writes (`pipe_protocol::redact`): the engine logs and shows these lines.
pub fn emit(event: &Event) {
    if let Some(prefix) = STDERR_EVENTS.get() {
        emit_to_stderr(prefix, event);
        return;
    }
    let event = match event {
        Event::Message { text } => Cow::Owned(Event::Message {
            text: redact_text(text).into_owned(),
        }),
        Event::Error { message, hint } => Cow::Owned(Event::Error {
            message: redact_text(message).into_owned(),
            hint: hint.as_deref().map(|hint| redact_text(hint).into_owned()),
        }),
        other => Cow::Borrowed(other),
    };
    let mut stdout = std::io::stdout().lock();
    if let Ok(line) = serde_json::to_string(event.as_ref()) {
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_interval_only_ever_lowers_the_workers_throttle() {
        assert_eq!(worker_progress_interval(None), PROGRESS_INTERVAL);
        assert_eq!(worker_progress_interval(Some("0")), Duration::ZERO);
        assert_eq!(
            worker_progress_interval(Some("0.05")),
            Duration::from_millis(50)
        );
        assert_eq!(worker_progress_interval(Some("30")), PROGRESS_INTERVAL);
        for nonsense in ["", "-1", "NaN", "inf", "soon", "1e400"] {
            assert_eq!(
                worker_progress_interval(Some(nonsense)),
                PROGRESS_INTERVAL,
                "{nonsense}"
            );
        }
    }
}
