//! The remote's run records: which remote a command uses, and pulling the
//! records this history lacks, each held to its results first.

use std::collections::BTreeSet;
use std::path::Path;

use pipe_cache::remote::{RecordError, Remote, RemoteConfig};
use pipe_cache::Cache;

use super::vet;
use crate::pipeline::RemoteSpec;
use crate::runs::{RunDb, RunExport, RunId};
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
    commit: Option<&str>,
) -> Result<RecordsPulled> {
    let paths = remote
        .list_run_records(commit)
        .map_err(EngineError::RemoteUnavailable)?;
    let known = db.known_uids()?;
    let mut pulled = RecordsPulled {
        listed: paths.len(),
        ..RecordsPulled::default()
    };
    for path in &paths {
        let uid = uid_of(path);
        if known.contains(uid) {
            continue;
        }
        let bytes = match remote.get_run_record(path) {
            Ok(bytes) => bytes,
            Err(RecordError::Refused(reason)) => {
                pulled
                    .skipped
                    .push(format!("run record in the remote: {reason}; skipped"));
                continue;
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
                    Ok(export) => {
                        if let Some(id) = db.import_run(export, remote.url())? {
                            pulled.new.push(id);
                        }
                    }
                    Err(problem) => pulled.skipped.push(format!(
                        "run record {path} in the remote is refused: {problem}; skipped"
                    )),
                }
            }
            Ok(_) => pulled.skipped.push(format!(
                "run record {path} in the remote is not a {} record for its name; skipped",
                RunExport::FORMAT
            )),
            Err(error) => pulled.skipped.push(format!(
                "run record {path} in the remote is unreadable ({error}); skipped"
            )),
        }
    }
    Ok(pulled)
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
