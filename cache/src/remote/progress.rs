//! Progress of one result's transfer, for whoever shows it (the CLI's bars,
//! `--json` events, CI log lines): a start, throttled progress, a finish.
//!
//! Bytes are the result's file bytes as its action names them (a
//! directory's size is the sum of its files), so `done` ends equal to
//! `total` whatever was already in place: an object the other side already
//! has counts as done when that is found, an object sent or received
//! counts chunk by chunk. Tree listings move too but are not in either
//! figure (they are metadata, and their size is not in the action);
//! `transferred` counts every byte that actually went over the wire.
//!
//! Nothing here runs without a sink: a remote opened without one creates
//! no `Transfer`, so the transfer loops pay one `Option` check per chunk.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{ActionKey, ActionResult};

/// Progress events of one transfer are at most this often (the first one
/// excepted): a few per second is what a bar or a `--json` reader needs,
/// and a 1 GiB pull in 8 MiB chunks would otherwise be hundreds of events.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Pull,
    Push,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Pull => "pull",
            Direction::Push => "push",
        }
    }
}

/// How a transfer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Pulled into the local cache, or pushed by this process.
    Done,
    /// A push found the result written already (another process first).
    AlreadyThere,
    /// Not completed: the remote failed, the entry was corrupt, or the
    /// local cache refused; the run's warnings and summary say which.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::AlreadyThere => "already_there",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The result's action is known (read from the remote, or about to be
    /// pushed); `outputs` are its output paths.
    Started {
        outputs: Vec<String>,
    },
    Progress,
    Finished {
        outcome: Outcome,
        /// Bytes that went over the wire, tree listings included.
        transferred_bytes: u64,
    },
}

/// One event of one result's transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferEvent {
    pub direction: Direction,
    pub key: ActionKey,
    /// The result's file bytes, and how many of them are in place.
    pub total_bytes: u64,
    pub done_bytes: u64,
    /// Since the transfer started.
    pub elapsed: Duration,
    pub phase: Phase,
}

/// Where a remote sends its transfer events. Called from the remote's I/O
/// threads, several transfers at once: it must return quickly.
#[derive(Clone)]
pub struct ProgressSink(Arc<dyn Fn(&TransferEvent) + Send + Sync>);

impl ProgressSink {
    pub fn new(sink: impl Fn(&TransferEvent) + Send + Sync + 'static) -> ProgressSink {
        ProgressSink(Arc::new(sink))
    }

    fn send(&self, event: &TransferEvent) {
        (self.0)(event)
    }
}

impl fmt::Debug for ProgressSink {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("ProgressSink")
    }
}

/// Two configurations are the same when they send to the same sink.
impl PartialEq for ProgressSink {
    fn eq(&self, other: &ProgressSink) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ProgressSink {}

/// Lets one caller through per interval, the first one at once, whichever
/// thread asks: a time is milliseconds since the transfer started.
#[derive(Debug)]
pub(crate) struct Throttle {
    interval_ms: u64,
    /// The first time the next event may go out.
    next_ms: AtomicU64,
}

impl Throttle {
    pub(crate) fn new(interval: Duration) -> Throttle {
        Throttle {
            interval_ms: interval.as_millis() as u64,
            next_ms: AtomicU64::new(0),
        }
    }

    /// Whether an event at `now_ms` may go out; if so, the next one waits
    /// an interval from now. Of callers racing for one slot, one wins.
    pub(crate) fn ready(&self, now_ms: u64) -> bool {
        let next = self.next_ms.load(Ordering::Relaxed);
        now_ms >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now_ms.saturating_add(self.interval_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }
}

/// One result's transfer in flight: counts bytes from any of the tasks
/// moving its objects and reports to the sink.
pub(crate) struct Transfer {
    sink: ProgressSink,
    direction: Direction,
    key: ActionKey,
    total: u64,
    done: AtomicU64,
    transferred: AtomicU64,
    started: Instant,
    throttle: Throttle,
}

impl Transfer {
    /// Starts reporting a transfer of `total` file bytes of `result`, when
    /// there is a sink.
    pub(crate) fn start(
        sink: Option<&ProgressSink>,
        direction: Direction,
        result: &ActionResult,
        total: u64,
    ) -> Option<Transfer> {
        let transfer = Transfer {
            sink: sink?.clone(),
            direction,
            key: result.key,
            total,
            done: AtomicU64::new(0),
            transferred: AtomicU64::new(0),
            started: Instant::now(),
            throttle: Throttle::new(PROGRESS_INTERVAL),
        };
        transfer.send(Phase::Started {
            outputs: result.outputs.keys().map(String::from).collect(),
        });
        Some(transfer)
    }

