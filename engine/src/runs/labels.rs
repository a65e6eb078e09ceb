//! A run's name and tags, and removing a run: what a team gives runs
//! after the fact (`pipe runs name`, `pipe tag`, `pipe runs rm`), and how
//! those labels meet a remote's copy of them (the later change wins).

use rusqlite::{params, OptionalExtension};

use super::db::{now_ms, RunDb};
use super::migrate::json;
use crate::run_id::RunId;
use crate::{EngineError, Result, UsageError};
use pipe_protocol::record::RunStatus;

/// The longest name or tag.
const LABEL_MAX: usize = 64;

/// Whether `label` can be a name or tag (`kind` says which, for the
/// error): letters, digits, `.`, `_`, `-`, starting with a letter, so
/// that it is never read as a number, `#12`, `last~2`, or an option. A
/// label pulled from a remote is held to the same rule.
pub fn check_label(kind: &'static str, label: &str) -> Result<()> {
    let problem = if label.is_empty() {
        Some("is empty".to_string())
    } else if label.len() > LABEL_MAX {
        Some(format!("is longer than {LABEL_MAX} characters"))
    } else if !label.starts_with(|c: char| c.is_ascii_alphabetic()) {
        Some("does not start with a letter".to_string())
    } else if let Some(bad) = label
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        Some(format!("holds {bad:?}"))
    } else if label == "last" {
        Some("is how the newest run is named".to_string())
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(UsageError::BadLabel {
            kind,
            label: label.chars().take(LABEL_MAX + 8).collect(),
            problem,
        }
        .into()),
    }
}

/// The labels of a run as they travel to and from a remote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunLabels {
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// When they last changed, in ms since the epoch.
    pub labels_ms: u64,
}

impl RunLabels {
    /// Whether these labels, from elsewhere, are well-formed.
    pub fn check(&self) -> Result<()> {
        if let Some(name) = &self.name {
            check_label("name", name)?;
        }
        self.tags.iter().try_for_each(|tag| check_label("tag", tag))
    }
}

/// What a removal left behind.
#[derive(Debug, Clone)]
pub struct Removed {
    pub id: RunId,
    pub uid: Option<String>,
    /// The run's results that no other run recorded: gc's to remove once
    /// no newer rule keeps them.
    pub results_only_it_had: usize,
    /// Its results that other runs also recorded, kept for them.
    pub results_shared: usize,
}

