//! Outputs of stages no longer in the pipeline: a sample file deleted
//! takes its expansions out of the pipeline, but what they wrote is still
//! in the work tree, where a glob or a directory read would pick it up
//! unnoticed. Every output path a run declares is noted in a ledger
//! (`.pipe/outputs/PIPELINE`); a noted path that no stage declares any
//! more and that is still there is an orphan, said by `pipe status` and
//! removed by `pipe run --remove-orphans`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::pipeline::Pipeline;
use crate::project::Project;
use crate::project_files::ProjectPath;
use crate::Result;

/// The ledger of `pipeline`'s outputs under the project's state dir.
fn ledger_path(state_dir: &Path, pipeline: &str) -> PathBuf {
    state_dir.join("outputs").join(pipeline)
}

fn read_ledger(path: &Path) -> BTreeSet<String> {
    pipe_cache::untrusted::read(path, pipe_cache::untrusted::STATE_FILE)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .map(|text| {
            text.lines()
                // What the cache's rule takes, as every output now declared
                // is: never a path in `.git/` or in pipe's own state, which
                // removing an orphan would delete.
                .filter_map(|line| ProjectPath::stored(line).ok())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The output paths the pipeline declares in the project's work tree (a
/// sweep's work trees are its own). A built-in stage's, under `.pipe/`,
/// are pipe's own: no glob of the user's picks them up, and a sweep's
/// versions of them are restored from there.
fn declared(pipeline: &Pipeline) -> BTreeSet<&str> {
    pipeline
        .stages
        .iter()
        .filter(|stage| stage.workspace.is_none())
        .flat_map(|stage| stage.outs.iter().chain(&stage.metrics))
        .map(|out| out.path.as_str())
        .filter(|path| crate::project_files::paths::protected_dir(path).is_none())
        .collect()
}

/// Whether `path` is a declared output or inside one.
fn is_declared(declared: &BTreeSet<&str>, path: &str) -> bool {
    declared.contains(path)
        || crate::project_files::paths::ancestors(path).any(|ancestor| declared.contains(ancestor))
}

fn is_there(root: &Path, path: &str) -> bool {
    std::fs::symlink_metadata(root.join(path)).is_ok()
}

/// Notes the outputs a run of `pipeline` declares; the orphans noted
/// before stay noted while they are there, and are returned. Written only
/// when it changes: a no-op reads one small file.
pub fn note_outputs(pipeline: &Pipeline, project: &Project) -> Vec<String> {
    let path = ledger_path(&project.state_dir, &pipeline.name);
    let known = read_ledger(&path);
    let declared = declared(pipeline);
    let orphans: Vec<String> = known
        .iter()
        .filter(|old| !is_declared(&declared, old) && is_there(&pipeline.root, old))
        .cloned()
        .collect();
    // Orphans come from the ledger and are never declared: the ledger is
    // current when it holds exactly both.
    let current = known.len() == declared.len() + orphans.len()
        && declared.iter().all(|path| known.contains(*path));
    if !current {
        let mut noted: BTreeSet<String> = declared.iter().map(|path| path.to_string()).collect();
        noted.extend(orphans.iter().cloned());
        write_ledger(&path, &noted);
    }
    orphans
}

fn write_ledger(path: &Path, noted: &BTreeSet<String>) {
    let mut text = String::with_capacity(noted.iter().map(|path| path.len() + 1).sum());
    for path in noted {
        text.push_str(path);
        text.push('\n');
    }
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let temporary = path.with_extension("tmp");
    if std::fs::write(&temporary, text).is_ok() {
        let _ = std::fs::rename(&temporary, path);
    }
}

/// Outputs that earlier runs of `pipeline` declared, that no stage of it
/// declares now, and that are still in the work tree, sorted.
pub fn orphans(pipeline: &Pipeline) -> Vec<String> {
    let state_dir = pipeline.root.join(crate::project::STATE_DIR);
    let declared = declared(pipeline);
    read_ledger(&ledger_path(&state_dir, &pipeline.name))
        .into_iter()
        .filter(|path| !is_declared(&declared, path) && is_there(&pipeline.root, path))
        .collect()
}

/// Removes the orphans of `pipeline` from the work tree (their results
/// stay in the cache), returning what was removed.
pub fn remove_orphans(pipeline: &Pipeline, project: &Project) -> Result<Vec<String>> {
    let found = orphans(pipeline);
    for path in &found {
        let full = pipeline.root.join(path);
        let removed = match std::fs::symlink_metadata(&full) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&full),
            Ok(_) => std::fs::remove_file(&full),
            Err(_) => Ok(()),
        };
        removed.map_err(|source| crate::EngineError::io(&full, source))?;
    }
    note_outputs(pipeline, project);
    Ok(found)
}
