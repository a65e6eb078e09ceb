//! The report's sections of one stage: training curves, hardware,
//! throughput, and an evaluation's confusion matrix.

use std::collections::BTreeMap;
use std::path::Path;

use pipe_protocol::{RunContext, RunStage};
use pipe_report::text::capitalised;
use pipe_report::{Cell, Document, HeatMap, LineChart, Series, Table};
use serde_json::Value;

use super::model::{value_cell, MAX_PLOT_POINTS};
use crate::{Result, StageError};

pub(super) fn draw_error(error: pipe_report::ReportError) -> StageError {
    StageError::Other(format!("internal: {error}"))
}

/// A CSV file's numeric columns by header name, in file order.
pub(super) struct Columns {
    pub(super) columns: BTreeMap<String, Vec<f64>>,
}

impl Columns {
    fn read(path: &Path) -> Result<Columns> {
        let bad = |message: String| {
            StageError::input(
                format!("`{}`: {message}", path.display()),
                "the report reads the CSV files its training stages wrote; rerun them with `pipe run --force STAGE`",
            )
        };
        let mut reader = csv::Reader::from_path(path).map_err(|e| bad(e.to_string()))?;
        let headers: Vec<String> = reader
            .headers()
            .map_err(|e| bad(e.to_string()))?
            .iter()
            .map(|name| name.trim().to_string())
            .collect();
        let mut columns: BTreeMap<String, Vec<f64>> = headers
            .iter()
            .map(|name| (name.clone(), Vec::new()))
            .collect();
        for record in reader.records() {
            let record = record.map_err(|e| bad(e.to_string()))?;
            let line = record.position().map_or(0, |p| p.line());
            for (name, field) in headers.iter().zip(record.iter()) {
                // An empty field is a value the writer did not have (no
                // throughput before the first timed step): a gap, not an
                // error.
                let value: f64 = match field.trim() {
                    "" => f64::NAN,
                    text => text.parse().map_err(|_| {
                        bad(format!(
                            "line {line}, column `{name}`: `{field}` is not a number"
                        ))
                    })?,
                };
                if let Some(column) = columns.get_mut(name) {
                    column.push(value);
                }
            }
        }
        Ok(Columns { columns })
    }

    /// (x, y) points of two columns, thinned to [`MAX_PLOT_POINTS`]; `None`
    /// when either column is absent.
    pub(super) fn points(&self, x: &str, y: &str) -> Option<Vec<(f64, f64)>> {
        let (xs, ys) = (self.columns.get(x)?, self.columns.get(y)?);
        let points: Vec<(f64, f64)> = xs.iter().copied().zip(ys.iter().copied()).collect();
        let stride = points.len().div_ceil(MAX_PLOT_POINTS).max(1);
        if stride == 1 {
            return Some(points);
        }
        let last = points.len() - 1;
        Some(
            points
                .iter()
                .enumerate()
                .filter(|(index, _)| index % stride == 0 || *index == last)
                .map(|(_, point)| *point)
                .collect(),
        )
    }
}

/// Named series of `columns` over `x`, those present.
pub(super) fn series(columns: &Columns, x: &str, ys: &[(&str, &str)]) -> Vec<Series> {
    ys.iter()
        .filter_map(|(column, name)| {
            columns
                .points(x, column)
                .map(|points| Series::new(*name, points))
        })
        .collect()
}

