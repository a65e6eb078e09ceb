//! Shows what a command does as it happens. The engine's typed events (a
//! run's stages, a worker build) and the remote's transfer events each go
//! to every reporter the flags chose, and each reporter renders all of
//! them its own way, as cargo-nextest's do: `JsonReporter` the `--json`
//! lines on stdout (src/json_reporter.rs), `HumanReporter` the terminal's
//! bars or a log's lines on stderr (src/human_reporter.rs;
//! src/transfers.rs for transfers). No match has a JSON branch and a
//! terminal branch.

use indicatif::MultiProgress;
use pipe_engine::Event;

use crate::human_reporter::HumanReporter;
use crate::json_reporter::JsonReporter;
use crate::reporter::Reporter;

/// The reporters of a run's events, chosen once from `--json` and
/// `--quiet`.
pub struct Progress {
    reporters: Vec<Box<dyn for<'e> Reporter<Event<'e>>>>,
    bars: Option<MultiProgress>,
}

impl Progress {
    /// `output_lines`: how many of a succeeded command stage's last lines
    /// the human reporter shows.
    pub fn new(json: bool, quiet: bool, output_lines: usize) -> Progress {
        let human = HumanReporter::new(quiet, output_lines);
        let bars = human.bars();
        let mut reporters: Vec<Box<dyn for<'e> Reporter<Event<'e>>>> = Vec::new();
        if json {
            reporters.push(Box::new(JsonReporter));
        }
        // With `--quiet` too: a failure is still shown.
        reporters.push(Box::new(human));
        Progress { reporters, bars }
    }

    /// The live display on a terminal, for the remote's transfer bars to
    /// share (src/transfers.rs); `None` when stderr is not one or `--quiet`.
    pub fn bars(&self) -> Option<MultiProgress> {
        self.bars.clone()
    }

    pub fn on_event(&self, event: Event<'_>) {
        for reporter in &self.reporters {
            reporter.report(&event);
        }
    }
}
