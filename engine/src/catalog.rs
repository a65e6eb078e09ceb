//! Finding stage workers and what they can run (the catalog).
//!
//! The built-in worker is `pipe-stage`, next to the `pipe` binary (or
//! `PIPE_WORKER`). Beside it, `pipe-stage-train` (crate `pipe-train`,
//! linked with libtorch) offers the training stages. In a source checkout
//! (`pipe` running from a cargo target directory of the workspace) they
//! are built on first use and rebuilt when their sources are newer, in
//! one cargo invocation into `pipe`'s own target directory and profile;
//! the training worker only for a pipeline that trains, after libtorch is
//! bootstrapped into `.venv/` (docs/libtorch.md). Any other
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

use crate::libtorch::Libtorch;
use crate::project::Project;
use crate::{EngineError, Result};

/// A stage a worker can run.
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    pub info: StageInfo,
    pub worker: PathBuf,
    pub launch: Launch,
}

/// How a worker is started, beyond its path.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Launch {
    /// Put first on its library path: the libtorch of a wheel install
    /// (crate::libtorch).
    pub library_dir: Option<PathBuf>,
    /// Why it cannot start and what to install: its stages are known (the
    /// pipeline loads, every other stage runs) but fail when they run.
    pub unavailable: Option<Box<Unavailable>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Unavailable {
    /// Follows the stage's name: "`train/classifier@1` REASON".
    pub reason: String,
    pub hint: String,
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
        self.add_started_as(worker, &Launch::default(), stages)
    }

    /// `add`, for a worker that needs more than its path to start.
    pub fn add_started_as(
        &mut self,
        worker: &Path,
        launch: &Launch,
        stages: Vec<StageInfo>,
    ) -> Result<()> {
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
                    launch: launch.clone(),
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
const TRAINING_STAGE_PREFIXES: &[&str] = &["train/", "eval/"];

/// Whether the stage `uses` names runs in `pipe-stage-train`.
pub fn is_training_stage(uses: &str) -> bool {
    TRAINING_STAGE_PREFIXES
        .iter()
        .any(|prefix| uses.starts_with(prefix))
}

/// A worker binary of this repository.
#[derive(Clone, Copy, PartialEq, Debug)]
enum BuiltinWorker {
    /// `pipe-stage` (package `pipe-stages`): the data stages, no libtorch.
    Data,
    /// `pipe-stage-train` (package `pipe-train`): the training stages, on
    /// libtorch.
    Training,
}

impl BuiltinWorker {
    fn binary(self) -> &'static str {
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
struct Checkout {
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
    fn of(exe: &Path) -> Option<Checkout> {
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
    fn is_stale(&self, worker: BuiltinWorker, binary: &Path) -> bool {
        let Ok(built) = std::fs::metadata(binary).and_then(|m| m.modified()) else {
            return true;
        };
        worker
            .sources()
            .any(|source| newer_than(&self.root.join(source), built))
    }

    /// Builds `workers` in one cargo invocation, so that the dependencies
    /// they share are compiled once (and are those `pipe` was built with:
    /// the workspace aligns their features, see `shared-deps/`).
    /// The training worker needs libtorch first.
    fn build(&self, workers: &[BuiltinWorker]) -> Result<()> {
        let training = workers.contains(&BuiltinWorker::Training);
        let names: Vec<String> = workers
            .iter()
            .map(|worker| format!("`{}`", worker.binary()))
            .collect();
        if training {
            eprintln!(
                "building {} (first use or sources changed): libtorch first (torch==2.11.0 into \
                 .venv/, 4.6 GB, unless LIBTORCH is set), then one cargo build into {}; the first \
                 time takes several minutes on 2 cores (docs/libtorch.md)",
                names.join(" and "),
                self.target_dir.display()
            );
            bootstrap_libtorch(&self.root)?;
        } else {
            eprintln!(
                "building {} (first use or sources changed)",
                names.join(" and ")
            );
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
                    "see docs/libtorch.md: the training worker needs libtorch 2.11.0 \
                     (scripts/bootstrap-libtorch.sh, or LIBTORCH)"
                } else {
                    "fix the build error, or set PIPE_WORKER to a working `pipe-stage`"
                },
            ));
        }
        Ok(())
    }
}

