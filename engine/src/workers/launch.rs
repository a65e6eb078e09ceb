//! How a worker is started: its library path, why it cannot start, or the
//! build it waits for.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::build::PendingBuild;
use super::describe::library_path_with;
use crate::builtin_workers::BuiltinWorker;
use crate::libtorch::Libtorch;

/// How a worker is started, beyond its path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Launch {
    /// Put first on its library path: the libtorch of a wheel install
    /// (crate::libtorch).
    pub library_dir: Option<PathBuf>,
    /// Why it cannot start and what to install: its stages are known (the
    /// pipeline loads, every other stage runs) but fail when they run.
    pub unavailable: Option<Box<Unavailable>>,
    /// In a checkout, a worker missing or older than its sources: built
    /// when one of its stages must run.
    pub build: Option<PendingBuild>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Unavailable {
    /// Follows the stage's name: "`train/classifier@1` REASON".
    pub reason: String,
    pub hint: String,
}

/// How to start `worker`: only the training worker needs more than its
/// path, and only when installed from the wheel (crate::libtorch).
pub(crate) fn launch_of(worker: &Path) -> Launch {
    if worker.file_name() != Some(BuiltinWorker::Training.binary().as_ref()) {
        return Launch::default();
    }
    let libtorch = Libtorch::for_worker(worker);
    if let Some((reason, hint)) = libtorch.missing_reason() {
        return Launch {
            unavailable: Some(Box::new(Unavailable { reason, hint })),
            ..Launch::default()
        };
    }
    match libtorch {
        Libtorch::At(dir) => Launch {
            library_dir: Some(dir),
            ..Launch::default()
        },
        _ => Launch::default(),
    }
}

impl Launch {
    /// Sets what `command`, which starts the worker, needs.
    pub fn apply(&self, command: &mut Command) {
        if let Some(path) = self.library_dir.as_deref().and_then(library_path_with) {
            command.env("LD_LIBRARY_PATH", path);
        }
    }
}
