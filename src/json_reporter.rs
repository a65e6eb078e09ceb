//! The `--json` reporter: each run event and each remote transfer as one
//! JSON line on stdout, in the schema docs/cli.md and docs/remote-cache.md
//! ("Events") describe.
//!
//! The lines are serialized from view types, not from the engine's and the
//! cache's own: those may change their events for their own reasons, while
//! the schema is a promise to scripts. A new event variant does not compile
//! until it is given its line here.

use std::path::Path;
use std::time::Duration;

use pipe_cache::remote::{Phase, TransferEvent};
use pipe_engine::{BuildStep, Event, RunId, RunStatus, StageStatus};
use serde::{Serialize, Serializer};

use crate::reporter::Reporter;

/// Writes every event it gets as a JSON line on stdout.
pub struct JsonReporter;

impl Reporter<Event<'_>> for JsonReporter {
    fn report(&self, event: &Event<'_>) {
        emit(&RunEventLine::from(event));
    }
}

impl Reporter<TransferEvent> for JsonReporter {
    fn report(&self, event: &TransferEvent) {
        emit(&TransferLine::from(event));
    }
}

/// One line on stdout, exactly as serialized. A failed write stops the
/// run as Ctrl-C would (`output::run_output_failed`), so it is recorded.
fn emit(line: &impl Serialize) {
    // Only strings, numbers and paths written as text: nothing can fail.
    let Ok(text) = serde_json::to_string(line) else {
        return;
    };
    if let Err(error) = crate::output::try_print_exact(format_args!("{text}\n")) {
        crate::output::run_output_failed(error, true);
    }
}

/// A run event's line: `event` names it, first.
#[derive(Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum RunEventLine<'a> {
    WaitingForLock {
        holder: Option<u32>,
    },
    RunStarted {
        stages: usize,
    },
    StageRunning {
        stage: &'a str,
        #[serde(serialize_with = "path_as_text")]
        log: &'a Path,
    },
    StageFinished {
        stage: &'a str,
        status: StageStatus,
        duration_ms: u64,
        detail: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        command: Option<&'a str>,
    },
    StageProgress {
        stage: &'a str,
        phase: &'a str,
        done: u64,
        total: Option<u64>,
        unit: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<&'a str>,
    },
    StageMessage {
        stage: &'a str,
        text: &'a str,
    },
    StageOutput {
        stage: &'a str,
        line: &'a str,
    },
    SweepRunStarting {
        /// From 1, as shown.
        number: usize,
        total: usize,
        swept: &'a [String],
    },
    ParamsFileWritten {
        #[serde(serialize_with = "path_as_text")]
        file: &'a Path,
        params: &'a [&'a str],
    },
    ParamsFileRestored {
        #[serde(serialize_with = "path_as_text")]
        file: &'a Path,
        #[serde(serialize_with = "optional_path_as_text")]
        kept: Option<&'a Path>,
    },
    OutputsIgnored {
        #[serde(serialize_with = "path_as_text")]
        file: &'a Path,
        lines: &'a [String],
    },
    Orphans {
        paths: &'a [String],
        removed: bool,
    },
    WorkerBuildStarted {
        workers: &'a [&'a str],
        libtorch: bool,
        #[serde(serialize_with = "path_as_text")]
        target_dir: &'a Path,
        profile: &'a str,
        #[serde(serialize_with = "path_as_text")]
        log: &'a Path,
    },
    WorkerBuildProgress {
        workers: &'a [&'a str],
        step: &'a str,
        done: u64,
        total: Option<u64>,
        unit: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<&'a str>,
        elapsed_ms: u64,
    },
    WorkerBuildFinished {
        workers: &'a [&'a str],
        succeeded: bool,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        stopped: bool,
        duration_ms: u64,
        #[serde(serialize_with = "path_as_text")]
        log: &'a Path,
    },
    RunFinished {
        /// `null` when nothing was recorded: a run whose stages were all
        /// fresh has no id.
        run: Option<RunId>,
        status: RunStatus,
        recorded: bool,
    },
}

