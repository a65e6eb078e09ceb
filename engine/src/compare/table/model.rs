//! The compare table's serde model: what the CLI renders as text, Markdown,
//! CSV and JSON, and the HTML page takes as is.

use std::collections::BTreeMap;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::metrics::{Direction, DirectionRules, Verdict};
use crate::runs::RunId;
use pipe_protocol::format::Unit;

#[derive(Debug, Clone, Default)]
pub struct CompareOptions {
    pub rules: DirectionRules,
    /// Every column: also those equal in all rows, text metrics, and
    /// metrics that repeat a param.
    pub all_columns: bool,
    /// One line per row, seeds not grouped.
    pub per_seed: bool,
    /// Default: the run of the first row.
    pub baseline_run: Option<RunId>,
    /// Matrix values the baseline row has (`precision=32-true`).
    pub baseline_row: Vec<(String, String)>,
    /// A metric column (`train.val_acc`, or `val_acc` when only one stage
    /// has it): rows best first.
    pub sort: Option<String>,
    /// `--metrics GLOB`: the metric columns to show instead of the key
    /// metrics, matched against `STAGE.METRIC` and `METRIC` (`*` any text).
    pub metrics: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompareTable {
    /// The columns shown, in order.
    pub columns: Vec<Column>,
    /// Every (run, matrix combination), in run order.
    pub rows: Vec<Row>,
    /// What is shown, one line each: rows that differ only in their seed
    /// (one row each with `--per-seed`), best first with `--sort`.
    pub groups: Vec<Group>,
    pub baseline: Baseline,
    pub warnings: Vec<Warning>,
    /// Metrics that differ between rows but are not shown: not key
    /// metrics (`--all` or `--metrics` shows them).
    pub hidden_metrics: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnKind {
    Pipeline,
    Param,
    Matrix,
    Metric,
}

#[derive(Debug, Clone, Serialize)]
pub struct Column {
    /// Unique key of the column in `Row::values` and `Group::cells`:
    /// `param:lr`, `matrix:precision`, `metric:train.val_acc`, `pipeline`.
    pub id: String,
    /// Its full name: `lr`, `precision`, `train.val_acc`.
    pub name: String,
    /// Its header in a table: the name, or a metric's name within its
    /// stage (`val_acc`) when no other column shown has that name.
    pub label: String,
    pub kind: ColumnKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Metrics only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// Every value present is a number.
    pub numeric: bool,
    /// Not every row has the same value.
    pub differs: bool,
    /// A key metric (accuracy, F1 or loss by name, or one the pipeline's
    /// `directions:` or `--higher`/`--lower` name): shown even when equal
    /// everywhere.
    pub key: bool,
    /// What a metric's number counts (`bytes`, `seconds`, `milliseconds`,
    /// from its name): shown in human units, raw in JSON and CSV.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<Unit>,
    /// Among the columns shown without `--all`: with `--all`, which of
    /// them a view shows at first (the HTML page's column picker, which
    /// has every column and ticks these).
    #[serde(skip)]
    pub by_default: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub run: RunId,
    pub pipeline: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
    /// The matrix combination, keys in declared order.
    pub matrix: Pairs,
    /// Raw values by column id; a column the row lacks is absent.
    pub values: BTreeMap<String, Value>,
    /// Index in `CompareTable::groups`.
    pub group: usize,
    /// The run's stages (indices in `RunRecord::stages`) whose results
    /// this row shows, as `rows_by_combination` found them.
    #[serde(skip)]
    pub stages: Vec<usize>,
}

/// Key-value pairs kept in their order, written as a JSON object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Pairs(pub Vec<(String, String)>);

impl Serialize for Pairs {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl Pairs {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

/// A run whose result is the one an earlier run of the same line made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Repeat {
    pub run: RunId,
    pub same_as: RunId,
}

#[derive(Debug, Clone, Serialize)]
pub struct Group {
    /// Indices in `CompareTable::rows`.
    pub rows: Vec<usize>,
    /// The runs of those rows, each once.
    pub runs: Vec<RunId>,
    /// How many distinct results the cells are the mean of.
    pub n: usize,
    /// Rows whose run has the very result of an earlier row's (a run that
    /// restored it): shown once, counted once.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repeats: Vec<Repeat>,
    /// The rows the cells are made of: one per distinct result.
    #[serde(skip)]
    pub distinct: Vec<usize>,
    /// By column id.
    pub cells: BTreeMap<String, Cell>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Cell {
    /// The value; for a group of several rows, the mean of a numeric
    /// column, the common value of another, or the list of the distinct
    /// values when they differ (the seeds).
    pub value: Value,
    /// Sample standard deviation, for a group of 2 rows or more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub std: Option<f64>,
    /// How many rows of the group have a number here (metrics).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<usize>,
    /// Against the baseline's value (metrics, other groups than the
    /// baseline).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    pub group: usize,
    pub run: RunId,
    pub matrix: Pairs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WarningKind {
    Data,
    Hardware,
    Precision,
}

#[derive(Debug, Clone, Serialize)]
pub struct Warning {
    pub kind: WarningKind,
    pub message: String,
    /// The rows concerned (indices in `CompareTable::rows`).
    pub rows: Vec<usize>,
}

/// What one row reads from its run and stages before columns exist.
pub(super) struct RowFacts {
    pub(super) run: usize,
    pub(super) stages: Vec<usize>,
    pub(super) matrix: Pairs,
    pub(super) values: BTreeMap<String, Value>,
    pub(super) seeds: Vec<Value>,
    pub(super) precision: Option<String>,
    pub(super) hardware: BTreeMap<String, Value>,
    /// Base stage name and `uses` -> the output digests of that data stage.
    pub(super) data: BTreeMap<String, (String, Vec<String>)>,
}

pub(super) fn metric_id(stage: &str, metric: &str) -> String {
    format!("metric:{stage}.{metric}")
}

pub(super) fn sorted(pairs: &Pairs) -> Pairs {
    let mut pairs = pairs.0.clone();
    pairs.sort();
    Pairs(pairs)
}

pub(super) fn is_seed_name(path: &str) -> bool {
    path.rsplit('.').next() == Some("seed")
}
