//! How a worker build shows on stderr: a line saying what is built and
//! where cargo's and pip's output goes, then one line per step (installing
//! libtorch, cargo) with its count and the time it has taken, redrawn in
//! place on a terminal and, off one, printed at most once per progress
//! interval; the step's end as a line of its own, and on failure the log's
//! last lines. Two builds may be under way at once (a run builds the
//! workers its stages will need while its first stages run,
//! pipe_engine::exec): each has its own lines.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use pipe_engine::{progress_interval, BuildStep, TORCH_VERSION};
use pipe_protocol::format::{format_bytes, format_seconds};

use crate::style::Style;

/// Off a terminal, how often a build step's line is printed: a CI log
/// gets the count every so often, not a line per crate;
/// `PIPE_PROGRESS_INTERVAL` changes it.
const LINE_INTERVAL: Duration = Duration::from_secs(10);

/// A line for the reporter to print: `error` ones are printed under
/// `--quiet` too.
pub struct Said {
    pub text: String,
    pub error: bool,
}

pub struct WorkerBuildView {
    style: Style,
    /// The live display on a terminal; `None` off one or with `--quiet`.
    bars: Option<MultiProgress>,
    /// Off a terminal: the least time between two lines of a step.
    interval: Duration,
    builds: Mutex<Vec<Build>>,
}

/// A build being shown.
struct Build {
    /// Its workers, as the events name them.
    workers: Vec<String>,
    names: String,
    profile: String,
    step: Option<Step>,
}

/// The step being shown, and what it showed last.
struct Step {
    step: BuildStep,
    bar: Option<ProgressBar>,
    /// Off a terminal: when its line was last printed (its start before
    /// the first, so a step shorter than the interval prints none).
    printed: Instant,
    done: u64,
    detail: Option<String>,
    elapsed: Duration,
}

/// How a build ended.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    pub succeeded: bool,
    /// Stopped unfinished, as the run did not need it after all.
    pub stopped: bool,
}

/// One progress reading of a step, as the event gives it.
pub struct Reading<'a> {
    pub step: BuildStep,
    pub done: u64,
    pub total: Option<u64>,
    pub detail: Option<&'a str>,
    pub elapsed: Duration,
}

impl WorkerBuildView {
    pub fn new(style: Style, bars: Option<MultiProgress>) -> WorkerBuildView {
        WorkerBuildView::with_interval(style, bars, progress_interval(LINE_INTERVAL))
    }

    fn with_interval(
        style: Style,
        bars: Option<MultiProgress>,
        interval: Duration,
    ) -> WorkerBuildView {
        WorkerBuildView {
            style,
            bars,
            interval,
            builds: Mutex::new(Vec::new()),
        }
    }

    pub fn started(
        &self,
        workers: &[&str],
        libtorch: bool,
        profile: &str,
        log: &Path,
    ) -> Vec<Said> {
        let names = names(workers);
        let text = started_line(&names, libtorch, log);
        let mut builds = lock(&self.builds);
        builds.retain(|build| build.workers != workers);
        builds.push(Build {
            workers: workers.iter().map(|worker| worker.to_string()).collect(),
            names,
            profile: profile.to_string(),
            step: None,
        });
        vec![Said { text, error: false }]
    }