/// The built-in workers: `pipe-stage` (`PIPE_WORKER`, else beside this
/// binary), and `pipe-stage-train` beside it when it exists. In a source
/// checkout, those missing or stale are built first, all in one cargo
/// invocation: `pipe-stage` always, `pipe-stage-train` when `for_training`
/// (a pipeline uses a training stage) or when it was built before.
fn builtin_workers(for_training: bool) -> Result<Vec<PathBuf>> {
    let data = match std::env::var_os("PIPE_WORKER").filter(|value| !value.is_empty()) {
        Some(path) => {
            let path = PathBuf::from(path);
            if !path.is_file() {
                return Err(EngineError::usage(
                    format!("PIPE_WORKER names `{}`, which does not exist", path.display()),
                    "point PIPE_WORKER at a `pipe-stage` binary, or unset it to use the one beside `pipe`",
                ));
            }
            path
        }
        None => {
            let exe =
                std::env::current_exe().map_err(|e| EngineError::io("current executable", e))?;
            let data = exe.with_file_name(BuiltinWorker::Data.binary());
            if let Some(checkout) = Checkout::of(&exe) {
                let training = exe.with_file_name(BuiltinWorker::Training.binary());
                let mut stale = Vec::new();
                if checkout.is_stale(BuiltinWorker::Data, &data) {
                    stale.push((BuiltinWorker::Data, data.clone()));
                }
                if (for_training || training.is_file())
                    && checkout.is_stale(BuiltinWorker::Training, &training)
                {
                    stale.push((BuiltinWorker::Training, training));
                }
                if !stale.is_empty() {
                    let workers: Vec<BuiltinWorker> =
                        stale.iter().map(|(worker, _)| *worker).collect();
                    checkout.build(&workers)?;
                    for (_, binary) in &stale {
                        mark_fresh(binary);
                    }
                }
            }
            if !data.is_file() {
                return Err(EngineError::usage(
                    format!(
                        "the stage worker `pipe-stage` is not installed beside `{}`",
                        exe.display()
                    ),
                    "build it with `cargo build --release -p pipe-stages`, or set PIPE_WORKER to its path",
                ));
            }
            data
        }
    };
    let mut workers = vec![data];
    // The libtorch worker is optional: installations without libtorch
    // leave it out (docs/libtorch.md).
    let training = workers[0].with_file_name(BuiltinWorker::Training.binary());
    if training.is_file() {
        workers.push(training);
    }
    Ok(workers)
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

/// The first line of `.pipe/catalog.json`, before the blake3 of the rest.
const CATALOG_HEADER: &str = "pipe-catalog-v2 ";

/// The cached catalog framed with a checksum of its exact bytes: a flipped
/// bit could otherwise turn a `path` param into a string (no dependency,
/// no edge) or change an implementation version (another key), and
/// nothing would say so.
fn checked_catalog(body: &[u8]) -> Vec<u8> {
    let mut bytes = format!("{CATALOG_HEADER}{}\n", blake3::hash(body).to_hex()).into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// The cached descriptions, or `None` (ask every worker again) when the
/// file is damaged or from another version.
fn read_checked_catalog(bytes: &[u8]) -> Option<Vec<CachedDescribe>> {
    let rest = bytes.strip_prefix(CATALOG_HEADER.as_bytes())?;
    let newline = rest.iter().position(|&byte| byte == b'\n')?;
    let (checksum, body) = (&rest[..newline], &rest[newline + 1..]);
    if blake3::hash(body).to_hex().as_bytes() != checksum {
        tracing::warn!("`.pipe/catalog.json` is damaged; asking the workers again");
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// Loads the catalog of every worker, asking only those that changed.
/// `for_training`: the pipeline uses a training stage, so a checkout
/// without the libtorch worker builds it.
pub fn load_catalog(project: &Project, for_training: bool) -> Result<Catalog> {
    let cache_path = project.state_dir.join("catalog.json");
    let cached: Vec<CachedDescribe> = std::fs::read(&cache_path)
        .ok()
        .and_then(|bytes| read_checked_catalog(&bytes))
        .unwrap_or_default();
    let mut workers = builtin_workers(for_training)?;
    let external: Vec<PathBuf> = external_workers(project)
        .into_iter()
        .filter(|worker| !workers.contains(worker))
        .collect();
    workers.extend(external);
    let mut fresh: Vec<CachedDescribe> = Vec::with_capacity(workers.len());
    let mut launches: Vec<Launch> = Vec::with_capacity(workers.len());
    let mut unusable_training: Option<(PathBuf, Launch)> = None;
    let mut changed = false;
    for worker in workers {
        let launch = launch_of(&worker);
        if launch.unavailable.is_some() {
            // Starting it would only fail in the dynamic loader.
            unusable_training = Some((worker, launch));
            continue;
        }
        let metadata = std::fs::metadata(&worker).map_err(|e| EngineError::io(&worker, e))?;
        let mtime_ns = metadata.mtime() as i128 * 1_000_000_000 + metadata.mtime_nsec() as i128;
        let hit = cached.iter().find(|entry| {
            entry.worker == worker && entry.size == metadata.len() && entry.mtime_ns == mtime_ns
        });
        let stages = match hit {
            Some(entry) => entry.stages.clone(),
            None => {
                changed = true;
                describe(&worker, &launch)?
            }
        };
        launches.push(launch);
        fresh.push(CachedDescribe {
            worker,
            size: metadata.len(),
            mtime_ns,
            stages,
        });
    }
    if changed {
        if let Ok(text) = serde_json::to_vec_pretty(&fresh).map(|body| checked_catalog(&body)) {
            let temporary = cache_path.with_extension(format!("json.tmp-{}", std::process::id()));
            if std::fs::write(&temporary, text).is_ok() {
                let _ = std::fs::rename(&temporary, &cache_path);
            }
        }
    }
    let mut catalog = Catalog::default();
    let data_worker = fresh.first().map(|described| described.worker.clone());
    for (described, launch) in fresh.into_iter().zip(&launches) {
        catalog.add_started_as(&described.worker, launch, described.stages)?;
    }
    // Without a usable training worker (an installation without it, or a
    // wheel installed without torch) its stages are still known, from the
    // description it gives (checked against the real worker by
    // `training_stages_json_is_what_the_worker_describes`): the pipeline
    // loads, every other stage runs, and the first training stage fails
    // saying what to install.
    let has_training = catalog.stages.keys().any(|id| is_training_stage(id));
    if let (false, Some(data_worker)) = (has_training, data_worker) {
        let (worker, launch) = unusable_training.unwrap_or_else(|| {
            let absent = data_worker.with_file_name(BuiltinWorker::Training.binary());
            let launch = Launch {
                library_dir: None,
                unavailable: Some(Box::new(Unavailable {
                    reason: format!(
                        "runs in the training worker `{}`, which is not installed",
                        absent.display()
                    ),
                    hint: "install the training worker beside `pipe` (it links libtorch): \
                           `pip install 'pipe-ml[train]'` for the wheel, or \
                           `cargo install --locked --git REPO pipe-train` with torch 2.11.0's \
                           Python first on PATH and LIBTORCH_USE_PYTORCH=1, or LIBTORCH set \
                           (docs/install.md)"
                        .to_string(),
                })),
            };
            (absent, launch)
        });
        catalog.add_started_as(&worker, &launch, training_stages())?;
    }
    Ok(catalog)
}

/// How to start `worker`: only the training worker needs more than its
/// path, and only when installed from the wheel (crate::libtorch).
fn launch_of(worker: &Path) -> Launch {
    if worker.file_name() != Some(BuiltinWorker::Training.binary().as_ref()) {
        return Launch::default();
    }
    let libtorch = Libtorch::for_worker(worker);
    if let Some((reason, hint)) = libtorch.missing_reason() {
        return Launch {
            library_dir: None,
            unavailable: Some(Box::new(Unavailable { reason, hint })),
        };
    }
    match libtorch {
        Libtorch::At(dir) => Launch {
            library_dir: Some(dir),
            unavailable: None,
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

/// `dir`, then the library path pipe was started with.
fn library_path_with(dir: &Path) -> Option<std::ffi::OsString> {
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(existing) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&existing));
    }
    std::env::join_paths(dirs).ok()
}

/// What `pipe-stage-train describe` answers, for when it is not installed.
fn training_stages() -> Vec<StageInfo> {
    // Checked in and compared with the worker by a test, so never stale.
    serde_json::from_str(include_str!("training_stages.json")).unwrap_or_default()
}

fn describe(worker: &Path, launch: &Launch) -> Result<Vec<StageInfo>> {
    let mut command = Command::new(worker);
    launch.apply(&mut command);
    let output = command
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
