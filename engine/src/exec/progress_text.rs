//! A stage's progress as lines of text, for where no live bar can be
//! drawn: the stage log, so that `tail -f` shows a long stage moving, and
//! stderr off a terminal, so that a CI log does too (the CLI's
//! src/progress.rs). One line at most every interval per stage: a CI log
//! of a ten-minute epoch should read like Lightning's, not like a bar
//! redrawn into a file.

use std::time::{Duration, Instant};

use pipe_protocol::format::{format_bytes, format_seconds};

/// The variable that sets the interval, in seconds (`0`: every event the
/// worker sends, which it throttles to 5 a second itself).
pub const PROGRESS_INTERVAL_VAR: &str = "PIPE_PROGRESS_INTERVAL";

/// The interval between two lines of one stage: [`PROGRESS_INTERVAL_VAR`]
/// when set to a number of seconds, else `default`.
pub fn progress_interval(default: Duration) -> Duration {
    std::env::var(PROGRESS_INTERVAL_VAR)
        .ok()
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
        .map_or(default, Duration::from_secs_f64)
}

/// One stage's progress readings turned into an occasional line.
#[derive(Debug)]
pub struct ProgressText {
    interval: Duration,
    /// When the last line was given; the stage's start before the first,
    /// so a stage shorter than the interval prints none.
    last_line: Instant,
    phase: Option<PhaseStart>,
}

/// Where the current phase's rate is measured from.
#[derive(Debug)]
struct PhaseStart {
    name: String,
    at: Instant,
    done: u64,
    /// Its line at 100% was given: a worker may report the end twice (the
    /// last step, then the epoch's figures), and one such line is enough.
    ended: bool,
}

/// One progress event of a stage.
#[derive(Debug, Clone, Copy)]
pub struct Reading<'a> {
    pub phase: &'a str,
    pub done: u64,
    pub total: Option<u64>,
    pub unit: &'a str,
    pub detail: Option<&'a str>,
}

impl ProgressText {
    pub fn new(interval: Duration, started: Instant) -> ProgressText {
        ProgressText {
            interval,
            last_line: started,
            phase: None,
        }
    }

    /// The line for `reading` when the interval has passed since the last
    /// one, or when a phase ends after having given a line of its own (so
    /// that a long epoch's figures are written when it ends).
    pub fn observe(&mut self, reading: Reading<'_>, now: Instant) -> Option<String> {
        let new_phase = match &self.phase {
            Some(phase) => phase.name != reading.phase || reading.done < phase.done,
            None => true,
        };
        if new_phase {
            self.phase = Some(PhaseStart {
                name: reading.phase.to_string(),
                at: now,
                done: reading.done,
                ended: false,
            });
        }
        let interval = self.interval;
        let phase = self.phase.as_mut()?;
        let at_end = reading.total == Some(reading.done);
        if at_end && phase.ended && !interval.is_zero() {
            return None;
        }
        let due = now.saturating_duration_since(self.last_line) >= interval;
        let ends = at_end && self.last_line > phase.at && self.last_line < now;
        if !due && !ends {
            return None;
        }
        phase.ended = at_end;
        self.last_line = now;
        Some(line(reading, phase, now))
    }
}

fn line(reading: Reading<'_>, phase: &PhaseStart, now: Instant) -> String {
    let mut text = format!("{}  {}", reading.phase, amount(reading.done, reading.unit));
    if let Some(total) = reading.total {
        text.push_str(&format!(" of {}", amount(total, reading.unit)));
        if reading.unit != "bytes" {
            text.push_str(&format!(" {}", reading.unit));
        }
        if total > 0 {
            let percent = (reading.done.min(total) as f64 / total as f64 * 100.0).floor();
            text.push_str(&format!(" ({percent:.0}%)"));
        }
    } else if reading.unit != "bytes" {
        text.push_str(&format!(" {}", reading.unit));
    }
    if let Some(detail) = reading.detail.filter(|detail| !detail.is_empty()) {
        text.push_str(&format!("  {detail}"));
    }
    let elapsed = now.saturating_duration_since(phase.at).as_secs_f64();
    let progressed = reading.done.saturating_sub(phase.done);
    if let Some(total) = reading.total.filter(|&total| total > reading.done) {
        if progressed > 0 && elapsed > 0.0 {
            let seconds = (total - reading.done) as f64 * elapsed / progressed as f64;
            // An estimate: to the second, never in milliseconds.
            text.push_str(&format!("  ETA {}", format_seconds(seconds.round())));
        }
    }
    text
}

/// `1,250` or, for bytes, `12.4 MiB`.
fn amount(count: u64, unit: &str) -> String {
    if unit == "bytes" {
        format_bytes(count as f64)
    } else {
        grouped(count)
    }
}

