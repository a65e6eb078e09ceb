//! The warnings of a compare table: rows that are not comparable because
//! their data, hardware or precision differ, read from the roles their
//! stages declared.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use serde_json::Value;

use super::columns::row_label;
use super::model::{sorted, Pairs, RowFacts, Warning, WarningKind};
use crate::runs::{RunId, RunRecord};

/// How many rows a warning names per value before "and N more".
const ROWS_NAMED_PER_VALUE: usize = 6;

/// "A in #1, #2; B in #3": which rows have which value. A run whose rows
/// all have one value is named once (`#3`), not row by row.
fn partition(values: &[(usize, String)], runs: &[RunRecord], facts: &[RowFacts]) -> String {
    let mut value_of_run: HashMap<RunId, Option<&str>> = HashMap::new();
    for (row, value) in values {
        let run = runs[facts[*row].run].id;
        let entry = value_of_run.entry(run).or_insert(Some(value.as_str()));
        if *entry != Some(value.as_str()) {
            *entry = None;
        }
    }
    let mut order: Vec<&str> = Vec::new();
    let mut rows_of: HashMap<&str, Vec<String>> = HashMap::new();
    let mut named_runs: HashSet<(RunId, &str)> = HashSet::new();
    for (row, value) in values {
        let run = runs[facts[*row].run].id;
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

/// Whether two rows of one run have different values of the hardware
/// field `field`: the matrix chose it (a strategy axis, the device count).
fn chosen_within_a_run(facts: &[RowFacts], field: &str) -> bool {
    let mut first_of: HashMap<usize, &Value> = HashMap::new();
    facts.iter().any(|row| {
        row.hardware
            .get(field)
            .is_some_and(|value| *first_of.entry(row.run).or_insert(value) != value)
    })
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

pub(super) fn warnings(
    runs: &[RunRecord],
    facts: &[RowFacts],
    matrix_keys: &[String],
) -> Vec<Warning> {
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
        if chosen_within_a_run(facts, field) && !differs_within_a_combination(facts, field) {
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

    // A precision the user set with `-S` differs on purpose, as a matrix
    // key's does: the run record keeps the command line that set it.
    if !matrix_keys.iter().any(|key| key == "precision") && !precision_overridden(runs) {
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

/// Whether a run of the table set a precision param with `-S`: one whose
/// last name is `precision`, or is the param a stage's roles say picks
/// the precision.
fn precision_overridden(runs: &[RunRecord]) -> bool {
    runs.iter().any(|compared| {
        let role_params: Vec<&str> = compared
            .stages
            .iter()
            .filter_map(|stage| stage.identity.roles.precision.as_deref())
            .collect();
        compared.overridden_params().any(|path| {
            let name = path.keys().last().map_or("", String::as_str);
            name == "precision" || role_params.contains(&name)
        })
    })
}
