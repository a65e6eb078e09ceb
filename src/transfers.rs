//! Shows the remote cache's transfers (`pipe run`'s pulls and pushes,
//! `pipe cache push|pull`): a bar per long transfer on a terminal, a line
//! per long transfer in a log, and every event as a JSON line on stdout
//! with `--json`. docs/remote-cache.md ("Progress") is the user's side.
//!
//! What is long: a transfer still moving bytes `LONG` after it started. A
//! result of a few KB is done long before, so it never flashes a bar or
//! writes a line; the end-of-command summary counts it. The time, not the
//! size, decides: 50 MB is instant on a LAN and a minute on a bad link.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use pipe_cache::remote::{Direction, Phase, ProgressSink, TransferEvent};
use pipe_cache::ActionKey;
use serde_json::json;

use crate::render;

/// A transfer gets a bar (terminal) or its lines (log) once it has been
/// moving this long.
const LONG: Duration = Duration::from_secs(1);

/// In a log, a long transfer still going writes a line this often, so a
/// CI job moving a large model never looks hung.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// At most this many output paths name a transfer in its bar or line.
const SHOWN_OUTPUTS: usize = 2;

/// How transfers are shown, decided once per command.
pub struct TransferView {
    json: bool,
    /// Where lines go: `Some` on a terminal (bars and lines through it, so
    /// they do not tear each other), `None` for plain lines on stderr,
    /// and nothing at all under `--quiet`.
    stderr: Stderr,
    live: Mutex<HashMap<(&'static str, ActionKey), Live>>,
}

enum Stderr {
    Quiet,
    Lines,
    Bars(MultiProgress),
}

/// One transfer in flight, as shown.
struct Live {
    label: String,
    bar: Option<ProgressBar>,
    /// When (since its start) the last periodic log line was written.
    logged: Duration,
}

impl TransferView {
    /// The sink for a remote's transfers, or `None` when nothing would be
    /// shown (`--quiet` without `--json`): the transfers then track
    /// nothing. `bars` is the command's own `MultiProgress` when stderr is
    /// a terminal (`pipe run` shares its stages' one).
    pub fn sink(json: bool, quiet: bool, bars: Option<MultiProgress>) -> Option<ProgressSink> {
        let stderr = match (quiet, bars) {
            (true, _) => Stderr::Quiet,
            (false, Some(bars)) => Stderr::Bars(bars),
            (false, None) => Stderr::Lines,
        };
        if !json && matches!(stderr, Stderr::Quiet) {
            return None;
        }
        let view = TransferView {
            json,
            stderr,
            live: Mutex::new(HashMap::new()),
        };
        Some(ProgressSink::new(move |event| view.on_event(event)))
    }

    /// A `MultiProgress` on stderr when it is a terminal and bars may be
    /// drawn, for commands that have none of their own.
    pub fn terminal_bars(quiet: bool) -> Option<MultiProgress> {
        use std::io::IsTerminal;
        (!quiet && std::io::stderr().is_terminal())
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
    }