fn grouped(count: u64) -> String {
    let digits = count.to_string();
    let head = match digits.len() % 3 {
        0 => 3.min(digits.len()),
        rest => rest,
    };
    let mut text = digits[..head].to_string();
    let mut at = head;
    while at < digits.len() {
        text.push(',');
        text.push_str(&digits[at..at + 3]);
        at += 3;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading<'a>(phase: &'a str, done: u64, total: Option<u64>) -> Reading<'a> {
        Reading {
            phase,
            done,
            total,
            unit: "steps",
            detail: Some("loss 0.4521  85.3 samples/s"),
        }
    }

    #[test]
    fn one_line_per_interval_with_the_rate_and_what_is_left() {
        let start = Instant::now();
        let mut text = ProgressText::new(Duration::from_secs(30), start);
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        assert_eq!(
            text.observe(reading("train epoch 1/2", 0, Some(1250)), at(1)),
            None
        );
        assert_eq!(
            text.observe(reading("train epoch 1/2", 100, Some(1250)), at(11)),
            None
        );
        let first = text.observe(reading("train epoch 1/2", 300, Some(1250)), at(31));
        assert_eq!(
            first.as_deref(),
            Some("train epoch 1/2  300 of 1,250 steps (24%)  loss 0.4521  85.3 samples/s  ETA 1 min 35 s")
        );
        assert_eq!(
            text.observe(reading("train epoch 1/2", 400, Some(1250)), at(40)),
            None
        );
        let second = text.observe(reading("train epoch 1/2", 1000, Some(1250)), at(61));
        assert!(second.unwrap().ends_with("ETA 15 s"));
        // The end of a phase that gave lines is written at once.
        let end = text.observe(reading("train epoch 1/2", 1250, Some(1250)), at(70));
        assert_eq!(
            end.as_deref(),
            Some("train epoch 1/2  1,250 of 1,250 steps (100%)  loss 0.4521  85.3 samples/s")
        );
        // Reported again at 100% (the epoch's own figures after its last
        // step): one end line is enough.
        assert_eq!(
            text.observe(reading("train epoch 1/2", 1250, Some(1250)), at(70)),
            None
        );
        // A new phase measures its own rate.
        assert_eq!(
            text.observe(reading("train epoch 2/2", 0, Some(1250)), at(71)),
            None
        );
        let next = text.observe(reading("train epoch 2/2", 625, Some(1250)), at(101));
        assert!(next
            .unwrap()
            .ends_with("(50%)  loss 0.4521  85.3 samples/s  ETA 30 s"));
    }

    #[test]
    fn a_phase_reported_at_its_end_again_past_the_interval_gives_no_second_line() {
        let start = Instant::now();
        let mut text = ProgressText::new(Duration::from_secs(30), start);
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        assert_eq!(text.observe(reading("validate", 0, Some(40)), at(1)), None);
        assert!(text
            .observe(reading("validate", 20, Some(40)), at(31))
            .is_some());
        assert!(text
            .observe(reading("validate", 40, Some(40)), at(35))
            .is_some());
        assert_eq!(
            text.observe(reading("validate", 40, Some(40)), at(36)),
            None
        );
        assert_eq!(
            text.observe(reading("validate", 40, Some(40)), at(90)),
            None
        );
        // Every event when the interval is 0, as asked.
        let mut every = ProgressText::new(Duration::ZERO, start);
        assert!(every
            .observe(reading("validate", 40, Some(40)), at(1))
            .is_some());
        assert!(every
            .observe(reading("validate", 40, Some(40)), at(2))
            .is_some());
    }

    #[test]
    fn a_stage_shorter_than_the_interval_gives_no_line() {
        let start = Instant::now();
        let mut text = ProgressText::new(Duration::from_secs(30), start);
        for (done, second) in [(0, 1), (50, 5), (100, 9)] {
            let reading = reading("tokenize", done, Some(100));
            assert_eq!(
                text.observe(reading, start + Duration::from_secs(second)),
                None
            );
        }
    }

    #[test]
    fn bytes_in_binary_units_and_unknown_totals_without_an_eta() {
        let start = Instant::now();
        let mut text = ProgressText::new(Duration::ZERO, start);
        let reading = Reading {
            phase: "download",
            done: 5 * 1024 * 1024 + 300 * 1024,
            total: None,
            unit: "bytes",
            detail: None,
        };
        let line = text.observe(reading, start + Duration::from_secs(3));
        assert_eq!(line.as_deref(), Some("download  5.29 MiB"));
        assert_eq!(
            [0, 999, 1000, 123456, 1234567].map(grouped),
            ["0", "999", "1,000", "123,456", "1,234,567"]
        );
    }
}
