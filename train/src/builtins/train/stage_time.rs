//! Where the stage's wall time went, for metrics.json's `stage_seconds`:
//! the start (the process loading libtorch, the token files and the
//! model, the peers, the peak probe), the optimizer steps, validation,
//! the resume states, the checkpoint, and the rest. The parts add up to
//! the total, which runs from the process's start (as the kernel dates
//! it: loading libtorch's libraries comes before `main`) to the metrics.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::metrics::round3;

/// The parts of the stage's time so far, in seconds.
pub(super) struct StageTime {
    /// When the process started.
    origin: Instant,
    /// When the first epoch began; None until then.
    loop_started: Option<Instant>,
    pub(super) steps: f64,
    pub(super) validation: f64,
    /// Saving resume states.
    pub(super) resume_state: f64,
    /// Reading one back, on a resumed run (before the first epoch).
    pub(super) resume_read: f64,
    /// The best epoch's weights, and the checkpoint's other files.
    pub(super) checkpoint: f64,
}

impl StageTime {
    /// Dated from the process's start where /proc says when that was,
    /// else from now.
    pub(super) fn start() -> StageTime {
        let now = Instant::now();
        let origin = process_age()
            .and_then(|age| now.checked_sub(age))
            .unwrap_or(now);
        StageTime {
            origin,
            loop_started: None,
            steps: 0.0,
            validation: 0.0,
            resume_state: 0.0,
            resume_read: 0.0,
            checkpoint: 0.0,
        }
    }

    /// The first epoch begins: what came before is the start.
    pub(super) fn loop_starts(&mut self) {
        self.loop_started.get_or_insert_with(Instant::now);
    }

    /// `{"start", "steps", "validation", "resume_state", "checkpoint",
    /// "other", "total"}`, total up to now. `resume_state` counts reading
    /// back the state a run resumed from (looking and finding none is
    /// start) as well as saving; `other` is what the named parts leave:
    /// the replicas' check after an epoch, the curves, the metrics.
    pub(super) fn to_json(&self) -> Value {
        let total = self.origin.elapsed().as_secs_f64();
        let before_loop = self
            .loop_started
            .map_or(total, |at| at.duration_since(self.origin).as_secs_f64());
        let start = (before_loop - self.resume_read).max(0.0);
        let resume_state = self.resume_state + self.resume_read;
        let named = start + self.steps + self.validation + resume_state + self.checkpoint;
        json!({
            "start": round3(start),
            "steps": round3(self.steps),
            "validation": round3(self.validation),
            "resume_state": round3(resume_state),
            "checkpoint": round3(self.checkpoint),
            "other": round3((total - named).max(0.0)),
            "total": round3(total),
        })
    }
}

/// How long ago this process started: /proc/uptime less the start time
/// in /proc/self/stat (clock ticks since boot). None off Linux.
fn process_age() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    age_of(&stat, &uptime, ticks_per_second)
}

fn age_of(stat: &str, uptime: &str, ticks_per_second: i64) -> Option<Duration> {
    // The command name, field 2, is in parentheses and may hold spaces
    // and parentheses itself: the fields after the last `)` are 3 on,
    // and the start time is field 22.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let started_ticks: f64 = after_name.split_whitespace().nth(22 - 3)?.parse().ok()?;
    let up: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    if ticks_per_second <= 0 {
        return None;
    }
    let age = up - started_ticks / ticks_per_second as f64;
    (age >= 0.0).then(|| Duration::from_secs_f64(age))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_age_is_uptime_less_the_start_in_ticks() {
        // Field 22 is 1234 ticks: 12.34 s after boot at 100 ticks a second.
        let stat = "4242 (pipe (stage) train) S 1 4242 4242 0 -1 4194560 1 0 0 0 \
                    5 6 0 0 20 0 3 0 1234 1000000 100 18446744073709551615";
        let age = age_of(stat, "20.50 40.00\n", 100).unwrap();
        assert!((age.as_secs_f64() - 8.16).abs() < 1e-9, "{age:?}");
        assert_eq!(age_of(stat, "10.00 1.0", 100), None, "started after now");
        assert_eq!(age_of("garbage", "20.5 1.0", 100), None);
        // This very process started before the test ran, not after.
        assert!(process_age().is_some_and(|age| age > Duration::ZERO));
    }
}
