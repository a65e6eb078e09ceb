//! What a stage sees of the workspace: its dependencies' digests, and
//! whether its outputs there match a cached result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pipe_cache::{ActionResult, Artifact, ArtifactKind, Cache, CacheError, StatCache};
use pipe_protocol::excerpt as shown;

use crate::key::DepDigests;
use crate::pipeline::{Dep, Out, Stage};
use crate::project_files::{ProjectPath, UnsafeOutput};

/// Why a dependency could not be hashed: it does not exist, or reading it failed.
#[derive(Debug, Clone)]
pub struct DepProblem {
    pub dep: String,
    pub missing: bool,
    pub message: String,
}

pub fn hash_deps(
    root: &Path,
    stage: &Stage,
    cache: &Cache,
    stat: &StatCache,
) -> Result<DepDigests, DepProblem> {
    hash_deps_planned(root, stage, cache, stat, |_| None)
}

/// [`hash_deps`], with the dependencies `planned` knows taken from it
/// instead of the workspace: what they will hold when the stage runs, where
/// the workspace does not hold it yet (the output of an upstream stage
/// that the run restores first; `Some(None)`: it will not exist).
pub fn hash_deps_planned(
    root: &Path,
    stage: &Stage,
    cache: &Cache,
    stat: &StatCache,
    planned: impl Fn(&Dep) -> Option<Option<Artifact>>,
) -> Result<DepDigests, DepProblem> {
    hash_deps_where(|dep| root.join(&dep.path), stage, cache, stat, planned)
}

/// [`hash_deps_planned`], each dependency read at `place(dep)`: in a
/// sweep's work tree, where the stage that made it made it
/// (`crate::exec` for the trees).
pub fn hash_deps_where(
    place: impl Fn(&Dep) -> PathBuf,
    stage: &Stage,
    cache: &Cache,
    stat: &StatCache,
    planned: impl Fn(&Dep) -> Option<Option<Artifact>>,
) -> Result<DepDigests, DepProblem> {
    let mut digests = DepDigests::new();
    for dep in &stage.deps {
        let path = place(dep);
        let hashed = match planned(dep) {
            Some(Some(artifact)) => Ok(artifact),
            Some(None) => Err(DepProblem {
                dep: dep.name.clone(),
                missing: true,
                message: format!("dependency `{}` does not exist", dep.path),
            }),
            None => cache
                .hash_path(&path, stat)
                .map_err(|error| dep_problem(dep, &path, error)),
        };
        match hashed {
            Ok(artifact) => {
                digests.insert(dep.name.clone(), artifact);
            }
            Err(problem) => return Err(problem),
        }
    }
    Ok(digests)
}

fn dep_problem(dep: &Dep, path: &Path, error: pipe_cache::CacheError) -> DepProblem {
    let missing = std::fs::symlink_metadata(path).is_err();
    DepProblem {
        dep: dep.name.clone(),
        missing,
        message: if missing {
            format!("dependency `{}` does not exist", dep.path)
        } else {
            format!("cannot read dependency `{}`: {error}", dep.path)
        },
    }
}

/// The artifact at `path` (project-relative) within `outputs`, a stored
/// result's: an output itself, or an entry inside an output directory.
/// `None` when no output holds the path; `Some(None)` when the output
/// that would hold it does not.
pub fn artifact_within(
    cache: &Cache,
    outputs: &BTreeMap<ProjectPath, Artifact>,
    path: &str,
) -> Option<Option<Artifact>> {
    for (output, artifact) in outputs {
        if output == path {
            return Some(Some(artifact.clone()));
        }
        let Some(inner) = path
            .strip_prefix(output.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
        else {
            continue;
        };
        let mut current = artifact.clone();
        for name in inner.split('/') {
            if current.kind != ArtifactKind::Dir {
                return Some(None);
            }
            let entries = match cache.read_tree(&current) {
                Ok(entries) => entries,
                Err(_) => return Some(None),
            };
            match entries.into_iter().find(|(entry, _)| entry == name) {
                Some((_, entry)) => current = entry,
                None => return Some(None),
            }
        }
        return Some(Some(current));
    }
    None
}

/// All declared outputs and metric files, which the cache stores alike.
pub fn declared_outputs(stage: &Stage) -> impl Iterator<Item = &Out> {
    stage.outs.iter().chain(stage.metrics.iter())
}

/// Whether a cached result may be used for `stage`: it holds every
/// declared output and nothing but declared outputs and metrics files.
/// The cache has already refused paths the result's own manifest does not
/// declare; this holds the result to the stage actually being run, so a
/// result written elsewhere (a shared directory, a remote) under this key
/// cannot make pipe write anything the pipeline does not name.
pub fn check_action_fits(stage: &Stage, result: &ActionResult) -> Result<(), Misfit> {
    let worker_metrics = stage.worker_metrics_path();
    for path in result.outputs.keys() {
        let declared = declared_outputs(stage).any(|out| out.path == *path)
            || worker_metrics.as_deref() == Some(path.as_str());
        if !declared {
            return Err(Misfit::Undeclared {
                result: result.key.short(),
                path: path.to_string(),
                stage: stage.name.clone(),
            });
        }
    }
    if let Some(out) =
        declared_outputs(stage).find(|out| !result.outputs.contains_key(out.path.as_str()))
    {
        return Err(Misfit::Lacking {
            result: result.key.short(),
            path: out.path.clone(),
            stage: stage.name.clone(),
        });
    }
    Ok(())
}

/// Why a cached result cannot be used for a stage (`check_action_fits`);
/// `result` is the short form of its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Misfit {
    #[error("cached result {result} names `{}`, which stage `{stage}` does not declare", shown(.path))]
    Undeclared {
        result: String,
        path: String,
        stage: String,
    },
    #[error("cached result {result} lacks the declared output `{path}` of stage `{stage}`")]
    Lacking {
        result: String,
        path: ProjectPath,
        stage: String,
    },
}

