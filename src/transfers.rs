//! Shows the remote cache's transfers (`pipe run`'s pulls and pushes,
//! `pipe cache push|pull`): a bar per long transfer on a terminal, a line
//! per long transfer in a log (`HumanTransfers`), and every event as a
//! JSON line on stdout with `--json` (src/json_reporter.rs).
//! docs/remote-cache.md ("Progress") is the user's side.
//!
//! What is long: a transfer still moving bytes `LONG` after it started. A
//! result of a few KB is done long before, so it never flashes a bar or
//! writes a line; the end-of-command summary counts it. The time, not the
//! size, decides: 50 MB is instant on a LAN and a minute on a bad link.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use pipe_cache::remote::{Direction, Outcome, Phase, ProgressSink, TransferEvent};
use pipe_cache::ActionKey;
use pipe_protocol::format::{format_bytes, format_seconds};

use crate::human_reporter::{human_times, print_line};
use crate::json_reporter::JsonReporter;
use crate::reporter::Reporter;

/// A transfer gets a bar (terminal) or its lines (log) once it has been
/// moving this long.
const LONG: Duration = Duration::from_secs(1);

/// In a log, a long transfer still going writes a line this often, so a
/// CI job moving a large model never looks hung.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// At most this many output paths name a transfer in its bar or line.
const SHOWN_OUTPUTS: usize = 2;

/// The sink for a remote's transfers, handing each to the reporters that
/// `--json` and `--quiet` chose, or `None` when nothing would be shown
/// (`--quiet` without `--json`): the transfers then track nothing. `bars`
/// is the command's own `MultiProgress` when stderr is a terminal (`pipe
/// run` shares its stages' one).
pub fn sink(json: bool, quiet: bool, bars: Option<MultiProgress>) -> Option<ProgressSink> {
    let mut reporters: Vec<Box<dyn Reporter<TransferEvent>>> = Vec::new();
    if json {
        reporters.push(Box::new(JsonReporter));
    }
    if !quiet {
        reporters.push(Box::new(HumanTransfers::new(bars)));
    }
    if reporters.is_empty() {
        return None;
    }
    Some(ProgressSink::new(move |event| {
        for reporter in &reporters {
            reporter.report(event);
        }
    }))
}

/// A `MultiProgress` on stderr when it is a terminal and bars may be
/// drawn, for commands that have none of their own.
pub fn terminal_bars(quiet: bool) -> Option<MultiProgress> {
    use std::io::IsTerminal;
    (!quiet && std::io::stderr().is_terminal())
        .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
}

/// Long transfers on stderr: bars on a terminal, lines otherwise.
struct HumanTransfers {
    /// A terminal's display, through which lines are printed too so that
    /// the two do not tear each other; `None`: plain lines.
    bars: Option<MultiProgress>,
    live: Mutex<HashMap<(&'static str, ActionKey), Live>>,
}

/// One transfer in flight, as shown.
struct Live {
    label: String,
    bar: Option<ProgressBar>,
    /// When (since its start) the last periodic log line was written.
    logged: Duration,
}

impl HumanTransfers {
    fn new(bars: Option<MultiProgress>) -> HumanTransfers {
        HumanTransfers {
            bars,
            live: Mutex::new(HashMap::new()),
        }
    }

