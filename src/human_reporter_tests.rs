//! The terminal reporter's lines for scripted runs, as a log gets them
//! (stderr not a terminal): every kind of stage line, a worker build, a
//! failure's command and log tail, and each run's summary. Timings and
//! the temporary directory are filtered, so the snapshots hold what a
//! person reads and nothing that moves between runs.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pipe_engine::{BuildStep, Event, RunId, RunStatus, StageStatus};

use super::{HumanReporter, RunTally};
use crate::reporter::Reporter;
use crate::style::Style;
use crate::worker_build_view::WorkerBuildView;

/// A reporter as `pipe run 2> log` makes it, its lines kept in a buffer.
fn reporter(quiet: bool) -> (HumanReporter, Arc<Mutex<String>>) {
    let sink = Arc::new(Mutex::new(String::new()));
    let style = Style::plain();
    let reporter = HumanReporter {
        quiet,
        output_lines: 0,
        style,
        bars: None,
        running: Mutex::default(),
        progress_lines: Mutex::default(),
        tally: Mutex::new(RunTally::default()),
        overall: Mutex::new(None),
        output_shown: Mutex::default(),
        started: Mutex::new(Instant::now()),
        worker_build: WorkerBuildView::new(style, None),
        sink: Some(Arc::clone(&sink)),
    };
    (reporter, sink)
}

fn finished<'a>(stage: &'a str, status: StageStatus, ms: u64) -> Event<'a> {
    Event::StageFinished {
        stage,
        status,
        duration: Duration::from_millis(ms),
        detail: None,
        command: None,
        log_tail: None,
        log: None,
    }
}

/// A failed run after a worker build, then a no-op: the two runs of a
/// session a user sees most.
fn script(dir: &Path) -> Vec<Event<'_>> {
    const WORKERS: &[&str] = &["pipe-stage"];
    let log = dir.join(".pipe/logs/3/train.log");
    let build_log = dir.join(".pipe/workers/build.log");
    let mut events = vec![
        Event::WaitingForLock { holder: Some(4242) },
        Event::RunStarted { stages: 6 },
        Event::WorkerBuildStarted {
            workers: WORKERS,
            libtorch: false,
            target_dir: dir,
            profile: "release",
            log: leak(build_log.clone()),
        },
        Event::WorkerBuildProgress {
            workers: WORKERS,
            step: BuildStep::Cargo,
            done: 12,
            total: Some(153),
            detail: Some("serde_json"),
            elapsed: Duration::from_secs(3),
        },
        Event::WorkerBuildFinished {
            workers: WORKERS,
            succeeded: true,
            stopped: false,
            duration: Duration::from_millis(65_400),
            log: leak(build_log),
            log_tail: None,
        },
        Event::StageRunning {
            stage: "prepare",
            log: dir,
        },
        finished("prepare", StageStatus::Ran, 1_250),
        finished("corpus", StageStatus::Fresh, 0),
        finished("tokenize", StageStatus::Restored, 40),
        Event::StageRunning {
            stage: "train",
            log: dir,
        },
        Event::StageMessage {
            stage: "train",
            text: "epoch 1/2",
        },
        Event::StageFinished {
            stage: "train",
            status: StageStatus::Failed,
            duration: Duration::from_millis(7_800),
            detail: Some("command exited with code 1"),
            command: Some("python train.py --lr 0.1"),
            log_tail: Some("epoch 1\nTraceback (most recent call last):\nValueError: lr"),
            log: Some(leak(log)),
        },
        Event::StageFinished {
            stage: "evaluate",
            status: StageStatus::Skipped,
            duration: Duration::ZERO,
            detail: Some("`train` failed"),
            command: None,
            log_tail: None,
            log: None,
        },
        finished("report", StageStatus::Skipped, 0),
        Event::RunFinished {
            status: RunStatus::Failed,
            recorded: Some(RunId(3)),
        },
    ];
    events.push(Event::RunStarted { stages: 2 });
    events.push(finished("prepare", StageStatus::Fresh, 0));
    events.push(finished("corpus", StageStatus::Fresh, 0));
    events.push(Event::RunFinished {
        status: RunStatus::Succeeded,
        recorded: None,
    });
    events
}

/// The events borrow their paths for the length of the test.
fn leak(path: std::path::PathBuf) -> &'static Path {
    Box::leak(path.into_boxed_path())
}

fn settings(dir: &Path) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&regex_escape(&dir.display().to_string()), "[dir]");
    settings.add_filter(r"\b\d+(\.\d+)? (ms|s)\b", "[time]");
    settings.add_filter(r"\b\d+ min \[time\]", "[time]");
    settings.set_prepend_module_to_snapshot(false);
    settings
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$".contains(c);
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect()
}

#[test]
fn a_failed_run_after_a_worker_build_then_a_no_op_as_a_log_reads_them() {
    let dir = std::env::temp_dir().join(format!("pipe-reporter-{}", std::process::id()));
    let (reporter, lines) = reporter(false);
    for event in script(&dir) {
        reporter.report(&event);
    }
    let text = lines.lock().unwrap().clone();
    settings(&dir).bind(|| insta::assert_snapshot!("reporter_lines_log", text));
}

#[test]
fn quiet_keeps_only_the_failure_and_the_failed_verdict() {
    let dir = std::env::temp_dir().join(format!("pipe-reporter-q-{}", std::process::id()));
    let (reporter, lines) = reporter(true);
    for event in script(&dir) {
        reporter.report(&event);
    }
    let text = lines.lock().unwrap().clone();
    settings(&dir).bind(|| insta::assert_snapshot!("reporter_lines_quiet", text));
}
