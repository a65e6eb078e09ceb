//! Building the workers in a source checkout: `pipe` running from a cargo
//! target directory of the workspace builds `pipe-stage` (and
//! `pipe-stage-train`, after libtorch is bootstrapped into `.venv/`) when
//! a stage that needs it must run and the binary is missing or older than
//! its sources, into `pipe`'s own target directory and profile. A run that
//! only restores results builds nothing. What it does is reported through
//! the run's `Observer` (so `--quiet` and `--json` hold); cargo's own
//! output goes to stderr.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use crate::exec::{Event, Observer};
use crate::libtorch::TORCH_VERSION;
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
        let described = crate::catalog::describe(&binary, &crate::catalog::Launch::default())?;
        let built_in = crate::catalog::built_in_stages(self.worker);
        match crate::catalog::first_difference(&built_in, &described) {
            None => Ok(()),
            Some(difference) => Err(EngineError::usage(
                format!(
                    "`{}`, just built, describes its stages differently from the catalog built \
                     into this `pipe` ({difference}), and the stages' keys were made from the latter",
                    binary.display()
                ),
                format!(
                    "regenerate the catalog (`{} describe > engine/src/{}`), rebuild `pipe` \
                     (`cargo build`) and run again",
                    binary.display(),
                    self.worker.catalog_file()
                ),
            )),
        }
    }
}

/// A worker binary of this repository.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BuiltinWorker {
    /// `pipe-stage` (package `pipe-stages`): the data stages, no libtorch.
    Data,
    /// `pipe-stage-train` (package `pipe-train`): the training stages, on
    /// libtorch.
    Training,
}

impl BuiltinWorker {
    /// Its catalog built into pipe, under engine/src/.
    pub fn catalog_file(self) -> &'static str {
        match self {
            BuiltinWorker::Data => "data_stages.json",
            BuiltinWorker::Training => "training_stages.json",
        }
    }

    pub fn binary(self) -> &'static str {
        match self {
            BuiltinWorker::Data => "pipe-stage",
            BuiltinWorker::Training => "pipe-stage-train",
        }
    }

    fn package(self) -> &'static str {
        match self {
            BuiltinWorker::Data => "pipe-stages",
            BuiltinWorker::Training => "pipe-train",
        }
    }

    /// What its build reads, relative to the workspace root: its crate, the
    /// crates it depends on, and the workspace's manifest and lock file
    /// (profiles, versions).
    /// The training worker is built from the data worker's sources and its own.
    fn sources(self) -> impl Iterator<Item = &'static str> {
        const DATA: &[&str] = &[
            "stages/src",
            "stages/Cargo.toml",
            "protocol/src",
            "protocol/Cargo.toml",
            "report/src",
            "report/Cargo.toml",
            "shared-deps/Cargo.toml",
            "Cargo.toml",
            "Cargo.lock",
        ];
        const TRAINING_ONLY: &[&str] = &[
            "train/src",
            "train/csrc",
            "train/build.rs",
            "train/Cargo.toml",
        ];
        let own: &[&str] = match self {
            BuiltinWorker::Data => &[],
            BuiltinWorker::Training => TRAINING_ONLY,
        };
        DATA.iter().chain(own).copied()
    }
}

/// `pipe` running from a cargo target directory of a source checkout: the
/// workers are built on first use, and again when their sources are newer,
/// into the same target directory and profile, so that they share every
/// dependency `pipe` itself was built with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Checkout {
    root: PathBuf,
    target_dir: PathBuf,
    /// The profile's directory name: `debug` (the dev profile), `release`,
    /// or a custom profile's name.
    profile_dir: String,
}