    /// A long transfer's bar moves; in a log, its line is written when due.
    fn progress(&self, transfer: &mut Live, event: &TransferEvent) {
        if event.elapsed < LONG || event.done_bytes >= event.total_bytes {
            return;
        }
        let Some(bars) = &self.bars else {
            if let Some(line) = periodic_line(transfer, event) {
                print_line(None, &line);
            }
            return;
        };
        let bar = transfer.bar.get_or_insert_with(|| {
            // Its clock starts with the transfer, not the bar.
            let bar = bars.add(
                ProgressBar::new(event.total_bytes)
                    .with_style(bar_style())
                    .with_message(crate::output::shown(format_args!("{}", transfer.label)))
                    .with_elapsed(event.elapsed),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        bar.set_position(event.done_bytes);
        bar.set_prefix(rate_and_eta(event));
    }
}

impl Reporter<TransferEvent> for HumanTransfers {
    fn report(&self, event: &TransferEvent) {
        let id = (event.direction.as_str(), event.key);
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        match &event.phase {
            Phase::Started { outputs } => {
                live.insert(
                    id,
                    Live {
                        label: label(event.direction, outputs),
                        bar: None,
                        logged: Duration::ZERO,
                    },
                );
            }
            Phase::Progress => {
                if let Some(transfer) = live.get_mut(&id) {
                    self.progress(transfer, event);
                }
            }
            Phase::Finished { outcome, .. } => {
                let Some(transfer) = live.remove(&id) else {
                    return;
                };
                if let Some(bar) = &transfer.bar {
                    bar.finish_and_clear();
                }
                if let Some(line) = finished_line(&transfer, event, *outcome) {
                    print_line(self.bars.as_ref(), &line);
                }
            }
        }
    }
}

/// In a log, a long transfer's line every `LOG_EVERY`, from its progress
/// events (a transfer that stalls writes none until it moves again).
fn periodic_line(transfer: &mut Live, event: &TransferEvent) -> Option<String> {
    if event.elapsed < LONG.max(transfer.logged + LOG_EVERY) {
        return None;
    }
    transfer.logged = event.elapsed;
    Some(format!(
        "  {}: {} of {} ({}%), {}/s",
        transfer.label,
        format_bytes(event.done_bytes as f64),
        format_bytes(event.total_bytes as f64),
        percent(event.done_bytes, event.total_bytes),
        format_bytes(rate(event.done_bytes, event.elapsed) as f64),
    ))
}

/// The line a transfer ends with, if it was long.
fn finished_line(transfer: &Live, event: &TransferEvent, outcome: Outcome) -> Option<String> {
    if event.elapsed < LONG {
        return None;
    }
    let verb = match (event.direction, outcome) {
        (_, Outcome::Failed) => "failed",
        (_, Outcome::AlreadyThere) => "already there",
        (Direction::Pull, Outcome::Done) => "pulled",
        (Direction::Push, Outcome::Done) => "pushed",
    };
    Some(format!(
        "  {}: {verb}, {} in {} ({}/s)",
        transfer.label,
        format_bytes(event.done_bytes as f64),
        format_seconds(event.elapsed.as_secs_f64()),
        format_bytes(rate(event.done_bytes, event.elapsed) as f64),
    ))
}

/// `↓ data, model.pt` / `↑ data and 3 more`: what is moving, by its
/// outputs (a remote knows keys, not stage names).
fn label(direction: Direction, outputs: &[String]) -> String {
    let arrow = match direction {
        Direction::Pull => "↓",
        Direction::Push => "↑",
    };
    let names = crate::terminal::first_few(outputs, SHOWN_OUTPUTS, ", ");
    format!("{arrow} {names}")
}

/// A transfer's bar. The rate is the transfer's own average, not
/// indicatif's estimate: the bar appears a second in, with most of a fast
/// transfer done, and an estimate from that jump would read GiB/s.
fn bar_style() -> ProgressStyle {
    human_times(
        ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {prefix} {elapsed:.dim}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    )
}

/// `140 MiB/s, eta 3 s`, from the start of the transfer.
fn rate_and_eta(event: &TransferEvent) -> String {
    let rate = rate(event.done_bytes, event.elapsed);
    let left = event.total_bytes.saturating_sub(event.done_bytes);
    match left.checked_div(rate) {
        Some(seconds) => format!(
            "{}/s, eta {}",
            format_bytes(rate as f64),
            format_seconds(seconds as f64)
        ),
        None => format!("{}/s", format_bytes(rate as f64)),
    }
}

fn percent(done: u64, total: u64) -> u64 {
    (done as u128 * 100)
        .checked_div(total as u128)
        .unwrap_or(100) as u64
}

fn rate(bytes: u64, elapsed: Duration) -> u64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        (bytes as f64 / seconds) as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_is_named_by_its_first_outputs() {
        let outputs: Vec<String> = ["data", "model.pt", "metrics.json", "log.txt"]
            .map(String::from)
            .to_vec();
        assert_eq!(label(Direction::Pull, &outputs[..1]), "↓ data");
        assert_eq!(
            label(Direction::Push, &outputs),
            "↑ data, model.pt and 2 more"
        );
    }

    fn event(elapsed_ms: u64, done: u64, phase: Phase) -> TransferEvent {
        TransferEvent {
            direction: Direction::Push,
            key: ActionKey::of(b"k"),
            total_bytes: 1000,
            done_bytes: done,
            elapsed: Duration::from_millis(elapsed_ms),
            phase,
        }
    }

    fn live() -> Live {
        Live {
            label: "↑ model".to_string(),
            bar: None,
            logged: Duration::ZERO,
        }
    }

    #[test]
    fn a_log_gets_a_line_every_ten_seconds_of_a_long_transfer_only() {
        let mut transfer = live();
        let lines: Vec<(u64, String)> = [100, 900, 1_500, 9_999, 10_000, 15_000, 19_999, 20_250]
            .into_iter()
            .filter_map(|ms| {
                periodic_line(&mut transfer, &event(ms, ms / 100, Phase::Progress))
                    .map(|line| (ms, line))
            })
            .collect();
        assert_eq!(
            lines,
            [
                (
                    10_000,
                    "  ↑ model: 100 B of 1000 B (10%), 10 B/s".to_string()
                ),
                (
                    20_250,
                    "  ↑ model: 202 B of 1000 B (20%), 9 B/s".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_transfer_ends_with_a_line_only_when_it_was_long() {
        let finished = |ms| {
            event(
                ms,
                1000,
                Phase::Finished {
                    outcome: Outcome::Done,
                    transferred_bytes: 1000,
                },
            )
        };
        // A few KB done in milliseconds: nothing, the summary counts it.
        assert_eq!(finished_line(&live(), &finished(30), Outcome::Done), None);
        assert_eq!(
            finished_line(&live(), &finished(2_000), Outcome::Done).as_deref(),
            Some("  ↑ model: pushed, 1000 B in 2 s (500 B/s)")
        );
        assert_eq!(
            finished_line(&live(), &finished(2_000), Outcome::AlreadyThere).as_deref(),
            Some("  ↑ model: already there, 1000 B in 2 s (500 B/s)")
        );
    }

    #[test]
    fn a_bar_shows_the_average_rate_and_what_is_left_at_it() {
        assert_eq!(
            rate_and_eta(&event(2_000, 400, Phase::Progress)),
            "200 B/s, eta 3 s"
        );
        assert_eq!(rate_and_eta(&event(0, 0, Phase::Progress)), "0 B/s");
    }

    #[test]
    fn an_empty_result_is_complete_and_an_instant_one_has_no_rate() {
        assert_eq!(percent(0, 0), 100);
        assert_eq!(percent(1, 3), 33);
        assert_eq!(rate(10, Duration::ZERO), 0);
        assert_eq!(rate(10, Duration::from_millis(500)), 20);
    }
}