    fn on_event(&self, event: &TransferEvent) {
        if self.json {
            emit_json(event);
        }
        if matches!(self.stderr, Stderr::Quiet) {
            return;
        }
        let id = (event.direction.as_str(), event.key);
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
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
                let Some(transfer) = live.get_mut(&id) else {
                    return;
                };
                if event.elapsed < LONG || event.done_bytes >= event.total_bytes {
                    return;
                }
                match &self.stderr {
                    Stderr::Bars(bars) => {
                        let bar = transfer.bar.get_or_insert_with(|| {
                            // Its clock starts with the transfer, not the bar.
                            let bar = bars.add(
                                ProgressBar::new(event.total_bytes)
                                    .with_style(bar_style())
                                    .with_message(transfer.label.clone())
                                    .with_elapsed(event.elapsed),
                            );
                            bar.enable_steady_tick(Duration::from_millis(120));
                            bar
                        });
                        bar.set_position(event.done_bytes);
                        bar.set_prefix(rate_and_eta(event));
                    }
                    Stderr::Lines if event.elapsed >= transfer.logged + LOG_EVERY => {
                        transfer.logged = event.elapsed;
                        let line = format!(
                            "  {}: {} of {} ({}%), {}/s",
                            transfer.label,
                            render::bytes(event.done_bytes),
                            render::bytes(event.total_bytes),
                            percent(event.done_bytes, event.total_bytes),
                            render::bytes(rate(event.done_bytes, event.elapsed)),
                        );
                        self.line(line);
                    }
                    Stderr::Lines | Stderr::Quiet => {}
                }
            }
            Phase::Finished { outcome, .. } => {
                let Some(transfer) = live.remove(&id) else {
                    return;
                };
                if let Some(bar) = &transfer.bar {
                    bar.finish_and_clear();
                }
                if event.elapsed >= LONG {
                    let verb = match (event.direction, outcome.as_str()) {
                        (_, "failed") => "failed",
                        (Direction::Pull, _) => "pulled",
                        (Direction::Push, _) => "pushed",
                    };
                    self.line(format!(
                        "  {}: {verb}, {} in {:.1} s ({}/s)",
                        transfer.label,
                        render::bytes(event.done_bytes),
                        event.elapsed.as_secs_f64(),
                        render::bytes(rate(event.done_bytes, event.elapsed)),
                    ));
                }
            }
        }
    }

    fn line(&self, text: String) {
        match &self.stderr {
            Stderr::Bars(bars) => {
                let _ = bars.println(text);
            }
            Stderr::Lines => {
                if let Err(error) = crate::output::try_eprint(format_args!("{text}\n")) {
                    crate::output::run_output_failed(error, false);
                }
            }
            Stderr::Quiet => {}
        }
    }
}

/// `↓ data, model.pt` / `↑ data and 3 more`: what is moving, by its
/// outputs (a remote knows keys, not stage names).
fn label(direction: Direction, outputs: &[String]) -> String {
    let arrow = match direction {
        Direction::Pull => "↓",
        Direction::Push => "↑",
    };
    let mut names = outputs
        .iter()
        .take(SHOWN_OUTPUTS)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if outputs.len() > SHOWN_OUTPUTS {
        names.push_str(&format!(" and {} more", outputs.len() - SHOWN_OUTPUTS));
    }
    format!("{arrow} {names}")
}

/// A transfer's bar. The rate is the transfer's own average, not
/// indicatif's estimate: the bar appears a second in, with most of a fast
/// transfer done, and an estimate from that jump would read GiB/s.
fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {prefix} {elapsed:.dim}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

/// `140.1 MiB/s, eta 3s`, from the start of the transfer.
fn rate_and_eta(event: &TransferEvent) -> String {
    let rate = rate(event.done_bytes, event.elapsed);
    let left = event.total_bytes.saturating_sub(event.done_bytes);
    match left.checked_div(rate) {
        Some(seconds) => format!("{}/s, eta {seconds}s", render::bytes(rate)),
        None => format!("{}/s", render::bytes(rate)),
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

/// The event as one JSON line on stdout, in the envelope of the run's
/// other events (`event` names it).
fn emit_json(event: &TransferEvent) {
    let mut value = json!({
        "direction": event.direction.as_str(),
        "key": event.key.to_hex(),
        "total_bytes": event.total_bytes,
        "done_bytes": event.done_bytes,
    });
    match &event.phase {
        Phase::Started { outputs } => {
            value["event"] = json!("transfer_started");
            value["outputs"] = json!(outputs);
        }
        Phase::Progress => {
            value["event"] = json!("transfer_progress");
            value["elapsed_ms"] = json!(event.elapsed.as_millis() as u64);
        }
        Phase::Finished {
            outcome,
            transferred_bytes,
        } => {
            value["event"] = json!("transfer_finished");
            value["outcome"] = json!(outcome.as_str());
            value["transferred_bytes"] = json!(transferred_bytes);
            value["duration_ms"] = json!(event.elapsed.as_millis() as u64);
        }
    }
    if let Err(error) = crate::output::try_print(format_args!("{value}\n")) {
        crate::output::run_output_failed(error, true);
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

    #[test]
    fn an_empty_result_is_complete_and_an_instant_one_has_no_rate() {
        assert_eq!(percent(0, 0), 100);
        assert_eq!(percent(1, 3), 33);
        assert_eq!(rate(10, Duration::ZERO), 0);
        assert_eq!(rate(10, Duration::from_millis(500)), 20);
    }
}
