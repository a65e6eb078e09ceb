//! The remote's run records: which remote a command uses, and pulling the
//! records this history lacks, each held to its results first.

use std::collections::BTreeSet;
use std::path::Path;

use pipe_cache::remote::{RecordError, Remote, RemoteConfig};
use pipe_cache::Cache;

use super::vet;
use crate::pipeline::RemoteSpec;
use crate::runs::{RunDb, RunExport, RunId, RunLabels};
use crate::{EngineError, Result};

/// The remote cache from a flag, the environment, the pipeline file
/// (`file`, else `pipe.yaml` in the project if there is one) and
/// pipe.config.yaml, in that order; `None` when none is set.
pub fn configured_remote(
    root: &Path,
    file: Option<&Path>,
    flag: Option<&str>,
    read_only_flag: bool,
) -> Result<Option<RemoteConfig>> {
    let default_file = root.join("pipe.yaml");
    let pipeline: Option<RemoteSpec> = match file {
        Some(file) => crate::pipefile::pipeline_remote(file)?,
        None if default_file.is_file() => crate::pipefile::pipeline_remote(&default_file)?,
        None => None,
    };
    crate::remote::resolve(root, pipeline.as_ref(), flag, read_only_flag)
}

/// What [`pull_records`] did.
#[derive(Debug, Default)]
pub struct RecordsPulled {
    /// How many records the remote lists.
    pub listed: usize,
    /// The local ids of the records new here.
    pub new: Vec<RunId>,
    /// Records not taken in, and why (one line each).
    pub skipped: Vec<String>,
}

/// Downloads the run records the remote has (for `commit`, or all) that
/// this database lacks. A record is hostile input: one that does not
/// parse, is not for its name, or names outputs that the results under
/// its keys do not hold is skipped and said so, never imported; the
/// metrics it keeps are read from those results' objects ([`vet::vet`]).
pub fn pull_records(
    remote: &Remote,
    cache: &Cache,
    db: &mut RunDb,
    root: &Path,
    commit: Option<&str>,
) -> Result<RecordsPulled> {
    let paths = remote
        .list_run_records(commit)
        .map_err(EngineError::RemoteUnavailable)?;
    let known = db.known_uids()?;
    let removed = db.removed_uids()?;
    let mut pulled = RecordsPulled {
        listed: paths.len(),
        ..RecordsPulled::default()
    };
    let mut vetted = Vec::new();
    for path in &paths {
        let uid = uid_of(path);
        if known.contains(uid) || removed.contains(uid) {
            continue;
        }
        if let Some(export) = fetch_record(remote, cache, root, path, &mut pulled.skipped)? {
            vetted.push(export);
        }
    }
    // Numbered here in the order the runs happened, whatever order the
    // remote lists them in: the same numbers a clone that pulls everything
    // sees as where they were made.
    vetted.sort_by(|a, b| (a.run.started_ms, &a.run.uid).cmp(&(b.run.started_ms, &b.run.uid)));
    for export in vetted {
        let labels = labels_in(&export);
        if let Some(id) = db.import_run(export, remote.url())? {
            pulled.new.push(id);
            if let Some(labels) = labels {
                merge_noting(db, &labels, &mut pulled.skipped)?;
            }
        }
    }
    if commit.is_none() {
        pull_labels(remote, db, &mut pulled.skipped)?;
    }
    Ok(pulled)
}

/// The record at `path`, vetted; `None` (and a line in `skipped`) when it
/// is refused.
fn fetch_record(
    remote: &Remote,
    cache: &Cache,
    root: &Path,
    path: &str,
    skipped: &mut Vec<String>,
) -> Result<Option<RunExport>> {
    let uid = uid_of(path);
    let bytes = match remote.get_run_record(path) {
        Ok(bytes) => bytes,
        Err(RecordError::Refused(reason)) => {
            skipped.push(format!("run record in the remote: {reason}; skipped"));
            return Ok(None);
        }
        Err(RecordError::Unavailable(reason)) => {
            return Err(EngineError::RemoteUnavailable(reason))
        }
    };
    match serde_json::from_slice::<RunExport>(&bytes) {
        Ok(export)
            if export.format == RunExport::FORMAT && export.run.uid.as_deref() == Some(uid) =>
        {
            match vet::vet(export, remote, cache) {
                Ok(mut export) => match super::bear_out::bear_out(&mut export, root) {
                    Ok(()) => Ok(Some(export)),
                    Err(contradiction) => {
                        skipped.push(format!(
                            "run record {path} in the remote is refused: {contradiction}; skipped"
                        ));
                        Ok(None)
                    }
                },
                Err(problem) => {
                    skipped.push(format!(
                        "run record {path} in the remote is refused: {problem}; skipped"
                    ));
                    Ok(None)
                }
            }
        }
        Ok(_) => {
            skipped.push(format!(
                "run record {path} in the remote is not a {} record for its name; skipped",
                RunExport::FORMAT
            ));
            Ok(None)
        }
        Err(error) => {
            skipped.push(format!(
                "run record {path} in the remote is unreadable ({error}); skipped"
            ));
            Ok(None)
        }
    }
}

