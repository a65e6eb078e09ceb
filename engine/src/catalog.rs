//! Finding stage workers and what they can run (the catalog).
//!
//! The built-in workers are `pipe-stage` (the data stages), next to the
//! `pipe` binary or named by `PIPE_WORKER`, and beside it `pipe-stage-train`
//! (crate `pipe-train`, linked with libtorch: the training stages). pipe
//! knows their stages without starting them: their descriptions are built
//! into it (`data_stages.json`, `training_stages.json`, checked against
//! what the workers describe by `pipe stages --check` and its test), so a
//! run that only restores results needs neither worker, nor libtorch.
//! A worker that exists is asked too, once per build of it: its own
//! description is the one used, and a difference from the built-in one is
//! a warning (pipe and its workers come from different builds).
//!
//! In a source checkout (`pipe` running from a cargo target directory of
//! the workspace) a missing or stale worker is built when a stage that
//! needs it must run (crate::workers), not before: the training worker
//! after libtorch is bootstrapped into `.venv/` (docs/libtorch.md).
//! In an installation, a missing worker fails the stages that need it, with
//! what to install, and only when they must run.
//!
//! Any other executable named `pipe-stage-*` in a directory of
//! `PIPE_STAGE_PATH` or in the project's `.pipe/stages/` is a third-party
//! worker: its stages join the catalog. `WORKER describe` answers are
//! cached in `.pipe/catalog.json`, keyed by each worker's path, size and
//! modification time, so a no-op run does not start any worker.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use pipe_cache::untrusted;
use pipe_protocol::StageInfo;
use serde::{Deserialize, Serialize};

use crate::builtin_workers::{built_in_stages, first_difference, BuiltinWorker};
use crate::libtorch::TORCH_VERSION;
use crate::project::Project;
use crate::suggest::did_you_mean;
use crate::workers::{describe, launch_of, Checkout, Launch, PendingBuild, Unavailable};
use crate::{EngineError, Result, UsageError};

/// A stage a worker can run.
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    pub info: StageInfo,
    pub worker: PathBuf,
    pub launch: Launch,
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

/// Whether the stage `uses` names would run in `pipe-stage-train`: one of
/// the families (`train/`, `eval/`) its built-in description offers, so a
/// misspelt or newer training stage is told which worker it needs. The
/// families come from the worker's own `describe`, not from a list here.
pub fn is_training_stage(uses: &str) -> bool {
    fn family(name: &str) -> Option<&str> {
        name.split_once('/').map(|(family, _)| family)
    }
    let Some(wanted) = family(uses) else {
        return false;
    };
    built_in_stages(BuiltinWorker::Training)
        .iter()
        .any(|info| family(&info.name) == Some(wanted))
}

/// A built-in worker: where it is, or would be, and whether to ask it.
struct Builtin {
    worker: BuiltinWorker,
    path: PathBuf,
    /// It exists and is current: its own description is used.
    present: bool,
    /// When it is not: how its stages start (built first in a checkout,
    /// else refused with what to install).
    launch_when_absent: Launch,
}

/// The built-in workers: `pipe-stage` (`PIPE_WORKER`, else beside this
/// binary) and `pipe-stage-train` beside it. Nothing is built here.
fn builtin_workers() -> Result<Vec<Builtin>> {
    let chosen = std::env::var_os("PIPE_WORKER").filter(|value| !value.is_empty());
    let (data, checkout) = match chosen {
        Some(path) => {
            let path = PathBuf::from(path);
            if !path.is_file() {
                return Err(EngineError::usage(
                    format!("PIPE_WORKER names `{}`, which does not exist", path.display()),
                    "point PIPE_WORKER at a `pipe-stage` binary, or unset it to use the one beside `pipe`",
                ));
            }
            (path, None)
        }
        None => {
            let exe =
                std::env::current_exe().map_err(|e| EngineError::io("current executable", e))?;
            let checkout = Checkout::of(&exe);
            (exe.with_file_name(BuiltinWorker::Data.binary()), checkout)
        }
    };
    Ok([BuiltinWorker::Data, BuiltinWorker::Training]
        .into_iter()
        .map(|worker| {
            let path = data.with_file_name(worker.binary());
            let (present, launch_when_absent) = match &checkout {
                Some(checkout) => (
                    !checkout.is_stale(worker, &path),
                    Launch {
                        build: Some(PendingBuild::new(checkout.clone(), worker)),
                        ..Launch::default()
                    },
                ),
                None => (path.is_file(), not_installed(worker, &path)),
            };
            Builtin {
                worker,
                path,
                present,
                launch_when_absent,
            }
        })
        .collect())
}

