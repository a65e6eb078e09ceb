//! Reading the history: runs, a run's stages, and key manifests.

use std::collections::{BTreeMap, HashSet};

use pipe_cache::{ActionKey, Artifact, ObjectDigest};
use rusqlite::{params, OptionalExtension};
use serde_json::Value;

use super::db::RunDb;
use super::record::Columns;
use crate::overrides::ParamOverride;
use crate::project_files::ProjectPath;
use crate::run_id::RunId;
use crate::{EngineError, Result};
use pipe_protocol::record::StageStatus;

impl RunDb {
    pub(super) fn run_exists(&self, id: RunId) -> Result<bool> {
        self.connection
            .query_row("SELECT 1 FROM runs WHERE id = ?1", params![id], |_| Ok(()))
            .optional()
            .map(|found| found.is_some())
            .map_err(|e| self.error(e))
    }

    /// The last recorded key and manifest of `stage` in a run of
    /// `pipeline` in which it had a result (it ran, was restored or was
    /// fresh), newest first. A run in which it failed never had the
    /// result of its key, so it is not what a change is measured from
    /// ([`RunDb::last_failure`] names it). Another pipeline's stage of the
    /// same name is a stranger: comparing with it would explain nothing.
    pub fn last_manifest(
        &self,
        pipeline: &str,
        stage: &str,
    ) -> Result<Option<(RunId, ActionKey, Value)>> {
        // Asked once per stage by `status`: prepared once, not per call.
        let found = self
            .connection
            .prepare_cached(
                "SELECT s.run_id, s.key, m.manifest FROM stage_runs s
                 JOIN manifests m ON m.key = s.key JOIN runs r ON r.id = s.run_id
                 WHERE s.stage = ?2 AND r.pipeline = ?1 AND s.status IN ('ran', 'restored', 'fresh')
                 ORDER BY s.run_id DESC LIMIT 1",
            )
            .and_then(|mut statement| {
                statement.query_row(params![pipeline, stage], |row| {
                    Ok((
                        row.get::<_, RunId>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                    ))
                })
            })
            .optional()
            .map_err(|e| self.error(e))?;
        let Some((run, key, text)) = found else {
            return Ok(None);
        };
        let corrupt = |column: &str, problem: String| EngineError::CorruptRecord {
            path: self.path.clone(),
            place: format!("run #{run}, stage `{stage}`"),
            column: column.to_string(),
            problem,
        };
        let key = key
            .parse::<ActionKey>()
            .map_err(|error| corrupt("key", error.to_string()))?;
        let manifest = serde_json::from_str(&text)
            .map_err(|error| corrupt("manifest", format!("the manifest of its key: {error}")))?;
        Ok(Some((run, key, manifest)))
    }

    /// The newest run of `pipeline` in which `stage` failed.
    pub fn last_failure(
        &self,
        pipeline: &str,
        stage: &str,
    ) -> Result<Option<(RunId, StageStatus)>> {
        let found = self
            .connection
            .prepare_cached(
                "SELECT s.run_id, s.status FROM stage_runs s JOIN runs r ON r.id = s.run_id
                 WHERE s.stage = ?2 AND r.pipeline = ?1 AND s.status IN ('failed', 'interrupted')
                 ORDER BY s.run_id DESC LIMIT 1",
            )
            .and_then(|mut statement| {
                statement.query_row(params![pipeline, stage], |row| {
                    Ok((row.get::<_, RunId>(0)?, row.get::<_, String>(1)?))
                })
            })
            .optional()
            .map_err(|e| self.error(e))?;
        Ok(found.map(|(run, status)| {
            let status = if status == "interrupted" {
                StageStatus::Interrupted
            } else {
                StageStatus::Failed
            };
            (run, status)
        }))
    }

