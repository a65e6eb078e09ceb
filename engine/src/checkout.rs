//! `pipe checkout RUN`: a recorded run's outputs back into the workspace,
//! from the cache. Nothing of a record is trusted (it may come from a
//! remote): every place it names is checked before anything is written,
//! and files only the workspace holds are never destroyed unasked.

use std::path::PathBuf;

use pipe_cache::{Artifact, Cache, LinkMode, RestoreSites, StatCache};

use crate::project::{Project, RunLock};
use crate::runs::RunRecord;
use crate::{workspace, EngineError, Result};

/// What a checkout did, or why it did nothing.
#[derive(Debug)]
pub enum CheckoutReport {
    /// The record names places pipe does not write (`stage: problem`
    /// each); nothing was changed.
    Refused(Vec<String>),
    /// Restoring would overwrite or delete these files, which the cache
    /// does not hold; nothing was changed.
    WouldLoseFiles(Vec<PathBuf>),
    /// Outputs restored and already in place, and those the cache could
    /// not give back (`path (stage): error` each).
    Done {
        restored: usize,
        unchanged: usize,
        missing: Vec<String>,
    },
}

/// Restores the outputs of `record`. The caller holds the project's run
/// lock: a checkout writes outputs as a run does, and the two take turns.
pub fn checkout(
    project: &Project,
    lock: &RunLock,
    record: &RunRecord,
    modes: &[LinkMode],
    force: bool,
) -> Result<CheckoutReport> {
    let outputs: Vec<(&str, &str, &Artifact)> = record
        .stages
        .iter()
        .flat_map(|stage| {
            stage
                .outputs
                .iter()
                .map(|(path, artifact)| (stage.stage.as_str(), path.as_str(), artifact))
        })
        .collect();
    let refused: Vec<String> = outputs
        .iter()
        .filter_map(|(stage, path, _)| {
            workspace::check_restore_target(&project.root, path)
                .err()
                .map(|problem| format!("stage `{stage}`: {problem}"))
        })
        .collect();
    if !refused.is_empty() {
        return Ok(CheckoutReport::Refused(refused));
    }

    let cache = Cache::open(&project.cache_dir)?;
    let stat = StatCache::open(&project.stat_db())?;
    let mut sites = RestoreSites::default();
    for (_, path, _) in &outputs {
        sites.output(path);
    }
    lock.remove_restore_leftovers(&project.root, &sites);

    // As git does: refuse to destroy what only the workspace holds.
    if !force {
        let mut lost = Vec::new();
        for (_, path, artifact) in &outputs {
            lost.extend(cache.files_lost_by_restore(artifact, &project.root.join(path), &stat)?);
        }
        if !lost.is_empty() {
            let _ = stat.flush();
            return Ok(CheckoutReport::WouldLoseFiles(lost));
        }
    }

    let mut restored = 0usize;
    let mut unchanged = 0usize;
    let mut missing = Vec::new();
    for (stage, path, artifact) in &outputs {
        let destination = project.root.join(path);
        // Already in place: nothing to read from the cache.
        if cache
            .hash_path(&destination, &stat)
            .is_ok_and(|current| current.digest == artifact.digest && current.kind == artifact.kind)
        {
            unchanged += 1;
            continue;
        }
        if let Some(parent) = destination.parent() {
            std::fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
        }
        match cache.restore(artifact, &destination, modes, &stat) {
            Ok(()) => restored += 1,
            Err(error) => missing.push(format!("{path} (stage `{stage}`): {error}")),
        }
    }
    let _ = stat.flush();
    Ok(CheckoutReport::Done {
        restored,
        unchanged,
        missing,
    })
}
