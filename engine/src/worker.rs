//! Finding stage workers and what they can run (the catalog).
//!
//! The built-in worker is `pipe-stage`, next to the `pipe` binary (or
//! `PIPE_WORKER`). Beside it, `pipe-stage-train` (built with libtorch)
//! offers the training stages. In a source checkout (`pipe` running from
//! `<root>/target/<profile>/`) both are built on first use and rebuilt when
//! their sources are newer: `pipe-stage` into `target/`, and
//! `pipe-stage-train`, once libtorch is bootstrapped into `.venv/`, into
//! `target-torch/` (docs/libtorch.md says why apart). Any other
//! executable named `pipe-stage-*` in a directory of `PIPE_STAGE_PATH` or in
//! the project's `.pipe/stages/` is a third-party worker: its stages join the
//! catalog. `WORKER describe` answers are cached in `.pipe/catalog.json`,
//! keyed by each worker's path, size and modification time, so a no-op run
//! does not start any worker.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use pipe_protocol::StageInfo;
use serde::{Deserialize, Serialize};

use crate::project::Project;
use crate::{EngineError, Result};

/// A stage a worker can run.
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    pub info: StageInfo,
    pub worker: PathBuf,
}

#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// `name@version` -> entry.
    pub stages: BTreeMap<String, CatalogEntry>,
}

impl Catalog {
    pub fn get(&self, name: &str, version: u32) -> Option<&CatalogEntry> {
        self.stages.get(&format!("{name}@{version}"))
    }

    /// Adds the stages `worker` offers (its `describe` answer). A stage
    /// two workers offer is refused: which one runs it would be a guess.
    pub fn add(&mut self, worker: &Path, stages: Vec<StageInfo>) -> Result<()> {
        for info in stages {
            let id = format!("{}@{}", info.name, info.version);
            if let Some(existing) = self.stages.get(&id) {
                return Err(EngineError::usage(
                    format!(
                        "stage `{id}` is offered by two workers: `{}` and `{}`",
                        existing.worker.display(),
                        worker.display()
                    ),
                    "remove or rename one of them (PIPE_STAGE_PATH, .pipe/stages/)",
                ));
            }
            self.stages.insert(
                id,
                CatalogEntry {
                    info,
                    worker: worker.to_path_buf(),
                },
            );
        }
        Ok(())
    }

    /// All `name@version` with the given name.
    pub fn versions_of(&self, name: &str) -> Vec<u32> {
        self.stages
            .values()
            .filter(|entry| entry.info.name == name)
            .map(|entry| entry.info.version)
            .collect()
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct CachedDescribe {
    worker: PathBuf,
    size: u64,
    mtime_ns: i128,
    stages: Vec<StageInfo>,
}

/// Names of the stages `pipe-stage-train` offers, by prefix: a pipeline
/// using one of them needs that worker, and in a checkout gets it built.
pub const TRAINING_STAGE_PREFIXES: &[&str] = &["train/", "eval/"];

/// Where the workers come from: an installation (binaries beside `pipe`
/// or named by `PIPE_WORKER`) or a source checkout that builds them.
enum Origin {
    Installed,
    Checkout { root: PathBuf, release: bool },
}

fn origin() -> Result<(Origin, PathBuf)> {
    let exe = std::env::current_exe().map_err(|e| EngineError::io("current executable", e))?;
    if std::env::var_os("PIPE_WORKER").is_some_and(|value| !value.is_empty()) {
        return Ok((Origin::Installed, exe));
    }
    let origin = match cargo_workspace_of(&exe) {
        Some(root) => Origin::Checkout {
            root,
            release: exe
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|name| name == "release"),
        },
        None => Origin::Installed,
    };
    Ok((origin, exe))
}

/// The built-in worker: `PIPE_WORKER`, else `pipe-stage` beside this binary,
/// built first (or rebuilt when stale) when this binary runs from a cargo
/// target directory.
pub fn builtin_worker() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("PIPE_WORKER").filter(|value| !value.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(EngineError::usage(
                format!("PIPE_WORKER names `{}`, which does not exist", path.display()),
                "point PIPE_WORKER at a `pipe-stage` binary, or unset it to use the one beside `pipe`",
            ))
        };
    }
    let (origin, exe) = origin()?;
    let sibling = exe.with_file_name("pipe-stage");
    if let Origin::Checkout { root, release } = &origin {
        if is_stale(&sibling, root) {
            build(root, *release, WorkerBuild::Data)?;
            mark_fresh(&sibling);
        }
    }
    if sibling.is_file() {
        return Ok(sibling);
    }
    Err(EngineError::usage(
        format!(
            "the stage worker `pipe-stage` is not installed beside `{}`",
            exe.display()
        ),
        "build it with `cargo build --release -p pipe-stages`, or set PIPE_WORKER to its path",
    ))
}