impl<'a> From<&Event<'a>> for RunEventLine<'a> {
    fn from(event: &Event<'a>) -> RunEventLine<'a> {
        match *event {
            Event::WaitingForLock { holder } => RunEventLine::WaitingForLock { holder },
            Event::RunStarted { stages } => RunEventLine::RunStarted { stages },
            Event::StageRunning { stage, log } => RunEventLine::StageRunning { stage, log },
            Event::StageFinished {
                stage,
                status,
                duration,
                detail,
                command,
                // For the person reading stderr; a script has the log file
                // `stage_running` named.
                log_tail: _,
                log: _,
            } => RunEventLine::StageFinished {
                stage,
                status,
                duration_ms: milliseconds(duration),
                detail,
                command,
            },
            Event::StageProgress {
                stage,
                phase,
                done,
                total,
                unit,
                detail,
            } => RunEventLine::StageProgress {
                stage,
                phase,
                done,
                total,
                unit,
                detail,
            },
            Event::StageMessage { stage, text } => RunEventLine::StageMessage { stage, text },
            Event::StageOutput { stage, line } => RunEventLine::StageOutput { stage, line },
            Event::SweepRunStarting {
                index,
                total,
                swept,
            } => RunEventLine::SweepRunStarting {
                number: index + 1,
                total,
                swept,
            },
            Event::ParamsFileWritten { file, params } => {
                RunEventLine::ParamsFileWritten { file, params }
            }
            Event::ParamsFileRestored { file, kept } => {
                RunEventLine::ParamsFileRestored { file, kept }
            }
            Event::OutputsIgnored { file, lines } => RunEventLine::OutputsIgnored { file, lines },
            Event::Orphans { paths, removed } => RunEventLine::Orphans { paths, removed },
            Event::WorkerBuildStarted {
                workers,
                libtorch,
                target_dir,
                profile,
                log,
            } => RunEventLine::WorkerBuildStarted {
                workers,
                libtorch,
                target_dir,
                profile,
                log,
            },
            Event::WorkerBuildProgress {
                workers,
                step,
                done,
                total,
                detail,
                elapsed,
            } => RunEventLine::WorkerBuildProgress {
                workers,
                step: step.as_str(),
                done,
                total,
                unit: match step {
                    BuildStep::Libtorch => "bytes",
                    BuildStep::Cargo => "crates",
                },
                detail,
                elapsed_ms: milliseconds(elapsed),
            },
            Event::WorkerBuildFinished {
                workers,
                succeeded,
                stopped,
                duration,
                log,
                // For the person reading stderr; a script has the log.
                log_tail: _,
            } => RunEventLine::WorkerBuildFinished {
                workers,
                succeeded,
                stopped,
                duration_ms: milliseconds(duration),
                log,
            },
            Event::RunFinished { status, recorded } => RunEventLine::RunFinished {
                run: recorded,
                status,
                recorded: recorded.is_some(),
            },
        }
    }
}

/// A transfer event's line. The fields every transfer has come first and
/// `event` after them: the order these lines have always had.
#[derive(Debug, Serialize)]
struct TransferLine<'a> {
    direction: &'static str,
    key: String,
    total_bytes: u64,
    done_bytes: u64,
    #[serde(flatten)]
    phase: TransferPhaseLine<'a>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "event")]
enum TransferPhaseLine<'a> {
    #[serde(rename = "transfer_started")]
    Started { outputs: &'a [String] },
    #[serde(rename = "transfer_progress")]
    Progress { elapsed_ms: u64 },
    #[serde(rename = "transfer_finished")]
    Finished {
        outcome: &'static str,
        transferred_bytes: u64,
        duration_ms: u64,
    },
}

impl<'a> From<&'a TransferEvent> for TransferLine<'a> {
    fn from(event: &'a TransferEvent) -> TransferLine<'a> {
        let phase = match &event.phase {
            Phase::Started { outputs } => TransferPhaseLine::Started { outputs },
            Phase::Progress => TransferPhaseLine::Progress {
                elapsed_ms: milliseconds(event.elapsed),
            },
            Phase::Finished {
                outcome,
                transferred_bytes,
            } => TransferPhaseLine::Finished {
                outcome: outcome.as_str(),
                transferred_bytes: *transferred_bytes,
                duration_ms: milliseconds(event.elapsed),
            },
        };
        TransferLine {
            direction: event.direction.as_str(),
            key: event.key.to_hex(),
            total_bytes: event.total_bytes,
            done_bytes: event.done_bytes,
            phase,
        }
    }
}

fn milliseconds(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A path as the text it reads as: a path that is not UTF-8 gets
/// replacement characters rather than failing the line.
fn path_as_text<S: Serializer>(path: &&Path, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&path.display())
}

