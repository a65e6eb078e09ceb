//! Run references: `12`, `last`, `last~2`, a name, a uid prefix, a tag,
//! or a git ref. Resolved here only, for every command that names a run.

use std::path::Path;

use rusqlite::{params, OptionalExtension};

use super::db::RunDb;
use super::git::git_commit_of;
use crate::overrides::ParamOverride;
use crate::run_id::RunId;
use crate::{EngineError, NoSuchRun, Result, UsageError};

impl RunDb {
    /// Resolves a run reference, trying in order: a number (`12`, `#12`),
    /// `last` and `last~N` (by when runs started, pulled ones included, so
    /// that they name the same runs wherever the runs are), a name, a uid
    /// prefix (at least 4 hex digits), a tag (its newest run), and a git
    /// ref: the newest run at that commit that ran its own configuration
    /// (no `-S`), clean before dirty (the caller resolves the ref to a
    /// commit).
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
            if self.run_exists(id)? {
                return Ok(id);
            }
            return match self.run_of_uid_prefix(query)? {
                Some(id) => Ok(id),
                None => Err(unknown(NoSuchRun::NoSuchId)),
            };
        }
        if let Some(back) = runs_back_of(query) {
            return self
                .connection
                .query_row(
                    "SELECT id FROM runs ORDER BY started_ms DESC, id DESC LIMIT 1 OFFSET ?1",
                    params![back],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| self.error(e))?
                .ok_or_else(|| unknown(NoSuchRun::TooFewRuns));
        }
        if let Some(id) = self.run_named(query)? {
            return Ok(id);
        }
        if let Some(id) = self.run_of_uid_prefix(query)? {
            return Ok(id);
        }
        if let Some(id) = self.newest_tagged(query)? {
            return Ok(id);
        }
        let branch = query.strip_prefix("origin/").unwrap_or(query);
        let Some(commit) = git_commit_of(query) else {
            // A branch a CI recorded runs under, though no local ref names
            // it (a pull request's merge commit ran, not the branch's head).
            if let Some(id) = self.newest_on_branch(branch)? {
                return Ok(id);
            }
            let remote = format!("origin/{query}");
            if !query.starts_with("origin/") && git_commit_of(&remote).is_some() {
                return Err(unknown(NoSuchRun::NotALocalRef { remote }));
            }
            return Err(unknown(NoSuchRun::NotARunOrRef));
        };
        if let Some(id) = self.own_configuration_at(&commit)? {
            return Ok(id);
        }
        Err({
            let commit = commit[..commit.len().min(12)].to_string();
            match self.experiments_at(&commit) {
                Ok(experiments) if !experiments.is_empty() => {
                    unknown(NoSuchRun::OnlyExperimentsAtCommit {
                        commit,
                        experiments,
                    })
                }
                Ok(_) => unknown(NoSuchRun::NoneAtCommit {
                    commit,
                    remote: None,
                }),
                Err(error) => error,
            }
        })
    }

    /// The newest run of its own configuration recorded on `branch` (by
    /// the branch HEAD named, or the one a CI said it built).
    fn newest_on_branch(&self, branch: &str) -> Result<Option<RunId>> {
        self.connection
            .query_row(
                "SELECT id FROM runs WHERE branch = ?1 AND coalesce(overrides, '[]') = '[]'
                 AND sweep IS NULL
                 ORDER BY coalesce(git_dirty, 0), started_ms DESC, id DESC LIMIT 1",
                params![branch],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.error(e))
    }

    /// The run that holds `name`; several after a pull brought a run of the
    /// same name are an error naming each.
    fn run_named(&self, name: &str) -> Result<Option<RunId>> {
        let holders = self.runs_where("name = ?1", name, 3)?;
        match holders.as_slice() {
            [] => Ok(None),
            [(id, _)] => Ok(Some(*id)),
            _ => Err(self.ambiguous(name, &holders)),
        }
    }

    /// The run whose uid starts with `prefix` (4 hex digits or more).
    fn run_of_uid_prefix(&self, prefix: &str) -> Result<Option<RunId>> {
        let prefix = prefix.trim_start_matches('#').to_ascii_lowercase();
        if prefix.len() < 4 || !prefix.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Ok(None);
        }
        // A range over the unique index: uids are lowercase hex, and `g`
        // sorts after every hex digit.
        let mut statement = self
            .connection
            .prepare_cached(
                "SELECT id, uid FROM runs WHERE uid >= ?1 AND uid < ?1 || 'g' ORDER BY uid LIMIT 3",
            )
            .map_err(|e| self.error(e))?;
        let found: Vec<(RunId, String)> = statement
            .query_map(params![prefix], |row| Ok((row.get(0)?, row.get(1)?)))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.error(e))?;
        match found.as_slice() {
            [] => Ok(None),
            [(id, _)] => Ok(Some(*id)),
            _ => Err(self.ambiguous(&prefix, &found)),
        }
    }

    /// The newest run tagged `tag`.
    fn newest_tagged(&self, tag: &str) -> Result<Option<RunId>> {
        Ok(self
            .runs_where(
                "tags IS NOT NULL AND EXISTS (SELECT 1 FROM json_each(tags) WHERE value = ?1)",
                tag,
                1,
            )?
            .first()
            .map(|(id, _)| *id))
    }

    /// Up to `limit` runs matching `condition` (over `?1` = `value`),
    /// newest first, with their uids.
    fn runs_where(&self, condition: &str, value: &str, limit: i64) -> Result<Vec<(RunId, String)>> {
        let query = format!(
            "SELECT id, coalesce(uid, '') FROM runs WHERE {condition}
             ORDER BY started_ms DESC, id DESC LIMIT {limit}"
        );
        let mut statement = self
            .connection
            .prepare_cached(&query)
            .map_err(|e| self.error(e))?;
        let found = statement
            .query_map(params![value], |row| Ok((row.get(0)?, row.get(1)?)))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.error(e))?;
        Ok(found)
    }

    fn ambiguous(&self, query: &str, runs: &[(RunId, String)]) -> EngineError {
        UsageError::AmbiguousRun {
            query: query.to_string(),
            candidates: runs
                .iter()
                .map(|(id, uid)| format!("#{id} (uid {})", &uid[..uid.len().min(12)]))
                .collect(),
        }
        .into()
    }

    /// The newest run at `commit` without `-S` settings, committed state
    /// first: a run with uncommitted changes at that commit is not what
    /// the ref names.
    fn own_configuration_at(&self, commit: &str) -> Result<Option<RunId>> {
        self.connection
            .query_row(
                "SELECT id FROM runs WHERE (git_commit = ?1 OR head_commit = ?1)
                 AND coalesce(overrides, '[]') = '[]'
                 AND sweep IS NULL
                 AND (unverified IS NULL OR NOT EXISTS
                      (SELECT 1 FROM json_each(unverified) WHERE value = 'git_commit'))
                 ORDER BY coalesce(git_dirty, 0), started_ms DESC, id DESC LIMIT 1",
                params![commit],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.error(e))
    }

    /// The runs at a commit (its first digits) that set params, newest
    /// first, each as `#14 (-S train.n_est=41)`.
    fn experiments_at(&self, commit: &str) -> Result<Vec<String>> {
        let mut statement = self
            .connection
            .prepare(
                "SELECT id, overrides, sweep, unverified FROM runs WHERE substr(git_commit, 1, ?2) = ?1
                 ORDER BY started_ms DESC, id DESC LIMIT 5",
            )
            .map_err(|e| self.error(e))?;
        type Row = (i64, Option<String>, Option<bool>, Option<String>);
        let rows: Vec<Row> = statement
            .query_map(params![commit, commit.len() as i64], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .and_then(|rows| rows.collect())
            .map_err(|e| self.error(e))?;
        Ok(rows
            .into_iter()
            .map(|(id, overrides, sweep, unverified)| {
                let settings: Vec<ParamOverride> = overrides
                    .and_then(|text| serde_json::from_str(&text).ok())
                    .unwrap_or_default();
                let why = if sweep == Some(true) {
                    "a sweep".to_string()
                } else if !settings.is_empty() {
                    let shown: Vec<String> = settings.iter().map(|s| format!("-S {s}")).collect();
                    shown.join(" ")
                } else if unverified.is_some_and(|text| text.contains("git_commit")) {
                    "pulled; its commit not borne out here".to_string()
                } else {
                    "dirty".to_string()
                };
                format!("#{id} ({why})")
            })
            .collect())
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
