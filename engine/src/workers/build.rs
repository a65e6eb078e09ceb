//! A worker built before the first of its stages runs, once per process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::describe::describe;
use super::source_checkout::{mark_fresh, Checkout};
use crate::builtin_workers::{built_in_stages, first_difference, BuiltinWorker};
use crate::events::Observer;
use crate::{EngineError, Result, UsageError};

/// A built-in worker to build before the first of its stages runs.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingBuild {
    checkout: Checkout,
    worker: BuiltinWorker,
}

/// The builds this process made, a slot per worker: parallel stages of a
/// worker wait for its one build, a failed build is not tried again by
/// every stage, and the two workers build at once (their cargo steps take
/// turns on cargo's lock of the target directory, but the training
/// worker's libtorch download is pip's, not cargo's).
static BUILDS: [Mutex<Option<BuildOutcome>>; 2] = [Mutex::new(None), Mutex::new(None)];

fn slot(worker: BuiltinWorker) -> MutexGuard<'static, Option<BuildOutcome>> {
    let index = match worker {
        BuiltinWorker::Data => 0,
        BuiltinWorker::Training => 1,
    };
    BUILDS[index]
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A build's outcome, kept to answer the stages that ask after it: its
/// error, as a usage error.
type BuildOutcome = std::result::Result<(), UsageError>;

impl PendingBuild {
    pub(crate) fn new(checkout: Checkout, worker: BuiltinWorker) -> PendingBuild {
        PendingBuild { checkout, worker }
    }

    pub fn worker(&self) -> BuiltinWorker {
        self.worker
    }

    /// Builds the worker unless this process already did (or another
    /// `pipe` did meanwhile), then checks that it describes its stages as
    /// the catalog built into pipe does: the stages' keys were made from
    /// that catalog.
    pub fn ensure(&self, observer: Observer<'_>) -> Result<()> {
        self.ensure_unless_stopped(observer, &AtomicBool::new(false))
    }

    /// `ensure`, its build stopped (its tools sent SIGINT, as Ctrl-C
    /// would) once `stop` is set: a build started ahead of the stages
    /// that need it, which the run no longer needs. A stopped build is no
    /// outcome: the next stage that needs the worker builds it, and cargo
    /// goes on from what it had compiled.
    pub(crate) fn ensure_unless_stopped(
        &self,
        observer: Observer<'_>,
        stop: &AtomicBool,
    ) -> Result<()> {
        let mut slot = slot(self.worker);
        if let Some(outcome) = slot.as_ref() {
            return outcome.clone().map_err(EngineError::Usage);
        }
        let outcome = self.build_and_check(observer, stop);
        if outcome.is_err() && stop.load(Ordering::SeqCst) {
            return outcome;
        }
        *slot = Some(outcome.as_ref().map(|_| ()).map_err(|error| match error {
            EngineError::Usage(usage) => usage.clone(),
            other => UsageError::Other {
                message: other.to_string(),
                hint: String::new(),
            },
        }));
        outcome
    }

    fn build_and_check(&self, observer: Observer<'_>, stop: &AtomicBool) -> Result<()> {
        let binary = self.checkout.binary(self.worker);
        if self.checkout.is_stale(self.worker, &binary) {
            self.checkout.build(&[self.worker], observer, stop)?;
            mark_fresh(&binary);
        }
        let described = describe(&binary, None)?;
        let built_in = built_in_stages(self.worker);
        match first_difference(&built_in, &described) {
            None => Ok(()),
            Some(difference) => Err(EngineError::usage(
                format!(
                    "`{}`, just built, describes its stages differently from the catalog built \
                     into this `pipe` ({difference}), and the stages' keys were made from the latter",
                    binary.display()
                ),
                format!(
                    "regenerate the catalog (`{} describe > engine/src/workers/{}`), rebuild `pipe` \
                     (`cargo build`) and run again",
                    binary.display(),
                    self.worker.catalog_file()
                ),
            )),
        }
    }
}