    pub fn progress(&self, workers: &[&str], reading: Reading<'_>) -> Vec<Said> {
        let mut builds = lock(&self.builds);
        let Some(build) = builds.iter_mut().find(|build| build.workers == workers) else {
            return Vec::new();
        };
        let mut said = Vec::new();
        if build.step.as_ref().map(|step| step.step) != Some(reading.step) {
            if let Some(step) = build.step.take() {
                said.extend(step_ended(step));
            }
            build.step = Some(Step {
                step: reading.step,
                bar: self.bars.as_ref().map(|bars| {
                    let bar = bars.add(ProgressBar::new_spinner());
                    bar.set_style(
                        ProgressStyle::with_template("{spinner} {wide_msg}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    bar.enable_steady_tick(Duration::from_millis(120));
                    bar
                }),
                printed: Instant::now(),
                done: 0,
                detail: None,
                elapsed: Duration::ZERO,
            });
        }
        let text = progress_line(&build.names, &build.profile, &reading);
        let Some(step) = build.step.as_mut() else {
            return said;
        };
        step.done = reading.done;
        step.detail = reading.detail.map(str::to_string);
        step.elapsed = reading.elapsed;
        match &step.bar {
            Some(bar) => bar.set_message(text),
            None if step.printed.elapsed() >= self.interval => {
                step.printed = Instant::now();
                said.push(Said { text, error: false });
            }
            None => {}
        }
        said
    }

    pub fn finished(
        &self,
        workers: &[&str],
        ended: Ended,
        duration: Duration,
        log: &Path,
        log_tail: Option<&str>,
    ) -> Vec<Said> {
        let mut build = {
            let mut builds = lock(&self.builds);
            let Some(position) = builds.iter().position(|build| build.workers == workers) else {
                return Vec::new();
            };
            builds.remove(position)
        };
        let step = build.step.take();
        let crates = step
            .as_ref()
            .filter(|step| step.step == BuildStep::Cargo)
            .map(|step| step.done);
        if let Some(bar) = step.as_ref().and_then(|step| step.bar.as_ref()) {
            bar.finish_and_clear();
        }
        let took = format_seconds(duration.as_secs_f64());
        if ended.stopped {
            let text = format!(
                "stopped building {} after {took}: no stage of this run needs it after all \
                 (cargo keeps what it compiled for the next build)",
                build.names
            );
            return vec![Said { text, error: false }];
        }
        if ended.succeeded {
            let counted = crates.map(|crates| match crates {
                1 => " (1 crate)".to_string(),
                _ => format!(" ({crates} crates)"),
            });
            let text = format!(
                "built {} in {took}{}",
                build.names,
                counted.unwrap_or_default()
            );
            return vec![Said { text, error: false }];
        }
        let mut said = Vec::new();
        let shown = crate::here::relative_to_cwd(log);
        said.push(Said {
            text: format!(
                "building {} failed after {took}; the end of its log, {}:",
                build.names,
                shown.display()
            ),
            error: true,
        });
        for line in log_tail.unwrap_or_default().lines() {
            said.push(Said {
                text: format!("    {} {line}", self.style.dim("│")),
                error: true,
            });
        }
        said
    }
}

/// The line a step leaves when the next one starts: only libtorch's, as
/// the build's own line ends cargo's.
fn step_ended(step: Step) -> Vec<Said> {
    if let Some(bar) = &step.bar {
        bar.finish_and_clear();
    }
    if step.step != BuildStep::Libtorch {
        return Vec::new();
    }
    let took = format_seconds(step.elapsed.as_secs_f64());
    let what = step.detail.map(|detail| format!(": {detail}"));
    vec![Said {
        text: format!("libtorch ready in {took}{}", what.unwrap_or_default()),
        error: false,
    }]
}

fn names(workers: &[&str]) -> String {
    let names: Vec<String> = workers.iter().map(|name| format!("`{name}`")).collect();
    names.join(" and ")
}

fn started_line(names: &str, libtorch: bool, log: &Path) -> String {
    let log = crate::here::relative_to_cwd(log);
    if libtorch {
        format!(
            "building {names} (first use or sources changed): libtorch \
             (torch=={TORCH_VERSION} into .venv/, 4.6 GB, unless LIBTORCH is set), then \
             cargo, several minutes the first time (docs/libtorch.md); pip's and cargo's \
             output: {}",
            log.display()
        )
    } else {
        format!(
            "building {names} (first use or sources changed); cargo's output: {}",
            log.display()
        )
    }
}

/// `building `pipe-stage` (cargo, release): 37/161 crates, 41 s`, or
/// `installing libtorch (pip): downloading torch-….whl (887.9 MB), 523 MB
/// downloaded, 41 s`.
fn progress_line(names: &str, profile: &str, reading: &Reading<'_>) -> String {
    let took = format_seconds(reading.elapsed.as_secs_f64().round());
    match reading.step {
        BuildStep::Cargo => {
            let count = match reading.total {
                Some(total) if total >= reading.done => format!("{}/{total} crates", reading.done),
                _ if reading.done == 1 => "1 crate".to_string(),
                _ => format!("{} crates", reading.done),
            };
            format!("building {names} (cargo, {profile}): {count}, {took}")
        }
        BuildStep::Libtorch => {
            let mut parts: Vec<String> = reading.detail.map(str::to_string).into_iter().collect();
            if reading.done > 0 {
                parts.push(format!("{} downloaded", format_bytes(reading.done as f64)));
            }
            parts.push(took);
            format!("installing libtorch (pip): {}", parts.join(", "))
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: Ended = Ended {
        succeeded: true,
        stopped: false,
    };

    fn reading(
        step: BuildStep,
        done: u64,
        total: Option<u64>,
        detail: Option<&str>,
    ) -> Reading<'_> {
        Reading {
            step,
            done,
            total,
            detail,
            elapsed: Duration::from_millis(41_400),
        }
    }

    #[test]
    fn a_build_steps_line_says_what_runs_how_far_it_is_and_for_how_long() {
        let names = names(&["pipe-stage"]);
        assert_eq!(
            progress_line(
                &names,
                "release",
                &reading(BuildStep::Cargo, 37, Some(161), None)
            ),
            "building `pipe-stage` (cargo, release): 37/161 crates, 41 s"
        );
        assert_eq!(
            progress_line(&names, "dev", &reading(BuildStep::Cargo, 37, None, None)),
            "building `pipe-stage` (cargo, dev): 37 crates, 41 s"
        );
        // An estimate cargo went past is not shown as 170/161.
        assert_eq!(
            progress_line(
                &names,
                "dev",
                &reading(BuildStep::Cargo, 170, Some(161), None)
            ),
            "building `pipe-stage` (cargo, dev): 170 crates, 41 s"
        );
        assert_eq!(
            progress_line(
                &names,
                "dev",
                &reading(
                    BuildStep::Libtorch,
                    0,
                    None,
                    Some("collecting torch==2.11.0")
                )
            ),
            "installing libtorch (pip): collecting torch==2.11.0, 41 s"
        );
        let downloading = reading(
            BuildStep::Libtorch,
            523_000_000,
            None,
            Some("downloading torch.whl (887.9 MB)"),
        );
        assert_eq!(
            progress_line(&names, "dev", &downloading),
            format!(
                "installing libtorch (pip): downloading torch.whl (887.9 MB), {} downloaded, 41 s",
                format_bytes(523_000_000.0)
            )
        );
    }

    #[test]
    fn off_a_terminal_a_step_is_printed_once_per_interval() {
        let view = WorkerBuildView::with_interval(Style::plain(), None, Duration::ZERO);
        let log = Path::new("/checkout/target/debug/pipe-stage.build.log");
        view.started(&["pipe-stage"], false, "dev", log);
        let texts: Vec<String> = (1..=2)
            .flat_map(|done| {
                view.progress(
                    &["pipe-stage"],
                    reading(BuildStep::Cargo, done, Some(2), None),
                )
            })
            .map(|said| said.text)
            .collect();
        assert_eq!(
            texts,
            [
                "building `pipe-stage` (cargo, dev): 1/2 crates, 41 s",
                "building `pipe-stage` (cargo, dev): 2/2 crates, 41 s",
            ]
        );
    }

    #[test]
    fn off_a_terminal_a_build_ends_with_one_line_or_with_the_end_of_its_log() {
        // An interval no test outlasts: no progress line.
        let view = WorkerBuildView::with_interval(Style::plain(), None, Duration::MAX);
        let log = Path::new("/checkout/target/debug/pipe-stage.build.log");
        let said = view.started(&["pipe-stage-train"], true, "dev", log);
        assert!(
            said[0]
                .text
                .contains("pip's and cargo's output: /checkout/target"),
            "{}",
            said[0].text
        );
        assert!(view
            .progress(
                &["pipe-stage-train"],
                reading(BuildStep::Libtorch, 0, None, Some("torch 2.11.0 in .venv")),
            )
            .is_empty());
        let said = view.progress(
            &["pipe-stage-train"],
            reading(BuildStep::Cargo, 3, Some(9), None),
        );
        let texts: Vec<&str> = said.iter().map(|said| said.text.as_str()).collect();
        assert_eq!(texts, ["libtorch ready in 41.4 s: torch 2.11.0 in .venv"]);
        let said = view.finished(
            &["pipe-stage-train"],
            DONE,
            Duration::from_secs(54),
            log,
            None,
        );
        assert_eq!(said[0].text, "built `pipe-stage-train` in 54 s (3 crates)");

        view.started(&["pipe-stage"], false, "dev", log);
        view.progress(&["pipe-stage"], reading(BuildStep::Cargo, 1, None, None));
        let said = view.finished(
            &["pipe-stage"],
            Ended {
                succeeded: false,
                stopped: false,
            },
            Duration::from_secs(2),
            log,
            Some("error[E0425]\nerror: could not compile"),
        );
        let texts: Vec<&str> = said.iter().map(|said| said.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "building `pipe-stage` failed after 2 s; the end of its log, /checkout/target/debug/pipe-stage.build.log:",
                "    │ error[E0425]",
                "    │ error: could not compile",
            ]
        );
        assert!(said.iter().all(|said| said.error));
    }

    #[test]
    fn two_builds_under_way_at_once_keep_their_own_lines_and_a_stopped_one_says_so() {
        let view = WorkerBuildView::with_interval(Style::plain(), None, Duration::ZERO);
        let log = Path::new("/checkout/target/release/pipe-stage.build.log");
        view.started(&["pipe-stage"], false, "release", log);
        view.started(&["pipe-stage-train"], true, "release", log);
        let mut texts: Vec<String> = Vec::new();
        let mut say = |said: Vec<Said>| texts.extend(said.into_iter().map(|said| said.text));
        say(view.progress(
            &["pipe-stage-train"],
            reading(
                BuildStep::Libtorch,
                0,
                None,
                Some("collecting torch==2.11.0"),
            ),
        ));
        say(view.progress(&["pipe-stage"], reading(BuildStep::Cargo, 5, Some(9), None)));
        say(view.finished(&["pipe-stage"], DONE, Duration::from_secs(40), log, None));
        say(view.progress(
            &["pipe-stage-train"],
            reading(BuildStep::Cargo, 1, Some(48), None),
        ));
        let stopped = Ended {
            succeeded: false,
            stopped: true,
        };
        say(view.finished(
            &["pipe-stage-train"],
            stopped,
            Duration::from_secs(90),
            log,
            None,
        ));
        assert_eq!(
            texts,
            [
                "installing libtorch (pip): collecting torch==2.11.0, 41 s",
                "building `pipe-stage` (cargo, release): 5/9 crates, 41 s",
                "built `pipe-stage` in 40 s (5 crates)",
                "libtorch ready in 41.4 s: collecting torch==2.11.0",
                "building `pipe-stage-train` (cargo, release): 1/48 crates, 41 s",
                "stopped building `pipe-stage-train` after 1 min 30 s: no stage of this run needs \
                 it after all (cargo keeps what it compiled for the next build)",
            ]
        );
    }
}
