//! The columns of a compare table, how its rows group (seeds into mean ±
//! std), which group is the baseline, and the cells.

use std::collections::HashMap;

use serde_json::Value;

use super::model::{
    is_seed_name, metric_id, Cell, Column, ColumnKind, CompareOptions, Pairs, RowFacts,
};
use crate::metrics::key_by_roles;
use crate::runs::{RunId, RunRecord};
use crate::{Result, UsageError};
use pipe_protocol::format::Unit;

/// The columns a table shows, and the metrics that differ but are left
/// out.
pub(crate) struct Shown {
    pub columns: Vec<Column>,
    pub hidden_metrics: Vec<String>,
}

pub(super) fn columns(
    facts: &[RowFacts],
    metric_order: &[(String, String)],
    matrix_keys: &[String],
    declared_keys: &HashMap<String, bool>,
    options: &CompareOptions,
) -> Shown {
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
        label: name.clone(),
        name,
        kind,
        stage: None,
        metric: None,
        direction: None,
        numeric: false,
        differs: false,
        key: false,
        unit: None,
        by_default: false,
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
    // A sweep's keys that stand for a swept param have no values of their
    // own: the param's column shows them.
    for key in matrix_keys.iter().filter(|key| {
        let id = format!("matrix:{key}");
        facts.iter().any(|row| row.values.contains_key(&id))
    }) {
        candidates.push(plain(
            format!("matrix:{key}"),
            key.clone(),
            ColumnKind::Matrix,
        ));
    }
    let mut metrics: Vec<Column> = metric_order
        .iter()
        .map(|(stage, metric)| {
            let id = metric_id(stage, metric);
            // A stage that declares its key metrics decides for its own;
            // others are judged by name. The pipeline and the command line
            // add to both.
            let key = options.rules.names(stage, metric)
                || key_by_roles(declared_keys.get(&id).copied(), metric);
            Column {
                id,
                name: format!("{stage}.{metric}"),
                label: format!("{stage}.{metric}"),
                kind: ColumnKind::Metric,
                stage: Some(stage.clone()),
                metric: Some(metric.clone()),
                direction: Some(options.rules.direction(stage, metric)),
                numeric: false,
                differs: false,
                key,
                unit: Unit::of(metric),
                by_default: false,
            }
        })
        .collect();
    // Key metrics first, the rest in the order the stages ran.
    metrics.sort_by_key(|column| !column.key);
    // With no key metric at all, the table shows what differs, as before
    // anything was declared.
    let any_key = metrics.iter().any(|column| column.key);
    candidates.extend(metrics);
    let mut hidden_metrics = Vec::new();
    let mut shown: Vec<Column> = candidates
        .into_iter()
        .filter_map(|mut column| {
            let values: Vec<Option<&Value>> =
                facts.iter().map(|row| row.values.get(&column.id)).collect();
            column.differs = values.iter().any(|value| *value != values[0]);
            column.numeric = values.iter().flatten().all(|value| value.is_number())
                && values.iter().any(Option::is_some);
            let is_text = values.iter().flatten().any(|value| value.is_string());
            let shown = match column.kind {
                ColumnKind::Matrix => true,
                ColumnKind::Metric if !options.metrics.is_empty() => {
                    options.metrics.iter().any(|glob| {
                        glob_matches(glob, &column.name)
                            || column
                                .metric
                                .as_deref()
                                .is_some_and(|metric| glob_matches(glob, metric))
                    })
                }
                ColumnKind::Metric if column.key => true,
                // Free text (`peak_source`, a precision also shown as its
                // param) says nothing a table of results can compare.
                ColumnKind::Metric if is_text => false,
                ColumnKind::Metric => {
                    let worth = column.differs && !repeats_a_param(&column, facts);
                    if worth && any_key && !options.all_columns {
                        hidden_metrics.push(column.name.clone());
                    }
                    worth && !any_key
                }
                _ => column.differs,
            };
            column.by_default = shown;
            (shown || options.all_columns).then_some(column)
        })
        .collect();
    unique_names(&mut shown);
    short_labels(&mut shown);
    Shown {
        columns: shown,
        hidden_metrics,
    }
}

