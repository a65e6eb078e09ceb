//! Renders run events: a live line per running stage on a terminal
//! (indicatif), plain lines otherwise, and JSON lines on stdout with `--json`.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use pipe_engine::events::Event;
use pipe_engine::exec::{progress_interval, ProgressText, Reading};
use pipe_engine::libtorch::TORCH_VERSION;
use pipe_engine::runs::{RunStatus, StageStatus};
use serde_json::json;

use crate::style::Style;

/// How often a running stage's progress is printed when stderr is not a
/// terminal (a CI log, a redirected run); `PIPE_PROGRESS_INTERVAL` changes it.
const LINE_INTERVAL: Duration = Duration::from_secs(30);

pub struct Progress {
    json: bool,
    quiet: bool,
    style: Style,
    bars: Option<MultiProgress>,
    running: Mutex<HashMap<String, ProgressBar>>,
    /// Off a terminal: each running stage's occasional progress line.
    progress_lines: Mutex<HashMap<String, ProgressText>>,
    counts: Mutex<HashMap<&'static str, usize>>,
    started: Instant,
}

impl Progress {
    pub fn new(json: bool, quiet: bool) -> Progress {
        let live = !quiet && std::io::stderr().is_terminal();
        Progress {
            json,
            quiet,
            style: Style::for_stderr(),
            bars: live.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr())),
            running: Mutex::new(HashMap::new()),
            progress_lines: Mutex::new(HashMap::new()),
            counts: Mutex::new(HashMap::new()),
            started: Instant::now(),
        }
    }

    /// The live display on a terminal, for the remote's transfer bars to
    /// share (src/transfers.rs); `None` when stderr is not one or `--quiet`.
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
        match self.bars.as_ref().filter(|bars| !bars.is_hidden()) {
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

    fn emit_json(&self, value: serde_json::Value) {
        if self.json {
            if let Err(error) = crate::output::try_print_exact(format_args!("{value}\n")) {
                crate::output::run_output_failed(error, true);
            }
        }
    }

    pub fn on_event(&self, event: Event<'_>) {
        match event {
            Event::WaitingForLock { holder } => {
                let who = holder
                    .map(|pid| format!(" (pid {pid})"))
                    .unwrap_or_default();
                self.line(format!(
                    "waiting for another `pipe run` in this project{who} to finish"
                ));
                self.emit_json(json!({"event": "waiting_for_lock", "holder": holder}));
            }
            Event::RunStarted { run_id, stages } => {
                self.emit_json(json!({"event": "run_started", "run": run_id, "stages": stages}));
            }
            Event::StageRunning { stage, log } => {
                self.emit_json(json!({"event": "stage_running", "stage": stage, "log": log}));
                if let Some(bars) = &self.bars {
                    let bar = bars.add(ProgressBar::new_spinner());
                    bar.set_style(
                        ProgressStyle::with_template("{spinner} {msg} {elapsed:.dim}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    bar.set_message(crate::output::shown(format_args!("{stage}  running")));
                    bar.enable_steady_tick(Duration::from_millis(120));
                    self.running
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(stage.to_string(), bar);
                } else {
                    self.line(format!("{} {stage}", self.style.dim("  running")));
                    self.progress_lines
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(
                            stage.to_string(),
                            ProgressText::new(progress_interval(LINE_INTERVAL), Instant::now()),
                        );
                }
            }
            Event::StageFinished {
                stage,
                status,
                duration,
                detail,
                command,
                log_tail,
                log,
            } => {
                if let Some(bar) = self
                    .running
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(stage)
                {
                    bar.finish_and_clear();
                }
                self.progress_lines
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(stage);
                *self
                    .counts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(status.as_str())
                    .or_default() += 1;
                let mut finished = json!({
                    "event": "stage_finished", "stage": stage, "status": status,
                    "duration_ms": duration.as_millis() as u64, "detail": detail,
                });
                if let Some(command) = command {
                    finished["command"] = json!(command);
                }
                self.emit_json(finished);
                let seconds = format_duration(duration);
                let text = match status {
                    StageStatus::Ran => format!(
                        "{} {stage}  {}",
                        self.style.green("✓ ran     "),
                        self.style.dim(&seconds)
                    ),
                    StageStatus::Fresh => format!("{} {stage}", self.style.dim("· fresh   ")),
                    StageStatus::Restored => format!(
                        "{} {stage}  {}",
                        self.style.cyan("↺ restored"),
                        self.style.dim(detail.unwrap_or("from cache"))
                    ),
                    StageStatus::Skipped => {
                        format!(
                            "{} {stage}  {}",
                            self.style.yellow("- skipped "),
                            detail.unwrap_or_default()
                        )
                    }
                    StageStatus::Failed => {
                        let mut text = format!(
                            "{} {stage}  after {seconds}: {}",
                            self.style.red("✗ failed  "),
                            detail.unwrap_or("failed")
                        );
                        if let Some(command) = command {
                            // As DVC shows it: what ran, as it ran.
                            let lines = command.trim_end().replace('\n', "\n      ");
                            text.push_str(&format!("\n    > {lines}"));
                        }
                        if let Some(tail) = log_tail {
                            for line in tail.lines() {
                                text.push_str(&format!("\n    {} {line}", self.style.dim("│")));
                            }
                        }
                        if let Some(log) = log {
                            let shown = std::env::current_dir()
                                .ok()
                                .and_then(|cwd| log.strip_prefix(cwd).ok().map(Path::to_path_buf))
                                .unwrap_or_else(|| log.to_path_buf());
                            text.push_str(&format!("\n    full log: {}", shown.display()));
                        }
                        self.print(text);
                        return;
                    }
                };
                self.line(text);
            }
            Event::StageProgress {
                stage,
                phase,
                done,
                total,
                unit,
                detail,
            } => {
                let mut event = json!({
                    "event": "stage_progress", "stage": stage, "phase": phase,
                    "done": done, "total": total, "unit": unit,
                });
                if let Some(detail) = detail {
                    event["detail"] = json!(detail);
                }
                self.emit_json(event);
                let reading = Reading {
                    phase,
                    done,
                    total,
                    unit,
                    detail,
                };
                let due = self
                    .progress_lines
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_mut(stage)
                    .and_then(|lines| lines.observe(reading, Instant::now()));
                if let Some(text) = due {
                    self.line(format!("  {} {text}", self.style.dim(&format!("{stage}:"))));
                }
                let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(bar) = running.get(stage) {
                    bar.set_style(progress_style(unit, total.is_some()));
                    bar.set_length(total.unwrap_or(0));
                    bar.set_position(done);
                    bar.set_message(match detail {
                        Some(detail) => {
                            crate::output::shown(format_args!("{stage}  {phase}  {detail}"))
                        }
                        None => crate::output::shown(format_args!("{stage}  {phase}")),
                    });
                }
            }
            Event::StageMessage { stage, text } => {
                self.emit_json(json!({"event": "stage_message", "stage": stage, "text": text}));
                self.line(format!("  {} {text}", self.style.dim(&format!("{stage}:"))));
            }
            Event::WorkerBuildStarted {
                workers,
                libtorch,
                target_dir,
            } => {
                self.emit_json(json!({
                    "event": "worker_build_started", "workers": workers,
                    "libtorch": libtorch, "target_dir": target_dir,
                }));
                // cargo writes to the terminal during the build: the live
                // lines would be drawn over it, so they wait.
                if let Some(bars) = &self.bars {
                    bars.set_draw_target(ProgressDrawTarget::hidden());
                }
                let names: Vec<String> = workers.iter().map(|name| format!("`{name}`")).collect();
                let names = names.join(" and ");
                self.line(if libtorch {
                    format!(
                        "building {names} (first use or sources changed): libtorch first \
                         (torch=={TORCH_VERSION} into .venv/, 4.6 GB, unless LIBTORCH is set), \
                         then a cargo build into {}; the first time takes several minutes on \
                         2 cores (docs/libtorch.md)",
                        target_dir.display()
                    )
                } else {
                    format!("building {names} (first use or sources changed)")
                });
            }
            Event::WorkerBuildFinished {
                workers,
                succeeded,
                duration,
            } => {
                self.emit_json(json!({
                    "event": "worker_build_finished", "workers": workers,
                    "succeeded": succeeded, "duration_ms": duration.as_millis() as u64,
                }));
                if let Some(bars) = &self.bars {
                    bars.set_draw_target(ProgressDrawTarget::stderr());
                }
            }
            Event::RunFinished {
                run_id,
                status,
                recorded,
            } => {
                // The id `run_started` announced is given back when nothing
                // was done: no run carries it.
                self.emit_json(json!({
                    "event": "run_finished", "run": recorded.then_some(run_id),
                    "status": status, "recorded": recorded,
                }));
                let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
                if !recorded {
                    let fresh = counts.get("fresh").copied().unwrap_or(0);
                    self.line(format!(
                        "nothing to do: {fresh} {} fresh, no run recorded ({})",
                        if fresh == 1 { "stage" } else { "stages" },
                        format_duration(self.started.elapsed())
                    ));
                    return;
                }
                let parts: Vec<String> = ["ran", "restored", "fresh", "failed", "skipped"]
                    .iter()
                    .filter_map(|name| counts.get(name).map(|count| format!("{count} {name}")))
                    .collect();
                let verdict = match status {
                    RunStatus::Succeeded => self.style.green("succeeded"),
                    other => self.style.red(other.as_str()),
                };
                let text = format!(
                    "run #{run_id} {verdict}: {} in {}",
                    if parts.is_empty() {
                        "nothing to do".to_string()
                    } else {
                        parts.join(", ")
                    },
                    format_duration(self.started.elapsed())
                );
                match status {
                    RunStatus::Succeeded => self.line(text),
                    _ => self.print(text),
                }
            }
        }
    }
}

/// A bar with rate and ETA when the total is known, a counter otherwise.
fn progress_style(unit: &str, known_total: bool) -> ProgressStyle {
    let template = match (unit == "bytes", known_total) {
        (true, true) => "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {elapsed:.dim}".to_string(),
        (true, false) => "{spinner} {msg} {bytes} {bytes_per_sec} {elapsed:.dim}".to_string(),
        (false, true) => format!("{{spinner}} {{msg}} [{{bar:30}}] {{human_pos}}/{{human_len}} {unit} {{per_sec}} eta {{eta}} {{elapsed:.dim}}"),
        (false, false) => format!("{{spinner}} {{msg}} {{human_pos}} {unit} {{per_sec}} {{elapsed:.dim}}"),
    };
    ProgressStyle::with_template(&template)
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .progress_chars("=> ")
}

pub fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    if seconds < 1.0 {
        format!("{}ms", duration.as_millis())
    } else if seconds < 60.0 {
        format!("{seconds:.1}s")
    } else {
        format!(
            "{}m{:02}s",
            duration.as_secs() / 60,
            duration.as_secs() % 60
        )
    }
}
