//! The one query `pipe compare` loads its runs with.

use std::collections::BTreeMap;

use pipe_cache::Artifact;
use pipe_protocol::record::StageIdentity;
use serde_json::Value;

use super::db::RunDb;
use super::record::RunRecord;
use super::record::{identity_from_row, run_columns, run_from_row, Columns};
use crate::run_id::RunId;
use crate::Result;
use pipe_protocol::record::{RunStatus, StageStatus};

/// Which runs `RunDb::runs_to_compare` loads.
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
    pub identity: StageIdentity,
    pub status: StageStatus,
    pub duration_ms: u64,
    pub metrics: BTreeMap<String, Value>,
    /// Loaded only for stages whose roles say they make data: rows whose
    /// data differs are flagged.
    pub outputs: Option<BTreeMap<String, Artifact>>,
}

impl RunDb {
    /// Every selected run and its stages, oldest first, in ONE query
    /// (runs JOIN stage_runs JOIN manifests, filtered in SQL), so that
    /// comparing 1,000 runs costs one statement, not one per run. Outputs
    /// are loaded only of stages that make data.
    pub fn runs_to_compare(&self, selection: &RunSelection) -> Result<Vec<ComparedRun>> {
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
            "SELECT {runs}, s.stage AS s_stage, s.status AS s_status,
                    s.duration_ms AS s_duration_ms, s.metrics AS s_metrics,
                    s.base_name AS s_base_name, s.combination AS s_combination,
                    s.uses AS s_uses, s.roles AS s_roles, s.role_values AS s_role_values,
                    s.position AS s_position, s.plots AS s_plots, s.pages AS s_pages,
                    CASE WHEN json_extract(s.roles, '$.makes_data') THEN s.outputs END AS s_outputs
             FROM runs r
             LEFT JOIN stage_runs s ON s.run_id = r.id
             WHERE r.id IN ({selected}) OR r.id IN (SELECT value FROM json_each({also}))
             ORDER BY r.started_ms, r.id, coalesce(s.position, 0), s.rowid",
            runs = run_columns("r"),
        );
        let mut statement = self.connection.prepare(&query).map_err(|e| self.error(e))?;
        let mut rows = statement
            .query(rusqlite::params_from_iter(arguments))
            .map_err(|e| self.error(e))?;
        let mut runs: Vec<ComparedRun> = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.error(e))? {
            let id: RunId = row.get("id").map_err(|e| self.error(e))?;
            if runs.last().is_none_or(|last| last.run.id != id) {
                runs.push(ComparedRun {
                    run: run_from_row(row, &self.path)?,
                    stages: Vec::new(),
                });
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
                stage: Some(stage.clone()),
            };
            let compared = ComparedStage {
                identity: identity_from_row(&columns, "s_")?,
                status: columns.parsed("s_status")?,
                duration_ms: columns.unsigned("s_duration_ms")?,
                metrics: columns.json("s_metrics")?,
                outputs: columns.opt_json("s_outputs")?,
                stage,
            };
            if let Some(last) = runs.last_mut() {
                last.stages.push(compared);
            }
        }
        if let Some(statuses) = &selection.statuses {
            let named_or_also = |id: RunId| selection.also.contains(&id);
            runs.retain(|compared| {
                named_or_also(compared.run.id) || statuses.contains(&compared.run.status)
            });
        }
        Ok(runs)
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