/// The name and tags a record carries, when it carries any.
fn labels_in(export: &RunExport) -> Option<RunLabels> {
    Some(RunLabels {
        uid: export.run.uid.clone()?,
        name: export.run.name.clone(),
        tags: export.run.tags.clone(),
        labels_ms: export.run.labels_ms?,
    })
}

/// Merges pulled labels; ill-formed ones are skipped and said so.
fn merge_noting(db: &RunDb, labels: &RunLabels, skipped: &mut Vec<String>) -> Result<()> {
    match db.merge_labels(labels) {
        Ok(Some(note)) => skipped.push(note),
        Ok(None) => {}
        Err(EngineError::Usage(problem)) => skipped.push(format!(
            "the labels of run {} in the remote are refused: {problem}; skipped",
            labels.uid
        )),
        Err(error) => return Err(error),
    }
    Ok(())
}

/// Takes in the names and tags given in the remote after the records
/// here were pulled: for each run here, the latest labels object, when it
/// is later than what this history has. One listing; a read only for
/// labels that changed.
fn pull_labels(remote: &Remote, db: &RunDb, skipped: &mut Vec<String>) -> Result<()> {
    let paths = remote
        .list_run_labels()
        .map_err(EngineError::RemoteUnavailable)?;
    let mut latest: std::collections::BTreeMap<&str, (u64, &str)> = Default::default();
    for path in &paths {
        let mut parts = path.rsplit('/');
        let (Some(file), Some(uid)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Some(ms) = file
            .strip_suffix(".json")
            .and_then(|ms| ms.parse::<u64>().ok())
        else {
            continue;
        };
        // A stamp from the future would win over every change here.
        if ms > vet::latest_labels_ms() {
            continue;
        }
        let entry = latest.entry(uid).or_insert((ms, path));
        if ms > entry.0 {
            *entry = (ms, path);
        }
    }
    if latest.is_empty() {
        return Ok(());
    }
    let here = db.labels_times()?;
    for (uid, (ms, path)) in latest {
        let Some(here_ms) = here.get(uid) else {
            continue;
        };
        if here_ms.is_some_and(|here_ms| here_ms >= ms) {
            continue;
        }
        let bytes = match remote.get_run_record(path) {
            Ok(bytes) => bytes,
            Err(RecordError::Refused(reason)) => {
                skipped.push(format!("labels in the remote: {reason}; skipped"));
                continue;
            }
            Err(RecordError::Unavailable(reason)) => {
                return Err(EngineError::RemoteUnavailable(reason))
            }
        };
        match serde_json::from_slice::<RunLabels>(&bytes) {
            Ok(labels)
                if labels.uid == uid && labels.labels_ms == ms && ms <= vet::latest_labels_ms() =>
            {
                merge_noting(db, &labels, skipped)?
            }
            _ => skipped.push(format!(
                "labels {path} in the remote are not the labels of their name; skipped"
            )),
        }
    }
    Ok(())
}

/// The uid in a run record's path (`runs/<commit>/<uid>.json`).
pub fn uid_of(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_suffix(".json").unwrap_or(name)
}

/// The uids of the run records the remote holds.
pub fn remote_uids(remote: &Remote) -> Result<BTreeSet<String>> {
    Ok(remote
        .list_run_records(None)
        .map_err(EngineError::RemoteUnavailable)?
        .iter()
        .map(|path| uid_of(path).to_string())
        .collect())
}
