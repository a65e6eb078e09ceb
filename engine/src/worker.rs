//! Finding stage workers and what they can run (the catalog).
//!
//! The built-in worker is `pipe-stage`, next to the `pipe` binary (or
//! `PIPE_WORKER`). In a source checkout it is built on first use. Beside it,
//! `pipe-stage-train` (built with libtorch) offers the training stages. Any other
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

/// The built-in worker: `PIPE_WORKER`, else `pipe-stage` beside this binary,
/// built first when this binary runs from a cargo target directory.
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
    let exe = std::env::current_exe().map_err(|e| EngineError::io("current executable", e))?;
    let sibling = exe.with_file_name("pipe-stage");
    if sibling.is_file() {
        return Ok(sibling);
    }
    if let Some(workspace) = cargo_workspace_of(&exe) {
        build_worker(&workspace, &exe)?;
        if sibling.is_file() {
            return Ok(sibling);
        }
    }
    Err(EngineError::usage(
        format!(
            "the stage worker `pipe-stage` is not installed beside `{}`",
            exe.display()
        ),
        "build it with `cargo build --release -p pipe-stages`, or set PIPE_WORKER to its path",
    ))
}

/// The workspace root when `exe` is `<root>/target/<profile>/pipe`.
fn cargo_workspace_of(exe: &Path) -> Option<PathBuf> {
    let profile_dir = exe.parent()?;
    let target_dir = profile_dir.parent()?;
    let root = target_dir.parent()?;
    (target_dir.file_name()? == "target" && root.join("stages").join("Cargo.toml").is_file())
        .then(|| root.to_path_buf())
}

fn build_worker(workspace: &Path, exe: &Path) -> Result<()> {
    let release = exe
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|name| name == "release");
    eprintln!("building the stage worker `pipe-stage` (first use; this takes a few minutes)");
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command
        .current_dir(workspace)
        .args(["build", "-p", "pipe-stages", "--bin", "pipe-stage"]);
    if release {
        command.arg("--release");
    }
    let status = command.status().map_err(|e| EngineError::io("cargo", e))?;
    if !status.success() {
        return Err(EngineError::usage(
            "building the stage worker `pipe-stage` failed (see cargo's output above)",
            "fix the build error, or set PIPE_WORKER to a working `pipe-stage`",
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
pub fn load_catalog(project: &Project) -> Result<Catalog> {
    let cache_path = project.state_dir.join("catalog.json");
    let cached: Vec<CachedDescribe> = std::fs::read(&cache_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let mut workers = vec![builtin_worker()?];
    // The libtorch worker is optional: it exists where it was built with
    // the `torch` feature (docs/libtorch.md).
    let training = workers[0].with_file_name("pipe-stage-train");
    if training.is_file() {
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
        for info in described.stages {
            let id = format!("{}@{}", info.name, info.version);
            if let Some(existing) = catalog.stages.get(&id) {
                return Err(EngineError::usage(
                    format!(
                        "stage `{id}` is offered by two workers: `{}` and `{}`",
                        existing.worker.display(),
                        described.worker.display()
                    ),
                    "remove or rename one of them (PIPE_STAGE_PATH, .pipe/stages/)",
                ));
            }
            catalog.stages.insert(
                id,
                CatalogEntry {
                    info,
                    worker: described.worker.clone(),
                },
            );
        }
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
