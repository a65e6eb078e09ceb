//! Writing the history: a run's start and end, its stages as they finish,
//! and runs exchanged with a remote cache.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

use pipe_protocol::redact::{redact_json, redact_text, redacted_json};
use rusqlite::config::DbConfig;
use rusqlite::{params, OptionalExtension};
use serde_json::Value;

use super::db::{new_uid, now_ms, RunDb};
use super::migrate::{json, legacy_identity};
use super::record::{RunEnd, RunExport, RunStart, StageRecord};
use crate::overrides::ParamOverride;
use crate::run_id::RunId;
use crate::{EngineError, Result};
use pipe_protocol::record::RunStatus;

impl RunDb {
    /// Records a new run. Credentials in its command line and params
    /// (`-p url=https://user:pass@...`) are masked: the database outlives
    /// the run and is meant to be queried and shared.
    pub fn start_run(&self, start: &RunStart<'_>) -> Result<RunId> {
        if let Some(name) = start.name {
            super::labels::check_label("name", name)?;
            self.check_name_free(name)?;
        }
        let argv = recorded_argv(start.argv);
        let overrides: Vec<ParamOverride> = start
            .overrides
            .iter()
            .map(ParamOverride::redacted)
            .collect();
        self.connection
            .execute(
                "INSERT INTO runs (pipeline, started_ms, status, git_commit, git_dirty, argv, params, pid, directions, uid, file, overrides, sweep, name, labels_ms, branch, head_commit)
                 VALUES (?1, ?2, ?8, ?3, ?4, ?5, ?6, ?7, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
                params![
                    start.pipeline,
                    start.started_ms as i64,
                    start.git_commit,
                    None::<bool>,
                    json(&argv),
                    redacted_json(start.params).to_string(),
                    std::process::id(),
                    RunStatus::Running.as_str(),
                    (!start.directions.is_empty()).then(|| json(start.directions)),
                    new_uid(),
                    start.file,
                    json(&overrides),
                    start.sweep.then_some(true),
                    start.name,
                    start.name.map(|_| now_ms() as i64),
                    start.branch,
                    start.head_commit,
                ],
            )
            .map_err(|e| self.error(e))?;
        Ok(RunId(self.connection.last_insert_rowid()))
    }

    /// Refuses `name` when another run holds it.
    pub fn check_name_free(&self, name: &str) -> Result<()> {
        match self.name_holder(name)? {
            Some(holder) => Err(crate::UsageError::NameTaken {
                name: name.to_string(),
                holder,
            }
            .into()),
            None => Ok(()),
        }
    }

    /// Records finished stages and the manifests of their keys, in one
    /// transaction.
    pub fn record_stages(
        &mut self,
        run_id: RunId,
        stages: &[(StageRecord, Option<&Value>)],
    ) -> Result<()> {
        let path = self.path.clone();
        let transaction = self
            .connection
            .transaction()
            .map_err(|e| EngineError::database(&path, e))?;
        insert_stages(
            &transaction,
            &path,
            run_id,
            stages.iter().map(|(record, manifest)| (record, *manifest)),
        )?;
        transaction
            .commit()
            .map_err(|e| EngineError::database(&path, e))
    }

    /// Ends run `run_id`. An unknown dirty flag leaves the row's as it
    /// is: a settler may have written it first.
    pub fn finish_run(&self, run_id: RunId, end: &RunEnd) -> Result<()> {
        self.connection
            .execute(
                "UPDATE runs SET ended_ms = ?1, status = ?2, git_dirty = coalesce(?3, git_dirty) WHERE id = ?4",
                params![now_ms() as i64, end.status.as_str(), end.git_dirty, run_id],
            )
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Writes the dirty flag a settler worked out into run `run_id`'s row,
    /// unless the row has one.
    pub fn settle_git_dirty(&self, run_id: RunId, dirty: bool) -> Result<()> {
        self.connection
            .execute(
                "UPDATE runs SET git_dirty = ?1 WHERE id = ?2 AND git_dirty IS NULL",
                params![dirty, run_id],
            )
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Removes run `run_id`, one in which nothing happened (every stage
    /// fresh), with any stage rows it has, in one transaction: such a run
    /// is not history (docs/decisions.md, "A no-op records no run").
    /// When no run was numbered after it in the meantime, its number is
    /// given back, so that run numbers have no gaps. The manifests its
    /// stages named stay: they are shared by key with the runs that made
    /// those results.
    pub fn discard_run(&mut self, run_id: RunId) -> Result<()> {
        let path = self.path.clone();
        let transaction = self
            .connection
            .transaction()
            .map_err(|e| EngineError::database(&path, e))?;
        transaction
            .execute("DELETE FROM stage_runs WHERE run_id = ?1", params![run_id])
            .map_err(|e| EngineError::database(&path, e))?;
        transaction
            .execute("DELETE FROM runs WHERE id = ?1", params![run_id])
            .map_err(|e| EngineError::database(&path, e))?;
        // AUTOINCREMENT keeps the largest id ever used in sqlite_sequence;
        // lowering it is what SQLite documents for reusing numbers. Only
        // when it is still this run's: a run imported or started since
        // holds a larger number, which must never be handed out twice.
        transaction
            .execute(
                "UPDATE sqlite_sequence SET seq = ?1 - 1 WHERE name = 'runs' AND seq = ?1",
                params![run_id],
            )
            .map_err(|e| EngineError::database(&path, e))?;
        transaction
            .commit()
            .map_err(|e| EngineError::database(&path, e))?;
        // Nothing of this run needs to reach the disk: closing without
        // the checkpoint SQLite makes by default (an fsync of the
        // write-ahead log and one of the database) leaves its two
        // transactions in the log, where the next recorded run's close
        // checkpoints them. A no-op in a row then syncs nothing at all
        // (docs/decisions.md, "The fsyncs of a no-op").
        self.connection
            .set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(|e| EngineError::database(&path, e))?;
        Ok(())
    }

    /// Run `run_id` with its stages and their manifests, for a remote
    /// cache. A run recorded before uids existed gets one now.
    pub fn export_run(&self, run_id: RunId) -> Result<Option<RunExport>> {
        let Some(mut run) = self.run(run_id)? else {
            return Ok(None);
        };
        if run.uid.is_none() {
            let uid = new_uid();
            self.connection
                .execute(
                    "UPDATE runs SET uid = ?1 WHERE id = ?2",
                    params![uid, run_id],
                )
                .map_err(|e| self.error(e))?;
            run.uid = Some(uid);
        }
        let mut manifests = BTreeMap::new();
        for key in run.stages.iter().filter_map(|stage| stage.key) {
            if let Some(manifest) = self.manifest(&key)? {
                manifests.insert(key.to_hex(), manifest);
            }
        }
        Ok(Some(RunExport {
            format: RunExport::FORMAT.to_string(),
            run,
            manifests,
        }))
    }

    /// Records a run pulled from `origin`, unless a run with its uid is
    /// already here; returns the new local id. Its text fields are masked
    /// again: a record from elsewhere is not trusted to be. A stage
    /// recorded by a pipe that stored no identity gets the one that pipe
    /// worked out from its name and manifest.
    ///
    /// The record is masked in place, never copied: it may be as large as
    /// `pipe_cache::untrusted::RUN_RECORD` allows.
    pub fn import_run(&mut self, mut export: RunExport, origin: &str) -> Result<Option<RunId>> {
        let Some(uid) = export.run.uid.clone() else {
            return Ok(None);
        };
        let known = self
            .connection
            .query_row("SELECT id FROM runs WHERE uid = ?1", params![uid], |row| {
                row.get::<_, i64>(0)
            })
            .optional()
            .map_err(|e| self.error(e))?;
        if known.is_some() {
            return Ok(None);
        }
        redact_json(&mut export.run.params);
        for manifest in export.manifests.values_mut() {
            redact_json(manifest);
        }
        let path = self.path.clone();
        let transaction = self
            .connection
            .transaction()
            .map_err(|e| EngineError::database(&path, e))?;
        let run = &mut export.run;
        let argv = recorded_argv(&run.argv);
        // A record from a pipe that did not keep the settings as data.
        if run.overrides.is_empty() {
            run.overrides = super::record::overrides_in_argv(&run.argv);
        }
        let overrides: Vec<ParamOverride> =
            run.overrides.iter().map(ParamOverride::redacted).collect();
        let status = match run.status {
            RunStatus::Running => RunStatus::Interrupted,
            other => other,
        };
        transaction
            .execute(
                "INSERT INTO runs (pipeline, started_ms, ended_ms, status, git_commit, git_dirty, argv, params, pid, directions, uid, origin, file, overrides, sweep, unverified, branch, head_commit)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
                params![
                    run.pipeline,
                    run.started_ms as i64,
                    run.ended_ms.map(|ms| ms as i64),
                    status.as_str(),
                    run.git_commit,
                    run.git_dirty,
                    json(&argv),
                    run.params.to_string(),
                    (!run.directions.is_empty()).then(|| json(&run.directions)),
                    uid,
                    origin,
                    run.file.as_deref(),
                    json(&overrides),
                    run.sweep.then_some(true),
                    (!run.unverified.is_empty()).then(|| json(&run.unverified)),
                    // A branch from elsewhere is held to what a branch can be.
                    run.branch.as_deref().filter(|branch| super::ci_ref::usable(branch)),
                    run.head_commit.as_deref().filter(|commit| {
                        commit.len() == 40 && commit.bytes().all(|byte| byte.is_ascii_hexdigit())
                    }),
                ],
            )
            .map_err(|e| EngineError::database(&path, e))?;
        let run_id = RunId(transaction.last_insert_rowid());
        for record in &mut run.stages {
            if let Some(detail) = &mut record.detail {
                if let Cow::Owned(masked) = redact_text(detail) {
                    *detail = masked;
                }
            }
            if record.identity.base_name.is_empty() {
                let manifest = record
                    .key
                    .and_then(|key| export.manifests.get(&key.to_hex()));
                record.identity = legacy_identity(&record.stage, manifest);
            }
        }
        let manifests = &export.manifests;
        let stages: Vec<(&StageRecord, Option<&Value>)> = run
            .stages
            .iter()
            .map(|record| {
                let manifest = record.key.and_then(|key| manifests.get(&key.to_hex()));
                (record, manifest)
            })
            .collect();
        insert_stages(&transaction, &path, run_id, stages.into_iter())?;
        transaction
            .commit()
            .map_err(|e| EngineError::database(&path, e))?;
        Ok(Some(run_id))
    }
}

/// Stage records and the manifests of their keys, inside `transaction`.
/// A command line as a record keeps it: the program as typed, its file
/// name (`pipe`, not `/home/ada/.cargo/bin/pipe`: a record travels to a
/// remote, and the path says whose home it ran from), and credentials
/// masked.
fn recorded_argv(argv: &[String]) -> Vec<Cow<'_, str>> {
    argv.iter()
        .enumerate()
        .map(|(index, arg)| match index {
            0 => redact_text(arg.rsplit('/').next().unwrap_or(arg)),
            _ => redact_text(arg),
        })
        .collect()
}

fn insert_stages<'a>(
    transaction: &rusqlite::Transaction<'_>,
    path: &Path,
    run_id: RunId,
    stages: impl Iterator<Item = (&'a StageRecord, Option<&'a Value>)>,
) -> Result<()> {
    let mut insert_stage = transaction
        .prepare_cached(
            "INSERT OR REPLACE INTO stage_runs
             (run_id, stage, key, status, duration_ms, outputs, metrics, detail, job, node,
              base_name, combination, uses, roles, role_values, position, plots, pages)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                     ?18)",
        )
        .map_err(|e| EngineError::database(path, e))?;
    let mut insert_manifest = transaction
        .prepare_cached("INSERT OR IGNORE INTO manifests (key, manifest) VALUES (?1, ?2)")
        .map_err(|e| EngineError::database(path, e))?;
    for (record, manifest) in stages {
        let key = record.key.map(|key| key.to_hex());
        let identity = &record.identity;
        insert_stage
            .execute(params![
                run_id,
                record.stage,
                key,
                record.status.as_str(),
                record.duration_ms as i64,
                json(&record.outputs),
                json(&record.metrics),
                record.detail,
                record.job,
                record.node,
                identity.base_name,
                json(&identity.combination),
                identity.uses,
                json(&identity.roles),
                json(&identity.role_values),
                identity.position as i64,
                (!identity.plots.is_empty()).then(|| json(&identity.plots)),
                (!identity.pages.is_empty()).then(|| json(&identity.pages)),
            ])
            .map_err(|e| EngineError::database(path, e))?;
        if let (Some(key), Some(manifest)) = (&key, manifest) {
            insert_manifest
                .execute(params![key, manifest.to_string()])
                .map_err(|e| EngineError::database(path, e))?;
        }
    }
    Ok(())
}