/// Checks a place a cached output is about to be written to: the path
/// (a stored result's or a record's, so plain, project-relative and
/// outside `.git/` and `.pipe/` but `.pipe/out/`, as its type holds)
/// whose directories lead nowhere else through a symbolic link. Run right
/// before each restore, as the links may have changed since the pipeline
/// was loaded.
pub fn check_restore_target(root: &Path, path: &ProjectPath) -> Result<(), UnsafeOutput> {
    crate::project_files::paths::check_output_location(root, path)
}

/// A metrics file is a small JSON document; a bigger one is not read.
const MAX_METRICS_BYTES: u64 = 16 << 20;

/// The flattened metrics of a result (`a.b.c` -> value), read from its
/// stored metrics files, each checked against its digest. This is the one
/// source of the metrics that runs record and `show`, `diff` and
/// `compare` print, whether the stage ran or was restored.
pub fn read_metrics(
    cache: &Cache,
    stage: &Stage,
    result: &ActionResult,
) -> Result<BTreeMap<String, serde_json::Value>, BadMetrics> {
    // The cache keys a result's outputs by their text.
    let paths = stage
        .metrics_paths()
        .into_iter()
        .map(String::from)
        .collect();
    read_metrics_files(cache, result, paths)
}

/// The flattened metrics of a result whose stage is not at hand (a pulled
/// run record's): the metrics files its own manifest declares, read the
/// same way, each checked against its digest.
pub fn read_result_metrics(
    cache: &Cache,
    result: &ActionResult,
) -> Result<BTreeMap<String, serde_json::Value>, BadMetrics> {
    read_metrics_files(cache, result, result.metrics_paths())
}

/// Why a result's metrics could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BadMetrics {
    #[error("metrics file `{path}`: {source}")]
    Unreadable {
        path: String,
        #[source]
        source: CacheError,
    },
    #[error("metrics file `{path}` is not valid JSON ({source})")]
    NotJson {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

fn read_metrics_files(
    cache: &Cache,
    result: &ActionResult,
    paths: Vec<String>,
) -> Result<BTreeMap<String, serde_json::Value>, BadMetrics> {
    let mut metrics = BTreeMap::new();
    for path in paths {
        let Some(artifact) = result.outputs.get(path.as_str()) else {
            continue;
        };
        let bytes = match cache.read_file_object(artifact, MAX_METRICS_BYTES) {
            Ok(bytes) => bytes,
            Err(source) => return Err(BadMetrics::Unreadable { path, source }),
        };
        let value: serde_json::Value = match serde_json::from_slice(&bytes) {
            Ok(value) => value,
            Err(source) => return Err(BadMetrics::NotJson { path, source }),
        };
        metrics.extend(crate::key::flatten(&value));
    }
    Ok(metrics)
}

/// The outputs of `result` whose workspace copy is missing or differs.
pub fn outputs_differing<'a>(
    root: &Path,
    result: &'a ActionResult,
    cache: &Cache,
    stat: &StatCache,
) -> Vec<&'a ProjectPath> {
    result
        .outputs
        .iter()
        .filter(
            |(path, artifact)| match cache.hash_path(&root.join(path), stat) {
                Ok(current) => current.digest != artifact.digest || current.kind != artifact.kind,
                Err(_) => true,
            },
        )
        .map(|(path, _)| path)
        .collect()
}

/// Removes a file or directory tree, read-only cache links included.
pub fn remove_path(path: &Path) -> std::io::Result<()> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if metadata.is_dir() {
        make_tree_writable(path);
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

fn make_tree_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().map(|kind| kind.is_dir()).unwrap_or(false) {
                make_tree_writable(&entry.path());
            }
        }
    }
}
