//! A project's run history as the commands that read it see it: the run
//! database, and the remote cache whose run records it can pull on
//! demand. Every command that names a run resolves it here, one way.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pipe_cache::remote::{RecordError, Remote, RemoteConfig};
use pipe_cache::{ActionKey, ActionResult, Cache};

use crate::project::{runs_db_of, Project};
use crate::remote::RemoteSpec;
use crate::runs::{self, RunDb, RunExport};
use crate::{exec, EngineError, Result, UsageError};

mod choose;
mod vet;

pub use choose::{ComparedSelection, DiffPair};

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
        Some(file) => crate::spec::pipeline_remote(file)?,
        None if default_file.is_file() => crate::spec::pipeline_remote(&default_file)?,
        None => None,
    };
    crate::remote::resolve(root, pipeline.as_ref(), flag, read_only_flag)
}

/// How a run reference that this history lacks is looked for elsewhere.
pub enum Pull<'a> {
    /// Not at all.
    Never,
    /// In the project's configured remote, if there is one and it answers;
    /// a remote that fails is as good as none (`pipe show main` offline).
    IfConfigured,
    /// In this remote; its failure is the command's.
    From(&'a Remote),
}

/// A resolved run reference, and what resolving it pulled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRun {
    pub id: i64,
    /// The remote whose run records were pulled to resolve it, and how many
    /// were new here.
    pub pulled: Option<(String, usize)>,
    /// Records of that remote not taken in, and why.
    pub skipped: Vec<String>,
}

pub struct History {
    pub db: RunDb,
    pub root: PathBuf,
}

impl History {
    /// The history of the project at `root`. A clone that never ran but
    /// has a remote cache gets an empty one, so that `pipe show main` can
    /// pull main's record into it.
    pub fn require(root: &Path) -> Result<History> {
        let path = runs_db_of(root);
        if let Some(db) = RunDb::open_existing(&path)? {
            return Ok(History {
                db,
                root: root.to_path_buf(),
            });
        }
        if matches!(configured_remote(root, None, None, false), Ok(Some(_))) {
            let project = Project::open(root)?;
            return Ok(History {
                db: RunDb::open(&project.runs_db())?,
                root: root.to_path_buf(),
            });
        }
        Err(UsageError::NoRuns.into())
    }

    /// The history if the project has one.
    pub fn open_existing(root: &Path) -> Result<Option<History>> {
        Ok(RunDb::open_existing(&runs_db_of(root))?.map(|db| History {
            db,
            root: root.to_path_buf(),
        }))
    }

    /// A run id, `last`, `last~N` or a git ref. A git ref that no run here
    /// recorded clean is looked for as `pull` says, and the records of its
    /// commit are pulled first.
    pub fn resolve(&mut self, query: &str, pull: Pull<'_>) -> Result<ResolvedRun> {
        let mut pulled = None;
        let mut skipped = Vec::new();
        let root = self.root.clone();
        let id = runs::resolve_run(&mut self.db, &root, query, |db, commit| match pull {
            Pull::Never => Ok(0),
            Pull::From(remote) => {
                let cache = Cache::open(&Project::open(&root)?.cache_dir)?;
                let records = pull_records(remote, &cache, db, Some(commit))?;
                pulled = Some((remote.url().to_string(), records.new.len()));
                skipped = records.skipped;
                Ok(pulled.as_ref().map_or(0, |(_, new)| *new))
            }
            Pull::IfConfigured => {
                let Some((remote, cache)) = configured_remote(&root, None, None, false)
                    .ok()
                    .flatten()
                    .and_then(|config| {
                        let project = Project::open(&root).ok()?;
                        let remote = exec::open_remote(&config, &project.cache_dir).ok()?;
                        Some((remote, Cache::open(&project.cache_dir).ok()?))
                    })
                else {
                    return Ok(0);
                };
                let Ok(records) = pull_records(&remote, &cache, db, Some(commit)) else {
                    return Ok(0);
                };
                let new = records.new.len();
                pulled = Some((remote.url().to_string(), new));
                skipped = records.skipped;
                Ok(new)
            }
        })?;
        Ok(ResolvedRun {
            id,
            pulled: pulled.filter(|(_, new)| *new > 0),
            skipped,
        })
    }

    /// Every dotted param path (`train.lr`) the newest `limit` runs
    /// recorded: what `pipe compare --where PATH=…` can match, so that a
    /// typo there is told apart from a selection that matches no run.
    pub fn recorded_param_paths(&self, limit: usize) -> Result<BTreeSet<String>> {
        fn walk(value: &serde_json::Value, prefix: String, paths: &mut BTreeSet<String>) {
            if let serde_json::Value::Object(entries) = value {
                for (key, value) in entries {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    paths.insert(path.clone());
                    walk(value, path, paths);
                }
            }
        }
        let mut paths = BTreeSet::new();
        for run in self.db.list_runs(limit)? {
            walk(&run.params, String::new(), &mut paths);
        }
        Ok(paths)
    }

    /// The keys the stages of runs `ids` recorded.
    pub fn keys_of_runs(&self, ids: &[i64]) -> Result<BTreeSet<ActionKey>> {
        let mut keys = BTreeSet::new();
        for &id in ids {
            if let Some(run) = self.db.run(id)? {
                keys.extend(run.stages.iter().filter_map(|stage| stage.key));
            }
        }
        Ok(keys)
    }

    /// The results the stages of runs `ids` recorded, as the local cache
    /// holds them, and how many it no longer holds.
    pub fn results_of_runs(
        &self,
        cache: &Cache,
        ids: &[i64],
    ) -> Result<(Vec<ActionResult>, usize)> {
        let mut results = Vec::new();
        let mut missing = 0;
        for key in self.keys_of_runs(ids)? {
            match cache.get_action(&key) {
                Some(result) => results.push(result),
                None => missing += 1,
            }
        }
        Ok((results, missing))
    }
}

/// What [`pull_records`] did.
#[derive(Debug, Default)]
pub struct RecordsPulled {
    /// How many records the remote lists.
    pub listed: usize,
    /// The local ids of the records new here.
    pub new: Vec<i64>,
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
