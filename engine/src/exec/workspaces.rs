//! The work trees of a sweep whose combinations cannot share the
//! project's (`Pipeline::workspaces`): one per combination under
//! `.pipe/workspaces/RUN/N/`, made before the stages start and removed
//! when the run ends. The user's files are not touched while it runs.
//!
//! A tree mirrors the project as links: each entry is a symbolic link to
//! the project's, but for the directories that hold an output of a
//! command stage, which are real (their other entries linked), the
//! outputs themselves, which the stages write or the run restores there,
//! and `params.yaml`, a file of its own holding the combination's values
//! (edited in place, as `-S` edits the project's for a run). A command
//! runs with the tree as its working directory, so every relative path it
//! reads or writes is the tree's. Keys hash the project-relative paths
//! and contents, never where the tree is: a result made in a tree is the
//! result a plain run with those values makes.
//!
//! Why links rather than copies: a copy of a data directory per
//! combination costs its size, and a hard link changes the file's ctime,
//! which would make the stat cache rehash the user's files after every
//! sweep. A source a stage declares is hashed in the project (where the
//! link leads); what a stage made is hashed where it was made.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::pipeline::{Pipeline, Stage, StageKind};
use crate::project::Project;
use crate::runs::RunId;
use crate::{EngineError, Result};

/// A sweep run's work trees, removed on drop.
pub(crate) struct Workspaces {
    /// `.pipe/workspaces/RUN/`.
    base: PathBuf,
    /// One absolute directory per combination.
    dirs: Vec<PathBuf>,
    /// Each stage's tree, by name (`None`: the project).
    stages: HashMap<String, Option<u32>>,
    /// Per tree, its own `params.yaml`, project-relative.
    params_files: Vec<Option<String>>,
}

impl Workspaces {
    /// Makes one tree per combination of `pipeline` for run `run_id`,
    /// after removing what killed runs left (the caller holds the run
    /// lock, so no other run has trees).
    pub(crate) fn create(
        project: &Project,
        pipeline: &Pipeline,
        run_id: RunId,
    ) -> Result<Workspaces> {
        let all = project.workspaces_dir();
        match std::fs::remove_dir_all(&all) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(EngineError::io(&all, error)),
        }
        let base = all.join(run_id.to_string());
        let mut workspaces = Workspaces {
            base,
            dirs: Vec::new(),
            stages: pipeline
                .stages
                .iter()
                .map(|stage| (stage.name.clone(), stage.workspace))
                .collect(),
            params_files: Vec::new(),
        };
        let root = &pipeline.root;
        let outputs: HashSet<&str> = command_outputs(pipeline).collect();
        for (index, workspace) in pipeline.workspaces.iter().enumerate() {
            let dir = workspaces.base.join(index.to_string());
            let params_file = workspace.params_file.as_ref().and_then(|edits| {
                let relative = edits.file.strip_prefix(root).ok()?;
                Some((relative.to_string_lossy().into_owned(), edits))
            });
            let mut real: HashSet<String> = HashSet::new();
            for path in outputs
                .iter()
                .copied()
                .chain(params_file.as_ref().map(|(path, _)| path.as_str()))
            {
                real.extend(ancestors(path));
            }
            let mut skipped: HashSet<&str> = outputs.clone();
            if let Some((path, _)) = &params_file {
                skipped.insert(path);
            }
            std::fs::create_dir_all(&dir).map_err(|e| EngineError::io(&dir, e))?;
            mirror(root, &dir, "", &real, &skipped)?;
            if let Some((path, edits)) = &params_file {
                let bytes =
                    std::fs::read(&edits.file).map_err(|e| EngineError::io(&edits.file, e))?;
                // Checked to be the text the sweep was loaded from, its
                // byte order mark kept, as a run's `-S` write is.
                let written = crate::params_override::edited(edits, &bytes).ok_or_else(|| {
                    EngineError::Internal(format!(
                        "{} changed since the sweep was loaded; run it again",
                        edits.file.display()
                    ))
                })?;
                let target = dir.join(path);
                std::fs::write(&target, written).map_err(|e| EngineError::io(&target, e))?;
            }
            workspaces.dirs.push(dir);
            workspaces
                .params_files
                .push(params_file.map(|(path, _)| path));
        }
        Ok(workspaces)
    }

    /// The tree of combination `index`.
    pub(crate) fn dir(&self, index: u32) -> Option<&Path> {
        self.dirs.get(index as usize).map(PathBuf::as_path)
    }

    /// The tree the stage named `stage` runs in; `None`: the project's.
    pub(crate) fn workspace_of(&self, stage: &str) -> Option<u32> {
        self.stages.get(stage).copied().flatten()
    }

    /// Whether `path` is the `params.yaml` tree `workspace` has its own of.
    pub(crate) fn is_params_file(&self, workspace: Option<u32>, path: &str) -> bool {
        workspace
            .and_then(|index| self.params_files.get(index as usize))
            .is_some_and(|file| file.as_deref() == Some(path))
    }
}

impl Drop for Workspaces {
    fn drop(&mut self) {
        // Removes the links, never what they lead to.
        if let Err(error) = std::fs::remove_dir_all(&self.base) {
            tracing::warn!(
                "cannot remove the sweep's work trees `{}`: {error}",
                self.base.display()
            );
        }
        if let Some(parent) = self.base.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// The outputs of command stages: what a tree must not link to the
/// project's, since its stages write or restore them there.
fn command_outputs(pipeline: &Pipeline) -> impl Iterator<Item = &str> {
    pipeline
        .stages
        .iter()
        .filter(|stage| is_command(stage))
        .flat_map(|stage| stage.outs.iter().chain(&stage.metrics))
        .map(|out| out.path.as_str())
}

pub(crate) fn is_command(stage: &Stage) -> bool {
    matches!(
        stage.kind,
        StageKind::Command { .. } | StageKind::Argv { .. }
    )
}

/// `a`, `a/b` for `a/b/c`: the directories above a project path.
fn ancestors(path: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(slash) = path[at..].find('/') {
        found.push(path[..at + slash].to_string());
        at += slash + 1;
    }
    found
}

/// Fills `dir` with the entries of `root/relative`: a directory in `real`
/// made and filled likewise, a path in `skipped` left out, anything else
/// a link to the project's entry.
fn mirror(
    root: &Path,
    dir: &Path,
    relative: &str,
    real: &HashSet<String>,
    skipped: &HashSet<&str>,
) -> Result<()> {
    let source = root.join(relative);
    let entries = match std::fs::read_dir(&source) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(EngineError::io(&source, error)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| EngineError::io(&source, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let path = match relative {
            "" => name.to_string(),
            _ => format!("{relative}/{name}"),
        };
        let target = dir.join(&path);
        if relative.is_empty() && name == crate::project::STATE_DIR {
            // The cache, and the outputs of built-in stages, seen as they are.
            link(&entry.path(), &target)?;
        } else if skipped.contains(path.as_str()) {
            continue;
        } else if real.contains(&path) && entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            std::fs::create_dir(&target).map_err(|e| EngineError::io(&target, e))?;
            mirror(root, dir, &path, real, skipped)?;
        } else {
            link(&entry.path(), &target)?;
        }
    }
    Ok(())
}

fn link(original: &Path, link: &Path) -> Result<()> {
    std::os::unix::fs::symlink(original, link).map_err(|e| EngineError::io(link, e))
}

#[cfg(test)]
mod tests {
    use super::ancestors;

    #[test]
    fn the_directories_above_a_path() {
        assert_eq!(ancestors("a/b/c.txt"), ["a", "a/b"]);
        assert!(ancestors("c.txt").is_empty());
    }
}
