//! The report's results table (one row per matrix combination, the
//! baseline, speed-ups), its params and its stage times.

use pipe_protocol::format::format_seconds;
use pipe_protocol::{RunContext, RunStage};
use pipe_report::text::format_number;
use pipe_report::{BarChart, Cell, Document, Table};
use serde_json::{Number, Value};

use super::model::{lookup, metric_cell, rows, value_text, MetricColumn, Options, Row};
use super::sections::draw_error;
use crate::{Result, StageError};

/// The numeric metrics of `stages`, in stage order, names sorted.
pub(super) fn default_columns(stages: &[&RunStage]) -> Vec<MetricColumn> {
    let mut columns: Vec<MetricColumn> = Vec::new();
    for stage in stages {
        for (name, value) in &stage.metrics {
            if value.is_number() && !stage.roles.is_detail_metric(name) {
                let column = MetricColumn {
                    stage: stage.base_name.clone(),
                    metric: name.clone(),
                };
                if !columns.contains(&column) {
                    columns.push(column);
                }
            }
        }
    }
    columns
}

pub(super) fn results(document: &mut Document, run: &RunContext, options: &Options) -> Result<()> {
    let rows = rows(run);
    let columns = match &options.metrics {
        Some(columns) => columns.clone(),
        None => {
            // With a matrix, the columns are what its stages measured; the
            // stages outside it are the same in every row.
            let with_matrix = run.stages.iter().any(|stage| !stage.combination.is_empty());
            let mut in_rows: Vec<&RunStage> = rows
                .iter()
                .flat_map(|row| row.stages.iter().copied())
                .filter(|stage| !with_matrix || !stage.combination.is_empty())
                .collect();
            in_rows.dedup_by(|a, b| a.name == b.name);
            default_columns(&in_rows)
        }
    };
    let baseline = match &options.baseline {
        None => 0,
        Some(pairs) => baseline_row(&rows, pairs)?,
    };
    let mut keys: Vec<String> = Vec::new();
    for row in &rows {
        for (key, _) in &row.combination.0 {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
    }
    let mut header: Vec<String> = keys.clone();
    header.extend(columns.iter().map(MetricColumn::label));
    if options.speedup.is_some() {
        header.push("speed-up".into());
    }
    let mut table = Table::new(header);
    let baseline_time = options
        .speedup
        .as_ref()
        .and_then(|column| lookup(&rows[baseline], column))
        .and_then(Value::as_f64);
    for row in &rows {
        let mut cells: Vec<Cell> = keys
            .iter()
            .map(|key| {
                row.combination
                    .get(key)
                    .map_or_else(Cell::missing, |value| Cell::text(value.to_string()))
            })
            .collect();
        cells.extend(
            columns
                .iter()
                .map(|column| metric_cell(lookup(row, column), &column.metric)),
        );
        if let Some(column) = &options.speedup {
            let time = lookup(row, column).and_then(Value::as_f64);
            cells.push(match (baseline_time, time) {
                (Some(base), Some(time)) if base > 0.0 && time > 0.0 => {
                    let ratio = base / time;
                    Cell::number_as(ratio, format!("{}x", format_number(ratio)))
                }
                _ => Cell::missing(),
            });
        }
        table.rows.push(cells);
    }
    document.heading(2, "Results");
    if rows.len() > 1 {
        document.paragraph(format!(
            "One row per matrix combination; baseline: {}.",
            rows[baseline].describe()
        ));
    }
    if let Some(column) = &options.speedup {
        document.paragraph(format!(
            "speed-up: the baseline's {} divided by the row's.",
            column.label()
        ));
    }
    if table.columns.is_empty() {
        document.paragraph("No stage reported a numeric metric.");
    } else {
        document.table(table);
    }
    Ok(())
}

pub(super) fn baseline_row(rows: &[Row], pairs: &[(String, String)]) -> Result<usize> {
    let listed = || {
        rows.iter()
            .map(Row::describe)
            .collect::<Vec<_>>()
            .join("; ")
    };
    let matching: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(_, row)| pairs.iter().all(|pair| row.combination.0.contains(pair)))
        .map(|(index, _)| index)
        .collect();
    match matching.as_slice() {
        [index] => Ok(*index),
        [] => Err(StageError::param(
            "baseline",
            format!(
                "no matrix combination of this run matches `{}`",
                pairs
                    .iter()
                    .map(|(key, value)| format!("{key}={value}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            format!("the run's combinations: {}", listed()),
        )),
        _ => Err(StageError::param(
            "baseline",
            format!("{} matrix combinations match it", matching.len()),
            format!("name more keys, so that one of these matches: {}", listed()),
        )),
    }
}

/// The spellings of numbers that the run's matrix values give them
/// (`1.0e-4`), by value: the stage names (`train@lr=1.0e-4`) and the
/// results table's rows write a matrix value as the pipeline wrote it,
/// and the params table writes the same number the same way, rather than
/// as its JSON value prints (`0.0001`).
struct NumberTexts(Vec<(f64, String)>);

impl NumberTexts {
    fn of(run: &RunContext) -> NumberTexts {
        let mut texts: Vec<(f64, String)> = Vec::new();
        for stage in &run.stages {
            for (_, text) in &stage.combination.0 {
                let Some(value) = text.parse::<f64>().ok().filter(|value| value.is_finite()) else {
                    continue;
                };
                if !texts.iter().any(|(known, _)| *known == value) {
                    texts.push((value, text.clone()));
                }
            }
        }
        NumberTexts(texts)
    }

    /// `number` as a matrix value wrote it, else as `fallback` does.
    fn text(&self, number: &Number, fallback: impl Fn(&Number) -> String) -> String {
        let written = number
            .as_f64()
            .filter(|_| number.is_f64())
            .and_then(|value| {
                self.0
                    .iter()
                    .find(|(known, _)| *known == value)
                    .map(|(_, text)| text.clone())
            });
        written.unwrap_or_else(|| fallback(number))
    }

    /// A list or other param value as compact JSON, its numbers spelt as
    /// [`NumberTexts::text`] spells them.
    fn json(&self, value: &Value) -> String {
        match value {
            Value::Number(number) => self.text(number, Number::to_string),
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(|item| self.json(item)).collect();
                format!("[{}]", items.join(","))
            }
            other => other.to_string(),
        }
    }
}

/// Nested params as `a.b` -> value text, in the params' own order.
fn flatten_params(
    prefix: &str,
    value: &Value,
    texts: &NumberTexts,
    out: &mut Vec<(String, String)>,
) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, inner) in map {
                let name = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten_params(&name, inner, texts, out);
            }
        }
        Value::Number(number) => out.push((
            prefix.to_string(),
            texts.text(number, |number| {
                number
                    .as_f64()
                    .filter(|_| number.is_f64())
                    .map_or_else(|| number.to_string(), format_number)
            }),
        )),
        Value::Array(_) => out.push((prefix.to_string(), texts.json(value))),
        other => out.push((prefix.to_string(), value_text(other))),
    }
}