    fn send(&self, phase: Phase) {
        self.sink.send(&TransferEvent {
            direction: self.direction,
            key: self.key,
            total_bytes: self.total,
            done_bytes: self.done.load(Ordering::Relaxed).min(self.total),
            elapsed: self.started.elapsed(),
            phase,
        });
    }

    /// `bytes` of the result's files are in place: moved now, or found
    /// already on the other side.
    pub(crate) fn done(&self, bytes: u64) {
        self.done.fetch_add(bytes, Ordering::Relaxed);
        let now_ms = self.started.elapsed().as_millis() as u64;
        if self.throttle.ready(now_ms) {
            self.send(Phase::Progress);
        }
    }

    /// `bytes` went over the wire (file bytes or a tree listing).
    pub(crate) fn transferred(&self, bytes: u64) {
        self.transferred.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn finish(self, outcome: Outcome) {
        let transferred_bytes = self.transferred.load(Ordering::Relaxed);
        self.send(Phase::Finished {
            outcome,
            transferred_bytes,
        });
    }
}

/// Counts into an optional transfer: what the transfer loops call, so that
/// without a sink they do nothing.
pub(crate) fn count_done(transfer: Option<&Transfer>, bytes: u64) {
    if let Some(transfer) = transfer {
        transfer.done(bytes);
    }
}

pub(crate) fn count_transferred(transfer: Option<&Transfer>, bytes: u64) {
    if let Some(transfer) = transfer {
        transfer.transferred(bytes);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn the_first_event_goes_out_then_one_per_interval() {
        let throttle = Throttle::new(Duration::from_millis(250));
        assert!(throttle.ready(0));
        assert!(!throttle.ready(0));
        assert!(!throttle.ready(249));
        assert!(throttle.ready(250));
        assert!(!throttle.ready(499));
        // A late caller is let through, and the next interval counts from it.
        assert!(throttle.ready(1_000));
        assert!(!throttle.ready(1_249));
        assert!(throttle.ready(1_250));
    }

    #[test]
    fn a_steady_stream_is_cut_to_a_few_events_per_second() {
        let throttle = Throttle::new(PROGRESS_INTERVAL);
        // A chunk every millisecond for ten seconds.
        let passed = (0..10_000).filter(|&ms| throttle.ready(ms)).count();
        assert_eq!(passed, 40);
    }

    #[test]
    fn of_threads_racing_for_one_slot_exactly_one_wins() {
        let throttle = Arc::new(Throttle::new(Duration::from_secs(3600)));
        let winners: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let throttle = throttle.clone();
                    scope.spawn(move || (0..1_000).filter(|_| throttle.ready(5)).count())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(winners, 1);
    }

    fn result() -> ActionResult {
        ActionResult {
            key: ActionKey::of(b"k"),
            outputs: BTreeMap::new(),
            manifest: crate::manifest_of(&serde_json::Value::Null),
            created_unix_ms: 0,
            duration_ms: 0,
        }
    }

    #[test]
    fn a_transfer_starts_reports_and_finishes_with_its_counts() {
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        let sink = ProgressSink::new(move |event| seen.lock().unwrap().push(event.clone()));
        let transfer = Transfer::start(Some(&sink), Direction::Pull, &result(), 30).unwrap();
        transfer.done(10);
        transfer.transferred(12);
        transfer.done(20);
        transfer.finish(Outcome::Done);
        let events = events.lock().unwrap();
        assert!(matches!(events[0].phase, Phase::Started { .. }));
        assert_eq!(events[1].phase, Phase::Progress);
        assert_eq!(events[1].done_bytes, 10);
        let last = events.last().unwrap();
        assert_eq!(
            last.phase,
            Phase::Finished {
                outcome: Outcome::Done,
                transferred_bytes: 12
            }
        );
        assert_eq!((last.done_bytes, last.total_bytes), (30, 30));
        assert!(events
            .iter()
            .all(|event| event.direction == Direction::Pull));
    }

    #[test]
    fn without_a_sink_nothing_is_tracked() {
        assert!(Transfer::start(None, Direction::Push, &result(), 1).is_none());
    }
}
