//! The reporter for people: on a terminal, a live line per running stage
//! (indicatif) above the stage lines; off one (a CI log, `2> file`), plain
//! lines, a running stage's progress among them at most every
//! `LINE_INTERVAL`. `--quiet` keeps only what is an error.

use std::collections::HashMap;
use std::fmt;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use pipe_engine::{progress_interval, Event, ProgressText, Reading, RunId, RunStatus, StageStatus};
use pipe_protocol::format::format_seconds;

use crate::reporter::Reporter;
use crate::run_tally::{RunTally, Shown};
use crate::style::Style;
use crate::worker_build_view::{Ended, Said, WorkerBuildView};

/// How often a running stage's progress is printed when stderr is not a
/// terminal (a CI log, a redirected run); `PIPE_PROGRESS_INTERVAL` changes it.
const LINE_INTERVAL: Duration = Duration::from_secs(30);

/// `-v`: every stage on a line of its own, fresh ones too.
static EVERY_STAGE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Shows every stage on a line (`-v`) instead of folding fresh and most
/// restored stages of a matrix.
pub fn show_every_stage(every: bool) {
    EVERY_STAGE.store(every, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `-v` asked for every stage on a line (status folds too).
pub fn every_stage() -> bool {
    EVERY_STAGE.load(std::sync::atomic::Ordering::Relaxed)
}

pub struct HumanReporter {
    quiet: bool,
    /// How many of a succeeded command stage's last lines to show.
    output_lines: usize,
    style: Style,
    bars: Option<MultiProgress>,
    running: Mutex<HashMap<String, ProgressBar>>,
    /// Off a terminal: each running stage's occasional progress line.
    progress_lines: Mutex<HashMap<String, ProgressText>>,
    /// The stages of the current run: counted, folded, named at its end.
    tally: Mutex<RunTally>,
    /// On a terminal: the run's overall count of stages done.
    overall: Mutex<Option<ProgressBar>>,
    /// Off a terminal: when each running command stage's output was last
    /// shown, so that a CI log gets a line per interval, not a flood.
    output_shown: Mutex<HashMap<String, Instant>>,
    /// When the current run started: reset by each run of a sweep.
    started: Mutex<Instant>,
    worker_build: WorkerBuildView,
    /// Where the lines go instead of stderr: the snapshot tests' buffer.
    sink: Option<std::sync::Arc<Mutex<String>>>,
}

impl HumanReporter {
    pub fn new(quiet: bool, output_lines: usize) -> HumanReporter {
        let live = !quiet && std::io::stderr().is_terminal();
        let style = Style::for_stderr();
        let bars = live.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        HumanReporter {
            quiet,
            output_lines,
            style,
            worker_build: WorkerBuildView::new(style, bars.clone()),
            bars,
            running: Mutex::new(HashMap::new()),
            progress_lines: Mutex::new(HashMap::new()),
            tally: Mutex::new(RunTally::default()),
            overall: Mutex::new(None),
            output_shown: Mutex::new(HashMap::new()),
            started: Mutex::new(Instant::now()),
            sink: None,
        }
    }

    /// The live display on a terminal; `None` when stderr is not one or
    /// with `--quiet`.
    pub fn bars(&self) -> Option<MultiProgress> {
        self.bars.clone()
    }

    fn line(&self, text: String) {
        if !self.quiet {
            self.print(text);
        }
    }

    /// A line printed with `--quiet` too: it promises "only errors", not
    /// silence, and a failed stage's reason, command and log tail, or a
    /// failed run's verdict, are the error.
    fn print(&self, text: String) {
        match &self.sink {
            Some(sink) => {
                let mut lines = lock(sink);
                lines.push_str(&text);
                lines.push('\n');
            }
            None => print_line(self.bars.as_ref(), &text),
        }
    }

    fn say(&self, said: Vec<Said>) {
        for Said { text, error } in said {
            if error {
                self.print(text);
            } else {
                self.line(text);
            }
        }
    }

    fn stage_running(&self, stage: &str) {
        let Some(bars) = &self.bars else {
            self.line(format!("{} {stage}", self.style.dim("  running")));
            lock(&self.progress_lines).insert(
                stage.to_string(),
                ProgressText::new(progress_interval(LINE_INTERVAL), Instant::now()),
            );
            lock(&self.output_shown).insert(stage.to_string(), Instant::now());
            return;
        };
        let bar = bars.add(ProgressBar::new_spinner());
        bar.set_style(human_times(
            ProgressStyle::with_template("{spinner} {msg} {elapsed:.dim}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        ));
        bar.set_message(crate::output::shown(format_args!("{stage}  running")));
        bar.enable_steady_tick(Duration::from_millis(120));
        lock(&self.running).insert(stage.to_string(), bar);
    }

    /// A command stage's newest line: beside it on a terminal; off one,
    /// prefixed by the stage, at most once per progress interval.
    fn stage_output(&self, stage: &str, line: &str) {
        if let Some(bar) = lock(&self.running).get(stage) {
            bar.set_message(crate::output::shown(format_args!("{stage}  {line}")));
            return;
        }
        let due = {
            let mut shown = lock(&self.output_shown);
            let now = Instant::now();
            match shown.get_mut(stage) {
                Some(last) if now.duration_since(*last) >= progress_interval(LINE_INTERVAL) => {
                    *last = now;
                    true
                }
                _ => false,
            }
        };
        if due {
            self.line(crate::output::shown(format_args!(
                "  {} {line}",
                self.style.dim(&format!("{stage}:"))
            )));
        }
    }

    /// Ends the stage's live line, counts it, and prints its line, with
    /// the count of stages done: on a terminal in the overall bar, in a
    /// log after the line. A fresh stage, and a matrix's restored ones past
    /// the first few, are counted only (`-v` shows them).
    fn stage_finished(&self, stage: &str, status: StageStatus, detail: Option<&str>, text: String) {
        lock(&self.output_shown).remove(stage);
        if let Some(bar) = lock(&self.running).remove(stage) {
            bar.finish_and_clear();
        }
        lock(&self.progress_lines).remove(stage);
        let every = EVERY_STAGE.load(std::sync::atomic::Ordering::Relaxed);
        let shown = lock(&self.tally).finished(stage, status, detail, every);
        if let Some(bar) = lock(&self.overall).as_ref() {
            bar.inc(1);
        }
        let Shown::Line { counter } = shown else {
            return;
        };
        let text = match &self.bars {
            Some(_) => text,
            None => match text.split_once('\n') {
                Some((first, rest)) => format!("{first}  {}\n{rest}", self.style.dim(&counter)),
                None => format!("{text}  {}", self.style.dim(&counter)),
            },
        };
        match status {
            StageStatus::Failed | StageStatus::Interrupted => self.print(text),
            _ => self.line(text),
        }
    }

    /// A run's start: a new tally and, on a terminal, its overall bar.
    fn run_started(&self, stages: usize) {
        *lock(&self.tally) = RunTally::start(stages);
        *lock(&self.started) = Instant::now();
        if let (Some(bars), false) = (&self.bars, self.quiet) {
            let bar = bars.add(ProgressBar::new(stages as u64));
            bar.set_style(human_times(
                ProgressStyle::with_template("{pos}/{len} stages  {elapsed:.dim}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ));
            bar.enable_steady_tick(Duration::from_millis(500));
            if let Some(old) = lock(&self.overall).replace(bar) {
                old.finish_and_clear();
            }
        }
    }

    fn stage_progress(&self, stage: &str, reading: Reading<'_>) {
        let due = lock(&self.progress_lines)
            .get_mut(stage)
            .and_then(|lines| lines.observe(reading, Instant::now()));
        if let Some(text) = due {
            self.line(format!("  {} {text}", self.style.dim(&format!("{stage}:"))));
        }
        if let Some(bar) = lock(&self.running).get(stage) {
            bar.set_style(progress_style(reading.unit, reading.total.is_some()));
            bar.set_length(reading.total.unwrap_or(0));
            bar.set_position(reading.done);
            let phase = reading.phase;
            bar.set_message(match reading.detail {
                Some(detail) => crate::output::shown(format_args!("{stage}  {phase}  {detail}")),
                None => crate::output::shown(format_args!("{stage}  {phase}")),
            });
        }
    }

    fn run_finished(&self, status: RunStatus, recorded: Option<RunId>) {
        if let Some(bar) = lock(&self.overall).take() {
            bar.finish_and_clear();
        }
        let tally = lock(&self.tally);
        let counts = &tally.counts;
        let elapsed = format_seconds(lock(&self.started).elapsed().as_secs_f64());
        let Some(run_id) = recorded else {
            let fresh = counts.get("fresh").copied().unwrap_or(0);
            self.line(format!(
                "nothing to do: {fresh} {} fresh, no run recorded ({elapsed})",
                if fresh == 1 { "stage" } else { "stages" },
            ));
            return;
        };
        let parts: Vec<String> = [
            StageStatus::Ran,
            StageStatus::Restored,
            StageStatus::Fresh,
            StageStatus::Failed,
            StageStatus::Interrupted,
            StageStatus::Skipped,
        ]
        .iter()
        .filter_map(|status| {
            let count = counts.get(status.as_str())?;
            let named = match status {
                StageStatus::Failed => tally.failed_names(),
                _ => String::new(),
            };
            Some(format!("{count} {}{named}", status.as_str()))
        })
        .collect();
        for (status, text) in tally.summary_lines(terminal_width()) {
            let mark = match status {
                "restored" => self.style.cyan("↺ restored"),
                _ => self.style.dim("· fresh   "),
            };
            self.line(format!("{mark} {text}"));
        }
        let verdict = match status {
            RunStatus::Succeeded => self.style.green("succeeded"),
            RunStatus::Interrupted => self.style.yellow("interrupted"),
            other => self.style.red(other.as_str()),
        };
        let done = if parts.is_empty() {
            "nothing to do".to_string()
        } else {
            parts.join(", ")
        };
        let text = format!("run #{run_id} {verdict}: {done} in {elapsed}");
        match status {
            RunStatus::Succeeded => self.line(text),
            _ => self.print(text),
        }
    }
}

impl Reporter<Event<'_>> for HumanReporter {
    fn report(&self, event: &Event<'_>) {
        match *event {
            Event::WaitingForLock { holder } => self.line(waiting_line(holder)),
            // Each run of a sweep is counted and timed on its own.
            Event::RunStarted { stages, .. } => self.run_started(stages),
            Event::StageRunning { stage, .. } => self.stage_running(stage),
            Event::StageFinished {
                stage,
                status,
                duration,
                detail,
                command,
                log_tail,
                log,
            } => {
                let mut text = stage_line(self.style, stage, status, duration, detail);
                if status == StageStatus::Failed {
                    text.push_str(&failure_details(self.style, command, log_tail, log));
                } else if self.output_lines > 0 && !self.quiet {
                    let tail = log_tail.map(|tail| last_lines(tail, self.output_lines));
                    text.push_str(&failure_details(self.style, None, tail, log));
                }
                self.stage_finished(stage, status, detail, text);
            }
            Event::StageProgress {
                stage,
                phase,
                done,
                total,
                unit,
                detail,
            } => self.stage_progress(
                stage,
                Reading {
                    phase,
                    done,
                    total,
                    unit,
                    detail,
                },
            ),
            Event::SweepRunStarting {
                index,
                total,
                swept,
            } => self.line(format!(
                "{} {}",
                self.style.cyan(&format!("sweep {}/{total}:", index + 1)),
                swept.join(" ")
            )),
            Event::ParamsFileWritten { file, params } => self.line(format!(
                "{} holds this run's -S {} until it ends, for the commands that read it",
                crate::here::relative_to_cwd(file).display(),
                params.join(", ")
            )),
            Event::ParamsFileRestored { file, kept: None } => {
                self.line(format!("{} put back as it was", crate::here::relative_to_cwd(file).display()))
            }
            Event::ParamsFileRestored {
                file,
                kept: Some(kept),
            } => self.print(format!(
                "warning: {} was changed during the run, so pipe left it as it is; the file before the run is {}",
                crate::here::relative_to_cwd(file).display(),
                crate::here::relative_to_cwd(kept).display()
            )),
            Event::OutputsIgnored { file, lines } => self.line(format!(
                "{}: added {}, outputs pipe's cache holds (`cache: false` on an output leaves it to git)",
                crate::here::relative_to_cwd(file).display(),
                crate::views::orphans_text::shortened(lines),
            )),
            Event::Orphans { paths, removed } => self.line(crate::views::orphans_text::orphans_line(paths, removed)),
            Event::StageOutput { stage, line } => self.stage_output(stage, line),
            Event::StageMessage { stage, text } => {
                self.line(format!("  {} {text}", self.style.dim(&format!("{stage}:"))));
            }
            Event::WorkerBuildStarted {
                workers,
                libtorch,
                target_dir: _,
                profile,
                log,
            } => self.say(self.worker_build.started(workers, libtorch, profile, log)),
            Event::WorkerBuildProgress {
                workers,
                step,
                done,
                total,
                detail,
                elapsed,
            } => self.say(self.worker_build.progress(workers, crate::worker_build_view::Reading {
                step,
                done,
                total,
                detail,
                elapsed,
            })),
            Event::WorkerBuildFinished {
                workers,
                succeeded,
                stopped,
                duration,
                log,
                log_tail,
            } => self.say(self.worker_build.finished(
                workers,
                Ended { succeeded, stopped },
                duration,
                log,
                log_tail,
            )),
            Event::RunFinished { status, recorded } => self.run_finished(status, recorded),
        }
    }
}

/// A line on stderr, through the live display when there is one, so the
/// two do not tear each other.
pub fn print_line(bars: Option<&MultiProgress>, text: &str) {
    match bars {
        Some(bars) => {
            let _ = bars.println(crate::output::shown(format_args!("{text}")));
        }
        None => {
            if let Err(error) = crate::output::try_eprint(format_args!("{text}\n")) {
                crate::output::run_output_failed(error, false);
            }
        }
    }
}

fn terminal_width() -> usize {
    crate::terminal::columns(100)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `✓ ran      train  1.2 s`: how a stage ended.
fn stage_line(
    style: Style,
    stage: &str,
    status: StageStatus,
    duration: Duration,
    detail: Option<&str>,
) -> String {
    let took = format_seconds(duration.as_secs_f64());
    match status {
        StageStatus::Ran => format!(
            "{} {stage}  {}",
            style.green("✓ ran     "),
            style.dim(&took)
        ),
        StageStatus::Fresh => format!("{} {stage}", style.dim("· fresh   ")),
        StageStatus::Restored => format!(
            "{} {stage}  {}",
            style.cyan("↺ restored"),
            style.dim(detail.unwrap_or("from cache"))
        ),
        StageStatus::Skipped => format!(
            "{} {stage}  {}",
            style.yellow("- skipped "),
            detail.unwrap_or_default()
        ),
        StageStatus::Failed => format!(
            "{} {stage}  after {took}: {}",
            style.red("✗ failed  "),
            detail.unwrap_or("failed")
        ),
        // Stopped on purpose: no reason or log to show, and no result.
        StageStatus::Interrupted => {
            format!("{} {stage}  after {took}", style.yellow("■ interrupted"),)
        }
    }
}

/// Below a stage's line: the command as it ran (as DVC shows a failed
/// one's), its log's last lines and where the whole log is.
fn failure_details(
    style: Style,
    command: Option<&str>,
    log_tail: Option<&str>,
    log: Option<&Path>,
) -> String {
    let mut text = String::new();
    if let Some(command) = command {
        let lines = command.trim_end().replace('\n', "\n      ");
        text.push_str(&format!("\n    > {lines}"));
    }
    for line in log_tail.unwrap_or_default().lines() {
        text.push_str(&format!("\n    {} {line}", style.dim("│")));
    }
    if let Some(log) = log {
        let shown = crate::here::relative_to_cwd(log);
        text.push_str(&format!("\n    full log: {}", shown.display()));
    }
    text
}

/// The last `count` lines of `text`.
fn last_lines(text: &str, count: usize) -> &str {
    let mut start = text.len();
    for _ in 0..count {
        match text[..start].rfind('\n') {
            Some(at) => start = at,
            None => return text,
        }
    }
    &text[start + 1..]
}

fn waiting_line(holder: Option<u32>) -> String {
    let who = holder.map(|pid| format!(" (pid {pid})"));
    format!(
        "waiting for another `pipe run` in this project{} to finish",
        who.unwrap_or_default()
    )
}

/// A bar with rate and ETA when the total is known, a counter otherwise.
fn progress_style(unit: &str, known_total: bool) -> ProgressStyle {
    let template = match (unit == "bytes", known_total) {
        (true, true) => "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {elapsed:.dim}".to_string(),
        (true, false) => "{spinner} {msg} {bytes} {bytes_per_sec} {elapsed:.dim}".to_string(),
        (false, true) => format!("{{spinner}} {{msg}} [{{bar:30}}] {{human_pos}}/{{human_len}} {unit} {{per_sec}} eta {{eta}} {{elapsed:.dim}}"),
        (false, false) => format!("{{spinner}} {{msg}} {{human_pos}} {unit} {{per_sec}} {{elapsed:.dim}}"),
    };
    human_times(
        ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .progress_chars("=> "),
    )
}

/// `{elapsed}` and `{eta}` spelled as every other duration pipe prints
/// (`1 min 21 s`, [`format_seconds`]), not indicatif's `1m`, in whole
/// seconds so that a live line does not flicker.
pub(crate) fn human_times(style: ProgressStyle) -> ProgressStyle {
    let whole = |duration: Duration| format_seconds(duration.as_secs_f64().round());
    style
        .with_key(
            "elapsed",
            move |state: &ProgressState, out: &mut dyn fmt::Write| {
                let _ = out.write_str(&whole(state.elapsed()));
            },
        )
        .with_key(
            "eta",
            move |state: &ProgressState, out: &mut dyn fmt::Write| {
                let _ = out.write_str(&whole(state.eta()));
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stage_ends_with_one_line_and_a_failure_says_what_ran_and_printed() {
        let style = Style::plain();
        let line = |status, detail| {
            stage_line(style, "train", status, Duration::from_millis(2_100), detail)
        };
        assert_eq!(line(StageStatus::Ran, None), "✓ ran      train  2.1 s");
        assert_eq!(line(StageStatus::Fresh, None), "· fresh    train");
        assert_eq!(
            line(StageStatus::Restored, None),
            "↺ restored train  from cache"
        );
        assert_eq!(
            line(StageStatus::Failed, Some("command exited with code 1")),
            "✗ failed   train  after 2.1 s: command exited with code 1"
        );
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            failure_details(
                style,
                Some("python train.py \\\n  --lr 0.1\n"),
                Some("epoch 1\nTraceback"),
                Some(&cwd.join(".pipe/logs/3/train.log")),
            ),
            "\n    > python train.py \\\n        --lr 0.1\
             \n    │ epoch 1\n    │ Traceback\
             \n    full log: .pipe/logs/3/train.log"
        );
        assert_eq!(failure_details(style, None, None, None), "");
    }

    #[test]
    fn a_wait_names_the_holder_when_it_is_known() {
        assert_eq!(
            waiting_line(Some(42)),
            "waiting for another `pipe run` in this project (pid 42) to finish"
        );
        assert_eq!(
            waiting_line(None),
            "waiting for another `pipe run` in this project to finish"
        );
    }
}

#[cfg(test)]
#[path = "human_reporter_tests.rs"]
mod snapshots;