    /// The newest run of `pipeline` whose result of `stage` had exactly
    /// the digests in `outputs` (path -> digest): the run that left what
    /// the workspace holds. Its id and `-S` settings.
    pub fn run_that_made(
        &self,
        pipeline: &str,
        stage: &str,
        outputs: &BTreeMap<String, ObjectDigest>,
    ) -> Result<Option<(RunId, Vec<ParamOverride>)>> {
        // The newest results are the likely ones; an older one than this
        // is named by no message worth a longer search.
        const SEARCHED: i64 = 200;
        let mut statement = self
            .connection
            .prepare_cached(
                "SELECT s.run_id, s.outputs, r.overrides, r.sweep FROM stage_runs s JOIN runs r ON r.id = s.run_id
                 WHERE s.stage = ?2 AND r.pipeline = ?1 AND s.status IN ('ran', 'restored', 'fresh')
                 ORDER BY s.run_id DESC LIMIT ?3",
            )
            .map_err(|e| self.error(e))?;
        let mut rows = statement
            .query(params![pipeline, stage, SEARCHED])
            .map_err(|e| self.error(e))?;
        while let Some(row) = rows.next().map_err(|e| self.error(e))? {
            let columns = Columns {
                row,
                path: &self.path,
                run: row.get("run_id").map_err(|e| self.error(e))?,
                stage: Some(stage.to_string()),
                prefix: "",
            };
            let recorded: BTreeMap<ProjectPath, Artifact> = columns.json("outputs")?;
            let same = recorded.len() == outputs.len()
                && recorded
                    .iter()
                    .all(|(path, artifact)| outputs.get(path.as_str()) == Some(&artifact.digest));
            if same {
                let sweep = columns.get::<Option<bool>>("sweep")?.unwrap_or(false);
                return Ok(Some((columns.run, columns.overrides(sweep)?)));
            }
        }
        Ok(None)
    }

    pub fn manifest(&self, key: &ActionKey) -> Result<Option<Value>> {
        let found = self
            .connection
            .query_row(
                "SELECT manifest FROM manifests WHERE key = ?1",
                params![key.to_hex()],
                |row| row.get::<_, String>(0),
            )
            .optional()
            .map_err(|e| self.error(e))?;
        found
            .map(|text| {
                serde_json::from_str(&text).map_err(|error| EngineError::CorruptRecord {
                    path: self.path.clone(),
                    place: format!("the manifest of key {}", key.short()),
                    column: "manifest".to_string(),
                    problem: error.to_string(),
                })
            })
            .transpose()
    }

    /// The uids of every run here, local and pulled.
    pub fn known_uids(&self) -> Result<HashSet<String>> {
        let mut statement = self
            .connection
            .prepare("SELECT uid FROM runs WHERE uid IS NOT NULL")
            .map_err(|e| self.error(e))?;
        let uids = statement
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(|e| self.error(e))?
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| self.error(e))?;
        Ok(uids)
    }

    /// Keys recorded by the newest `runs` runs (gc's roots). A key that
    /// does not parse is an error naming its run: dropping it would let
    /// gc delete a result the history still points to.
    pub fn keys_of_recent_runs(&self, runs: usize) -> Result<Vec<ActionKey>> {
        let mut statement = self
            .connection
            .prepare(
                "SELECT run_id, stage, key FROM stage_runs WHERE key IS NOT NULL AND run_id IN
                 (SELECT id FROM runs ORDER BY started_ms DESC, id DESC LIMIT ?1)",
            )
            .map_err(|e| self.error(e))?;
        let mut rows = statement
            .query(params![runs as i64])
            .map_err(|e| self.error(e))?;
        let mut keys = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.error(e))? {
            let columns = Columns {
                row,
                path: &self.path,
                run: row.get("run_id").map_err(|e| self.error(e))?,
                stage: row.get("stage").ok(),
                prefix: "",
            };
            keys.push(columns.parsed::<ActionKey>("key")?);
        }
        keys.sort_unstable();
        keys.dedup();
        Ok(keys)
    }
}
