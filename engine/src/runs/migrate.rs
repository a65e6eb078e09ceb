//! The schema of runs.db and its migrations, versioned by SQLite's
//! `user_version`. A database written before a column existed gets it, so
//! history outlives upgrades; one written by a newer pipe is refused
//! rather than misread.

use pipe_protocol::record::{Combination, RoleValues, StageIdentity, StageRoles};
use rusqlite::{params, TransactionBehavior};
use serde_json::Value;

use rusqlite::Connection;

use crate::{EngineError, Result, UsageError};

/// The version this pipe writes. 1: each stage's identity (base name,
/// matrix combination, `uses`, roles and their values) is stored in its
/// own columns instead of being worked out from its name and manifest.
/// 2: and its place in the pipeline (`position`). 3: the pipeline file a
/// run ran (`file`), which `pipe checkout` holds a record's outputs to, and
/// its `-S` settings as data (`overrides`, filled in from argv for the
/// runs before). 4: whether the run is a sweep run as one (`sweep`).
/// 5: the plots each stage declares (`plots`, NULL for none).
/// 6: a run's name and tags and when they last changed (`name`, `tags`,
/// `labels_ms`), the uids of removed runs (`removed_runs`), and the
/// indexes that order runs by time and find a result's runs by key.
/// 7: what a pulled run's results do not bear out (`unverified`).
/// 8: the branch a run was made on (`branch`). 9: the head commit of the
/// branch a CI job merged to run (`head_commit`). 10: the pages each
/// stage's worker declares among its outputs (`pages`, NULL for none).
pub(super) const CURRENT: i64 = 10;

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
CREATE TABLE IF NOT EXISTS removed_runs (
    uid TEXT PRIMARY KEY,
    removed_ms INTEGER NOT NULL
);
";

/// Indexes over columns added after the first release: made once they
/// exist.
const LATER_INDEXES: &str = "
CREATE UNIQUE INDEX IF NOT EXISTS runs_by_uid ON runs(uid);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs(started_ms, id);
CREATE INDEX IF NOT EXISTS runs_by_name ON runs(name);
CREATE INDEX IF NOT EXISTS stage_runs_by_key ON stage_runs(key, stage);
CREATE INDEX IF NOT EXISTS runs_by_head_commit ON runs(head_commit);
";

/// Columns added after the first release (name and type), NULL in the
/// rows before them.
const ADDED_COLUMNS: &[(&str, &[(&str, &str)])] = &[
    (
        "runs",
        &[
            ("directions", "TEXT"),
            ("uid", "TEXT"),
            ("origin", "TEXT"),
            ("file", "TEXT"),
            ("overrides", "TEXT"),
            ("sweep", "INTEGER"),
            ("name", "TEXT"),
            ("tags", "TEXT"),
            ("labels_ms", "INTEGER"),
            ("unverified", "TEXT"),
            ("branch", "TEXT"),
            ("head_commit", "TEXT"),
        ],
    ),
    (
        "stage_runs",
        &[
            ("job", "TEXT"),
            ("node", "TEXT"),
            ("base_name", "TEXT"),
            ("combination", "TEXT"),
            ("uses", "TEXT"),
            ("roles", "TEXT"),
            ("role_values", "TEXT"),
            ("position", "INTEGER"),
            ("plots", "TEXT"),
            ("pages", "TEXT"),
        ],
    ),
];

/// Brings the database to [`CURRENT`] in one immediate transaction, so
/// two pipes opening an old database at once migrate it once.
pub(super) fn to_current(connection: &mut Connection, path: &std::path::Path) -> Result<()> {
    let path = path.to_path_buf();
    let version = user_version(connection, &path)?;
    if version == CURRENT {
        return Ok(());
    }
    if version > CURRENT {
        return Err(newer(&path, version));
    }
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| EngineError::database(&path, e))?;
    let version: i64 = transaction
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|e| EngineError::database(&path, e))?;
    if version > CURRENT {
        return Err(newer(&path, version));
    }
    if version < CURRENT {
        transaction
            .execute_batch(SCHEMA)
            .map_err(|e| EngineError::database(&path, e))?;
        for (table, columns) in ADDED_COLUMNS {
            add_columns(&transaction, &path, table, columns)?;
        }
        transaction
            .execute_batch(LATER_INDEXES)
            .map_err(|e| EngineError::database(&path, e))?;
        backfill_identities(&transaction, &path)?;
        backfill_overrides(&transaction, &path)?;
        transaction
            .execute_batch(&format!("PRAGMA user_version = {CURRENT}"))
            .map_err(|e| EngineError::database(&path, e))?;
    }
    transaction
        .commit()
        .map_err(|e| EngineError::database(&path, e))
}

fn user_version(connection: &Connection, path: &std::path::Path) -> Result<i64> {
    connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|e| EngineError::database(path, e))
}

fn newer(path: &std::path::Path, version: i64) -> EngineError {
    UsageError::NewerDatabase {
        path: path.to_path_buf(),
        version,
        reads: CURRENT,
    }
    .into()
}

/// Adds to `table` the columns of `wanted` (name, type) it lacks.
fn add_columns(
    transaction: &rusqlite::Transaction<'_>,
    path: &std::path::Path,
    table: &str,
    wanted: &[(&str, &str)],
) -> Result<()> {
    let mut statement = transaction
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .map_err(|e| EngineError::database(path, e))?;
    let columns = statement
        .query_map([], |row| row.get::<_, String>(0))
        .map_err(|e| EngineError::database(path, e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| EngineError::database(path, e))?;
    for (column, kind) in wanted {
        if !columns.iter().any(|name| name == column) {
            transaction
                .execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))
                .map_err(|e| EngineError::database(path, e))?;
        }
    }
    Ok(())
}

