//! A worker built before the first of its stages runs, once per process.

use std::sync::Mutex;

use super::builtin::{built_in_stages, first_difference, BuiltinWorker};
use super::describe::describe;
use super::source_checkout::{mark_fresh, Checkout};
use crate::events::Observer;
use crate::{EngineError, Result, UsageError};

/// A built-in worker to build before the first of its stages runs.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingBuild {
    checkout: Checkout,
    worker: BuiltinWorker,
}

/// The builds this process made, by worker: parallel stages wait for one
/// build, and a failed build is not tried again by every stage.
static BUILDS: Mutex<Vec<(BuiltinWorker, BuildOutcome)>> = Mutex::new(Vec::new());

/// A build's outcome, kept to answer the stages that ask after it: its
/// error, as a usage error.
type BuildOutcome = std::result::Result<(), UsageError>;

impl PendingBuild {
    pub(crate) fn new(checkout: Checkout, worker: BuiltinWorker) -> PendingBuild {
        PendingBuild { checkout, worker }
    }

    /// Builds the worker unless this process already did (or another
    /// `pipe` did meanwhile), then checks that it describes its stages as
    /// the catalog built into pipe does: the stages' keys were made from
    /// that catalog.
    pub fn ensure(&self, observer: Observer<'_>) -> Result<()> {
        let mut builds = BUILDS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, outcome)) = builds.iter().find(|(worker, _)| *worker == self.worker) {
            return outcome.clone().map_err(EngineError::Usage);
        }
        let outcome = self.build_and_check(observer);
        builds.push((
            self.worker,
            outcome.as_ref().map(|_| ()).map_err(|error| match error {
                EngineError::Usage(usage) => usage.clone(),
                other => UsageError::Other {
                    message: other.to_string(),
                    hint: String::new(),
                },
            }),
        ));
        outcome
    }

    fn build_and_check(&self, observer: Observer<'_>) -> Result<()> {
        let binary = self.checkout.binary(self.worker);
        if self.checkout.is_stale(self.worker, &binary) {
            self.checkout.build(&[self.worker], observer)?;
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
