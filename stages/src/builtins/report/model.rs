//! What the report reads from the run: the metric columns and rows it
//! shows, the options its params give, and how a value becomes a cell.

use std::collections::BTreeSet;

use pipe_protocol::record::{rows_by_combination, Combination};
use pipe_protocol::{RunContext, RunStage};
use pipe_report::Cell;
use serde::Deserialize;
use serde_json::Value;

use crate::{Result, StageContext, StageError};

/// A plot drawn from more points than this keeps every n-th one (and the
/// last): a long run's per-step log would otherwise make a page of
/// megabytes that shows no more than a few thousand points can.
pub(super) const MAX_PLOT_POINTS: usize = 2000;

/// A results-table column: metric `metric` of the stage named `stage`
/// (its base name: the same in every matrix combination).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct MetricColumn {
    pub(super) stage: String,
    pub(super) metric: String,
}

impl MetricColumn {
    pub(super) fn label(&self) -> String {
        format!("{}.{}", self.stage, self.metric)
    }
}

/// The stage's params, one field per `ParamSpec` of its `info()`, as
/// given; [`Options`] is what the report makes of them.
#[derive(Deserialize)]
pub(super) struct ReportParams {
    pub(super) title: Option<String>,
    /// Unset: the default columns.
    pub(super) metrics: Option<Vec<String>>,
    pub(super) baseline: Option<String>,
    pub(super) speedup: Option<String>,
}

pub(super) struct Options {
    pub(super) title: String,
    /// `None`: the default columns.
    pub(super) metrics: Option<Vec<MetricColumn>>,
    /// KEY=VALUE pairs, in the order written.
    pub(super) baseline: Option<Vec<(String, String)>>,
    pub(super) speedup: Option<MetricColumn>,
}

impl Options {
    pub(super) fn read(context: &StageContext, run: &RunContext) -> Result<Options> {
        let params: ReportParams = context.params()?;
        let title = params.title.unwrap_or_else(|| run.pipeline.clone());
        let metrics = params
            .metrics
            .map(|metrics| {
                metrics
                    .iter()
                    .map(|text| metric_column("metrics", text, run))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        let baseline = params
            .baseline
            .as_deref()
            .map(parse_combination)
            .transpose()?;
        let speedup = params
            .speedup
            .as_deref()
            .map(|text| metric_column("speedup", text, run))
            .transpose()?;
        Ok(Options {
            title,
            metrics,
            baseline,
            speedup,
        })
    }
}

/// `evaluate.accuracy` against the run's stages: the longest stage name
/// that prefixes it (stage names may hold dots), and a metric that stage
/// reported somewhere in the run.
pub(super) fn metric_column(param: &str, text: &str, run: &RunContext) -> Result<MetricColumn> {
    let base_names: BTreeSet<&str> = run.stages.iter().map(|s| s.base_name.as_str()).collect();
    let listed = base_names.iter().copied().collect::<Vec<_>>().join(", ");
    let stage = base_names
        .iter()
        .copied()
        .filter(|base| {
            text.strip_prefix(base)
                .is_some_and(|rest| rest.len() > 1 && rest.starts_with('.'))
        })
        .max_by_key(|base| base.len())
        .ok_or_else(|| {
            StageError::param(
                param,
                format!("`{text}` names no stage of this run and a metric of it"),
                format!("write STAGE.METRIC with STAGE one of: {listed}"),
            )
        })?;
    let metric = &text[stage.len() + 1..];
    let of_stage: Vec<&RunStage> = run.stages.iter().filter(|s| s.base_name == stage).collect();
    let known: BTreeSet<&str> = of_stage
        .iter()
        .flat_map(|s| s.metrics.keys().map(String::as_str))
        .collect();
    // A stage that failed everywhere reported nothing: its column stays
    // empty rather than failing the report of what did run.
    if !known.is_empty() && !known.contains(metric) {
        let listed = known.iter().copied().collect::<Vec<_>>().join(", ");
        return Err(StageError::param(
            param,
            format!("stage `{stage}` has no metric `{metric}` in this run"),
            format!("its metrics: {listed}"),
        ));
    }
    Ok(MetricColumn {
        stage: stage.to_string(),
        metric: metric.to_string(),
    })
}

/// `precision=32-true,strategy=single` -> its pairs.
pub(super) fn parse_combination(text: &str) -> Result<Vec<(String, String)>> {
    text.split(',')
        .map(|pair| {
            pair.split_once('=')
                .map(|(key, value)| (key.trim().to_string(), value.trim().to_string()))
                .filter(|(key, _)| !key.is_empty())
                .ok_or_else(|| {
                    StageError::param(
                        "baseline",
                        format!("`{pair}` is not KEY=VALUE"),
                        "write the baseline's matrix values as KEY=VALUE pairs separated by commas, e.g. \
                         `precision=32-true,strategy=single`",
                    )
                })
        })
        .collect()
}

/// A matrix value as the row shows it: text without quotes.
pub(super) fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// One row of the results table: a matrix combination and the stages it
/// shows, those without a matrix included.
pub(super) struct Row<'a> {
    pub(super) combination: Combination,
    pub(super) stages: Vec<&'a RunStage>,
}

impl Row<'_> {
    pub(super) fn describe(&self) -> String {
        if self.combination.is_empty() {
            return "(no matrix)".into();
        }
        self.combination.to_string()
    }
}

/// The run's rows: the record's one definition of them, which `pipe
/// compare` and its HTML page read too.
pub(super) fn rows(run: &RunContext) -> Vec<Row<'_>> {
    rows_by_combination(run.stages.iter().map(|stage| {
        let shows_something = !stage.metrics.is_empty() || stage.roles.makes_data;
        stage.combination.splitting_rows(shows_something)
    }))
    .into_iter()
    .map(|row| Row {
        combination: row.combination,
        stages: row.stages.iter().map(|&index| &run.stages[index]).collect(),
    })
    .collect()
}

/// A metric's value in its unit when its name gives one (`train_seconds`
/// reads `1 min 21 s`, `peak_rss_bytes` `1.46 GiB`), still sorted by the
/// number; else as [`value_cell`] shows it.
pub(super) fn metric_cell(value: Option<&Value>, metric: &str) -> Cell {
    match (
        value.and_then(Value::as_f64),
        pipe_protocol::format::Unit::of(metric),
    ) {
        (Some(number), Some(unit)) => Cell::number_as(number, unit.format(number)),
        _ => value_cell(value),
    }
}

/// The value of `column` in `row`.
pub(super) fn lookup<'a>(row: &Row<'a>, column: &MetricColumn) -> Option<&'a Value> {
    row.stages
        .iter()
        .filter(|stage| stage.base_name == column.stage)
        .find_map(|stage| stage.metrics.get(&column.metric))
}

pub(super) fn value_cell(value: Option<&Value>) -> Cell {
    match value {
        None | Some(Value::Null) => Cell::missing(),
        Some(Value::Number(number)) => number.as_f64().map_or_else(Cell::missing, Cell::number),
        Some(Value::String(text)) => Cell::text(text.clone()),
        Some(Value::Array(items)) => {
            Cell::text(items.iter().map(value_text).collect::<Vec<_>>().join(", "))
        }
        Some(other) => Cell::text(other.to_string()),
    }
}
