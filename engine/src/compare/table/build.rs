//! Building the compare table from runs: rows, seed groups, columns,
//! baseline deltas and warnings.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use super::columns::{baseline_group, cell, columns, group_rows, sort_column, Shown};
use super::model::*;
use super::warnings::warnings;
use crate::key;
use crate::metrics::{relative_change, Direction};
use crate::runs::{RunId, RunRecord};
use crate::{Result, UsageError};
use pipe_protocol::record::rows_by_combination;

/// Builds the table of `runs` (in the order given).
pub fn compare_runs(runs: &[RunRecord], options: &CompareOptions) -> Result<CompareTable> {
    if runs.is_empty() {
        return Err(UsageError::NoRunSelected.into());
    }
    let Collected {
        facts,
        metric_order,
        matrix_keys,
        declared_keys,
    } = collect_rows(runs);
    let Shown {
        columns,
        hidden_metrics,
    } = columns(&facts, &metric_order, &matrix_keys, &declared_keys, options);
    let group_of_row = group_rows(runs, &facts, options.per_seed);
    let mut groups = groups_of_rows(runs, &facts, &group_of_row);
    let baseline_group = baseline_group(runs, &facts, &group_of_row, options)?;
    for group in &mut groups {
        for column in &columns {
            group
                .cells
                .insert(column.id.clone(), cell(column, &group.distinct, &facts));
        }
    }
    add_baseline_deltas(&mut groups, &columns, baseline_group);

    let warnings = warnings(runs, &facts, &matrix_keys);
    let rows = table_rows(runs, facts, &group_of_row, &columns);
    let order = group_order(&groups, &columns, options)?;
    let (groups, rows, baseline) = reordered(groups, rows, &order, baseline_group);
    Ok(CompareTable {
        columns,
        rows,
        groups,
        baseline,
        warnings,
        hidden_metrics,
    })
}

/// The rows of every run, with the metrics and matrix keys in the order
/// they were first seen.
struct Collected {
    facts: Vec<RowFacts>,
    /// (stage, metric) pairs.
    metric_order: Vec<(String, String)>,
    matrix_keys: Vec<String>,
    /// By metric column id: whether a stage that declares its key metrics
    /// (`StageRoles::key_metrics`) counts it among them.
    declared_keys: HashMap<String, bool>,
}

fn collect_rows(runs: &[RunRecord]) -> Collected {
    let mut metric_order: Vec<(String, String)> = Vec::new();
    let mut seen_metrics: HashSet<String> = HashSet::new();
    let mut matrix_keys: Vec<String> = Vec::new();
    let mut declared_keys: HashMap<String, bool> = HashMap::new();
    let mut facts: Vec<RowFacts> = Vec::new();
    for (run_index, compared) in runs.iter().enumerate() {
        for (combo, stages) in rows_of_run(compared) {
            for (key, _) in &combo.0 {
                if !matrix_keys.contains(key) {
                    matrix_keys.push(key.clone());
                }
            }
            let row = row_facts(
                compared,
                run_index,
                combo,
                &stages,
                &mut |stage, metric, declared| {
                    let id = metric_id(stage, metric);
                    if let Some(key) = declared {
                        let known = declared_keys.entry(id.clone()).or_insert(key);
                        *known |= key;
                    }
                    if seen_metrics.insert(id) {
                        metric_order.push((stage.to_string(), metric.to_string()));
                    }
                },
            );
            facts.push(row);
        }
    }
    Collected {
        facts,
        metric_order,
        matrix_keys,
        declared_keys,
    }
}

/// The groups `group_of_row` puts the rows in, each with its rows and
/// runs; cells are filled in later.
fn groups_of_rows(runs: &[RunRecord], facts: &[RowFacts], group_of_row: &[usize]) -> Vec<Group> {
    let group_count = group_of_row.iter().max().map_or(0, |max| max + 1);
    let mut groups: Vec<Group> = (0..group_count)
        .map(|_| Group {
            rows: Vec::new(),
            runs: Vec::new(),
            n: 0,
            repeats: Vec::new(),
            distinct: Vec::new(),
            cells: BTreeMap::new(),
        })
        .collect();
    let mut runs_of_group: HashSet<(usize, RunId)> = HashSet::new();
    for (row, &group_index) in group_of_row.iter().enumerate() {
        let group = &mut groups[group_index];
        group.rows.push(row);
        let run = runs[facts[row].run].id;
        if runs_of_group.insert((group_index, run)) {
            group.runs.push(run);
        }
        // A result already in the line (the same values, seed included)
        // is a repeat of it, not another sample of the mean.
        match group
            .distinct
            .iter()
            .find(|&&earlier| facts[earlier].values == facts[row].values)
        {
            Some(&earlier) => {
                let same_as = runs[facts[earlier].run].id;
                if same_as != run {
                    group.repeats.push(Repeat { run, same_as });
                }
            }
            None => group.distinct.push(row),
        }
        group.n = group.distinct.len();
    }
    groups
}