impl Checkout {
    /// The checkout `exe` (`<target dir>/<profile>/pipe`) was built from:
    /// the directory above a target directory named `target`, or else,
    /// when `CARGO_TARGET_DIR` put the target directory elsewhere, the
    /// workspace this binary was compiled from, if it is still there.
    /// Either must hold this repository's worker crates.
    pub(crate) fn of(exe: &Path) -> Option<Checkout> {
        let profile_dir = exe.parent()?;
        let target_dir = profile_dir.parent()?;
        let is_workspace = |root: &Path| {
            root.join("stages").join("Cargo.toml").is_file()
                && root.join("train").join("Cargo.toml").is_file()
        };
        let beside = target_dir
            .parent()
            .filter(|root| target_dir.file_name() == Some("target".as_ref()) && is_workspace(root));
        // cargo marks every target directory with CACHEDIR.TAG; a `pipe`
        // copied into some other directory is an installation.
        let compiled_from = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .filter(|root| target_dir.join("CACHEDIR.TAG").is_file() && is_workspace(root));
        let root = beside.or(compiled_from)?;
        Some(Checkout {
            root: root.to_path_buf(),
            target_dir: target_dir.to_path_buf(),
            profile_dir: profile_dir.file_name()?.to_str()?.to_string(),
        })
    }

    /// Whether `worker`'s binary is missing or older than a source it is
    /// built from. Walks a few dozen files (well under a millisecond), so
    /// a no-op run in a checkout stays a no-op; cargo makes the real
    /// decision when it runs.
    pub(crate) fn is_stale(&self, worker: BuiltinWorker, binary: &Path) -> bool {
        let Ok(built) = std::fs::metadata(binary).and_then(|m| m.modified()) else {
            return true;
        };
        // A training worker whose libtorch is gone (a CI cache that keeps
        // `target/` but not `.venv/`) would not even start: the build
        // bootstraps libtorch again first.
        if worker == BuiltinWorker::Training && !self.has_libtorch() {
            return true;
        }
        worker
            .sources()
            .any(|source| newer_than(&self.root.join(source), built))
    }

    /// Whether the libtorch the training worker was linked against is
    /// there: LIBTORCH's, else the torch of the checkout's `.venv/`.
    fn has_libtorch(&self) -> bool {
        if let Some(dir) = std::env::var_os("LIBTORCH").filter(|value| !value.is_empty()) {
            return Path::new(&dir).join("lib").is_dir();
        }
        std::fs::read_dir(self.root.join(".venv").join("lib")).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|python| python.path().join("site-packages/torch/lib").is_dir())
        })
    }

    pub(crate) fn pending_build(&self, worker: BuiltinWorker) -> PendingBuild {
        PendingBuild {
            checkout: self.clone(),
            worker,
        }
    }

    /// Where `worker`'s binary goes: beside `pipe`.
    fn binary(&self, worker: BuiltinWorker) -> PathBuf {
        self.target_dir
            .join(&self.profile_dir)
            .join(worker.binary())
    }

    /// Builds `workers` in one cargo invocation, so that the dependencies
    /// they share are compiled once (and are those `pipe` was built with:
    /// the workspace aligns their features, see `shared-deps/`).
    /// The training worker needs libtorch first. What it does is told to
    /// `observer`; cargo's and the bootstrap's own output go to stderr.
    fn build(&self, workers: &[BuiltinWorker], observer: Observer<'_>) -> Result<()> {
        let names: Vec<&str> = workers.iter().map(|worker| worker.binary()).collect();
        let libtorch = workers.contains(&BuiltinWorker::Training);
        observer(Event::WorkerBuildStarted {
            workers: &names,
            libtorch,
            target_dir: &self.target_dir,
        });
        let started = Instant::now();
        let built = self.run_build(workers, libtorch);
        observer(Event::WorkerBuildFinished {
            workers: &names,
            succeeded: built.is_ok(),
            duration: started.elapsed(),
        });
        built
    }

    fn run_build(&self, workers: &[BuiltinWorker], training: bool) -> Result<()> {
        let names: Vec<String> = workers
            .iter()
            .map(|worker| format!("`{}`", worker.binary()))
            .collect();
        if training {
            bootstrap_libtorch(&self.root)?;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        without_cargo_run_env(&mut command);
        command
            .current_dir(&self.root)
            .env("CARGO_TARGET_DIR", &self.target_dir)
            .arg("build");
        // The dev profile's directory is `debug`; any other profile's is
        // its name.
        let profile = match self.profile_dir.as_str() {
            "debug" => "dev",
            name => name,
        };
        command.args(["--profile", profile]);
        for worker in workers {
            command.args(["-p", worker.package(), "--bin", worker.binary()]);
        }
        if training && std::env::var_os("LIBTORCH").is_none() {
            let venv_bin = self.root.join(".venv").join("bin");
            let mut path = vec![venv_bin];
            if let Some(existing) = std::env::var_os("PATH") {
                path.extend(std::env::split_paths(&existing));
            }
            let path = std::env::join_paths(path)
                .map_err(|e| EngineError::usage(format!("PATH: {e}"), "fix PATH"))?;
            command.env("LIBTORCH_USE_PYTORCH", "1").env("PATH", path);
        }
        command.stdout(stdout_to_stderr()?);
        let status = command.status().map_err(|e| EngineError::io("cargo", e))?;
        if !status.success() {
            return Err(EngineError::usage(
                format!(
                    "building {} failed (see cargo's output above)",
                    names.join(" and ")
                ),
                if training {
                    format!(
                        "see docs/libtorch.md: the training worker needs libtorch {TORCH_VERSION} \
                         (scripts/bootstrap-libtorch.sh, or LIBTORCH)"
                    )
                } else {
                    "fix the build error, or set PIPE_WORKER to a working `pipe-stage`".to_string()
                },
            ));
        }
        Ok(())
    }
}

