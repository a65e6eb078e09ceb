//! The workers a run will need, built as soon as it starts doing work: in
//! a source checkout, the first stage that must run (a cache miss, or
//! forced) starts the builds of the workers of the stages below it, so
//! that they build while it runs, and the data worker's build, the
//! training worker's libtorch download and the stages between overlap
//! instead of waiting for one another. Each build is the one its stages
//! would have started (`PendingBuild`), shared with them: a stage that
//! reaches it waits for it as before.
//!
//! A build the run turns out not to need (the stage above it failed, or
//! made what it made before, so the stages below are fresh) is stopped
//! when the run ends; cargo keeps what it compiled for the next build.
//! A run that only restores or finds its stages fresh starts none.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, PoisonError};
use std::thread::Scope;

use crate::dag::Dag;
use crate::events::Observer;
use crate::pipeline::{Pipeline, StageKind};
use crate::workers::PendingBuild;

pub(super) struct Prebuild {
    /// The builds the run's stages wait for, one per worker.
    builds: Vec<PendingBuild>,
    /// Per stage: the builds (bits of `builds`) that the selected stages
    /// below it wait for.
    below: Vec<u32>,
    /// The builds already asked for.
    asked: Mutex<u32>,
    /// While the scheduler runs: where builds are asked for.
    requests: Mutex<Option<Sender<PendingBuild>>>,
    /// Set when the scheduler is done: what still builds is not needed.
    stop: AtomicBool,
}

impl Prebuild {
    pub(super) fn new(pipeline: &Pipeline, dag: &Dag, selected: &[usize]) -> Prebuild {
        let mut builds: Vec<PendingBuild> = Vec::new();
        let mut own: Vec<(usize, u32)> = Vec::new();
        for &index in selected {
            let StageKind::Worker(worker) = &pipeline.stages[index].kind else {
                continue;
            };
            let Some(build) = &worker.launch.build else {
                continue;
            };
            let position = match builds.iter().position(|b| b.worker() == build.worker()) {
                Some(position) => position,
                // A bit each: past 32 workers built from a checkout, the
                // rest build when their stages reach them, as before.
                None if builds.len() == u32::BITS as usize => continue,
                None => {
                    builds.push(build.clone());
                    builds.len() - 1
                }
            };
            own.push((index, 1 << position));
        }
        // Nothing to build (a checkout whose workers are up to date, an
        // installation): a no-op of many stages pays no more than this.
        let mut below = Vec::new();
        if !builds.is_empty() {
            let mut is_selected = vec![false; pipeline.stages.len()];
            for &index in selected {
                is_selected[index] = true;
            }
            let mut own_bits = vec![0u32; pipeline.stages.len()];
            for (index, bit) in own {
                own_bits[index] = bit;
            }
            below = vec![0u32; pipeline.stages.len()];
            for &index in dag.order.iter().rev() {
                for &down in &dag.downstream[index] {
                    if is_selected[down] {
                        below[index] |= own_bits[down] | below[down];
                    }
                }
            }
        }
        Prebuild {
            builds,
            below,
            asked: Mutex::new(0),
            requests: Mutex::new(None),
            stop: AtomicBool::new(false),
        }
    }

    /// Stage `index` is about to run: the builds the stages below it will
    /// wait for start now, those not started yet.
    pub(super) fn stage_runs(&self, index: usize) {
        let wanted = self.below.get(index).copied().unwrap_or(0);
        if wanted == 0 {
            return;
        }
        let new = {
            let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
            let new = wanted & !*asked;
            *asked |= new;
            new
        };
        let requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(requests) = requests.as_ref() else {
            return;
        };
        for (position, build) in self.builds.iter().enumerate() {
            if new & (1 << position) != 0 {
                let _ = requests.send(build.clone());
            }
        }
    }

    /// Serves the requests of `stage_runs` on threads of `scope`, each
    /// build on its own, until the guard returned is dropped, which stops
    /// the builds still going. The guard must be dropped before `scope`
    /// ends, as the scheduler's closure does by holding it.
    pub(super) fn serve<'scope, 'env>(
        &'env self,
        scope: &'scope Scope<'scope, 'env>,
        observer: Observer<'env>,
    ) -> Serving<'env> {
        if self.builds.is_empty() {
            return Serving(self);
        }
        let (sender, receiver) = mpsc::channel::<PendingBuild>();
        *self.requests.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
        scope.spawn(move || {
            for build in receiver {
                scope.spawn(move || {
                    // Its outcome is the worker's: the stages that need it
                    // take it from there (`PendingBuild::ensure`).
                    let _ = build.ensure_unless_stopped(observer, &self.stop);
                });
            }
        });
        Serving(self)
    }
}

/// While it lives, `Prebuild` takes requests; dropped, it takes no more
/// and stops the builds still going.
pub(super) struct Serving<'a>(&'a Prebuild);

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.0.stop.store(true, Ordering::SeqCst);
    }
}