/// Each numeric cell with a direction, against the baseline group's:
/// the change, relative change and verdict.
fn add_baseline_deltas(groups: &mut [Group], columns: &[Column], baseline_group: usize) {
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
}

/// The rows as shown: their values only for the columns kept.
fn table_rows(
    runs: &[RunRecord],
    facts: Vec<RowFacts>,
    group_of_row: &[usize],
    columns: &[Column],
) -> Vec<Row> {
    let shown: HashSet<&str> = columns.iter().map(|column| column.id.as_str()).collect();
    facts
        .into_iter()
        .zip(group_of_row)
        .map(|(facts, &group)| {
            let run = &runs[facts.run];
            let mut values = facts.values;
            values.retain(|id, _| shown.contains(id.as_str()));
            Row {
                run: run.id,
                pipeline: run.pipeline.clone(),
                git_commit: run.git_commit.clone(),
                matrix: facts.matrix,
                values,
                group,
                stages: facts.stages,
            }
        })
        .collect()
}

/// The groups in the order shown: as built, or best first by `--sort`.
fn group_order(
    groups: &[Group],
    columns: &[Column],
    options: &CompareOptions,
) -> Result<Vec<usize>> {
    let mut order: Vec<usize> = (0..groups.len()).collect();
    if let Some(metric) = &options.sort {
        let column = sort_column(columns, metric)?;
        let direction = column.direction.unwrap_or(Direction::Unknown);
        if direction == Direction::Unknown {
            return Err(UsageError::NoSortDirection {
                column: column.name.clone(),
            }
            .into());
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
    Ok(order)
}

/// The groups put in `order`, the rows' group numbers and the baseline
/// following them.
fn reordered(
    groups: Vec<Group>,
    rows: Vec<Row>,
    order: &[usize],
    baseline_group: usize,
) -> (Vec<Group>, Vec<Row>, Baseline) {
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
    (groups, rows, baseline)
}

/// The rows of one run: the record's one definition of them
/// (`rows_by_combination`), shared with the HTML page and `report/html`.
fn rows_of_run(compared: &RunRecord) -> Vec<(Pairs, Vec<usize>)> {
    rows_by_combination(compared.stages.iter().map(|stage| {
        let shows_something = !stage.metrics.is_empty() || stage.identity.roles.makes_data;
        stage.identity.combination.splitting_rows(shows_something)
    }))
    .into_iter()
    .map(|row| (Pairs(row.combination.0), row.stages))
    .collect()
}

/// A sweep row's swept params: for each matrix key that names one (the
/// param's path, or its last segments, as `sweep::merge` keys them) and
/// whose value is one of the param's listed values, the path -> (the key,
/// that value as the record types it), so that the row shows `train.lr`
/// 0.05 where the run's record lists `[0.05, 0.2]`, and no second column
/// `lr` beside it.
fn swept_values(
    params: &BTreeMap<String, Value>,
    matrix: &Pairs,
) -> BTreeMap<String, (String, Value)> {
    let mut swept = BTreeMap::new();
    for (key, text) in &matrix.0 {
        let mut candidates = params.iter().filter(|(path, value)| {
            value.is_array() && (*path == key || path.ends_with(&format!(".{key}")))
        });
        let (Some((path, Value::Array(values))), None) = (candidates.next(), candidates.next())
        else {
            continue;
        };
        if let Some(chosen) = values.iter().find(|value| same_value(value, text)) {
            swept.insert(path.clone(), (key.clone(), chosen.clone()));
        }
    }
    swept
}

/// Whether `text`, a matrix value as `-S` gave it, is `value`: numbers as
/// numbers (`1e-4` is 0.0001), strings as themselves.
fn same_value(value: &Value, text: &str) -> bool {
    match value {
        Value::String(string) => string == text,
        Value::Number(number) => match (number.as_f64(), text.trim().parse::<f64>()) {
            (Some(number), Ok(parsed)) => number == parsed,
            _ => false,
        },
        Value::Bool(flag) => text.trim().parse::<bool>() == Ok(*flag),
        Value::Null => text.trim() == "null",
        // A swept value is a scalar: a list or a mapping is never one.
        Value::Array(_) | Value::Object(_) => false,
    }
}

fn row_facts(
    compared: &RunRecord,
    run: usize,
    matrix: Pairs,
    stages: &[usize],
    note_metric: &mut impl FnMut(&str, &str, Option<bool>),
) -> RowFacts {
    let mut values = BTreeMap::new();
    values.insert(
        "pipeline".to_string(),
        Value::String(compared.pipeline.clone()),
    );
    let mut seeds = Vec::new();
    let mut precision = None;
    let params = key::flatten(&compared.params);
    let swept = if compared.sweep {
        swept_values(&params, &matrix)
    } else {
        BTreeMap::new()
    };
    for (path, value) in params {
        if path.is_empty() {
            continue;
        }
        // A sweep's record holds each swept param as the list of its
        // values; this row is one of them.
        let value = match swept.get(&path) {
            Some((_, chosen)) => chosen.clone(),
            None => value,
        };
        if is_seed_name(&path) {
            seeds.push(value.clone());
        }
        if path.rsplit('.').next() == Some("precision") {
            precision = value.as_str().map(String::from);
        }
        values.insert(format!("param:{path}"), value);
    }
    for (key, value) in &matrix.0 {
        if swept.values().any(|(axis, _)| axis == key) {
            continue;
        }
        if key == "seed" {
            seeds.push(Value::String(value.clone()));
        }
        values.insert(format!("matrix:{key}"), Value::String(value.clone()));
    }
    let mut hardware = BTreeMap::new();
    let mut data = BTreeMap::new();
    for &index in stages {
        let stage = &compared.stages[index];
        let identity = &stage.identity;
        let base = identity.base_name.as_str();
        let roles = &identity.roles;
        if let Some(seed) = &identity.role_values.seed {
            seeds.push(seed.clone());
        }
        if let Some(Value::String(text)) = &identity.role_values.precision {
            precision.get_or_insert_with(|| text.clone());
        }
        for (metric, value) in &stage.metrics {
            if roles.is_hardware_metric(metric) {
                if let Some(value) = hardware_value(value) {
                    hardware.insert(metric.clone(), value);
                }
            }
            // Detail (per epoch, per class, the confusion matrix, the
            // machine) is too much or too nested to be columns; `pipe show`
            // and reports have it.
            if (roles.is_detail_metric(metric) && !roles.is_hardware_metric(metric))
                || matches!(value, Value::Array(_) | Value::Object(_) | Value::Null)
            {
                continue;
            }
            note_metric(base, metric, roles.declares_key(metric));
            values.insert(metric_id(base, metric), value.clone());
        }
        // Only data is told apart by its digests: a model's would differ
        // on every rerun of a nondeterministic training.
        if identity.roles.makes_data {
            let outputs = &stage.outputs;
            let uses = identity
                .uses
                .clone()
                .unwrap_or_else(|| "command".to_string());
            let digests = outputs
                .values()
                .map(|artifact| artifact.digest.to_hex())
                .collect();
            data.insert(base.to_string(), (uses, digests));
        }
    }
    if let Some(value) = matrix.get("precision") {
        precision = Some(value.to_string());
    }
    RowFacts {
        run,
        stages: stages.to_vec(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Verdict;
    use crate::runs::{RunRecord, RunStatus, StageRecord, StageStatus};
    use serde_json::json;

    fn stage(name: &str, metrics: Value) -> StageRecord {
        let identity = crate::runs::legacy_identity(name, None);
        StageRecord {
            duration_ms: 1,
            metrics: serde_json::from_value(metrics).unwrap(),
            ..StageRecord::new(name, identity, StageStatus::Ran)
        }
    }

    fn run(id: i64, params: Value, stages: Vec<StageRecord>) -> RunRecord {
        RunRecord {
            sweep: false,
            id: RunId(id),
            uid: None,
            origin: None,
            pipeline: "p".into(),
            file: None,
            started_ms: 0,
            ended_ms: Some(1),
            status: RunStatus::Succeeded,
            git_commit: None,
            git_dirty: None,
            argv: vec![],
            overrides: vec![],
            params,
            directions: Default::default(),
            stages,
            name: None,
            tags: vec![],
            labels_ms: None,
            unverified: vec![],
            branch: None,
            head_commit: None,
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
            // In the pipeline's order: the order the matrix declares.
            [
                vec!["prepare", "train@p=32,s=a", "eval@p=32"],
                vec!["prepare", "train@p=16,s=a", "eval@p=16"],
            ]
        );
        let table = compare_runs(&runs, &CompareOptions::default()).unwrap();
        let accuracy = &table.groups[1].cells["metric:eval.accuracy"];
        assert!((accuracy.delta.unwrap() + 0.1).abs() < 1e-12);
        assert_eq!(accuracy.verdict, Some(Verdict::Worse));
        assert_eq!(
            table.groups[1].cells["metric:train.loss"].verdict,
            Some(Verdict::Better)
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
        let runs: Vec<RunRecord> = [(1, 1, 0.8), (2, 2, 0.9), (3, 3, 1.0)]
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
