//! Run references: `12`, `last`, `last~2`, or a git ref. Resolved here
//! only, for every command that names a run.

use std::path::Path;

use rusqlite::{params, OptionalExtension};

use super::db::RunDb;
use super::git::git_commit_of;
use super::id::RunId;
use crate::{EngineError, NoSuchRun, Result, UsageError};

impl RunDb {
    /// Resolves `12`, `last`, `last~2` (runs of this project, not pulled
    /// ones), or a git ref (the latest run recorded at that commit with no
    /// uncommitted changes, else the latest with; the caller resolves the
    /// ref to a commit).
    pub fn resolve(
        &self,
        query: &str,
        git_commit_of: impl Fn(&str) -> Option<String>,
    ) -> Result<RunId> {
        let unknown = |why: NoSuchRun| {
            EngineError::from(UsageError::UnknownRun {
                query: query.to_string(),
                why,
            })
        };
        if let Some(id) = run_id_of(query) {
            return match self.run_exists(id)? {
                true => Ok(id),
                false => Err(unknown(NoSuchRun::NoSuchId)),
            };
        }
        if let Some(back) = runs_back_of(query) {
            return self
                .connection
                .query_row(
                    "SELECT id FROM runs WHERE origin IS NULL ORDER BY id DESC LIMIT 1 OFFSET ?1",
                    params![back],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| self.error(e))?
                .ok_or_else(|| unknown(NoSuchRun::TooFewRuns));
        }
        let Some(commit) = git_commit_of(query) else {
            return Err(unknown(NoSuchRun::NotARunOrRef));
        };
        self.connection
            .query_row(
                // The committed state first: a run with uncommitted
                // changes at that commit is not what the ref names.
                "SELECT id FROM runs WHERE git_commit = ?1
                 ORDER BY coalesce(git_dirty, 0), id DESC LIMIT 1",
                params![commit],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.error(e))?
            .ok_or_else(|| {
                unknown(NoSuchRun::NoneAtCommit {
                    commit: commit[..commit.len().min(12)].to_string(),
                })
            })
    }
}

/// `12` or `#12`.
fn run_id_of(query: &str) -> Option<RunId> {
    query.trim_start_matches('#').parse::<i64>().ok().map(RunId)
}

/// `last` is 0 runs back, `last~2` two.
fn runs_back_of(query: &str) -> Option<i64> {
    if query == "last" {
        return Some(0);
    }
    query
        .strip_prefix("last~")
        .and_then(|n| n.parse::<i64>().ok())
        .filter(|back| *back >= 0)
}

/// Resolves a run reference of the project at `root`. A git ref names the
/// committed state: when no run here recorded that commit clean, `pull`
/// is asked for the records of that commit (a remote cache's: CI's run of
/// it) and the ref is resolved again if it brought any. `pull` returns
/// how many records it added.
pub fn resolve_run(
    db: &mut RunDb,
    root: &Path,
    query: &str,
    pull: impl FnOnce(&mut RunDb, &str) -> Result<usize>,
) -> Result<RunId> {
    let resolved = db.resolve(query, |reference| git_commit_of(root, reference));
    if run_id_of(query).is_some() || runs_back_of(query).is_some() {
        return resolved;
    }
    let committed_here = match &resolved {
        Ok(id) => db.run(*id)?.is_some_and(|run| run.git_dirty != Some(true)),
        Err(_) => false,
    };
    if committed_here {
        return resolved;
    }
    let Some(commit) = git_commit_of(root, query) else {
        return resolved;
    };
    match pull(db, &commit)? {
        0 => resolved,
        _ => db.resolve(query, |reference| git_commit_of(root, reference)),
    }
}
