//! Building the workers in a source checkout: `pipe` running from a cargo
//! target directory of the workspace builds `pipe-stage` (and
//! `pipe-stage-train`, after libtorch is bootstrapped into `.venv/`) when
//! a stage that needs it must run and the binary is missing or older than
//! its sources, into `pipe`'s own target directory and profile. A run that
//! only restores results builds nothing. What it does is reported through
//! the run's `Observer` (so `--quiet` and `--json` hold); cargo's and
//! pip's own output go to a log file (`build_output`).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::build_output::{run_step, BuildLog, Progress, Watch};
use crate::builtin_workers::BuiltinWorker;
use crate::events::{BuildStep, Event, Observer};
use crate::libtorch::TORCH_VERSION;
use crate::{EngineError, Result};

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

    /// Where `worker`'s binary goes: beside `pipe`.
    pub(super) fn binary(&self, worker: BuiltinWorker) -> PathBuf {
        self.target_dir
            .join(&self.profile_dir)
            .join(worker.binary())
    }

    /// Where a build of `workers` puts cargo's and pip's output: beside
    /// the binaries, one log per worker (`pipe-stage.build.log`), of its
    /// last build, so that building the next worker keeps the log of the
    /// one before.
    pub(super) fn build_log(&self, workers: &[&str]) -> PathBuf {
        self.target_dir
            .join(&self.profile_dir)
            .join(format!("{}.build.log", workers.join("+")))
    }

    /// The cargo profile `pipe` was built with: the dev profile's
    /// directory is `debug`, any other profile's is its name.
    fn profile(&self) -> &str {
        match self.profile_dir.as_str() {
            "debug" => "dev",
            name => name,
        }
    }

    /// Builds `workers` in one cargo invocation, so that the dependencies
    /// they share are compiled once (and are those `pipe` was built with:
    /// the workspace aligns their features, see `shared-deps/`).
    /// The training worker needs libtorch first. What it does is told to
    /// `observer`; cargo's and pip's own output go to the build's log
    /// (`build_log`), whose last lines a failure shows.
    pub(super) fn build(
        &self,
        workers: &[BuiltinWorker],
        observer: Observer<'_>,
        stop: &AtomicBool,
    ) -> Result<()> {
        let names: Vec<&str> = workers.iter().map(|worker| worker.binary()).collect();
        let libtorch = workers.contains(&BuiltinWorker::Training);
        let log_path = self.build_log(&names);
        observer(Event::WorkerBuildStarted {
            workers: &names,
            libtorch,
            target_dir: &self.target_dir,
            profile: self.profile(),
            log: &log_path,
        });
        let started = Instant::now();
        let progress = Progress {
            workers: &names,
            observer,
            stop,
        };
        let (built, tail) = match BuildLog::create(&log_path) {
            Ok(mut log) => {
                let built = self.run_build(workers, libtorch, &mut log, &progress);
                (built, log.tail())
            }
            Err(error) => (Err(error), String::new()),
        };
        let stopped = built.is_err() && stop.load(Ordering::SeqCst);
        observer(Event::WorkerBuildFinished {
            workers: &names,
            succeeded: built.is_ok(),
            stopped,
            duration: started.elapsed(),
            log: &log_path,
            log_tail: (built.is_err() && !stopped).then_some(tail.as_str()),
        });
        built
    }

    /// cargo, as the workers' build runs it: without what `cargo run` set
    /// for this process, into `pipe`'s own target directory, and, for the
    /// training worker, finding the torch of `.venv/` unless LIBTORCH
    /// names one.
    fn cargo(&self, training: bool) -> Result<Command> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        without_cargo_run_env(&mut command);
        command
            .current_dir(&self.root)
            .env("CARGO_TARGET_DIR", &self.target_dir);
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
        Ok(command)
    }

    fn run_build(
        &self,
        workers: &[BuiltinWorker],
        training: bool,
        log: &mut BuildLog,
        progress: &Progress<'_>,
    ) -> Result<()> {
        let names: Vec<String> = workers
            .iter()
            .map(|worker| format!("`{}`", worker.binary()))
            .collect();
        if training {
            self.bootstrap_libtorch(log, progress)?;
        }
        let packages: Vec<&str> = workers.iter().map(|worker| worker.package()).collect();
        let mut watch = Watch::cargo_counting(
            || {
                self.cargo(training)
                    .unwrap_or_else(|_| Command::new("false"))
            },
            &packages,
        );
        let mut command = self.cargo(training)?;
        command.args([
            "build",
            "--message-format=json-render-diagnostics",
            "--profile",
            self.profile(),
        ]);
        for worker in workers {
            command.args(["-p", worker.package(), "--bin", worker.binary()]);
        }
        let status = run_step(command, BuildStep::Cargo, &mut watch, log, progress)?;
        if !status.success() {
            return Err(EngineError::usage(
                format!(
                    "building {} failed ({}): the last lines of its log are above, all of it is in {}",
                    names.join(" and "),
                    exited(status),
                    log.path().display()
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

    /// `scripts/bootstrap-libtorch.sh`, its pip given a TMPDIR of its own
    /// so that what it has downloaded can be measured (`build_output`).
    fn bootstrap_libtorch(&self, log: &mut BuildLog, progress: &Progress<'_>) -> Result<()> {
        let script = self.root.join("scripts").join("bootstrap-libtorch.sh");
        let tmp = self
            .target_dir
            .join(&self.profile_dir)
            .join("pipe-build-tmp");
        // What a killed install left there.
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| EngineError::io(&tmp, e))?;
        let mut command = Command::new("bash");
        command
            .arg(&script)
            .current_dir(&self.root)
            .env("TMPDIR", &tmp);
        let mut watch = Watch::Pip {
            tmp: tmp.clone(),
            detail: None,
        };
        let status = run_step(command, BuildStep::Libtorch, &mut watch, log, progress);
        let _ = std::fs::remove_dir_all(&tmp);
        let status = status?;
        if !status.success() {
            return Err(EngineError::usage(
                format!(
                    "installing libtorch failed ({}): the last lines of its log are above, all of it is in {}",
                    exited(status),
                    log.path().display()
                ),
                format!(
                    "the training stages need torch=={TORCH_VERSION}: check that python3 and its venv \
                     module work (Debian: apt install python3-venv) and that pip can reach the package \
                     index, or set LIBTORCH to a libtorch {TORCH_VERSION} directory (docs/libtorch.md)"
                ),
            ));
        }
        Ok(())
    }
}

/// How a tool ended, for a message: `exit code 101`, `killed by signal 9`.
fn exited(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "no exit code".to_string(),
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
pub(super) fn mark_fresh(binary: &Path) {
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
