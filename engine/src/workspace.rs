//! What a stage sees of the workspace: its dependencies' digests, and
//! whether its outputs there match a cached result.

use std::path::Path;

use pipe_cache::{ActionResult, Cache, StatCache};

use crate::key::DepDigests;
use crate::pipeline::{Out, Stage};

/// Why a dependency could not be hashed: it does not exist, or reading it failed.
#[derive(Debug, Clone)]
pub struct DepProblem {
    pub dep: String,
    pub path: String,
    pub missing: bool,
    pub message: String,
}

pub fn hash_deps(
    root: &Path,
    stage: &Stage,
    cache: &Cache,
    stat: &StatCache,
) -> Result<DepDigests, DepProblem> {
    let mut digests = DepDigests::new();
    for dep in &stage.deps {
        let path = root.join(&dep.path);
        match cache.hash_path(&path, stat) {
            Ok(artifact) => {
                digests.insert(dep.name.clone(), artifact);
            }
            Err(error) => {
                let missing = std::fs::symlink_metadata(&path).is_err();
                return Err(DepProblem {
                    dep: dep.name.clone(),
                    path: dep.path.clone(),
                    missing,
                    message: if missing {
                        format!("dependency `{}` does not exist", dep.path)
                    } else {
                        format!("cannot read dependency `{}`: {error}", dep.path)
                    },
                });
            }
        }
    }
    Ok(digests)
}

/// All declared outputs and metric files, which the cache stores alike.
pub fn declared_outputs(stage: &Stage) -> impl Iterator<Item = &Out> {
    stage.outs.iter().chain(stage.metrics.iter())
}

/// The outputs of `result` whose workspace copy is missing or differs.
pub fn outputs_differing<'a>(
    root: &Path,
    result: &'a ActionResult,
    cache: &Cache,
    stat: &StatCache,
) -> Vec<&'a str> {
    result
        .outputs
        .iter()
        .filter(
            |(path, artifact)| match cache.hash_path(&root.join(path), stat) {
                Ok(current) => current.digest != artifact.digest || current.kind != artifact.kind,
                Err(_) => true,
            },
        )
        .map(|(path, _)| path.as_str())
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
