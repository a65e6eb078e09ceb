//! Opening a project's history and resolving a run reference in it, from
//! the remote when this history lacks it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pipe_cache::remote::Remote;
use pipe_cache::{ActionKey, ActionResult, Cache};

use super::remote_records::{configured_remote, pull_records};
use crate::project::{runs_db_of, Project};
use crate::runs::RunId;
use crate::runs::{self, RunDb, RunRecord, RunSelection};
use crate::{EngineError, NoSuchRun, Result, UsageError};

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
    pub id: RunId,
    /// The remote whose run records were pulled to resolve it, and how many
    /// were new here.
    pub pulled: Option<(String, usize)>,
    /// Records of that remote not taken in, and why.
    pub skipped: Vec<String>,
}

/// What a use case over the history tells the user on the way, as it
/// happens rather than in its report (the report may never come, or come
/// long after): a pulled record not taken in, records pulled to resolve a
/// reference, a note on a selection, a warning about a choice, a wait for
/// another run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    Skipped(String),
    Pulled {
        query: String,
        remote: String,
        new: usize,
    },
    Note(String),
    /// Something the command goes on despite (runs of two pipelines diffed).
    Warning(String),
    /// Another `pipe run` holds the project (`holder`, its pid, when
    /// known): a command that writes outputs waits for it.
    WaitingForLock {
        holder: Option<u32>,
    },
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::Skipped(why) => write!(f, "warning: {why}"),
            Notice::Pulled { query, remote, new } => write!(
                f,
                "pulled {new} run record{} of `{query}` from {remote}",
                if *new == 1 { "" } else { "s" }
            ),
            Notice::Note(note) => write!(f, "note: {note}"),
            Notice::Warning(warning) => write!(f, "warning: {warning}"),
            Notice::WaitingForLock { holder } => {
                let who = holder.map(|pid| format!(" (pid {pid})"));
                write!(
                    f,
                    "waiting for another `pipe run` in this project{} to finish",
                    who.unwrap_or_default()
                )
            }
        }
    }
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

    /// [`History::resolve`], telling `notify` what was pulled or skipped.
    pub fn resolve_noting(
        &mut self,
        query: &str,
        pull: Pull<'_>,
        notify: &mut dyn FnMut(Notice),
    ) -> Result<RunId> {
        let resolved = self.resolve(query, pull)?;
        for skipped in &resolved.skipped {
            notify(Notice::Skipped(skipped.clone()));
        }
        if let Some((remote, new)) = &resolved.pulled {
            notify(Notice::Pulled {
                query: query.to_string(),
                remote: remote.clone(),
                new: *new,
            });
        }
        Ok(resolved.id)
    }

    /// A run id, `last`, `last~N` or a git ref. A git ref that no run here
    /// recorded clean is looked for as `pull` says, and the records of its
    /// commit are pulled first.
    pub fn resolve(&mut self, query: &str, pull: Pull<'_>) -> Result<ResolvedRun> {
        let mut pulled = None;
        let mut skipped = Vec::new();
        // The remote asked, and what it answered: none of the commit's
        // runs, or no answer at all (`searched`).
        let mut searched: Option<(String, Option<String>)> = None;
        let root = self.root.clone();
        let id = runs::resolve_run(&mut self.db, &root, query, |db, commit| match pull {
            Pull::Never => Ok(0),
            Pull::From(remote) => {
                let cache = Cache::open(&Project::open(&root)?.cache_dir)?;
                let records = pull_records(remote, &cache, db, &root, Some(commit))?;
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
                        let remote =
                            crate::remote::open_remote(&config, &project.cache_dir).ok()?;
                        Some((remote, Cache::open(&project.cache_dir).ok()?))
                    })
                else {
                    return Ok(0);
                };
                let url = remote.url().to_string();
                let records = match pull_records(&remote, &cache, db, &root, Some(commit)) {
                    Ok(records) => records,
                    Err(EngineError::RemoteUnavailable(reason)) => {
                        searched = Some((url, Some(reason.to_string())));
                        return Ok(0);
                    }
                    Err(_) => return Ok(0),
                };
                searched = Some((url, None));
                let new = records.new.len();
                pulled = Some((remote.url().to_string(), new));
                skipped = records.skipped;
                Ok(new)
            }
        })
        .map_err(|error| searched_too(error, searched))?;
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
        for run in self.db.newest_runs(RunSelection::default(), limit)? {
            walk(&run.params, String::new(), &mut paths);
        }
        Ok(paths)
    }

    /// The keys the stages of `runs` recorded.
    pub fn keys_of_runs(runs: &[RunRecord]) -> BTreeSet<ActionKey> {
        runs.iter()
            .flat_map(|run| &run.stages)
            .filter_map(|stage| stage.key)
            .collect()
    }

    /// The results the stages of `runs` recorded, as the local cache
    /// holds them, and how many it no longer holds.
    pub fn results_of_runs(cache: &Cache, runs: &[RunRecord]) -> (Vec<ActionResult>, usize) {
        let mut results = Vec::new();
        let mut missing = 0;
        for key in Self::keys_of_runs(runs) {
            match cache.get_action(&key) {
                Some(result) => results.push(result),
                None => missing += 1,
            }
        }
        (results, missing)
    }
}

/// `error`, when it says no run was recorded at a commit, with what the
/// remote said too: it held none either, or it could not be read (which
/// is then the error: exit code 6, not a run that does not exist).
fn searched_too(error: EngineError, searched: Option<(String, Option<String>)>) -> EngineError {
    let Some((remote, failure)) = searched else {
        return error;
    };
    match error {
        EngineError::Usage(UsageError::UnknownRun {
            query,
            why: NoSuchRun::NoneAtCommit { commit, .. },
        }) => UsageError::UnknownRun {
            query,
            why: match failure {
                Some(reason) => NoSuchRun::RemoteUnreadable { commit, reason },
                None => NoSuchRun::NoneAtCommit {
                    commit,
                    remote: Some(remote),
                },
            },
        }
        .into(),
        other => other,
    }
}