/// Removes what cargo sets for a program it runs (`cargo run`, `cargo
/// test`): a build started from that program would otherwise see an
/// environment its last build did not, and cargo rebuilds what watches it
/// (ring's build script watches CARGO_MANIFEST_DIR, and everything above
/// ring follows: the workers and `pipe` itself).
pub fn without_cargo_run_env(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if is_cargo_run_env(name) {
            command.env_remove(name);
        }
    }
}

fn is_cargo_run_env(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_CRATE_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
        )
}

/// After a successful build: cargo leaves a binary it found up to date
/// untouched (a `Cargo.lock` change for another package, an edited
/// comment it did not need to recompile for), which would make it look
/// stale on every run; it is now as new as the check requires.
fn mark_fresh(binary: &Path) {
    if let Ok(file) = std::fs::File::options().write(true).open(binary) {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
}

fn newer_than(path: &Path, time: std::time::SystemTime) -> bool {
    let Ok(metadata) = std::fs::metadata(path) else {
        return false;
    };
    if metadata.modified().is_ok_and(|modified| modified > time) {
        return true;
    }
    metadata.is_dir()
        && std::fs::read_dir(path).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|entry| newer_than(&entry.path(), time))
        })
}

/// A child's stdout sent to our stderr: build output is progress for the
/// user, and our stdout stays for data.
fn stdout_to_stderr() -> Result<std::process::Stdio> {
    let stderr = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| EngineError::io("stderr", e))?;
    Ok(std::process::Stdio::from(stderr))
}

fn bootstrap_libtorch(root: &Path) -> Result<()> {
    let script = root.join("scripts").join("bootstrap-libtorch.sh");
    let status = Command::new("bash")
        .arg(&script)
        .current_dir(root)
        .stdout(stdout_to_stderr()?)
        .status()
        .map_err(|e| EngineError::io(&script, e))?;
    if !status.success() {
        return Err(EngineError::usage(
            "installing libtorch failed (see the output above)",
            format!(
                "the training stages need torch=={TORCH_VERSION}: check that python3 and its venv \
                 module work (Debian: apt install python3-venv) and that pip can reach the package \
                 index, or set LIBTORCH to a libtorch {TORCH_VERSION} directory (docs/libtorch.md)"
            ),
        ));
    }
    Ok(())
}
