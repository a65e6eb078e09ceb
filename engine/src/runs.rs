//! Run history in SQLite (`.pipe/runs.db`, WAL): one row per `pipe run`,
//! one per stage in it, and the key manifests those stages had.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pipe_cache::Artifact;
use pipe_protocol::redact::{redact_text, redacted_json};
use rusqlite::config::DbConfig;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::metrics::Direction;
use crate::{EngineError, Result};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pipeline TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    ended_ms INTEGER,
    status TEXT NOT NULL,
    git_commit TEXT,
    git_dirty INTEGER,
    argv TEXT NOT NULL,
    params TEXT NOT NULL,
    pid INTEGER NOT NULL,
    directions TEXT
);
CREATE TABLE IF NOT EXISTS stage_runs (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    stage TEXT NOT NULL,
    key TEXT,
    status TEXT NOT NULL,
    duration_ms INTEGER NOT NULL,
    outputs TEXT NOT NULL,
    metrics TEXT NOT NULL,
    detail TEXT,
    PRIMARY KEY (run_id, stage)
);
CREATE INDEX IF NOT EXISTS stage_runs_by_stage ON stage_runs(stage, run_id);
CREATE TABLE IF NOT EXISTS manifests (
    key TEXT PRIMARY KEY,
    manifest TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_commit ON runs(git_commit, id);
";

/// How a run ended (or that it has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    /// At least one stage failed.
    Failed,
    /// Stopped by a signal, or its process is gone while it was running.
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }

    fn parse(text: &str) -> RunStatus {
        match text {
            "running" => RunStatus::Running,
            "succeeded" => RunStatus::Succeeded,
            "failed" => RunStatus::Failed,
            _ => RunStatus::Interrupted,
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// How a stage ended in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StageStatus {
    /// Its outputs were already in the workspace.
    Fresh,
    /// Restored from the cache (run-cache hit).
    Restored,
    /// Executed.
    Ran,
    Failed,
    /// Not run because a stage it depends on failed.
    Skipped,
}

impl StageStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Fresh => "fresh",
            StageStatus::Restored => "restored",
            StageStatus::Ran => "ran",
            StageStatus::Failed => "failed",
            StageStatus::Skipped => "skipped",
        }
    }

    fn parse(text: &str) -> StageStatus {
        match text {
            "fresh" => StageStatus::Fresh,
            "restored" => StageStatus::Restored,
            "ran" => StageStatus::Ran,
            "failed" => StageStatus::Failed,
            _ => StageStatus::Skipped,
        }
    }

    /// Whether the stage has valid outputs after the run.
    pub fn succeeded(self) -> bool {
        matches!(
            self,
            StageStatus::Fresh | StageStatus::Restored | StageStatus::Ran
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageRecord {
    pub stage: String,
    pub key: Option<String>,
    pub status: StageStatus,
    pub duration_ms: u64,
    pub outputs: BTreeMap<String, Artifact>,
    pub metrics: BTreeMap<String, Value>,
    /// Failure message, or why it ran; credentials already masked where
    /// it is made (`exec::failed_record`), so it is shown and stored as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The Slurm job that ran it (`123`, `123_4` for a task of an array).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The node its job ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// This database's id; another project's record carries its own.
    #[serde(default)]
    pub id: i64,
    /// Unique across machines: how a record pulled from a remote cache is
    /// recognised when it comes again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Where a pulled record came from (the remote's URL); `None` for a
    /// run of this project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    pub pipeline: String,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    pub status: RunStatus,
    pub git_commit: Option<String>,
    pub git_dirty: Option<bool>,
    pub argv: Vec<String>,
    pub params: Value,
    /// What the pipeline declared under `directions:`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub directions: BTreeMap<String, Direction>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageRecord>,
}

/// A run as it travels to and from a remote cache: its record, stages
/// included, and the key manifests of those stages (for `pipe diff`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunExport {
    pub format: String,
    pub run: RunRecord,
    pub manifests: BTreeMap<String, Value>,
}

impl RunExport {
    pub const FORMAT: &'static str = "pipe-run-v1";
}

pub struct RunStart<'a> {
    pub pipeline: &'a str,
    pub argv: &'a [String],
    pub params: &'a Value,
    pub directions: &'a BTreeMap<String, Direction>,
    pub git: Option<GitState>,
}

#[derive(Debug, Clone)]
pub struct GitState {
    pub commit: String,
    pub dirty: bool,
}