pub(super) fn params(document: &mut Document, run: &RunContext) {
    document.heading(2, "Params");
    let mut flat = Vec::new();
    match &run.params {
        Value::Null => {}
        Value::Object(map) if map.is_empty() => {}
        params => flatten_params("", params, &NumberTexts::of(run), &mut flat),
    }
    if flat.is_empty() {
        document.paragraph("The pipeline has no params.");
        return;
    }
    let mut table = Table::new(vec!["param".into(), "value".into()]);
    for (name, value) in flat {
        table.rows.push(vec![Cell::text(name), Cell::text(value)]);
    }
    document.table(table);
}

pub(super) fn seconds_cell(ms: Option<u64>) -> Cell {
    ms.map_or_else(Cell::missing, |ms| {
        let seconds = ms as f64 / 1000.0;
        Cell::number_as(seconds, format_seconds(seconds))
    })
}

pub(super) fn stage_times(document: &mut Document, run: &RunContext) -> Result<()> {
    document.heading(2, "Stages");
    if run.stages.is_empty() {
        document.paragraph("No stage comes before the report.");
        return Ok(());
    }
    // What making each result took, in the run that made it: the same
    // whether this run computed it or restored it.
    let mut table = Table::new(["stage", "uses", "compute time"].map(String::from).to_vec());
    for stage in &run.stages {
        table.rows.push(vec![
            Cell::text(stage.name.clone()),
            stage
                .uses
                .clone()
                .map_or_else(|| Cell::text("command"), Cell::text),
            seconds_cell(stage.compute_ms),
        ]);
    }
    document.table(table);
    let seconds = |ms: u64| ms as f64 / 1000.0;
    let chart = BarChart {
        title: "Compute time per stage".into(),
        value_label: "seconds".into(),
        categories: run.stages.iter().map(|s| s.name.clone()).collect(),
        series: vec![(
            "compute time".into(),
            run.stages
                .iter()
                .map(|s| s.compute_ms.map_or(0.0, seconds))
                .collect(),
        )],
    };
    document.plot(
        "stage-times",
        "Compute time per stage",
        chart.to_svg().map_err(draw_error)?,
    );
    Ok(())
}
