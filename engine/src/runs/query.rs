//! The one reader of runs: every run read from runs.db (shown, compared,
//! listed, exported, diffed, checked out) comes from `RunDb::runs`, with
//! all its stages, decoded by the same row readers. There is no record
//! read "without its stages" whose empty `stages` a caller could take for
//! a run that ran none.

use serde_json::Value;

use super::db::RunDb;
use super::record::RunRecord;
use super::record::{run_columns, run_from_row, stage_columns, stage_from_row, Columns};
use crate::run_id::RunId;
use crate::Result;
use pipe_protocol::record::RunStatus;

/// Which runs [`RunDb::runs`] reads.
#[derive(Debug, Clone, Default)]
pub struct RunSelection {
    /// Runs named by the user, compared whatever their status; the filters
    /// below still narrow them. `None`: every run the filters select.
    pub named: Option<Vec<RunId>>,
    /// Always loaded, whatever the filters say (the baseline).
    pub also: Vec<RunId>,
    pub pipeline: Option<String>,
    /// `--where`: a dotted path in the run's params and the value it must
    /// have.
    pub params_equal: Vec<(Vec<String>, Value)>,
    /// `--where name=X`: the run named X.
    pub names: Vec<String>,
    /// `--where tag=X`: runs tagged X, every one given.
    pub tags: Vec<String>,
    /// `None`: any status.
    pub statuses: Option<Vec<RunStatus>>,
    /// The newest N of the selected runs.
    pub last: Option<usize>,
}

impl RunDb {
    /// Every selected run with all its stages, oldest first, stages in the
    /// order they were recorded, in ONE query (runs LEFT JOIN stage_runs,
    /// filtered in SQL), so that reading 1,000 runs costs one statement,
    /// not one per run.
    pub fn runs(&self, selection: &RunSelection) -> Result<Vec<RunRecord>> {
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
        for name in &selection.names {
            filters.push(format!("name = {}", bind(Sql::Text(name.clone()))));
        }
        for tag in &selection.tags {
            filters.push(format!(
                "tags IS NOT NULL AND EXISTS (SELECT 1 FROM json_each(tags) WHERE value = {})",
                bind(Sql::Text(tag.clone()))
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
                "{selected} ORDER BY started_ms DESC, id DESC LIMIT {}",
                bind(Sql::Integer(last.min(i64::MAX as usize) as i64))
            );
        }
        let also = bind(Sql::Text(
            serde_json::to_string(&selection.also).unwrap_or_default(),
        ));
        // Only the joined rows are read, so the cost follows the runs
        // selected, not the whole history.
        let query = format!(
            "SELECT {runs}, {stages}
             FROM runs r
             LEFT JOIN stage_runs s ON s.run_id = r.id
             WHERE r.id IN ({selected}) OR r.id IN (SELECT value FROM json_each({also}))
             ORDER BY r.started_ms, r.id, s.rowid",
            runs = run_columns("r"),
            stages = stage_columns("s", "s_"),
        );
        let mut statement = self.connection.prepare(&query).map_err(|e| self.error(e))?;
        let mut rows = statement
            .query(rusqlite::params_from_iter(arguments))
            .map_err(|e| self.error(e))?;
        let mut runs: Vec<RunRecord> = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.error(e))? {
            let id: RunId = row.get("id").map_err(|e| self.error(e))?;
            if runs.last().is_none_or(|last| last.id != id) {
                runs.push(run_from_row(row, &self.path)?);
            }
            let Some(stage) = row
                .get::<_, Option<String>>("s_stage")
                .map_err(|e| self.error(e))?
            else {
                continue;
            };
            let columns = Columns {
                row,
                path: &self.path,
                run: id,
                stage: Some(stage),
                prefix: "s_",
            };
            let stage = stage_from_row(&columns)?;
            if let Some(last) = runs.last_mut() {
                last.stages.push(stage);
            }
        }
        if let Some(statuses) = &selection.statuses {
            let named_or_also = |id: RunId| selection.also.contains(&id);
            runs.retain(|run| named_or_also(run.id) || statuses.contains(&run.status));
        }
        Ok(runs)
    }

    /// The run numbered `run_id`, with its stages.
    pub fn run(&self, run_id: RunId) -> Result<Option<RunRecord>> {
        Ok(self.runs(&RunSelection::one(run_id))?.pop())
    }

    /// The record of a run `resolve` found: that it is gone since is a
    /// bug, not the user's mistake.
    pub fn resolved_run(&self, run_id: RunId) -> Result<RunRecord> {
        self.run(run_id)?
            .ok_or(crate::EngineError::RunVanished { id: run_id })
    }

    /// The newest `limit` runs of `selection` (every run for the default),
    /// newest first.
    pub fn newest_runs(&self, selection: RunSelection, limit: usize) -> Result<Vec<RunRecord>> {
        let mut runs = self.runs(&RunSelection {
            last: Some(limit),
            ..selection
        })?;
        runs.reverse();
        Ok(runs)
    }
}

impl RunSelection {
    /// The run numbered `id` alone.
    pub fn one(id: RunId) -> RunSelection {
        RunSelection {
            named: Some(vec![id]),
            ..RunSelection::default()
        }
    }
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

#[cfg(test)]
#[path = "query_tests.rs"]
mod tests;