pub struct RunDb {
    connection: Connection,
    path: PathBuf,
}

impl RunDb {
    pub fn open(path: &Path) -> Result<RunDb> {
        let connection = Connection::open(path).map_err(|e| db_error(path, e))?;
        let path = path.to_path_buf();
        let db = RunDb { connection, path };
        db.connection
            .busy_timeout(Duration::from_secs(30))
            .map_err(|e| db.error(e))?;
        // A plan that does not depend on the values bound: with the bundled
        // SQLite's STAT4, a statement asked once per stage (`last_manifest`
        // for `pipe status`) was otherwise compiled again at every call.
        db.connection
            .set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(|e| db.error(e))?;
        db.connection
            .execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
            .map_err(|e| db.error(e))?;
        db.connection
            .execute_batch(SCHEMA)
            .map_err(|e| db.error(e))?;
        db.add_missing_columns()?;
        Ok(db)
    }

    /// A database written before a column existed gets it (NULL in the
    /// runs it already holds), so history outlives upgrades.
    fn add_missing_columns(&self) -> Result<()> {
        self.add_columns("runs", &["directions", "uid", "origin"])?;
        self.add_columns("stage_runs", &["job", "node"])?;
        self.connection
            .execute_batch("CREATE UNIQUE INDEX IF NOT EXISTS runs_by_uid ON runs(uid)")
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Adds to `table` the TEXT columns of `wanted` it lacks.
    fn add_columns(&self, table: &str, wanted: &[&str]) -> Result<()> {
        let mut statement = self
            .connection
            .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
            .map_err(|e| self.error(e))?;
        let columns = statement
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(|e| self.error(e))?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| self.error(e))?;
        for column in wanted {
            if !columns.iter().any(|name| name == column) {
                self.connection
                    .execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} TEXT"))
                    .map_err(|e| self.error(e))?;
            }
        }
        Ok(())
    }

    /// Opens the database only if it exists (read-only commands on a
    /// project that never ran).
    pub fn open_existing(path: &Path) -> Result<Option<RunDb>> {
        if path.exists() {
            RunDb::open(path).map(Some)
        } else {
            Ok(None)
        }
    }

    fn error(&self, source: rusqlite::Error) -> EngineError {
        db_error(&self.path, source)
    }

    /// Records a new run. Credentials in its command line and params
    /// (`-p url=https://user:pass@...`) are masked: the database outlives
    /// the run and is meant to be queried and shared.
    pub fn start_run(&self, start: &RunStart<'_>) -> Result<i64> {
        let argv: Vec<std::borrow::Cow<'_, str>> =
            start.argv.iter().map(|arg| redact_text(arg)).collect();
        self.connection
            .execute(
                "INSERT INTO runs (pipeline, started_ms, status, git_commit, git_dirty, argv, params, pid, directions, uid)
                 VALUES (?1, ?2, ?8, ?3, ?4, ?5, ?6, ?7, ?9, ?10)",
                params![
                    start.pipeline,
                    now_ms() as i64,
                    start.git.as_ref().map(|git| git.commit.clone()),
                    start.git.as_ref().map(|git| git.dirty),
                    serde_json::to_string(&argv).unwrap_or_default(),
                    redacted_json(start.params).to_string(),
                    std::process::id(),
                    RunStatus::Running.as_str(),
                    (!start.directions.is_empty())
                        .then(|| serde_json::to_string(start.directions).unwrap_or_default()),
                    new_uid(),
                ],
            )
            .map_err(|e| self.error(e))?;
        Ok(self.connection.last_insert_rowid())
    }

    /// Records finished stages and the manifests of their keys, in one
    /// transaction.
    pub fn record_stages(
        &mut self,
        run_id: i64,
        stages: &[(StageRecord, Option<&Value>)],
    ) -> Result<()> {
        let path = self.path.clone();
        let transaction = self
            .connection
            .transaction()
            .map_err(|e| db_error(&path, e))?;
        insert_stages(
            &transaction,
            &path,
            run_id,
            stages.iter().map(|(record, manifest)| (record, *manifest)),
        )?;
        transaction.commit().map_err(|e| db_error(&path, e))
    }

    pub fn finish_run(&self, run_id: i64, status: RunStatus) -> Result<()> {
        self.connection
            .execute(
                "UPDATE runs SET ended_ms = ?1, status = ?2 WHERE id = ?3",
                params![now_ms() as i64, status.as_str(), run_id],
            )
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The most recent runs first.
    pub fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>> {
        let mut statement = self
            .connection
            .prepare(
                "SELECT id, pipeline, started_ms, ended_ms, status, git_commit, git_dirty, argv, params, pid, directions, uid, origin
                 FROM runs ORDER BY id DESC LIMIT ?1",
            )
            .map_err(|e| self.error(e))?;
        let rows = statement
            .query_map(params![limit as i64], run_from_row)
            .map_err(|e| self.error(e))?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| self.error(e))?;
        Ok(rows)
    }

    pub fn run(&self, run_id: i64) -> Result<Option<RunRecord>> {
        let run = self
            .connection
            .query_row(
                "SELECT id, pipeline, started_ms, ended_ms, status, git_commit, git_dirty, argv, params, pid, directions, uid, origin
                 FROM runs WHERE id = ?1",
                params![run_id],
                run_from_row,
            )
            .optional()
            .map_err(|e| self.error(e))?;
        let Some(mut run) = run else { return Ok(None) };
        let mut statement = self
            .connection
            .prepare(
                "SELECT stage, key, status, duration_ms, outputs, metrics, detail, job, node
                 FROM stage_runs WHERE run_id = ?1 ORDER BY rowid",
            )
            .map_err(|e| self.error(e))?;
        run.stages = statement
            .query_map(params![run_id], stage_from_row)
            .map_err(|e| self.error(e))?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| self.error(e))?;
        Ok(Some(run))
    }

    /// Resolves `12`, `last`, `last~2` (runs of this project, not pulled
    /// ones), or a git ref (the latest run recorded at that commit with no
    /// uncommitted changes, else the latest with; the caller resolves the
    /// ref to a commit).
    pub fn resolve(
        &self,
        query: &str,
        git_commit_of: impl Fn(&str) -> Option<String>,
    ) -> Result<i64> {
        let unknown =
            |hint: &str| EngineError::usage(format!("no run matches `{query}`"), hint.to_string());
        if let Ok(id) = query.trim_start_matches('#').parse::<i64>() {
            return match self.run_exists(id)? {
                true => Ok(id),
                false => Err(unknown("`pipe runs` lists the recorded runs")),
            };
        }
        let back = if query == "last" {
            Some(0)
        } else {
            query
                .strip_prefix("last~")
                .and_then(|n| n.parse::<i64>().ok())
        };
        if let Some(back) = back {
            return self
                .connection
                .query_row(
                    "SELECT id FROM runs WHERE origin IS NULL ORDER BY id DESC LIMIT 1 OFFSET ?1",
                    params![back],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| self.error(e))?
                .ok_or_else(|| unknown("there are fewer runs than that; `pipe runs` lists them"));
        }
        let Some(commit) = git_commit_of(query) else {
            return Err(unknown(
                "use a run id, `last`, `last~N`, or a git ref (branch, tag, commit)",
            ));
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
                unknown(&format!(
                    "no run was recorded at commit {}",
                    &commit[..commit.len().min(12)]
                ))
            })
    }

    fn run_exists(&self, id: i64) -> Result<bool> {
        self.connection
            .query_row("SELECT 1 FROM runs WHERE id = ?1", params![id], |_| Ok(()))
            .optional()
            .map(|found| found.is_some())
            .map_err(|e| self.error(e))
    }

    /// Runs `read` inside one read transaction, so that many lookups in a
    /// row (one per stage of a large pipeline) share one snapshot and one
    /// lock of the write-ahead log instead of taking one each.
    pub fn reading<T>(&self, read: impl FnOnce() -> Result<T>) -> Result<T> {
        self.connection
            .execute_batch("BEGIN")
            .map_err(|e| self.error(e))?;
        let result = read();
        // Nothing was written: ending the transaction cannot lose anything.
        let _ = self.connection.execute_batch("COMMIT");
        result
    }

    /// The last recorded key and manifest of `stage` in a run of
    /// `pipeline` (newest first), skipping runs where it did not get a key.
    /// Another pipeline's stage of the same name is a stranger: comparing
    /// with it would explain nothing.
    pub fn last_manifest(
        &self,
        pipeline: &str,
        stage: &str,
    ) -> Result<Option<(i64, String, Value)>> {
        // Asked once per stage by `status`: prepared once, not per call.
        self.connection
            .prepare_cached(
                "SELECT s.run_id, s.key, m.manifest FROM stage_runs s
                 JOIN manifests m ON m.key = s.key JOIN runs r ON r.id = s.run_id
                 WHERE s.stage = ?2 AND r.pipeline = ?1 ORDER BY s.run_id DESC LIMIT 1",
            )
            .and_then(|mut statement| {
                statement.query_row(params![pipeline, stage], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                    ))
                })
            })
            .optional()
            .map_err(|e| self.error(e))
            .map(|found| {
                found.map(|(run, key, text)| {
                    (run, key, serde_json::from_str(&text).unwrap_or(Value::Null))
                })
            })
    }

    pub fn manifest(&self, key: &str) -> Result<Option<Value>> {
        self.connection
            .query_row(
                "SELECT manifest FROM manifests WHERE key = ?1",
                params![key],
                |row| row.get::<_, String>(0),
            )
            .optional()
            .map_err(|e| self.error(e))
            .map(|found| found.and_then(|text| serde_json::from_str(&text).ok()))
    }

    /// Run `run_id` with its stages and their manifests, for a remote
    /// cache. A run recorded before uids existed gets one now.
    pub fn export_run(&self, run_id: i64) -> Result<Option<RunExport>> {
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
        for key in run.stages.iter().filter_map(|stage| stage.key.as_deref()) {
            if let Some(manifest) = self.manifest(key)? {
                manifests.insert(key.to_string(), manifest);
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
    /// again: a record from elsewhere is not trusted to be.
    pub fn import_run(&mut self, export: &RunExport, origin: &str) -> Result<Option<i64>> {
        let run = &export.run;
        let Some(uid) = run.uid.as_deref() else {
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
        let path = self.path.clone();
        let transaction = self
            .connection
            .transaction()
            .map_err(|e| db_error(&path, e))?;
        let argv: Vec<std::borrow::Cow<'_, str>> =
            run.argv.iter().map(|arg| redact_text(arg)).collect();
        let status = match run.status {
            RunStatus::Running => RunStatus::Interrupted,
            other => other,
        };
        transaction
            .execute(
                "INSERT INTO runs (pipeline, started_ms, ended_ms, status, git_commit, git_dirty, argv, params, pid, directions, uid, origin)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?9, ?10, ?11)",
                params![
                    run.pipeline,
                    run.started_ms as i64,
                    run.ended_ms.map(|ms| ms as i64),
                    status.as_str(),
                    run.git_commit,
                    run.git_dirty,
                    serde_json::to_string(&argv).unwrap_or_default(),
                    redacted_json(&run.params).to_string(),
                    (!run.directions.is_empty())
                        .then(|| serde_json::to_string(&run.directions).unwrap_or_default()),
                    uid,
                    origin,
                ],
            )
            .map_err(|e| db_error(&path, e))?;
        let run_id = transaction.last_insert_rowid();
        let stages: Vec<(StageRecord, Option<Value>)> = run
            .stages
            .iter()
            .map(|record| {
                let detail = record
                    .detail
                    .as_deref()
                    .map(|d| redact_text(d).into_owned());
                let manifest = record
                    .key
                    .as_ref()
                    .and_then(|key| export.manifests.get(key));
                (
                    StageRecord {
                        detail,
                        ..record.clone()
                    },
                    manifest.map(redacted_json),
                )
            })
            .collect();
        insert_stages(
            &transaction,
            &path,
            run_id,
            stages
                .iter()
                .map(|(record, manifest)| (record, manifest.as_ref())),
        )?;
        transaction.commit().map_err(|e| db_error(&path, e))?;
        Ok(Some(run_id))
    }

    /// The uids of every run here, local and pulled.
    pub fn known_uids(&self) -> Result<std::collections::HashSet<String>> {
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

    /// Keys recorded by the newest `runs` runs (for gc).
    pub fn keys_of_recent_runs(&self, runs: usize) -> Result<Vec<String>> {
        let mut statement = self
            .connection
            .prepare(
                "SELECT DISTINCT key FROM stage_runs WHERE key IS NOT NULL AND run_id IN
                 (SELECT id FROM runs ORDER BY id DESC LIMIT ?1)",
            )
            .map_err(|e| self.error(e))?;
        let keys = statement
            .query_map(params![runs as i64], |row| row.get(0))
            .map_err(|e| self.error(e))?
            .collect::<std::result::Result<Vec<String>, _>>()
            .map_err(|e| self.error(e))?;
        Ok(keys)
    }
}

/// Which runs `RunDb::runs_to_compare` loads.
#[derive(Debug, Clone, Default)]
pub struct RunSelection {
    /// Runs named by the user, compared whatever their status; the filters
    /// below still narrow them. `None`: every run the filters select.
    pub named: Option<Vec<i64>>,
    /// Always loaded, whatever the filters say (the baseline).
    pub also: Vec<i64>,
    pub pipeline: Option<String>,
    /// `--where`: a dotted path in the run's params and the value it must
    /// have.
    pub params_equal: Vec<(Vec<String>, Value)>,
    /// `None`: any status.
    pub statuses: Option<Vec<RunStatus>>,
    /// The newest N of the selected runs.
    pub last: Option<usize>,
}

/// A run with what a comparison reads of its stages.
#[derive(Debug, Clone)]
pub struct ComparedRun {
    /// Without its stages: they are below.
    pub run: RunRecord,
    pub stages: Vec<ComparedStage>,
}

#[derive(Debug, Clone)]
pub struct ComparedStage {
    pub stage: String,
    pub status: StageStatus,
    pub duration_ms: u64,
    pub metrics: BTreeMap<String, Value>,
    /// `data/split@1`, from the key manifest of a built-in stage.
    pub uses: Option<String>,
    /// Loaded only for stages whose `uses` starts with one of the
    /// prefixes the caller asked for (the data stages).
    pub outputs: Option<BTreeMap<String, Artifact>>,
    /// `with.seed` and `with.precision` of a built-in stage.
    pub with_seed: Option<Value>,
    pub with_precision: Option<Value>,
}

impl RunDb {
    /// Every selected run and its stages, oldest first, in ONE query
    /// (runs JOIN stage_runs JOIN manifests, filtered in SQL), so that
    /// comparing 1,000 runs costs one statement, not one per run. Only
    /// the manifest fields needed are extracted (`json_extract`), and
    /// outputs only of stages whose `uses` starts with one of
    /// `outputs_of_uses`.
    pub fn runs_to_compare(
        &self,
        selection: &RunSelection,
        outputs_of_uses: &[&str],
    ) -> Result<Vec<ComparedRun>> {
        use rusqlite::types::Value as Sql;
        let mut arguments: Vec<Sql> = Vec::new();
        let mut bind = |value: Sql| {
            arguments.push(value);
            format!("?{}", arguments.len())
        };
        let mut filters: Vec<String> = Vec::new();
        if let Some(named) = &selection.named {
            let list = serde_json::to_string(named).unwrap_or_default();
            filters.push(format!(
                "id IN (SELECT value FROM json_each({}))",
                bind(Sql::Text(list))
            ));
        }
        if let Some(pipeline) = &selection.pipeline {
            filters.push(format!("pipeline = {}", bind(Sql::Text(pipeline.clone()))));
        }
        if let Some(statuses) = &selection.statuses {
            let mut names: Vec<&str> = statuses.iter().map(|status| status.as_str()).collect();
            // A run whose process died while it ran is still `running` in
            // the table; it is told apart below.
            if statuses.contains(&RunStatus::Interrupted) {
                names.push(RunStatus::Running.as_str());
            }
            let list = serde_json::to_string(&names).unwrap_or_default();
            filters.push(format!(
                "status IN (SELECT value FROM json_each({}))",
                bind(Sql::Text(list))
            ));
        }
        for (path, value) in &selection.params_equal {
            let json_path = json_path(path);
            let path = bind(Sql::Text(json_path));
            let number = bind(value.as_f64().map_or(Sql::Null, Sql::Real));
            let text = bind(match value {
                Value::String(text) => Sql::Text(text.clone()),
                other => Sql::Text(other.to_string()),
            });
            let boolean = bind(
                value
                    .as_bool()
                    .map_or(Sql::Null, |b| Sql::Integer(b.into())),
            );
            filters.push(format!(
                "CASE json_type(params, {path})
                   WHEN 'integer' THEN json_extract(params, {path}) = {number}
                   WHEN 'real' THEN json_extract(params, {path}) = {number}
                   WHEN 'text' THEN json_extract(params, {path}) = {text}
                   WHEN 'true' THEN {boolean} = 1
                   WHEN 'false' THEN {boolean} = 0
                   ELSE 0 END"
            ));
        }
        let mut selected = format!(
            "SELECT id FROM runs WHERE {}",
            if filters.is_empty() {
                "1".to_string()
            } else {
                filters.join(" AND ")
            }
        );
        if let Some(last) = selection.last {
            selected = format!(
                "{selected} ORDER BY id DESC LIMIT {}",
                bind(Sql::Integer(last.min(i64::MAX as usize) as i64))
            );
        }
        let also = bind(Sql::Text(
            serde_json::to_string(&selection.also).unwrap_or_default(),
        ));
        let uses = "json_extract(m.manifest, '$.uses')";
        let data_stage = if outputs_of_uses.is_empty() {
            "0".to_string()
        } else {
            outputs_of_uses
                .iter()
                .map(|prefix| format!("instr({uses}, {}) = 1", bind(Sql::Text(prefix.to_string()))))
                .collect::<Vec<_>>()
                .join(" OR ")
        };
        // The manifest fields are extracted here, for the joined rows only,
        // so the cost follows the runs selected, not the whole history.
        let query = format!(
            "SELECT r.id, r.pipeline, r.started_ms, r.ended_ms, r.status, r.git_commit, r.git_dirty,
                    r.argv, r.params, r.pid,
                    s.stage, s.status, s.duration_ms, s.metrics,
                    {uses}, CASE WHEN {data_stage} THEN s.outputs END,
                    json_extract(m.manifest, '$.with.seed'),
                    json_extract(m.manifest, '$.with.precision'),
                    r.directions, r.uid, r.origin
             FROM runs r
             LEFT JOIN stage_runs s ON s.run_id = r.id
             LEFT JOIN manifests m ON m.key = s.key
             WHERE r.id IN ({selected}) OR r.id IN (SELECT value FROM json_each({also}))
             ORDER BY r.id, s.rowid"
        );
        let mut statement = self.connection.prepare(&query).map_err(|e| self.error(e))?;
        let mut rows = statement
            .query(rusqlite::params_from_iter(arguments))
            .map_err(|e| self.error(e))?;
        let mut runs: Vec<ComparedRun> = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.error(e))? {
            let id: i64 = row.get(0).map_err(|e| self.error(e))?;
            if runs.last().is_none_or(|last| last.run.id != id) {
                let run = run_from_row(row).map_err(|e| self.error(e))?;
                runs.push(ComparedRun {
                    run,
                    stages: Vec::new(),
                });
            }
            let Some(stage) = row
                .get::<_, Option<String>>(10)
                .map_err(|e| self.error(e))?
            else {
                continue;
            };
            let compared = compared_stage_from_row(stage, row).map_err(|e| self.error(e))?;
            if let Some(last) = runs.last_mut() {
                last.stages.push(compared);
            }
        }
        if let Some(statuses) = &selection.statuses {
            let named_or_also = |id: i64| selection.also.contains(&id);
            runs.retain(|compared| {
                named_or_also(compared.run.id) || statuses.contains(&compared.run.status)
            });
        }
        Ok(runs)
    }
}

fn compared_stage_from_row(
    stage: String,
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<ComparedStage> {
    let json = |index: usize| -> rusqlite::Result<Option<Value>> {
        Ok(match row.get::<_, rusqlite::types::Value>(index)? {
            rusqlite::types::Value::Integer(number) => Some(Value::from(number)),
            rusqlite::types::Value::Real(number) => {
                serde_json::Number::from_f64(number).map(Value::Number)
            }
            rusqlite::types::Value::Text(text) => Some(Value::String(text)),
            _ => None,
        })
    };
    Ok(ComparedStage {
        stage,
        status: StageStatus::parse(&row.get::<_, String>(11)?),
        duration_ms: row.get::<_, i64>(12)? as u64,
        metrics: serde_json::from_str(&row.get::<_, String>(13)?).unwrap_or_default(),
        uses: row.get(14)?,
        outputs: row
            .get::<_, Option<String>>(15)?
            .map(|text| serde_json::from_str(&text).unwrap_or_default()),
        with_seed: json(16)?,
        with_precision: json(17)?,
    })
}

/// `["train", "lr"]` as an SQLite JSON path, each name quoted: `$."train"."lr"`.
fn json_path(names: &[String]) -> String {
    let mut path = String::from("$");
    for name in names {
        path.push_str(".\"");
        path.push_str(name);
        path.push('"');
    }
    path
}

/// Stage records and the manifests of their keys, inside `transaction`.
fn insert_stages<'a>(
    transaction: &rusqlite::Transaction<'_>,
    path: &Path,
    run_id: i64,
    stages: impl Iterator<Item = (&'a StageRecord, Option<&'a Value>)>,
) -> Result<()> {
    let mut insert_stage = transaction
        .prepare_cached(
            "INSERT OR REPLACE INTO stage_runs
             (run_id, stage, key, status, duration_ms, outputs, metrics, detail, job, node)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .map_err(|e| db_error(path, e))?;
    let mut insert_manifest = transaction
        .prepare_cached("INSERT OR IGNORE INTO manifests (key, manifest) VALUES (?1, ?2)")
        .map_err(|e| db_error(path, e))?;
    for (record, manifest) in stages {
        insert_stage
            .execute(params![
                run_id,
                record.stage,
                record.key,
                record.status.as_str(),
                record.duration_ms as i64,
                serde_json::to_string(&record.outputs).unwrap_or_default(),
                serde_json::to_string(&record.metrics).unwrap_or_default(),
                record.detail,
                record.job,
                record.node,
            ])
            .map_err(|e| db_error(path, e))?;
        if let (Some(key), Some(manifest)) = (&record.key, manifest) {
            insert_manifest
                .execute(params![key, manifest.to_string()])
                .map_err(|e| db_error(path, e))?;
        }
    }
    Ok(())
}

fn run_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    let ended_ms: Option<i64> = row.get(3)?;
    let mut status = RunStatus::parse(&row.get::<_, String>(4)?);
    let pid: i64 = row.get(9)?;
    if status == RunStatus::Running && !process_alive(pid) {
        status = RunStatus::Interrupted;
    }
    Ok(RunRecord {
        id: row.get(0)?,
        uid: row.get("uid")?,
        origin: row.get("origin")?,
        pipeline: row.get(1)?,
        started_ms: row.get::<_, i64>(2)? as u64,
        ended_ms: ended_ms.map(|ms| ms as u64),
        status,
        git_commit: row.get(5)?,
        git_dirty: row.get(6)?,
        argv: serde_json::from_str(&row.get::<_, String>(7)?).unwrap_or_default(),
        params: serde_json::from_str(&row.get::<_, String>(8)?).unwrap_or(Value::Null),
        directions: row
            .get::<_, Option<String>>("directions")?
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default(),
        stages: Vec::new(),
    })
}

fn stage_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<StageRecord> {
    Ok(StageRecord {
        stage: row.get(0)?,
        key: row.get(1)?,
        status: StageStatus::parse(&row.get::<_, String>(2)?),
        duration_ms: row.get::<_, i64>(3)? as u64,
        outputs: serde_json::from_str(&row.get::<_, String>(4)?).unwrap_or_default(),
        metrics: serde_json::from_str(&row.get::<_, String>(5)?).unwrap_or_default(),
        detail: row.get(6)?,
        job: row.get(7)?,
        node: row.get(8)?,
    })
}

fn process_alive(pid: i64) -> bool {
    if pid <= 0 || pid > i32::MAX as i64 {
        return false;
    }
    if pid as u32 == std::process::id() {
        return true;
    }
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

fn db_error(path: &Path, source: rusqlite::Error) -> EngineError {
    EngineError::Database {
        path: path.to_path_buf(),
        source,
    }
}

/// A run id unique across machines: 20 hex digits of blake3 over a
/// kernel-made random UUID, the process, the time and a counter.
fn new_uid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or(0);
    let random = std::fs::read_to_string("/proc/sys/kernel/random/uuid").unwrap_or_default();
    let seed = format!(
        "{random}/{}/{nanos}/{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    blake3::hash(seed.as_bytes()).to_hex()[..20].to_string()
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

/// The commit and dirty flag of the git work tree at `root`, if any.
pub fn git_state(root: &Path) -> Option<GitState> {
    let commit = git(root, &["rev-parse", "--verify", "-q", "HEAD"])?;
    let status = git(root, &["status", "--porcelain", "--untracked-files=no"]).unwrap_or_default();
    Some(GitState {
        commit,
        dirty: !status.is_empty(),
    })
}

/// Resolves a git ref to a commit id in the repository at `root`.
pub fn git_commit_of(root: &Path, reference: &str) -> Option<String> {
    if reference.starts_with('-') {
        return None;
    }
    git(
        root,
        &[
            "rev-parse",
            "--verify",
            "-q",
            &format!("{reference}^{{commit}}"),
        ],
    )
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}