/// How the stages of a worker that is not installed fail, when they must
/// run: saying what to install.
fn not_installed(worker: BuiltinWorker, path: &Path) -> Launch {
    let hint = match worker {
        BuiltinWorker::Data => "install `pipe-stage` beside `pipe` (`cargo install --locked --git REPO \
             pipe-stages`, or `pip install pipe-ml`), or set PIPE_WORKER to its path (docs/install.md)"
            .to_string(),
        BuiltinWorker::Training => format!(
            "install the training worker beside `pipe` (it links libtorch): \
             `pip install 'pipe-ml[train]'` for the wheel, or \
             `cargo install --locked --git REPO pipe-train` with torch {TORCH_VERSION}'s \
             Python first on PATH and LIBTORCH_USE_PYTORCH=1, or LIBTORCH set \
             (docs/install.md)"
        ),
    };
    Launch {
        unavailable: Some(Box::new(Unavailable {
            reason: format!(
                "runs in the {} `{}`, which is not installed",
                match worker {
                    BuiltinWorker::Data => "data worker",
                    BuiltinWorker::Training => "training worker",
                },
                path.display()
            ),
            hint,
        })),
        ..Launch::default()
    }
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

/// Loads the catalog: the built-in stages (from the workers that are
/// present, else from the descriptions built into pipe) and those of
/// third-party workers, asking only workers that changed since they were
/// last asked. Starts no build: a worker is built when a stage that needs
/// it must run.
pub fn load_catalog(project: &Project) -> Result<Catalog> {
    let cache_path = project.state_dir.join("catalog.json");
    let cached: Vec<CachedDescribe> = untrusted::read(&cache_path, untrusted::CATALOG)
        .ok()
        .and_then(|bytes| read_checked_catalog(&bytes))
        .unwrap_or_default();
    let mut described = Described {
        cached,
        fresh: Vec::new(),
        changed: false,
    };
    let mut catalog = Catalog::default();
    let builtins = builtin_workers()?;
    for builtin in &builtins {
        let built_in = built_in_stages(builtin.worker);
        if !builtin.present {
            catalog.add_started_as(&builtin.path, &builtin.launch_when_absent, built_in)?;
            continue;
        }
        let launch = launch_of(&builtin.path);
        if launch.unavailable.is_some() {
            // Starting it would only fail in the dynamic loader.
            catalog.add_started_as(&builtin.path, &launch, built_in)?;
            continue;
        }
        let stages = match described.stages_of(&builtin.path, &launch) {
            Ok(stages) => stages,
            // Its stages are still known; they fail, saying why, only if
            // they must run (a checkout builds the worker again first).
            Err(error) => {
                tracing::warn!("{error}; its stages are known from the catalog built into pipe");
                let launch = match &builtin.launch_when_absent.build {
                    Some(_) => builtin.launch_when_absent.clone(),
                    None => Launch {
                        unavailable: Some(Box::new(Unavailable {
                            reason: format!(
                                "runs in `{}`, which does not start",
                                builtin.path.display()
                            ),
                            hint: error.to_string(),
                        })),
                        ..Launch::default()
                    },
                };
                catalog.add_started_as(&builtin.path, &launch, built_in)?;
                continue;
            }
        };
        if let Some(difference) = first_difference(&built_in, &stages) {
            tracing::warn!(
                "`{}` describes its stages differently from the catalog built into this \
                 `pipe` ({difference}): they come from different builds, and the worker's \
                 description is used; install both from one build, or in a checkout \
                 regenerate the catalog with `{} describe > engine/src/workers/{}`",
                builtin.path.display(),
                builtin.path.display(),
                builtin.worker.catalog_file(),
            );
        }
        catalog.add_started_as(&builtin.path, &launch, stages)?;
    }
    for worker in external_workers(project) {
        if builtins.iter().any(|builtin| builtin.path == worker) {
            continue;
        }
        let stages = described.stages_of(&worker, &Launch::default())?;
        catalog.add(&worker, stages)?;
    }
    if described.changed {
        if let Ok(text) =
            serde_json::to_vec_pretty(&described.fresh).map(|body| checked_catalog(&body))
        {
            let temporary = cache_path.with_extension(format!("json.tmp-{}", std::process::id()));
            if std::fs::write(&temporary, text).is_ok() {
                let _ = std::fs::rename(&temporary, &cache_path);
            }
        }
    }
    Ok(catalog)
}

/// `pipe stages [NAME[@VERSION]]`: the project's catalog, whole or the
/// entries of one stage. A name no stage has is a usage error naming the
/// closest: a typo must not read as a stage with no versions.
pub fn find_stages(project: &Project, name: Option<&str>) -> Result<Vec<CatalogEntry>> {
    let catalog = load_catalog(project)?;
    let Some(name) = name else {
        return Ok(catalog.stages.into_values().collect());
    };
    let (stage, version) = match name.split_once('@') {
        Some((stage, version)) => (stage, version.parse::<u32>().ok()),
        None => (name, None),
    };
    let found: Vec<CatalogEntry> = catalog
        .stages
        .values()
        .filter(|entry| entry.info.name == stage && version.is_none_or(|v| v == entry.info.version))
        .cloned()
        .collect();
    if found.is_empty() {
        let names = catalog
            .stages
            .values()
            .map(|entry| entry.info.name.as_str());
        return Err(UsageError::UnknownCatalogStage {
            name: name.to_string(),
            suggestion: did_you_mean(stage, names).map(str::to_string),
            known: catalog.stages.keys().cloned().collect(),
        }
        .into());
    }
    Ok(found)
}

/// Workers' descriptions: those cached in `.pipe/catalog.json` while the
/// worker is unchanged, else its `describe` answer.
struct Described {
    cached: Vec<CachedDescribe>,
    /// What the cache file will hold: the workers seen this time.
    fresh: Vec<CachedDescribe>,
    changed: bool,
}

impl Described {
    fn stages_of(&mut self, worker: &Path, launch: &Launch) -> Result<Vec<StageInfo>> {
        let metadata = std::fs::metadata(worker).map_err(|e| EngineError::io(worker, e))?;
        let mtime_ns = metadata.mtime() as i128 * 1_000_000_000 + metadata.mtime_nsec() as i128;
        let hit = self.cached.iter().find(|entry| {
            entry.worker == worker && entry.size == metadata.len() && entry.mtime_ns == mtime_ns
        });
        let stages = match hit {
            Some(entry) => entry.stages.clone(),
            None => {
                self.changed = true;
                describe(worker, launch.library_dir.as_deref())?
            }
        };
        self.fresh.push(CachedDescribe {
            worker: worker.to_path_buf(),
            size: metadata.len(),
            mtime_ns,
            stages: stages.clone(),
        });
        Ok(stages)
    }
}

/// What `pipe stages --check` found for one built-in worker.
#[derive(Debug)]
pub struct WorkerCheck {
    pub worker: BuiltinWorker,
    pub path: PathBuf,
    /// The number of stages it describes as the catalog built into pipe
    /// does, or what is wrong.
    pub outcome: std::result::Result<usize, WorkerDisagrees>,
}

/// Why a built-in worker does not agree with the catalog built into pipe.
#[derive(Debug, thiserror::Error)]
pub enum WorkerDisagrees {
    #[error("not installed")]
    NotInstalled,
    /// It cannot start here (libtorch missing); the reason as `Launch`
    /// gives it.
    #[error("{0}")]
    CannotStart(String),
    /// Building it, or checking what it built, failed.
    #[error(transparent)]
    Build(Box<EngineError>),
    /// `difference` as `first_difference` says it; `catalog_file` is
    /// where the catalog lives, under engine/src/.
    #[error(
        "it describes its stages differently ({difference}): regenerate engine/src/{catalog_file} \
         from its `describe`"
    )]
    Differs {
        difference: String,
        catalog_file: &'static str,
    },
}

