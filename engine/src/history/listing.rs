//! `pipe runs` as one use case: the newest runs, and for each what tells it
//! apart from the others listed: its name and tags, the params whose values
//! differ between the runs listed, and its key metrics (a sweep's best,
//! with how many combinations it had).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use super::History;
use crate::key::flatten;
use crate::metrics::{Direction, DirectionRules};
use crate::runs::{RestoredFrom, RunRecord, RunSelection};
use crate::Result;

/// A key metric column: the stage's base name and the metric.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct MetricColumn {
    pub stage: String,
    pub metric: String,
}

/// A run's value of a key metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricCell {
    pub value: f64,
    /// How many values the run had (a sweep's combinations), when more
    /// than one: `value` is then the best of them by the metric's
    /// direction (the last one when it has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_of: Option<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ListedRun {
    #[serde(flatten)]
    pub record: RunRecord,
    /// The runs whose results it restored when it ran nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<Vec<crate::runs::RunId>>,
    /// Its value of each of [`RunListing::params`]: `None` when it has
    /// none. A sweep's is what it swept (`10,20,41`).
    #[serde(skip)]
    pub params: Vec<Option<String>>,
    /// Its value of each of [`RunListing::metrics`].
    #[serde(skip)]
    pub metrics: Vec<Option<MetricCell>>,
    #[serde(skip)]
    pub restored: RestoredFrom,
}

#[derive(Debug, Clone, Default)]
pub struct RunListing {
    pub runs: Vec<ListedRun>,
    /// The dotted params whose values differ between the runs listed, or
    /// that a listed sweep swept.
    pub params: Vec<String>,
    pub metrics: Vec<MetricColumn>,
}

impl History {
    /// The newest `limit` runs, newest first, with what tells them apart.
    /// Reads the listed runs only: its cost does not grow with the
    /// history.
    pub fn listing(&self, limit: usize) -> Result<RunListing> {
        let records = self.db.newest_runs(RunSelection::default(), limit)?;
        let restored = records
            .iter()
            .map(|run| self.db.restored_from(run))
            .collect::<Result<Vec<_>>>()?;
        let params = differing_params(&records);
        let values: Vec<Vec<(MetricColumn, f64)>> = records.iter().map(key_values).collect();
        let metrics = metric_columns(&values);
        let runs = records
            .into_iter()
            .zip(restored)
            .zip(&values)
            .map(|((record, restored), values)| {
                let param_cells = param_cells(&record, &params);
                let metric_cells = metric_cells(&record, values, &metrics);
                ListedRun {
                    restored_from: restored.only_restored(),
                    params: param_cells,
                    metrics: metric_cells,
                    restored,
                    record: RunRecord {
                        stages: Vec::new(),
                        ..record
                    },
                }
            })
            .collect();
        Ok(RunListing {
            runs,
            params,
            metrics,
        })
    }
}

/// What a sweep swept: each param path and its values as given
/// (`train.lr` -> `1e-4,3e-4`).
fn swept(run: &RunRecord) -> BTreeMap<String, String> {
    if !run.sweep {
        return BTreeMap::new();
    }
    run.overrides
        .iter()
        .filter(|setting| setting.values().len() > 1)
        .map(|setting| (setting.path.dotted(), setting.values_shown()))
        .collect()
}

fn differing_params(runs: &[RunRecord]) -> Vec<String> {
    let flat: Vec<BTreeMap<String, Value>> = runs.iter().map(|run| flatten(&run.params)).collect();
    let mut paths: BTreeSet<String> = BTreeSet::new();
    for run in runs {
        paths.extend(swept(run).into_keys());
    }
    let all: BTreeSet<&String> = flat.iter().flat_map(|params| params.keys()).collect();
    for path in all {
        let mut values = flat.iter().map(|params| params.get(path));
        let first = values.next().flatten();
        if values.any(|value| value != first) {
            paths.insert(path.clone());
        }
    }
    paths.into_iter().collect()
}

fn param_cells(run: &RunRecord, params: &[String]) -> Vec<Option<String>> {
    let flat = flatten(&run.params);
    let swept = swept(run);
    params
        .iter()
        .map(|path| {
            swept.get(path).cloned().or_else(|| {
                flat.get(path).map(|value| match value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                })
            })
        })
        .collect()
}

/// The key metrics of the runs listed, as (stage base name, metric), in
/// the order first seen.
fn metric_columns(values: &[Vec<(MetricColumn, f64)>]) -> Vec<MetricColumn> {
    let mut columns: Vec<MetricColumn> = Vec::new();
    for (column, _) in values.iter().flatten() {
        if !columns.contains(column) {
            columns.push(column.clone());
        }
    }
    columns
}

/// Each key metric value of a run, with its column.
fn key_values(run: &RunRecord) -> Vec<(MetricColumn, f64)> {
    let base_of = |stage: &str| -> String {
        run.stages
            .iter()
            .find(|record| record.stage == stage)
            .map(|record| record.identity.base_name.clone())
            .filter(|base| !base.is_empty())
            .unwrap_or_else(|| stage.split('@').next().unwrap_or(stage).to_string())
    };
    run.summary()
        .key_metrics
        .into_iter()
        .filter_map(|metric| {
            let value = match &metric.value {
                Value::Bool(flag) => f64::from(u8::from(*flag)),
                other => other.as_f64()?,
            };
            let column = MetricColumn {
                stage: base_of(&metric.stage),
                metric: metric.metric,
            };
            Some((column, value))
        })
        .collect()
}

fn metric_cells(
    run: &RunRecord,
    values: &[(MetricColumn, f64)],
    columns: &[MetricColumn],
) -> Vec<Option<MetricCell>> {
    let rules = DirectionRules::default().declared(&run.trusted_directions());
    columns
        .iter()
        .map(|column| {
            let of_column: Vec<f64> = values
                .iter()
                .filter(|(found, _)| found == column)
                .map(|(_, value)| *value)
                .collect();
            let last = *of_column.last()?;
            let best = match rules.direction(&column.stage, &column.metric) {
                Direction::Higher => of_column.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                Direction::Lower => of_column.iter().copied().fold(f64::INFINITY, f64::min),
                Direction::Unknown => last,
            };
            Some(MetricCell {
                value: best,
                best_of: (of_column.len() > 1).then_some(of_column.len()),
            })
        })
        .collect()
}