fn optional_path_as_text<S: Serializer>(
    path: &Option<&Path>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match path {
        Some(path) => serializer.collect_str(&path.display()),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use pipe_cache::remote::{Direction, Outcome};
    use pipe_cache::ActionKey;

    use super::*;

    fn line(event: Event<'_>) -> String {
        serde_json::to_string(&RunEventLine::from(&event)).unwrap()
    }

    #[test]
    fn run_events_keep_their_documented_lines() {
        let log = Path::new(".pipe/logs/1/train.log");
        let cases = [
            (
                Event::WaitingForLock { holder: None },
                r#"{"event":"waiting_for_lock","holder":null}"#,
            ),
            (
                Event::RunStarted { stages: 3 },
                r#"{"event":"run_started","stages":3}"#,
            ),
            (
                Event::StageRunning {
                    stage: "train",
                    log,
                },
                r#"{"event":"stage_running","stage":"train","log":".pipe/logs/1/train.log"}"#,
            ),
            (
                Event::StageMessage {
                    stage: "train",
                    text: "hi",
                },
                r#"{"event":"stage_message","stage":"train","text":"hi"}"#,
            ),
            (
                Event::RunFinished {
                    status: RunStatus::Succeeded,
                    recorded: Some(RunId(7)),
                },
                r#"{"event":"run_finished","run":7,"status":"succeeded","recorded":true}"#,
            ),
            (
                Event::RunFinished {
                    status: RunStatus::Succeeded,
                    recorded: None,
                },
                r#"{"event":"run_finished","run":null,"status":"succeeded","recorded":false}"#,
            ),
        ];
        for (event, expected) in cases {
            assert_eq!(line(event), expected);
        }
    }

    #[test]
    fn a_finished_stage_names_its_command_only_when_it_has_one() {
        let finished = |command| Event::StageFinished {
            stage: "train",
            status: StageStatus::Failed,
            duration: Duration::from_millis(2_150),
            detail: Some("command exited with code 1"),
            command,
            log_tail: Some("Traceback"),
            log: Some(Path::new("train.log")),
        };
        assert_eq!(
            line(finished(None)),
            r#"{"event":"stage_finished","stage":"train","status":"failed","duration_ms":2150,"detail":"command exited with code 1"}"#
        );
        assert_eq!(
            line(finished(Some("python train.py"))),
            r#"{"event":"stage_finished","stage":"train","status":"failed","duration_ms":2150,"detail":"command exited with code 1","command":"python train.py"}"#
        );
    }

    #[test]
    fn progress_and_worker_builds_keep_their_lines() {
        assert_eq!(
            line(Event::StageProgress {
                stage: "get",
                phase: "download",
                done: 5,
                total: None,
                unit: "bytes",
                detail: None,
            }),
            r#"{"event":"stage_progress","stage":"get","phase":"download","done":5,"total":null,"unit":"bytes"}"#
        );
        assert_eq!(
            line(Event::StageProgress {
                stage: "fit",
                phase: "train",
                done: 1,
                total: Some(4),
                unit: "steps",
                detail: Some("loss 0.4521"),
            }),
            r#"{"event":"stage_progress","stage":"fit","phase":"train","done":1,"total":4,"unit":"steps","detail":"loss 0.4521"}"#
        );
        let workers = ["pipe-stage-data"];
        assert_eq!(
            line(Event::WorkerBuildStarted {
                workers: &workers,
                libtorch: false,
                target_dir: Path::new("/tmp/t"),
                profile: "release",
                log: Path::new("/tmp/t/release/pipe-stage-data.build.log"),
            }),
            r#"{"event":"worker_build_started","workers":["pipe-stage-data"],"libtorch":false,"target_dir":"/tmp/t","profile":"release","log":"/tmp/t/release/pipe-stage-data.build.log"}"#
        );
        assert_eq!(
            line(Event::WorkerBuildProgress {
                workers: &workers,
                step: BuildStep::Cargo,
                done: 37,
                total: Some(161),
                detail: None,
                elapsed: Duration::from_millis(41_250),
            }),
            r#"{"event":"worker_build_progress","workers":["pipe-stage-data"],"step":"cargo","done":37,"total":161,"unit":"crates","elapsed_ms":41250}"#
        );
        assert_eq!(
            line(Event::WorkerBuildProgress {
                workers: &workers,
                step: BuildStep::Libtorch,
                done: 5,
                total: None,
                detail: Some("downloading torch.whl (887.9 MB)"),
                elapsed: Duration::from_secs(2),
            }),
            r#"{"event":"worker_build_progress","workers":["pipe-stage-data"],"step":"libtorch","done":5,"total":null,"unit":"bytes","detail":"downloading torch.whl (887.9 MB)","elapsed_ms":2000}"#
        );
        assert_eq!(
            line(Event::WorkerBuildFinished {
                workers: &workers,
                succeeded: true,
                stopped: false,
                duration: Duration::from_secs(3),
                log: Path::new("/tmp/t/release/pipe-stage-data.build.log"),
                log_tail: None,
            }),
            r#"{"event":"worker_build_finished","workers":["pipe-stage-data"],"succeeded":true,"duration_ms":3000,"log":"/tmp/t/release/pipe-stage-data.build.log"}"#
        );
    }

    #[test]
    fn transfer_events_keep_their_field_order() {
        let key = ActionKey::of(b"k");
        let event = |phase| TransferEvent {
            direction: Direction::Pull,
            key,
            total_bytes: 400,
            done_bytes: 200,
            elapsed: Duration::from_millis(1_250),
            phase,
        };
        let line =
            |event: &TransferEvent| serde_json::to_string(&TransferLine::from(event)).unwrap();
        let hex = key.to_hex();
        assert_eq!(
            line(&event(Phase::Started {
                outputs: vec!["data".to_string()]
            })),
            format!(
                r#"{{"direction":"pull","key":"{hex}","total_bytes":400,"done_bytes":200,"event":"transfer_started","outputs":["data"]}}"#
            )
        );
        assert_eq!(
            line(&event(Phase::Progress)),
            format!(
                r#"{{"direction":"pull","key":"{hex}","total_bytes":400,"done_bytes":200,"event":"transfer_progress","elapsed_ms":1250}}"#
            )
        );
        assert_eq!(
            line(&event(Phase::Finished {
                outcome: Outcome::AlreadyThere,
                transferred_bytes: 10,
            })),
            format!(
                r#"{{"direction":"pull","key":"{hex}","total_bytes":400,"done_bytes":200,"event":"transfer_finished","outcome":"already_there","transferred_bytes":10,"duration_ms":1250}}"#
            )
        );
    }
}
