//! `pipe compare`: runs side by side as one table, one row per run and
//! matrix combination, rows that differ only in their seed grouped into
//! mean ± std, deltas against a baseline, and warnings when rows are not
//! comparable (other data, hardware or precision).
//!
//! The table is a plain serde model (`CompareTable`): the CLI renders it as
//! text, Markdown, CSV and JSON, and an HTML renderer can take it as is.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::base_name;
use crate::key;
use crate::metrics::{relative_change, Direction, DirectionRules, Verdict};
use crate::runs::ComparedRun;
use crate::{EngineError, Result};

/// The `uses` namespaces of built-in stages that make data: rows whose
/// outputs of these differ were trained or evaluated on different data.
pub const DATA_STAGE_NAMESPACES: &[&str] = &["data/", "imdb/", "text/", "hf/"];

/// Metrics too many or too nested to be columns (per epoch, per class,
/// the confusion matrix); `pipe show` and reports have them.
const SKIPPED_METRIC_PREFIXES: &[&str] = &["epochs.", "confusion.", "per_class."];

#[derive(Debug, Clone, Default)]
pub struct CompareOptions {
    pub rules: DirectionRules,
    /// Every column, also those equal in all rows.
    pub all_columns: bool,
    /// One line per row, seeds not grouped.
    pub per_seed: bool,
    /// Default: the run of the first row.
    pub baseline_run: Option<i64>,
    /// Matrix values the baseline row has (`precision=32-true`).
    pub baseline_row: Vec<(String, String)>,
    /// A metric column (`train.val_acc`, or `val_acc` when only one stage
    /// has it): rows best first.
    pub sort: Option<String>,
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
    /// As shown: `lr`, `precision`, `train.val_acc`.
    pub name: String,
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
    /// Accuracy, F1 or loss: shown even when equal everywhere.
    pub key: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub run: i64,
    pub pipeline: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
    /// The matrix combination, keys in declared order.
    pub matrix: Pairs,
    /// Raw values by column id; a column the row lacks is absent.
    pub values: BTreeMap<String, Value>,
    /// Index in `CompareTable::groups`.
    pub group: usize,
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

#[derive(Debug, Clone, Serialize)]
pub struct Group {
    /// Indices in `CompareTable::rows`.
    pub rows: Vec<usize>,
    /// The runs of those rows, each once.
    pub runs: Vec<i64>,
    pub n: usize,
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
    pub run: i64,
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
struct RowFacts {
    run: usize,
    matrix: Pairs,
    values: BTreeMap<String, Value>,
    seeds: Vec<Value>,
    precision: Option<String>,
    hardware: BTreeMap<String, Value>,
    /// Base stage name and `uses` -> the output digests of that data stage.
    data: BTreeMap<String, (String, Vec<String>)>,
}

/// Builds the table of `runs` (in the order given).
pub fn compare_runs(runs: &[ComparedRun], options: &CompareOptions) -> Result<CompareTable> {
    if runs.is_empty() {
        return Err(EngineError::usage(
            "no run matches",
            "`pipe runs` lists the recorded runs; `--status any` includes failed ones",
        ));
    }
    let mut metric_order: Vec<(String, String)> = Vec::new();
    let mut seen_metrics: HashSet<String> = HashSet::new();
    let mut matrix_keys: Vec<String> = Vec::new();
    let mut facts: Vec<RowFacts> = Vec::new();
    for (run_index, compared) in runs.iter().enumerate() {
        for (combo, stages) in rows_of_run(compared) {
            for (key, _) in &combo.0 {
                if !matrix_keys.contains(key) {
                    matrix_keys.push(key.clone());
                }
            }
            let row = row_facts(compared, run_index, combo, &stages, &mut |stage, metric| {
                let id = metric_id(stage, metric);
                if seen_metrics.insert(id) {
                    metric_order.push((stage.to_string(), metric.to_string()));
                }
            });
            facts.push(row);
        }
    }

    let columns = columns(&facts, &metric_order, &matrix_keys, options);
    let group_of_row = group_rows(runs, &facts, options.per_seed);
    let group_count = group_of_row.iter().max().map_or(0, |max| max + 1);
    let mut groups: Vec<Group> = (0..group_count)
        .map(|_| Group {
            rows: Vec::new(),
            runs: Vec::new(),
            n: 0,
            cells: BTreeMap::new(),
        })
        .collect();
    let mut runs_of_group: HashSet<(usize, i64)> = HashSet::new();
    for (row, &group_index) in group_of_row.iter().enumerate() {
        let group = &mut groups[group_index];
        group.rows.push(row);
        group.n += 1;
        let run = runs[facts[row].run].run.id;
        if runs_of_group.insert((group_index, run)) {
            group.runs.push(run);
        }
    }
    let baseline_group = baseline_group(runs, &facts, &group_of_row, options)?;
    for group in &mut groups {
        for column in &columns {
            group
                .cells
                .insert(column.id.clone(), cell(column, &group.rows, &facts));
        }
    }
    let baseline_cells = groups[baseline_group].cells.clone();
    for (index, group) in groups.iter_mut().enumerate() {
        if index == baseline_group {
            continue;
        }
        for column in columns.iter().filter(|column| column.numeric) {
            let Some(direction) = column.direction else {
                continue;
            };
            let (Some(cell), Some(base)) = (
                group.cells.get_mut(&column.id),
                baseline_cells.get(&column.id),
            ) else {
                continue;
            };
            if let (Some(value), Some(base)) = (cell.value.as_f64(), base.value.as_f64()) {
                cell.delta = Some(value - base);
                cell.relative = relative_change(base, value);
                cell.verdict = Some(direction.verdict(base, value));
            }
        }
    }

    let warnings = warnings(runs, &facts, &matrix_keys);
    let shown: HashSet<&str> = columns.iter().map(|column| column.id.as_str()).collect();
    let rows: Vec<Row> = facts
        .into_iter()
        .zip(&group_of_row)
        .map(|(facts, &group)| {
            let run = &runs[facts.run].run;
            let mut values = facts.values;
            values.retain(|id, _| shown.contains(id.as_str()));
            Row {
                run: run.id,
                pipeline: run.pipeline.clone(),
                git_commit: run.git_commit.clone(),
                matrix: facts.matrix,
                values,
                group,
            }
        })
        .collect();

    let mut order: Vec<usize> = (0..groups.len()).collect();
    if let Some(metric) = &options.sort {
        let column = sort_column(&columns, metric)?;
        let direction = column.direction.unwrap_or(Direction::Unknown);
        if direction == Direction::Unknown {
            return Err(EngineError::usage(
                format!("`{}` has no known direction to sort by", column.name),
                format!(
                    "say which way is better: `--higher {0}` or `--lower {0}`",
                    column.name
                ),
            ));
        }
        let value = |group: usize| {
            groups[group]
                .cells
                .get(&column.id)
                .and_then(|cell| cell.value.as_f64())
        };
        order.sort_by(|&a, &b| match (value(a), value(b)) {
            (Some(x), Some(y)) if direction == Direction::Higher => y.total_cmp(&x),
            (Some(x), Some(y)) => x.total_cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
    }
    let mut position = vec![0; groups.len()];
    for (new, &old) in order.iter().enumerate() {
        position[old] = new;
    }
    let mut sorted: Vec<Option<Group>> = groups.into_iter().map(Some).collect();
    let groups: Vec<Group> = order.iter().filter_map(|&old| sorted[old].take()).collect();
    let rows = rows
        .into_iter()
        .map(|mut row| {
            row.group = position[row.group];
            row
        })
        .collect::<Vec<_>>();
    let baseline_row = &rows[groups[position[baseline_group]].rows[0]];
    let baseline = Baseline {
        group: position[baseline_group],
        run: baseline_row.run,
        matrix: baseline_row.matrix.clone(),
    };
    Ok(CompareTable {
        columns,
        rows,
        groups,
        baseline,
        warnings,
    })
}

fn metric_id(stage: &str, metric: &str) -> String {
    format!("metric:{stage}.{metric}")
}

/// `train@precision=bf16-mixed,strategy=ddp` -> `train` and its pairs.
pub fn parse_stage_name(stage: &str) -> (&str, Pairs) {
    match stage.split_once('@') {
        None => (stage, Pairs::default()),
        Some((base, combination)) => (
            base,
            Pairs(
                combination
                    .split(',')
                    .filter_map(|pair| pair.split_once('='))
                    .map(|(key, value)| (key.to_string(), value.to_string()))
                    .collect(),
            ),
        ),
    }
}

/// The rows of one run: its matrix combinations that no other combination
/// of the run contains (`train@p=32` is part of `eval@p=32,seed=1`), each
/// with the stages whose combination it contains; a stage without a
/// matrix belongs to every row. Linear in the stages: combinations are
/// compared through hash sets per pair of distinct key sets, and a run
/// has few of those.
fn rows_of_run(compared: &ComparedRun) -> Vec<(Pairs, Vec<usize>)> {
    let mut combos: Vec<Pairs> = Vec::new();
    let mut stages_of: HashMap<Pairs, Vec<usize>> = HashMap::new();
    for (index, stage) in compared.stages.iter().enumerate() {
        let (_, combo) = parse_stage_name(&stage.stage);
        let entry = stages_of.entry(sorted(&combo)).or_default();
        if entry.is_empty() {
            combos.push(combo);
        }
        entry.push(index);
    }
    let key_set = |pairs: &Pairs| -> Vec<String> {
        let mut keys: Vec<String> = pairs.0.iter().map(|(key, _)| key.clone()).collect();
        keys.sort();
        keys
    };
    let mut key_sets: Vec<Vec<String>> = combos.iter().map(key_set).collect();
    key_sets.sort();
    key_sets.dedup();
    // For each pair (larger, smaller) of key sets: the larger set's
    // combinations projected onto the smaller's keys.
    let mut projections: HashMap<(usize, usize), HashSet<Pairs>> = HashMap::new();
    for (large, large_keys) in key_sets.iter().enumerate() {
        for (small, small_keys) in key_sets.iter().enumerate() {
            if large == small || !small_keys.iter().all(|key| large_keys.contains(key)) {
                continue;
            }
            let projected = combos
                .iter()
                .filter(|combo| &key_set(combo) == large_keys)
                .map(|combo| project(combo, small_keys))
                .collect();
            projections.insert((large, small), projected);
        }
    }
    let index_of = |keys: &Vec<String>| key_sets.iter().position(|set| set == keys).unwrap_or(0);
    let rows: Vec<Pairs> = combos
        .iter()
        .filter(|combo| {
            let own = index_of(&key_set(combo));
            let canonical = sorted(combo);
            !(0..key_sets.len()).any(|other| {
                projections
                    .get(&(other, own))
                    .is_some_and(|set| set.contains(&canonical))
            })
        })
        .cloned()
        .collect();
    let mut rows = if rows.is_empty() {
        vec![Pairs::default()]
    } else {
        rows
    };
    // Stages are recorded as they finish; rows read in matrix order.
    rows.sort_by(compare_combinations);
    rows.into_iter()
        .map(|row| {
            let row_keys = key_set(&row);
            let mut stages: Vec<usize> = key_sets
                .iter()
                .filter(|keys| keys.iter().all(|key| row_keys.contains(key)))
                .filter_map(|keys| stages_of.get(&project(&row, keys)))
                .flatten()
                .copied()
                .collect();
            stages.sort_unstable();
            (row, stages)
        })
        .collect()
}

/// Value by value in key order, numbers as numbers (`2` before `10`).
fn compare_combinations(a: &Pairs, b: &Pairs) -> std::cmp::Ordering {
    for ((key_a, value_a), (key_b, value_b)) in a.0.iter().zip(&b.0) {
        let order =
            key_a
                .cmp(key_b)
                .then_with(|| match (value_a.parse::<f64>(), value_b.parse::<f64>()) {
                    (Ok(x), Ok(y)) => x.total_cmp(&y),
                    _ => value_a.cmp(value_b),
                });
        if order.is_ne() {
            return order;
        }
    }
    a.0.len().cmp(&b.0.len())
}

fn sorted(pairs: &Pairs) -> Pairs {
    let mut pairs = pairs.0.clone();
    pairs.sort();
    Pairs(pairs)
}

/// The pairs of `combo` whose key is in `keys`, sorted.
fn project(combo: &Pairs, keys: &[String]) -> Pairs {
    sorted(&Pairs(
        combo
            .0
            .iter()
            .filter(|(key, _)| keys.contains(key))
            .cloned()
            .collect(),
    ))
}

fn is_seed_name(path: &str) -> bool {
    path.rsplit('.').next() == Some("seed")
}

fn row_facts(
    compared: &ComparedRun,
    run: usize,
    matrix: Pairs,
    stages: &[usize],
    note_metric: &mut impl FnMut(&str, &str),
) -> RowFacts {
    let mut values = BTreeMap::new();
    values.insert(
        "pipeline".to_string(),
        Value::String(compared.run.pipeline.clone()),
    );
    let mut seeds = Vec::new();
    let mut precision = None;
    for (path, value) in key::flatten(&compared.run.params) {
        if path.is_empty() {
            continue;
        }
        if is_seed_name(&path) {
            seeds.push(value.clone());
        }
        if path.rsplit('.').next() == Some("precision") {
            precision = value.as_str().map(String::from);
        }
        values.insert(format!("param:{path}"), value);
    }
    for (key, value) in &matrix.0 {
        if key == "seed" {
            seeds.push(Value::String(value.clone()));
        }
        values.insert(format!("matrix:{key}"), Value::String(value.clone()));
    }
    let mut hardware = BTreeMap::new();
    let mut data = BTreeMap::new();
    for &index in stages {
        let stage = &compared.stages[index];
        let base = base_name(&stage.stage);
        if let Some(seed) = &stage.with_seed {
            seeds.push(seed.clone());
        }
        if let Some(Value::String(text)) = &stage.with_precision {
            precision.get_or_insert_with(|| text.clone());
        }
        for (metric, value) in &stage.metrics {
            if metric.starts_with("hardware.") || metric == "devices" {
                if let Some(value) = hardware_value(value) {
                    hardware.insert(metric.clone(), value);
                }
            }
            if metric == "precision" {
                if let Value::String(text) = value {
                    precision.get_or_insert_with(|| text.clone());
                }
            }
            if SKIPPED_METRIC_PREFIXES
                .iter()
                .any(|prefix| metric.starts_with(prefix))
                || matches!(value, Value::Array(_) | Value::Object(_) | Value::Null)
            {
                continue;
            }
            note_metric(base, metric);
            values.insert(metric_id(base, metric), value.clone());
        }
        if let (Some(uses), Some(outputs)) = (&stage.uses, &stage.outputs) {
            let digests = outputs
                .values()
                .map(|artifact| artifact.digest.to_hex())
                .collect();
            data.insert(base.to_string(), (uses.clone(), digests));
        }
    }
    if let Some(value) = matrix.get("precision") {
        precision = Some(value.to_string());
    }
    RowFacts {
        run,
        matrix,
        values,
        seeds,
        precision,
        hardware,
        data,
    }
}

/// A hardware metric as compared: null (not found out) is unknown, and a
/// list of device names (`hardware.gpus`) is the set of models, so that
/// two GPUs of a kind are the same hardware as one.
fn hardware_value(value: &Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::Array(items) => {
            let mut names: Vec<&Value> = items.iter().filter(|item| !item.is_null()).collect();
            names.sort_by_key(|item| item.to_string());
            names.dedup();
            Some(Value::Array(names.into_iter().cloned().collect()))
        }
        other => Some(other.clone()),
    }
}

fn columns(
    facts: &[RowFacts],
    metric_order: &[(String, String)],
    matrix_keys: &[String],
    options: &CompareOptions,
) -> Vec<Column> {
    let mut param_paths: Vec<&str> = facts
        .iter()
        .flat_map(|row| row.values.keys())
        .filter_map(|id| id.strip_prefix("param:"))
        .collect();
    param_paths.sort_unstable();
    param_paths.dedup();
    let mut candidates: Vec<Column> = Vec::new();
    let plain = |id: String, name: String, kind: ColumnKind| Column {
        id,
        name,
        kind,
        stage: None,
        metric: None,
        direction: None,
        numeric: false,
        differs: false,
        key: false,
    };
    candidates.push(plain(
        "pipeline".into(),
        "pipeline".into(),
        ColumnKind::Pipeline,
    ));
    for path in param_paths {
        candidates.push(plain(
            format!("param:{path}"),
            path.to_string(),
            ColumnKind::Param,
        ));
    }
    for key in matrix_keys {
        candidates.push(plain(
            format!("matrix:{key}"),
            key.clone(),
            ColumnKind::Matrix,
        ));
    }
    let mut metrics: Vec<Column> = metric_order
        .iter()
        .map(|(stage, metric)| Column {
            id: metric_id(stage, metric),
            name: format!("{stage}.{metric}"),
            kind: ColumnKind::Metric,
            stage: Some(stage.clone()),
            metric: Some(metric.clone()),
            direction: Some(options.rules.direction(stage, metric)),
            numeric: false,
            differs: false,
            key: crate::metrics::is_key_metric(metric),
        })
        .collect();
    // Key metrics first, the rest in the order the stages ran.
    metrics.sort_by_key(|column| !column.key);
    candidates.extend(metrics);
    candidates
        .into_iter()
        .filter_map(|mut column| {
            let values: Vec<Option<&Value>> =
                facts.iter().map(|row| row.values.get(&column.id)).collect();
            column.differs = values.iter().any(|value| *value != values[0]);
            column.numeric = values.iter().flatten().all(|value| value.is_number())
                && values.iter().any(Option::is_some);
            let shown = options.all_columns
                || column.differs
                || column.key
                || column.kind == ColumnKind::Matrix;
            shown.then_some(column)
        })
        .collect()
}

/// The group of each row: rows of one pipeline, commit and params that
/// differ only in a seed (a param or matrix key named `seed`, or a
/// built-in stage's `with.seed`).
fn group_rows(runs: &[ComparedRun], facts: &[RowFacts], per_seed: bool) -> Vec<usize> {
    if per_seed {
        return (0..facts.len()).collect();
    }
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut group_of_identity: HashMap<String, usize> = HashMap::new();
    for (index, row) in facts.iter().enumerate() {
        let run = &runs[row.run].run;
        let identity: Vec<(&str, String)> = row
            .values
            .iter()
            .filter(|(id, _)| {
                (id.starts_with("param:") || id.starts_with("matrix:") || *id == "pipeline")
                    && !is_seed_name(id.split_once(':').map_or(id.as_str(), |(_, path)| path))
            })
            .map(|(id, value)| (id.as_str(), value.to_string()))
            .chain([
                ("commit", format!("{:?}", run.git_commit)),
                ("dirty", format!("{:?}", run.git_dirty)),
            ])
            .collect();
        let identity = serde_json::to_string(&identity).unwrap_or_default();
        let group = *group_of_identity.entry(identity).or_insert_with(|| {
            members.push(Vec::new());
            members.len() - 1
        });
        members[group].push(index);
    }
    // Rows alike in everything, seed included, are different experiments
    // that happen to match (a rerun after a code change at a dirty commit),
    // not repetitions over seeds: they stay apart.
    let mut group_of_row = vec![0; facts.len()];
    let mut next = 0;
    let mut first_of_group: Vec<(usize, Vec<usize>)> = Vec::new();
    for rows in members {
        let seeds_differ = rows
            .iter()
            .any(|&row| facts[row].seeds != facts[rows[0]].seeds);
        if seeds_differ {
            first_of_group.push((rows[0], rows));
        } else {
            for row in rows {
                first_of_group.push((row, vec![row]));
            }
        }
    }
    // Groups appear where their first row is.
    first_of_group.sort_by_key(|(first, _)| *first);
    for (_, rows) in first_of_group {
        for row in rows {
            group_of_row[row] = next;
        }
        next += 1;
    }
    group_of_row
}

fn baseline_group(
    runs: &[ComparedRun],
    facts: &[RowFacts],
    group_of_row: &[usize],
    options: &CompareOptions,
) -> Result<usize> {
    let run = options.baseline_run.unwrap_or(runs[facts[0].run].run.id);
    let of_run: Vec<usize> = (0..facts.len())
        .filter(|&row| runs[facts[row].run].run.id == run)
        .collect();
    if of_run.is_empty() {
        return Err(EngineError::usage(
            format!("the baseline run #{run} is not among the compared runs"),
            "name it among the runs, or choose another with `--baseline RUN`",
        ));
    }
    for (key, _) in &options.baseline_row {
        if !of_run
            .iter()
            .any(|&row| facts[row].matrix.get(key).is_some())
        {
            let keys: Vec<&str> = facts[of_run[0]]
                .matrix
                .0
                .iter()
                .map(|(key, _)| key.as_str())
                .collect();
            return Err(EngineError::usage(
                format!("run #{run} has no matrix key `{key}`"),
                if keys.is_empty() {
                    "it has no matrix; leave out `--baseline-row`".to_string()
                } else {
                    format!("its matrix keys: {}", keys.join(", "))
                },
            ));
        }
    }
    let matching: Vec<usize> = of_run
        .iter()
        .copied()
        .filter(|&row| {
            options
                .baseline_row
                .iter()
                .all(|(key, value)| facts[row].matrix.get(key) == Some(value.as_str()))
        })
        .collect();
    let label = |row: usize| row_label(runs[facts[row].run].run.id, &facts[row].matrix);
    let Some(&first) = matching.first() else {
        let rows: Vec<String> = of_run.iter().map(|&row| label(row)).collect();
        return Err(EngineError::usage(
            format!("no row of run #{run} matches `--baseline-row`"),
            format!("its rows: {}", rows.join("; ")),
        ));
    };
    let group = group_of_row[first];
    if options.baseline_row.is_empty() || matching.iter().all(|&row| group_of_row[row] == group) {
        return Ok(group);
    }
    let rows: Vec<String> = matching.iter().map(|&row| label(row)).collect();
    Err(EngineError::usage(
        format!(
            "{} rows of run #{run} match the baseline: {}",
            matching.len(),
            rows.join("; ")
        ),
        "name more matrix values in `--baseline-row`, e.g. `precision=32-true,strategy=single`",
    ))
}

/// `#3` or `#3 (precision=bf16-mixed,strategy=ddp)`.
pub fn row_label(run: i64, matrix: &Pairs) -> String {
    if matrix.0.is_empty() {
        format!("#{run}")
    } else {
        let pairs: Vec<String> = matrix
            .0
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        format!("#{run} ({})", pairs.join(","))
    }
}

fn cell(column: &Column, rows: &[usize], facts: &[RowFacts]) -> Cell {
    let is_number = column.kind == ColumnKind::Metric && column.numeric;
    if let [row] = rows {
        let value = facts[*row]
            .values
            .get(&column.id)
            .cloned()
            .unwrap_or(Value::Null);
        return Cell {
            n: is_number.then_some(usize::from(!value.is_null())),
            value,
            ..Cell::default()
        };
    }
    let values: Vec<&Value> = rows
        .iter()
        .filter_map(|&row| facts[row].values.get(&column.id))
        .collect();
    if column.kind == ColumnKind::Metric && column.numeric && rows.len() > 1 {
        let numbers: Vec<f64> = values.iter().filter_map(|value| value.as_f64()).collect();
        let n = numbers.len();
        // Equal values have that mean exactly, and no spread from rounding.
        let mean = match numbers.first() {
            Some(&first) if numbers.iter().all(|&x| x == first) => Some(first),
            _ => (n > 0).then(|| numbers.iter().sum::<f64>() / n as f64),
        };
        let std = mean.filter(|_| n > 1).map(|mean| {
            let squares: f64 = numbers.iter().map(|x| (x - mean).powi(2)).sum();
            (squares / (n - 1) as f64).sqrt()
        });
        return Cell {
            value: mean
                .and_then(serde_json::Number::from_f64)
                .map_or(Value::Null, Value::Number),
            std,
            n: Some(n),
            ..Cell::default()
        };
    }
    let mut distinct: Vec<&Value> = Vec::new();
    for value in values {
        if !distinct.contains(&value) {
            distinct.push(value);
        }
    }
    let value = match distinct.len() {
        0 => Value::Null,
        1 => distinct[0].clone(),
        _ => Value::Array(distinct.into_iter().cloned().collect()),
    };
    Cell {
        n: (column.kind == ColumnKind::Metric && column.numeric)
            .then_some(usize::from(!value.is_null())),
        value,
        ..Cell::default()
    }
}

fn sort_column<'a>(columns: &'a [Column], name: &str) -> Result<&'a Column> {
    let metrics: Vec<&Column> = columns
        .iter()
        .filter(|column| column.kind == ColumnKind::Metric)
        .collect();
    if let Some(column) = metrics.iter().find(|column| column.name == name) {
        return Ok(column);
    }
    let by_metric: Vec<&&Column> = metrics
        .iter()
        .filter(|column| column.metric.as_deref() == Some(name))
        .collect();
    match by_metric.as_slice() {
        [column] => Ok(column),
        [] => Err(EngineError::usage(
            format!("no metric `{name}` to sort by"),
            format!(
                "metrics shown: {}",
                metrics
                    .iter()
                    .map(|column| column.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        several => Err(EngineError::usage(
            format!("`{name}` is a metric of several stages"),
            format!(
                "name one: {}",
                several
                    .iter()
                    .map(|column| column.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// How many rows a warning names per value before "and N more".
const ROWS_NAMED_PER_VALUE: usize = 6;

/// "A in #1, #2; B in #3": which rows have which value. A run whose rows
/// all have one value is named once (`#3`), not row by row.
fn partition(values: &[(usize, String)], runs: &[ComparedRun], facts: &[RowFacts]) -> String {
    let mut value_of_run: HashMap<i64, Option<&str>> = HashMap::new();
    for (row, value) in values {
        let run = runs[facts[*row].run].run.id;
        let entry = value_of_run.entry(run).or_insert(Some(value.as_str()));
        if *entry != Some(value.as_str()) {
            *entry = None;
        }
    }
    let mut order: Vec<&str> = Vec::new();
    let mut rows_of: HashMap<&str, Vec<String>> = HashMap::new();
    let mut named_runs: HashSet<(i64, &str)> = HashSet::new();
    for (row, value) in values {
        let run = runs[facts[*row].run].run.id;
        let rows = rows_of.entry(value.as_str()).or_default();
        if rows.is_empty() {
            order.push(value);
        }
        if value_of_run[&run].is_some() {
            if named_runs.insert((run, value.as_str())) {
                rows.push(format!("#{run}"));
            }
        } else {
            rows.push(row_label(run, &facts[*row].matrix));
        }
    }
    order
        .iter()
        .map(|value| {
            let rows = &rows_of[value];
            let mut named = rows[..rows.len().min(ROWS_NAMED_PER_VALUE)].join(", ");
            if rows.len() > ROWS_NAMED_PER_VALUE {
                let _ = write!(named, " and {} more", rows.len() - ROWS_NAMED_PER_VALUE);
            }
            format!("{value} in {named}")
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether two rows with the same matrix combination have different
/// values of the hardware field `field`.
fn differs_within_a_combination(facts: &[RowFacts], field: &str) -> bool {
    let mut first_of: HashMap<Pairs, &Value> = HashMap::new();
    facts.iter().any(|row| {
        row.hardware
            .get(field)
            .is_some_and(|value| *first_of.entry(sorted(&row.matrix)).or_insert(value) != value)
    })
}

fn warnings(runs: &[ComparedRun], facts: &[RowFacts], matrix_keys: &[String]) -> Vec<Warning> {
    let mut warnings = Vec::new();

    let mut data_stages: Vec<(&String, &String)> = facts
        .iter()
        .flat_map(|row| row.data.iter().map(|(stage, (uses, _))| (stage, uses)))
        .collect();
    data_stages.sort();
    data_stages.dedup_by(|a, b| a.0 == b.0);
    for (stage, uses) in data_stages {
        let digests: Vec<(usize, &Vec<String>)> = facts
            .iter()
            .enumerate()
            .filter_map(|(index, row)| row.data.get(stage).map(|(_, digests)| (index, digests)))
            .collect();
        let mut version_of: HashMap<&Vec<String>, usize> = HashMap::new();
        let versions: Vec<(usize, String)> = digests
            .iter()
            .map(|(row, digest)| {
                let next = version_of.len() + 1;
                let version = *version_of.entry(digest).or_insert(next);
                (*row, format!("output {version}"))
            })
            .collect();
        if version_of.len() < 2 {
            continue;
        }
        warnings.push(Warning {
            kind: WarningKind::Data,
            message: format!(
                "the data differs: stage `{stage}` ({uses}) wrote different outputs: {}",
                partition(&versions, runs, facts)
            ),
            rows: digests.iter().map(|(row, _)| *row).collect(),
        });
    }

    let mut fields: Vec<&String> = facts.iter().flat_map(|row| row.hardware.keys()).collect();
    fields.sort();
    fields.dedup();
    for field in fields {
        // A device count that is a matrix key differs on purpose, and so
        // does one that differs between the rows of one run (a strategy
        // axis choosing it): it is compared only between rows of the same
        // combination.
        if matrix_keys.iter().any(|key| key == field) {
            continue;
        }
        if field == "devices" && !differs_within_a_combination(facts, field) {
            continue;
        }
        let values: Vec<(usize, String)> = facts
            .iter()
            .enumerate()
            .filter_map(|(index, row)| {
                row.hardware.get(field).map(|value| {
                    let text = match value {
                        Value::String(text) => text.clone(),
                        Value::Array(items) if items.is_empty() => "none".to_string(),
                        Value::Array(items) => items
                            .iter()
                            .map(|item| {
                                item.as_str().map_or_else(|| item.to_string(), String::from)
                            })
                            .collect::<Vec<_>>()
                            .join(", "),
                        other => other.to_string(),
                    };
                    (index, text)
                })
            })
            .collect();
        if values.iter().all(|(_, value)| *value == values[0].1) {
            continue;
        }
        warnings.push(Warning {
            kind: WarningKind::Hardware,
            message: format!(
                "the hardware differs: `{field}` is {}",
                partition(&values, runs, facts)
            ),
            rows: values.iter().map(|(row, _)| *row).collect(),
        });
    }

    if !matrix_keys.iter().any(|key| key == "precision") {
        let values: Vec<(usize, String)> = facts
            .iter()
            .enumerate()
            .filter_map(|(index, row)| row.precision.clone().map(|value| (index, value)))
            .collect();
        if values.iter().any(|(_, value)| *value != values[0].1) {
            warnings.push(Warning {
                kind: WarningKind::Precision,
                message: format!(
                    "the precision differs and is not a matrix key: {}",
                    partition(&values, runs, facts)
                ),
                rows: values.iter().map(|(row, _)| *row).collect(),
            });
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::{ComparedStage, RunRecord, RunStatus, StageStatus};
    use serde_json::json;

    fn stage(name: &str, metrics: Value) -> ComparedStage {
        ComparedStage {
            stage: name.to_string(),
            status: StageStatus::Ran,
            duration_ms: 1,
            metrics: serde_json::from_value(metrics).unwrap(),
            uses: None,
            outputs: None,
            with_seed: None,
            with_precision: None,
        }
    }

    fn run(id: i64, params: Value, stages: Vec<ComparedStage>) -> ComparedRun {
        ComparedRun {
            run: RunRecord {
                id,
                uid: None,
                origin: None,
                pipeline: "p".into(),
                started_ms: 0,
                ended_ms: Some(1),
                status: RunStatus::Succeeded,
                git_commit: None,
                git_dirty: None,
                argv: vec![],
                params,
                directions: Default::default(),
                stages: vec![],
            },
            stages,
        }
    }

    #[test]
    fn a_matrix_run_is_one_row_per_combination_with_its_shared_stages() {
        let runs = [run(
            1,
            json!({}),
            vec![
                stage("prepare", json!({"rows": 10})),
                stage("train@p=32,s=a", json!({"loss": 1.0})),
                stage("train@p=16,s=a", json!({"loss": 0.5})),
                stage("eval@p=32", json!({"accuracy": 0.8})),
                stage("eval@p=16", json!({"accuracy": 0.7})),
            ],
        )];
        let rows = rows_of_run(&runs[0]);
        let names: Vec<Vec<&str>> = rows
            .iter()
            .map(|(_, stages)| {
                stages
                    .iter()
                    .map(|&s| runs[0].stages[s].stage.as_str())
                    .collect()
            })
            .collect();
        assert_eq!(
            names,
            // Matrix values in order, numbers as numbers.
            [
                vec!["prepare", "train@p=16,s=a", "eval@p=16"],
                vec!["prepare", "train@p=32,s=a", "eval@p=32"],
            ]
        );
        let table = compare_runs(&runs, &CompareOptions::default()).unwrap();
        let accuracy = &table.groups[1].cells["metric:eval.accuracy"];
        assert!((accuracy.delta.unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(accuracy.verdict, Some(Verdict::Better));
        assert_eq!(
            table.groups[1].cells["metric:train.loss"].verdict,
            Some(Verdict::Worse)
        );
    }

    #[test]
    fn a_device_count_chosen_by_the_matrix_is_no_hardware_difference() {
        let matrix_run = |id: i64, ddp_devices: i64| {
            run(
                id,
                json!({}),
                vec![
                    stage(
                        "train@strategy=single",
                        json!({"devices": 1, "accuracy": 0.8}),
                    ),
                    stage(
                        "train@strategy=ddp",
                        json!({"devices": ddp_devices, "accuracy": 0.8}),
                    ),
                ],
            )
        };
        let one = compare_runs(&[matrix_run(1, 2)], &CompareOptions::default()).unwrap();
        assert!(one.warnings.is_empty(), "{:?}", one.warnings);
        let two = compare_runs(
            &[matrix_run(1, 2), matrix_run(2, 4)],
            &CompareOptions::default(),
        )
        .unwrap();
        assert_eq!(two.warnings.len(), 1, "{:?}", two.warnings);
        assert_eq!(two.warnings[0].kind, WarningKind::Hardware);
    }

    #[test]
    fn gpus_are_compared_as_the_set_of_their_models() {
        let with_gpus = |id: i64, strategy: &str, gpus: Value| {
            run(
                id,
                json!({}),
                vec![stage(
                    &format!("train@strategy={strategy}"),
                    json!({"hardware.gpus": gpus, "hardware.cpu": null, "accuracy": 0.8}),
                )],
            )
        };
        let same = [
            with_gpus(1, "single", json!(["H200"])),
            with_gpus(2, "ddp", json!(["H200", "H200"])),
        ];
        let table = compare_runs(&same, &CompareOptions::default()).unwrap();
        assert!(table.warnings.is_empty(), "{:?}", table.warnings);
        let other = [
            with_gpus(1, "single", json!(["H200"])),
            with_gpus(2, "single", json!([])),
        ];
        let table = compare_runs(&other, &CompareOptions::default()).unwrap();
        assert_eq!(
            table.warnings[0].message,
            "the hardware differs: `hardware.gpus` is H200 in #1; none in #2"
        );
    }

    #[test]
    fn rows_that_differ_only_in_their_seed_are_one_group_with_sample_std() {
        let runs: Vec<ComparedRun> = [(1, 1, 0.8), (2, 2, 0.9), (3, 3, 1.0)]
            .into_iter()
            .map(|(id, seed, accuracy)| {
                run(
                    id,
                    json!({"seed": seed, "lr": 0.1}),
                    vec![stage("eval", json!({"accuracy": accuracy}))],
                )
            })
            .chain([run(
                4,
                json!({"seed": 1, "lr": 0.2}),
                vec![stage("eval", json!({"accuracy": 0.5}))],
            )])
            .collect();
        let table = compare_runs(&runs, &CompareOptions::default()).unwrap();
        assert_eq!(table.groups.len(), 2);
        let cell = &table.groups[0].cells["metric:eval.accuracy"];
        assert_eq!(cell.n, Some(3));
        assert!((cell.value.as_f64().unwrap() - 0.9).abs() < 1e-12);
        assert!((cell.std.unwrap() - 0.1).abs() < 1e-12);
        let per_seed = CompareOptions {
            per_seed: true,
            ..CompareOptions::default()
        };
        assert_eq!(compare_runs(&runs, &per_seed).unwrap().groups.len(), 4);
    }
}