/// The libtorch worker, if there is one: beside the built-in worker, else
/// in a checkout `target-torch/<profile>/`, built there first when
/// `build_if_missing` (a pipeline uses a training stage) or when stale.
fn training_worker(builtin: &Path, build_if_missing: bool) -> Result<Option<PathBuf>> {
    let beside = builtin.with_file_name("pipe-stage-train");
    if beside.is_file() {
        return Ok(Some(beside));
    }
    let (Origin::Checkout { root, release }, _) = origin()? else {
        return Ok(None);
    };
    let built = root
        .join(TORCH_TARGET_DIR)
        .join(if release { "release" } else { "debug" })
        .join("pipe-stage-train");
    let present = built.is_file();
    if (present || build_if_missing) && is_stale(&built, &root) {
        build(&root, release, WorkerBuild::Training)?;
        mark_fresh(&built);
    }
    Ok(built.is_file().then_some(built))
}

/// The target directory of libtorch builds, apart from `target/`: a
/// `pipe-stages` built with the `torch` feature links libtorch into every
/// binary of the package, `pipe-stage` included (docs/libtorch.md).
const TORCH_TARGET_DIR: &str = "target-torch";

/// The workspace root when `exe` is `<root>/target/<profile>/pipe`.
fn cargo_workspace_of(exe: &Path) -> Option<PathBuf> {
    let profile_dir = exe.parent()?;
    let target_dir = profile_dir.parent()?;
    let root = target_dir.parent()?;
    (target_dir.file_name()? == "target" && root.join("stages").join("Cargo.toml").is_file())
        .then(|| root.to_path_buf())
}

/// Whether `binary` is missing or older than a source it is built from.
/// Walks a few dozen files (well under a millisecond), so a no-op run in
/// a checkout stays a no-op; cargo makes the real decision when it runs.
fn is_stale(binary: &Path, root: &Path) -> bool {
    let Ok(built) = std::fs::metadata(binary).and_then(|m| m.modified()) else {
        return true;
    };
    let sources = [
        root.join("stages/src"),
        root.join("stages/csrc"),
        root.join("stages/build.rs"),
        root.join("stages/Cargo.toml"),
        root.join("protocol/src"),
        root.join("protocol/Cargo.toml"),
        root.join("Cargo.lock"),
    ];
    sources.iter().any(|source| newer_than(source, built))
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

#[derive(Clone, Copy, PartialEq)]
enum WorkerBuild {
    Data,
    Training,
}

fn build(root: &Path, release: bool, which: WorkerBuild) -> Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(root)
        .args(["build", "-p", "pipe-stages"]);
    if release {
        command.arg("--release");
    }
    let name = match which {
        WorkerBuild::Data => {
            eprintln!("building the stage worker `pipe-stage` (first use or sources changed)");
            command.args(["--bin", "pipe-stage"]);
            "pipe-stage"
        }
        WorkerBuild::Training => {
            eprintln!(
                "building the training worker `pipe-stage-train` (first use or sources changed): \
                 libtorch first (torch==2.11.0 into .venv/, 4.6 GB, unless LIBTORCH is set), then \
                 a build against it into {TORCH_TARGET_DIR}/; the first time takes 10 to 20 minutes \
                 on 2 cores (docs/libtorch.md)"
            );
            bootstrap_libtorch(root)?;
            command
                .args(["--bin", "pipe-stage-train", "--features", "torch"])
                .env("CARGO_TARGET_DIR", root.join(TORCH_TARGET_DIR));
            if std::env::var_os("LIBTORCH").is_none() {
                let venv_bin = root.join(".venv").join("bin");
                let mut path = vec![venv_bin];
                if let Some(existing) = std::env::var_os("PATH") {
                    path.extend(std::env::split_paths(&existing));
                }
                let path = std::env::join_paths(path)
                    .map_err(|e| EngineError::usage(format!("PATH: {e}"), "fix PATH"))?;
                command.env("LIBTORCH_USE_PYTORCH", "1").env("PATH", path);
            }
            "pipe-stage-train"
        }
    };
    command.stdout(stdout_to_stderr()?);
    let status = command.status().map_err(|e| EngineError::io("cargo", e))?;
    if !status.success() {
        return Err(EngineError::usage(
            format!("building the worker `{name}` failed (see cargo's output above)"),
            match which {
                WorkerBuild::Data => "fix the build error, or set PIPE_WORKER to a working `pipe-stage`",
                WorkerBuild::Training => "see docs/libtorch.md: the build needs libtorch 2.11.0 (scripts/bootstrap-libtorch.sh, or LIBTORCH)",
            },
        ));
    }
    Ok(())
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
            "the training stages need torch==2.11.0: check that python3 and its venv module work \
             (Debian: apt install python3-venv) and that pip can reach the package index, or set \
             LIBTORCH to a libtorch 2.11.0 directory (docs/libtorch.md)",
        ));
    }
    Ok(())
}

