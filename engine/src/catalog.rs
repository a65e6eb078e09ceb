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
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use pipe_protocol::StageInfo;
use serde::{Deserialize, Serialize};

use crate::exec::Observer;
use crate::libtorch::{Libtorch, TORCH_VERSION};
use crate::project::Project;
pub use crate::worker_build::without_cargo_run_env;
use crate::worker_build::{build_stale_workers, BuiltinWorker};
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

/// The built-in workers: `pipe-stage` (`PIPE_WORKER`, else beside this
/// binary), and `pipe-stage-train` beside it when it exists. In a source
/// checkout, those missing or stale are built first, all in one cargo
/// invocation: `pipe-stage` always, `pipe-stage-train` when `for_training`
/// (a pipeline uses a training stage) or when it was built before.
fn builtin_workers(for_training: bool, observer: Observer<'_>) -> Result<Vec<PathBuf>> {
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
            build_stale_workers(&exe, for_training, observer)?;
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
/// without the libtorch worker builds it; a build is told to `observer`.
pub fn load_catalog(
    project: &Project,
    for_training: bool,
    observer: Observer<'_>,
) -> Result<Catalog> {
    let cache_path = project.state_dir.join("catalog.json");
    let cached: Vec<CachedDescribe> = std::fs::read(&cache_path)
        .ok()
        .and_then(|bytes| read_checked_catalog(&bytes))
        .unwrap_or_default();
    let mut workers = builtin_workers(for_training, observer)?;
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
                    hint: format!(
                        "install the training worker beside `pipe` (it links libtorch): \
                           `pip install 'pipe-ml[train]'` for the wheel, or \
                           `cargo install --locked --git REPO pipe-train` with torch {TORCH_VERSION}'s \
                           Python first on PATH and LIBTORCH_USE_PYTORCH=1, or LIBTORCH set \
                           (docs/install.md)"
                    ),
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