impl RunDb {
    /// Gives run `id` the name `name` (or takes its name away), refusing a
    /// name another run holds.
    pub fn set_name(&self, id: RunId, name: Option<&str>) -> Result<()> {
        if let Some(name) = name {
            check_label("name", name)?;
            if let Some(holder) = self.name_holder(name)? {
                if holder != id {
                    return Err(UsageError::NameTaken {
                        name: name.to_string(),
                        holder,
                    }
                    .into());
                }
            }
        }
        self.connection
            .execute(
                "UPDATE runs SET name = ?1, labels_ms = ?2 WHERE id = ?3",
                params![name, now_ms() as i64, id],
            )
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The run here that holds `name`, if one does.
    pub fn name_holder(&self, name: &str) -> Result<Option<RunId>> {
        self.connection
            .query_row(
                "SELECT id FROM runs WHERE name = ?1 ORDER BY id LIMIT 1",
                params![name],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| self.error(e))
    }

    /// Adds `add` to run `id`'s tags and takes `remove` away; returns its
    /// tags after.
    pub fn retag(&self, id: RunId, add: &[String], remove: &[String]) -> Result<Vec<String>> {
        for tag in add {
            check_label("tag", tag)?;
        }
        let run = self.resolved_run_row_tags(id)?;
        let mut tags: Vec<String> = run
            .into_iter()
            .filter(|tag| !remove.contains(tag))
            .collect();
        for tag in add {
            if !tags.contains(tag) {
                tags.push(tag.clone());
            }
        }
        self.connection
            .execute(
                "UPDATE runs SET tags = ?1, labels_ms = ?2 WHERE id = ?3",
                params![(!tags.is_empty()).then(|| json(&tags)), now_ms() as i64, id],
            )
            .map_err(|e| self.error(e))?;
        Ok(tags)
    }

    fn resolved_run_row_tags(&self, id: RunId) -> Result<Vec<String>> {
        let text: Option<Option<String>> = self
            .connection
            .query_row("SELECT tags FROM runs WHERE id = ?1", params![id], |row| {
                row.get(0)
            })
            .optional()
            .map_err(|e| self.error(e))?;
        let Some(text) = text else {
            return Err(EngineError::RunVanished { id });
        };
        match text {
            None => Ok(Vec::new()),
            Some(text) => serde_json::from_str(&text).map_err(|error| EngineError::CorruptRecord {
                path: self.path.clone(),
                place: format!("run #{id}"),
                column: "tags".to_string(),
                problem: error.to_string(),
            }),
        }
    }

    /// The labels of the runs here that have any, for a push.
    pub fn labels_of(&self, id: RunId) -> Result<Option<RunLabels>> {
        let run = self.resolved_run(id)?;
        Ok(match (run.uid, run.labels_ms) {
            (Some(uid), Some(labels_ms)) => Some(RunLabels {
                uid,
                name: run.name,
                tags: run.tags,
                labels_ms,
            }),
            _ => None,
        })
    }

    /// Takes labels from a remote when they changed after the ones here.
    /// A name that another run here holds stays with that run: the pulled
    /// run keeps its tags and goes without the name, which the returned
    /// line says. `None`: nothing to say.
    pub fn merge_labels(&self, labels: &RunLabels) -> Result<Option<String>> {
        labels.check()?;
        let here: Option<(RunId, Option<i64>)> = self
            .connection
            .query_row(
                "SELECT id, labels_ms FROM runs WHERE uid = ?1",
                params![labels.uid],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(|e| self.error(e))?;
        let Some((id, here_ms)) = here else {
            return Ok(None);
        };
        if here_ms.is_some_and(|ms| ms >= labels.labels_ms as i64) {
            return Ok(None);
        }
        let mut note = None;
        let name = match &labels.name {
            Some(name) => match self.name_holder(name)? {
                Some(holder) if holder != id => {
                    note = Some(format!(
                        "run #{id} is named `{name}` in the remote, but run #{holder} here holds that name, so #{id} is left without it here; rename one with `pipe runs name`"
                    ));
                    None
                }
                _ => Some(name.as_str()),
            },
            None => None,
        };
        self.connection
            .execute(
                "UPDATE runs SET name = ?1, tags = ?2, labels_ms = ?3 WHERE id = ?4",
                params![
                    name,
                    (!labels.tags.is_empty()).then(|| json(&labels.tags)),
                    labels.labels_ms as i64,
                    id
                ],
            )
            .map_err(|e| self.error(e))?;
        Ok(note)
    }

    /// Removes run `id` and its stage rows, and remembers its uid so that
    /// a pull does not bring it back. Its results stay in the cache until
    /// `pipe cache gc`, which keeps those other runs recorded.
    pub fn remove_run(&mut self, id: RunId) -> Result<Removed> {
        let run = self.resolved_run(id)?;
        if run.status == RunStatus::Running {
            return Err(EngineError::usage(
                format!("run #{id} is still running"),
                "stop it first (Ctrl-C in its terminal), or wait for it to finish",
            ));
        }
        let (mut only_it, mut shared) = (0, 0);
        {
            let mut others = self
                .connection
                .prepare_cached("SELECT 1 FROM stage_runs WHERE key = ?1 AND run_id != ?2 LIMIT 1")
                .map_err(|e| self.error(e))?;
            for key in run.stages.iter().filter_map(|stage| stage.key) {
                let kept = others
                    .exists(params![key.to_hex(), id])
                    .map_err(|e| self.error(e))?;
                if kept {
                    shared += 1;
                } else {
                    only_it += 1;
                }
            }
        }
        let path = self.path.clone();
        let transaction = self
            .connection
            .transaction()
            .map_err(|e| EngineError::database(&path, e))?;
        for statement in [
            "DELETE FROM stage_runs WHERE run_id = ?1",
            "DELETE FROM runs WHERE id = ?1",
        ] {
            transaction
                .execute(statement, params![id])
                .map_err(|e| EngineError::database(&path, e))?;
        }
        if let Some(uid) = &run.uid {
            transaction
                .execute(
                    "INSERT OR REPLACE INTO removed_runs (uid, removed_ms) VALUES (?1, ?2)",
                    params![uid, now_ms() as i64],
                )
                .map_err(|e| EngineError::database(&path, e))?;
        }
        transaction
            .commit()
            .map_err(|e| EngineError::database(&path, e))?;
        Ok(Removed {
            id,
            uid: run.uid,
            results_only_it_had: only_it,
            results_shared: shared,
        })
    }

    /// When each run here (by uid) last had its labels changed.
    pub fn labels_times(&self) -> Result<std::collections::HashMap<String, Option<u64>>> {
        let mut statement = self
            .connection
            .prepare("SELECT uid, labels_ms FROM runs WHERE uid IS NOT NULL")
            .map_err(|e| self.error(e))?;
        let times = statement
            .query_map([], |row| {
                Ok((row.get::<_, String>(0)?, row.get::<_, Option<i64>>(1)?))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| self.error(e))?;
        Ok(times
            .into_iter()
            .map(|(uid, ms)| (uid, ms.map(|ms| ms.max(0) as u64)))
            .collect())
    }

    /// The uids of the runs removed here.
    pub fn removed_uids(&self) -> Result<std::collections::HashSet<String>> {
        let mut statement = self
            .connection
            .prepare("SELECT uid FROM removed_runs")
            .map_err(|e| self.error(e))?;
        let uids = statement
            .query_map([], |row| row.get::<_, String>(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.error(e))?;
        Ok(uids)
    }
}

#[cfg(test)]
mod tests {
    use super::check_label;

    #[test]
    fn a_label_is_never_read_as_another_kind_of_run_reference() {
        for good in ["baseline", "best", "v1.2", "lr_3e-4", "cafe"] {
            assert!(check_label("name", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "12",
            "#3",
            "last",
            "last~2",
            "-x",
            "a b",
            "a/b",
            "é",
            &"x".repeat(65),
        ] {
            assert!(check_label("name", bad).is_err(), "{bad:?}");
        }
    }
}