pub(super) fn line_plot(
    document: &mut Document,
    stage: &RunStage,
    what: &str,
    x_label: &str,
    y_label: &str,
    series: Vec<Series>,
) -> Result<()> {
    if series.is_empty() {
        return Ok(());
    }
    let title = format!("{} of {}", capitalised(what), stage.name);
    let chart = LineChart {
        title: title.clone(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        series,
    };
    let svg = chart.to_svg().map_err(draw_error)?;
    document.plot(&format!("{}-{what}", stage.name), title, svg);
    Ok(())
}

pub(super) fn training(document: &mut Document, stage: &RunStage) -> Result<()> {
    document.heading(2, format!("Training: {}", stage.name));
    hardware(document, stage);
    if let Some(path) = stage.outputs.get("curves") {
        let curves = Columns::read(path)?;
        let epochs = curves.columns.get("epoch").map_or(0, Vec::len);
        if epochs <= 1 {
            // One epoch is one point per curve: a chart of dots says less
            // than the numbers, and the steps below show the curve.
            epoch_table(document, &curves);
        } else {
            per_epoch_plots(document, stage, &curves)?;
        }
    }
    if let Some(path) = stage.outputs.get("steps") {
        let steps = Columns::read(path)?;
        line_plot(
            document,
            stage,
            "loss per step",
            "step",
            "loss",
            series(&steps, "step", &[("loss", "train loss")]),
        )?;
        line_plot(
            document,
            stage,
            "learning rate per step",
            "step",
            "learning rate",
            series(&steps, "step", &[("lr", "learning rate")]),
        )?;
    }
    throughput(document, stage);
    Ok(())
}

/// The per-epoch losses and accuracies that a curves file holds.
const EPOCH_COLUMNS: [(&str, &str); 4] = [
    ("train_loss", "train loss"),
    ("val_loss", "validation loss"),
    ("train_acc", "train accuracy"),
    ("val_acc", "validation accuracy"),
];

/// A one-epoch run's curves as a table: one row, the columns it has.
fn epoch_table(document: &mut Document, curves: &Columns) {
    let present: Vec<&(&str, &str)> = EPOCH_COLUMNS
        .iter()
        .filter(|(column, _)| curves.columns.contains_key(*column))
        .collect();
    let Some(epochs) = curves.columns.get("epoch").filter(|e| !e.is_empty()) else {
        return;
    };
    let mut header = vec!["epoch".to_string()];
    header.extend(present.iter().map(|(_, label)| label.to_string()));
    let mut table = Table::new(header);
    for (index, epoch) in epochs.iter().enumerate() {
        let mut row = vec![Cell::number(*epoch)];
        row.extend(present.iter().map(|(column, _)| {
            curves.columns[*column]
                .get(index)
                .copied()
                .filter(|value| value.is_finite())
                .map_or_else(Cell::missing, Cell::number)
        }));
        table.rows.push(row);
    }
    document.table(table);
}

fn per_epoch_plots(document: &mut Document, stage: &RunStage, curves: &Columns) -> Result<()> {
    line_plot(
        document,
        stage,
        "loss per epoch",
        "epoch",
        "loss",
        series(curves, "epoch", &EPOCH_COLUMNS[..2]),
    )?;
    line_plot(
        document,
        stage,
        "accuracy per epoch",
        "epoch",
        "accuracy",
        series(curves, "epoch", &EPOCH_COLUMNS[2..]),
    )
}

pub(super) fn hardware(document: &mut Document, stage: &RunStage) {
    let names = [
        ("hardware.cpu", "CPU"),
        ("hardware.cpus", "CPU threads"),
        ("hardware.gpus", "GPUs"),
        ("hardware.libtorch", "libtorch"),
        ("devices", "devices"),
        ("precision", "precision"),
        ("strategy", "strategy"),
    ];
    let facts: Vec<(String, String)> = names
        .iter()
        .filter_map(|(metric, label)| {
            let value = stage.metrics.get(*metric)?;
            let text = match value {
                // Flattened metrics keep an empty list as itself.
                Value::Array(items) if items.is_empty() => "none".to_string(),
                _ => value_cell(Some(value)).text,
            };
            Some((label.to_string(), text))
        })
        .collect();
    document.facts(facts);
}

/// The `epochs.N.*` throughput metrics as a table, epochs in order.
pub(super) fn throughput(document: &mut Document, stage: &RunStage) {
    let fields = [
        ("epoch_seconds", "epoch seconds"),
        ("samples_per_s", "samples/s"),
        ("tokens_per_s", "tokens/s"),
    ];
    let mut epochs: BTreeMap<u64, BTreeMap<&str, &Value>> = BTreeMap::new();
    for (name, value) in &stage.metrics {
        let Some((epoch, field)) = name
            .strip_prefix("epochs.")
            .and_then(|rest| rest.split_once('.'))
        else {
            continue;
        };
        if let (Ok(epoch), Some((field, _))) = (
            epoch.parse::<u64>(),
            fields.iter().find(|(known, _)| *known == field),
        ) {
            epochs.entry(epoch).or_default().insert(field, value);
        }
    }
    let present: Vec<&(&str, &str)> = fields
        .iter()
        .filter(|(field, _)| epochs.values().any(|row| row.contains_key(field)))
        .collect();
    if present.is_empty() {
        return;
    }
    let mut header = vec!["epoch".to_string()];
    header.extend(present.iter().map(|(_, label)| label.to_string()));
    let mut table = Table::new(header);
    for (epoch, values) in &epochs {
        let mut row = vec![Cell::number(*epoch as f64)];
        row.extend(
            present
                .iter()
                .map(|(field, _)| value_cell(values.get(field).copied())),
        );
        table.rows.push(row);
    }
    document.heading(3, format!("Throughput of {}", stage.name));
    document.table(table);
}

/// The stage's confusion matrix: metric `confusion` as rows of counts, or
/// flattened as `confusion.I.J`. `None` when it reported none.
pub(super) fn confusion_matrix(stage: &RunStage) -> Result<Option<Vec<Vec<f64>>>> {
    let bad = |message: &str| {
        StageError::input(
            format!("stage `{}`: metric `confusion` {message}", stage.name),
            "a confusion matrix is a square table of counts, `confusion: [[..], [..]]` in metrics.json",
        )
    };
    let number = |value: &Value| {
        value
            .as_f64()
            .ok_or_else(|| bad("holds a value that is not a number"))
    };
    let mut rows: Vec<Vec<f64>> = Vec::new();
    if let Some(value) = stage.metrics.get("confusion") {
        let Value::Array(items) = value else {
            return Err(bad("is not a list of rows"));
        };
        for item in items {
            let Value::Array(cells) = item else {
                return Err(bad("is not a list of rows"));
            };
            rows.push(cells.iter().map(number).collect::<Result<_>>()?);
        }
    } else {
        let mut cells: BTreeMap<(usize, usize), f64> = BTreeMap::new();
        for (name, value) in &stage.metrics {
            let Some((row, column)) = name
                .strip_prefix("confusion.")
                .and_then(|rest| rest.split_once('.'))
            else {
                continue;
            };
            let (Ok(row), Ok(column)) = (row.parse(), column.parse()) else {
                return Err(bad(&format!(
                    "has a cell `{name}` that is not confusion.ROW.COLUMN"
                )));
            };
            cells.insert((row, column), number(value)?);
        }
        if cells.is_empty() {
            return Ok(None);
        }
        let size = cells.keys().map(|&(r, c)| r.max(c) + 1).max().unwrap_or(0);
        if size > 1000 {
            return Err(bad("has more than 1000 classes"));
        }
        rows = (0..size)
            .map(|r| {
                (0..size)
                    .map(|c| cells.get(&(r, c)).copied().unwrap_or(0.0))
                    .collect()
            })
            .collect();
    }
    if rows.is_empty() || rows.iter().any(|row| row.len() != rows.len()) {
        return Err(bad("is not square"));
    }
    Ok(Some(rows))
}

/// The class names a dataset stage of the run recorded (metric
/// `label_names.ID`, as `data/from-csv` and `imdb/extract` write it), by class
/// id from 0; `None` when no stage recorded any, the ids have gaps, or two
/// stages disagree (datasets of a matrix with other classes).
pub(crate) fn label_names(run: &RunContext) -> Option<Vec<String>> {
    let mut found: Option<Vec<String>> = None;
    for stage in &run.stages {
        let mut by_id: BTreeMap<usize, String> = BTreeMap::new();
        for (name, value) in &stage.metrics {
            let Some(id) = name.strip_prefix("label_names.") else {
                continue;
            };
            if let (Ok(id), Some(label)) = (id.parse::<usize>(), value.as_str()) {
                by_id.insert(id, label.to_string());
            }
        }
        if by_id.is_empty() {
            continue;
        }
        if by_id.keys().copied().ne(0..by_id.len()) {
            return None;
        }
        let names: Vec<String> = by_id.into_values().collect();
        match &found {
            Some(earlier) if *earlier != names => return None,
            _ => found = Some(names),
        }
    }
    found
}

/// `names` when there is one per class of the matrix, else the class ids.
fn class_labels(size: usize, names: Option<&[String]>) -> Vec<String> {
    match names {
        Some(names) if names.len() == size => names.to_vec(),
        _ => (0..size).map(|label| label.to_string()).collect(),
    }
}

pub(super) fn evaluation(
    document: &mut Document,
    stage: &RunStage,
    confusion: Vec<Vec<f64>>,
    names: Option<&[String]>,
) -> Result<()> {
    document.heading(2, format!("Evaluation: {}", stage.name));
    let scores = [
        ("accuracy", "accuracy"),
        ("precision", "precision"),
        ("recall", "recall"),
        ("f1", "F1"),
        ("macro.precision", "macro precision"),
        ("macro.recall", "macro recall"),
        ("macro.f1", "macro F1"),
        ("loss", "loss"),
        ("rows", "rows"),
    ];
    let mut table = Table::new(vec!["metric".into(), "value".into()]);
    for (metric, label) in scores {
        if let Some(value) = stage.metrics.get(metric) {
            table
                .rows
                .push(vec![Cell::text(label), value_cell(Some(value))]);
        }
    }
    if !table.rows.is_empty() {
        document.table(table);
    }
    let title = format!("Confusion matrix of {}", stage.name);
    let labels = class_labels(confusion.len(), names);
    // Where no image can go, the counts as a table: true label by row.
    let mut header = vec!["true \\ predicted".to_string()];
    header.extend(labels.iter().cloned());
    let mut counts = Table::new(header);
    for (label, row) in labels.iter().zip(&confusion) {
        let mut cells = vec![Cell::text(label.clone())];
        cells.extend(row.iter().map(|&count| Cell::number(count)));
        counts.rows.push(cells);
    }
    let chart = HeatMap {
        title: title.clone(),
        row_label: "true label".into(),
        column_label: "predicted label".into(),
        labels,
        cells: confusion,
    };
    let svg = chart.to_svg().map_err(draw_error)?;
    document.plot_with_table(
        &format!("{}-confusion", stage.name),
        title,
        svg,
        Some(counts),
    );
    Ok(())
}
