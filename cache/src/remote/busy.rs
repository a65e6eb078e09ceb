//! How long pushing took: the time at least one push was under way.
//!
//! Pushes run in the background beside the run's stages and beside each
//! other, so neither the time since the first one began (which counts the
//! stages that ran meanwhile) nor the sum of their times (which counts
//! overlapping pushes twice) says how long the remote kept pipe busy.

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub(super) struct BusyClock {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    under_way: usize,
    since: Option<Instant>,
    total: Duration,
    started: bool,
}

/// One push under way, until it is dropped (finished, failed, or its task
/// cancelled).
pub(super) struct Busy<'a> {
    clock: &'a BusyClock,
}

impl BusyClock {
    pub(super) fn enter(&self) -> Busy<'_> {
        self.enter_at(Instant::now());
        Busy { clock: self }
    }

    fn enter_at(&self, now: Instant) {
        let mut state = self.lock();
        if state.under_way == 0 {
            state.since = Some(now);
        }
        state.under_way += 1;
        state.started = true;
    }

    fn leave_at(&self, now: Instant) {
        let mut state = self.lock();
        state.under_way = state.under_way.saturating_sub(1);
        if state.under_way == 0 {
            if let Some(since) = state.since.take() {
                state.total += now.saturating_duration_since(since);
            }
        }
    }

    /// The time something was being pushed, up to now; `None` when
    /// nothing ever was.
    pub(super) fn total(&self) -> Option<Duration> {
        self.total_at(Instant::now())
    }

    fn total_at(&self, now: Instant) -> Option<Duration> {
        let state = self.lock();
        let running = state
            .since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        state.started.then_some(state.total + running)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.clock.leave_at(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_pushes_count_once_and_idle_gaps_not_at_all() {
        let clock = BusyClock::default();
        assert_eq!(clock.total(), None);
        let t0 = Instant::now();
        let at = |seconds: u64| t0 + Duration::from_secs(seconds);
        // Two pushes over 0..10 and 5..12, then nothing until 100..103.
        clock.enter_at(at(0));
        clock.enter_at(at(5));
        clock.leave_at(at(10));
        clock.leave_at(at(12));
        assert_eq!(clock.total_at(at(50)), Some(Duration::from_secs(12)));
        clock.enter_at(at(100));
        assert_eq!(clock.total_at(at(101)), Some(Duration::from_secs(13)));
        clock.leave_at(at(103));
        assert_eq!(clock.total_at(at(200)), Some(Duration::from_secs(15)));
    }

    #[test]
    fn a_dropped_push_stops_the_clock() {
        let clock = BusyClock::default();
        drop(clock.enter());
        let total = clock.total().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            clock.total(),
            Some(total),
            "nothing under way, nothing counted"
        );
    }
}