/// Version 0 stored no identity: stages recorded then get the one version
/// 0 worked out when it read them, from the stage's name and manifest.
/// The `-S` settings of the runs recorded before they were kept as data,
/// read once from their argv.
fn backfill_overrides(
    transaction: &rusqlite::Transaction<'_>,
    path: &std::path::Path,
) -> Result<()> {
    let mut select = transaction
        .prepare("SELECT id, argv FROM runs WHERE overrides IS NULL")
        .map_err(|e| EngineError::database(path, e))?;
    let mut update = transaction
        .prepare("UPDATE runs SET overrides = ?2 WHERE id = ?1")
        .map_err(|e| EngineError::database(path, e))?;
    let rows: Vec<(i64, String)> = select
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .and_then(|rows| rows.collect())
        .map_err(|e| EngineError::database(path, e))?;
    for (id, argv) in rows {
        // An argv that does not parse is left for the reader to name.
        let Ok(argv) = serde_json::from_str::<Vec<String>>(&argv) else {
            continue;
        };
        let overrides = super::record::overrides_in_argv(&argv);
        update
            .execute(params![id, json(&overrides)])
            .map_err(|e| EngineError::database(path, e))?;
    }
    Ok(())
}

fn backfill_identities(
    transaction: &rusqlite::Transaction<'_>,
    path: &std::path::Path,
) -> Result<()> {
    let mut select = transaction
        .prepare(
            "SELECT s.rowid, s.stage, m.manifest FROM stage_runs s
             LEFT JOIN manifests m ON m.key = s.key WHERE s.base_name IS NULL",
        )
        .map_err(|e| EngineError::database(path, e))?;
    let mut update = transaction
        .prepare(
            "UPDATE stage_runs SET base_name = ?2, combination = ?3, uses = ?4, roles = ?5,
             role_values = ?6 WHERE rowid = ?1",
        )
        .map_err(|e| EngineError::database(path, e))?;
    let mut rows = select
        .query([])
        .map_err(|e| EngineError::database(path, e))?;
    while let Some(row) = rows.next().map_err(|e| EngineError::database(path, e))? {
        let rowid: i64 = row.get(0).map_err(|e| EngineError::database(path, e))?;
        let stage: String = row.get(1).map_err(|e| EngineError::database(path, e))?;
        let manifest: Option<String> = row.get(2).map_err(|e| EngineError::database(path, e))?;
        let manifest = manifest.and_then(|text| serde_json::from_str::<Value>(&text).ok());
        let identity = legacy_identity(&stage, manifest.as_ref());
        update
            .execute(params![
                rowid,
                identity.base_name,
                json(&identity.combination),
                identity.uses,
                json(&identity.roles),
                json(&identity.role_values),
            ])
            .map_err(|e| EngineError::database(path, e))?;
    }
    Ok(())
}

/// A record type as stored: serialising these types cannot fail.
pub(super) fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// The `uses` namespaces whose stages made data, as version 0 of the
/// record knew them (it listed them instead of reading declared roles).
const LEGACY_DATA_NAMESPACES: &[&str] = &["data/", "imdb/", "text/", "hf/"];

/// The identity version 0 gave a stage recorded without one: its name
/// split at `@` and `,`, and roles from its manifest's `uses` and `with`.
/// Also used for a record pulled from a remote by a pipe of that version.
pub(crate) fn legacy_identity(stage: &str, manifest: Option<&Value>) -> StageIdentity {
    let (base_name, combination) = match stage.split_once('@') {
        None => (stage.to_string(), Combination::default()),
        Some((base, pairs)) => (
            base.to_string(),
            Combination(
                pairs
                    .split(',')
                    .filter_map(|pair| pair.split_once('='))
                    .map(|(key, value)| (key.to_string(), value.to_string()))
                    .collect(),
            ),
        ),
    };
    let uses = manifest
        .and_then(|manifest| manifest.get("uses"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let with = manifest
        .and_then(|manifest| manifest.get("with"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let roles = StageRoles {
        seed: with.contains_key("seed").then(|| "seed".to_string()),
        precision: with
            .contains_key("precision")
            .then(|| "precision".to_string()),
        makes_data: uses.as_deref().is_some_and(|uses| {
            LEGACY_DATA_NAMESPACES
                .iter()
                .any(|namespace| uses.starts_with(namespace))
        }),
        // Version 0 left these out of every stage's comparison: what the
        // conventions of metrics.json still say.
        detail_metrics: Vec::new(),
        hardware_metrics: Vec::new(),
        key_metrics: Vec::new(),
    }
    .with_conventional_metrics();
    let role_values = RoleValues::of(&roles, &with);
    StageIdentity {
        base_name,
        combination,
        uses,
        roles,
        role_values,
        position: 0,
        plots: Vec::new(),
        pages: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_0_stage_gets_the_identity_its_name_and_manifest_gave() {
        let manifest = serde_json::json!({"uses": "data/split@1", "with": {"seed": 3}});
        let identity = legacy_identity("split@fold=1,n=2", Some(&manifest));
        assert_eq!(identity.base_name, "split");
        assert_eq!(identity.combination.to_string(), "fold=1,n=2");
        assert!(identity.roles.makes_data);
        assert_eq!(identity.role_values.seed, Some(serde_json::json!(3)));
        let command = legacy_identity("prepare", None);
        assert!(!command.roles.makes_data && command.roles.seed.is_none());
    }
}