/// Third-party workers: `pipe-stage-*` executables in `PIPE_STAGE_PATH`
/// and in `<project>/.pipe/stages/`, sorted by path.
fn external_workers(project: &Project) -> Vec<PathBuf> {
    let mut directories: Vec<PathBuf> = std::env::var_os("PIPE_STAGE_PATH")
        .map(|value| std::env::split_paths(&value).collect())
        .unwrap_or_default();
    directories.push(project.state_dir.join("stages"));
    let mut workers = Vec::new();
    for directory in directories {
        let Ok(entries) = std::fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let executable = entry
                .metadata()
                .is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0);
            if executable
                && entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with("pipe-stage-")
            {
                workers.push(path);
            }
        }
    }
    workers.sort();
    workers
}

/// Loads the catalog of every worker, asking only those that changed.
/// `for_training`: the pipeline uses a training stage, so a checkout
/// without the libtorch worker builds it.
pub fn load_catalog(project: &Project, for_training: bool) -> Result<Catalog> {
    let cache_path = project.state_dir.join("catalog.json");
    let cached: Vec<CachedDescribe> = std::fs::read(&cache_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let mut workers = vec![builtin_worker()?];
    // The libtorch worker is optional: it exists where it was built with
    // the `torch` feature (docs/libtorch.md).
    if let Some(training) = training_worker(&workers[0], for_training)? {
        workers.push(training);
    }
    let external: Vec<PathBuf> = external_workers(project)
        .into_iter()
        .filter(|worker| !workers.contains(worker))
        .collect();
    workers.extend(external);
    let mut fresh: Vec<CachedDescribe> = Vec::with_capacity(workers.len());
    let mut changed = false;
    for worker in workers {
        let metadata = std::fs::metadata(&worker).map_err(|e| EngineError::io(&worker, e))?;
        let mtime_ns = metadata.mtime() as i128 * 1_000_000_000 + metadata.mtime_nsec() as i128;
        let hit = cached.iter().find(|entry| {
            entry.worker == worker && entry.size == metadata.len() && entry.mtime_ns == mtime_ns
        });
        let stages = match hit {
            Some(entry) => entry.stages.clone(),
            None => {
                changed = true;
                describe(&worker)?
            }
        };
        fresh.push(CachedDescribe {
            worker,
            size: metadata.len(),
            mtime_ns,
            stages,
        });
    }
    if changed {
        if let Ok(text) = serde_json::to_vec_pretty(&fresh) {
            let temporary = cache_path.with_extension(format!("json.tmp-{}", std::process::id()));
            if std::fs::write(&temporary, text).is_ok() {
                let _ = std::fs::rename(&temporary, &cache_path);
            }
        }
    }
    let mut catalog = Catalog::default();
    for described in fresh {
        catalog.add(&described.worker, described.stages)?;
    }
    Ok(catalog)
}

fn describe(worker: &Path) -> Result<Vec<StageInfo>> {
    let output = Command::new(worker)
        .arg("describe")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| EngineError::io(worker, e))?;
    if !output.status.success() {
        return Err(EngineError::usage(
            format!(
                "worker `{}` failed to describe its stages: {}",
                worker.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ),
            "a worker must print its stages as JSON for `WORKER describe` (docs/stage-protocol.md)",
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|error| {
        EngineError::usage(
            format!("worker `{}` printed an invalid stage description: {error}", worker.display()),
            "`WORKER describe` must print a JSON array of stage descriptions (docs/stage-protocol.md)",
        )
    })
}