/// `*` stands for any text, everything else for itself.
pub(crate) fn glob_matches(glob: &str, text: &str) -> bool {
    let mut parts = glob.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// A metric column is headed by its name within its stage (`val_acc`)
/// when no other column shown has that header: narrow tables read at a
/// glance; the full name stays in `name` (JSON, CSV, `--sort`).
fn short_labels(columns: &mut [Column]) {
    let mut metric_names: HashMap<String, usize> = HashMap::new();
    for column in columns.iter_mut() {
        column.label = column.name.clone();
        if let Some(metric) = &column.metric {
            *metric_names.entry(metric.clone()).or_default() += 1;
        }
    }
    let taken: std::collections::HashSet<String> = columns
        .iter()
        .map(|column| column.name.clone())
        .chain(["run".to_string()])
        .collect();
    for column in columns.iter_mut() {
        if let Some(metric) = &column.metric {
            if metric_names.get(metric) == Some(&1) && !taken.contains(metric) {
                column.label = metric.clone();
            }
        }
    }
}

/// Whether the metric column holds, in every row, the value of a param
/// of the same name (`precision` as a param and as what training
/// reported): one thing, shown once, as the param.
fn repeats_a_param(column: &Column, facts: &[RowFacts]) -> bool {
    let Some(name) = column.metric.as_deref() else {
        return false;
    };
    let name = name.rsplit('.').next().unwrap_or(name);
    let mut params: Vec<&str> = facts
        .iter()
        .flat_map(|row| row.values.keys())
        .filter_map(|id| id.strip_prefix("param:"))
        .filter(|path| path.rsplit('.').next() == Some(name))
        .collect();
    params.sort_unstable();
    params.dedup();
    params.into_iter().any(|path| {
        let param = format!("param:{path}");
        facts.iter().all(
            |row| match (row.values.get(&column.id), row.values.get(&param)) {
                (None, _) => true,
                (Some(metric), Some(param)) => same_value(metric, param),
                (Some(_), None) => false,
            },
        )
    })
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// The header `run` (the row label) and each column's name appear once:
/// a param or matrix key whose name is taken is shown with its kind in
/// front (`matrix.run`, `param.n`).
fn unique_names(columns: &mut [Column]) {
    let mut taken: std::collections::HashSet<String> = ["run".to_string()].into();
    for column in columns.iter_mut() {
        if !taken.insert(column.name.clone()) {
            let kind = match column.kind {
                ColumnKind::Param => "param",
                ColumnKind::Matrix => "matrix",
                ColumnKind::Metric => "metric",
                ColumnKind::Pipeline => "pipeline",
            };
            column.name = format!("{kind}.{}", column.name);
            taken.insert(column.name.clone());
        }
    }
}

/// The group of each row: rows of one pipeline, commit and params that
/// differ only in a seed (a param or matrix key named `seed`, or a
/// built-in stage's `with.seed`).
pub(super) fn group_rows(runs: &[RunRecord], facts: &[RowFacts], per_seed: bool) -> Vec<usize> {
    if per_seed {
        return (0..facts.len()).collect();
    }
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut group_of_identity: HashMap<String, usize> = HashMap::new();
    for (index, row) in facts.iter().enumerate() {
        let run = &runs[row.run];
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
    // not repetitions over seeds: they stay apart, unless their results
    // are the same too (a run that restored another's): one line.
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
            let mut alike: Vec<Vec<usize>> = Vec::new();
            for row in rows {
                match alike
                    .iter_mut()
                    .find(|same| facts[same[0]].values == facts[row].values)
                {
                    Some(same) => same.push(row),
                    None => alike.push(vec![row]),
                }
            }
            first_of_group.extend(alike.into_iter().map(|same| (same[0], same)));
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

pub(super) fn baseline_group(
    runs: &[RunRecord],
    facts: &[RowFacts],
    group_of_row: &[usize],
    options: &CompareOptions,
) -> Result<usize> {
    let run = options.baseline_run.unwrap_or(runs[facts[0].run].id);
    let of_run: Vec<usize> = (0..facts.len())
        .filter(|&row| runs[facts[row].run].id == run)
        .collect();
    if of_run.is_empty() {
        return Err(UsageError::BaselineNotCompared { run }.into());
    }
    for (key, _) in &options.baseline_row {
        if !of_run
            .iter()
            .any(|&row| facts[row].matrix.get(key).is_some())
        {
            let keys: Vec<String> = facts[of_run[0]]
                .matrix
                .0
                .iter()
                .map(|(key, _)| key.clone())
                .collect();
            return Err(UsageError::NoMatrixKey {
                run,
                key: key.clone(),
                keys,
            }
            .into());
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
    let label = |row: usize| row_label(runs[facts[row].run].id, &facts[row].matrix);
    let Some(&first) = matching.first() else {
        let rows: Vec<String> = of_run.iter().map(|&row| label(row)).collect();
        return Err(UsageError::NoBaselineRow { run, rows }.into());
    };
    let group = group_of_row[first];
    if options.baseline_row.is_empty() || matching.iter().all(|&row| group_of_row[row] == group) {
        return Ok(group);
    }
    let rows: Vec<String> = matching.iter().map(|&row| label(row)).collect();
    Err(UsageError::AmbiguousBaselineRow { run, rows }.into())
}

/// `#3` or `#3 (precision=bf16-mixed,strategy=ddp)`.
pub fn row_label(run: RunId, matrix: &Pairs) -> String {
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

pub(super) fn cell(column: &Column, rows: &[usize], facts: &[RowFacts]) -> Cell {
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

pub(super) fn sort_column<'a>(columns: &'a [Column], name: &str) -> Result<&'a Column> {
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
        [] => Err(UsageError::UnknownSortMetric {
            name: name.to_string(),
            shown: metrics.iter().map(|column| column.name.clone()).collect(),
        }
        .into()),
        several => Err(UsageError::AmbiguousSortMetric {
            name: name.to_string(),
            columns: several.iter().map(|column| column.name.clone()).collect(),
        }
        .into()),
    }
}