impl WorkerCheck {
    pub fn agrees(&self) -> bool {
        self.outcome.is_ok()
    }
}

/// Asks each built-in worker to describe its stages and compares that
/// with the catalog built into pipe, which keys every stage of a run that
/// starts no worker. In a checkout, builds the workers first (the
/// training worker after libtorch), as a run that needs them would.
pub fn check_builtin_workers(observer: crate::events::Observer<'_>) -> Result<Vec<WorkerCheck>> {
    let mut checks = Vec::new();
    for builtin in builtin_workers()? {
        let built_in = built_in_stages(builtin.worker);
        let outcome = match (&builtin.launch_when_absent.build, builtin.present) {
            (Some(build), _) => build
                .ensure(observer)
                .map_err(|error| WorkerDisagrees::Build(Box::new(error))),
            (None, false) => Err(WorkerDisagrees::NotInstalled),
            (None, true) => {
                let launch = launch_of(&builtin.path);
                match &launch.unavailable {
                    Some(unavailable) => {
                        Err(WorkerDisagrees::CannotStart(unavailable.reason.clone()))
                    }
                    None => {
                        let described = describe(&builtin.path, launch.library_dir.as_deref())?;
                        match first_difference(&built_in, &described) {
                            None => Ok(()),
                            Some(difference) => Err(WorkerDisagrees::Differs {
                                difference,
                                catalog_file: builtin.worker.catalog_file(),
                            }),
                        }
                    }
                }
            }
        };
        checks.push(WorkerCheck {
            worker: builtin.worker,
            path: builtin.path,
            outcome: outcome.map(|()| built_in.len()),
        });
    }
    Ok(checks)
}

#[cfg(test)]
mod tests {
    use super::is_training_stage;

    #[test]
    fn the_training_families_come_from_the_training_workers_description() {
        assert!(is_training_stage("train/classifier"));
        assert!(is_training_stage("train/clasifier"));
        assert!(is_training_stage("eval/anything"));
        assert!(!is_training_stage("data/split"));
        assert!(!is_training_stage("report/html"));
        assert!(!is_training_stage("training"));
    }
}
