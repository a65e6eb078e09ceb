//! A declared plot drawn from its data: one run's (the report) or several
//! runs' overlaid, one colour per run (`pipe compare --html`). Columns the
//! spec leaves unset are chosen here from the data.

use pipe_protocol::{PlotKind, PlotSpec};

use super::data::{DataTable, Datum};
use crate::chart::Shape;
use crate::{BarChart, Cell, HeatMap, LineChart, ReportError, Result, Series, Table};

/// The most points of one line drawn: a longer one is thinned to every
/// n-th point and the last (a ROC curve of a million thresholds looks the
/// same at a few thousand).
pub const MAX_DRAWN_POINTS: usize = 4000;

/// The most labels of a confusion matrix drawn: beyond that the cells are
/// too small to read, and the labels are likely not classes.
pub const MAX_CONFUSION_LABELS: usize = 50;

/// One run's data of a plot.
pub struct PlotRun<'a> {
    /// Its name in a legend (`#4 lr=0.1`); unused with one run.
    pub name: String,
    /// The key its lines share with its table row ([`Series::key`]).
    pub key: Option<String>,
    pub data: &'a DataTable,
}

/// One drawn chart of a plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    pub title: String,
    pub svg: String,
    /// The counts of a confusion matrix, for where images cannot go.
    pub table: Option<Table>,
}

/// The columns a plot draws of `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct Columns {
    pub x: String,
    pub y: Vec<String>,
}

/// The columns `spec` draws of `data`: those it names, else x `step`,
/// `epoch` or the first column and y every other numeric one (a
/// confusion matrix: the first two columns). An error names the file.
pub fn columns(spec: &PlotSpec, data: &DataTable) -> Result<Columns> {
    let missing = |message: String| ReportError::PlotData {
        file: data.file.clone(),
        message,
    };
    let x = match &spec.x {
        Some(x) => x.clone(),
        None if spec.kind.is_confusion() || spec.kind == PlotKind::Bar => data
            .names
            .first()
            .cloned()
            .ok_or_else(|| missing("no columns".into()))?,
        None => ["step", "epoch"]
            .into_iter()
            .find(|name| data.has(name))
            .map(str::to_string)
            .or_else(|| data.names.first().cloned())
            .ok_or_else(|| missing("no columns".into()))?,
    };
    data.column(&x)?;
    let y = if !spec.y.is_empty() {
        spec.y.clone()
    } else if spec.kind.is_confusion() {
        let second = data.names.iter().find(|name| **name != x).cloned();
        vec![second.ok_or_else(|| {
            missing(format!(
                "one column: a confusion matrix reads two, the actual label (`{x}`) and the predicted"
            ))
        })?]
    } else {
        let numeric: Vec<String> = (0..data.names.len())
            .filter(|&index| data.names[index] != x && data.is_numeric(index))
            .map(|index| data.names[index].clone())
            .collect();
        if numeric.is_empty() {
            return Err(missing(format!(
                "no numeric column besides `{x}` to draw; name one with `y:`"
            )));
        }
        numeric
    };
    for column in &y {
        data.column(column)?;
    }
    Ok(Columns { x, y })
}

/// The plot of `spec` from `runs` (one, or several overlaid): a line,
/// scatter, step or bar chart, or one heat map per run.
pub fn draw(spec: &PlotSpec, runs: &[PlotRun<'_>]) -> Result<Vec<Figure>> {
    let title = spec.title.clone().unwrap_or_else(|| spec.path.clone());
    let mut drawn: Vec<(&PlotRun, Columns)> = Vec::with_capacity(runs.len());
    for run in runs {
        drawn.push((run, columns(spec, run.data)?));
    }
    match spec.kind {
        PlotKind::Confusion | PlotKind::ConfusionNormalized => drawn
            .iter()
            .map(|(run, columns)| {
                let title = if runs.len() > 1 {
                    format!("{title}: {}", run.name)
                } else {
                    title.clone()
                };
                confusion(spec, &title, run.data, columns)
            })
            .collect(),
        PlotKind::Bar => Ok(vec![bars(spec, &title, &drawn)?]),
        PlotKind::Line | PlotKind::Scatter | PlotKind::Step => {
            Ok(vec![lines(spec, &title, &drawn)?])
        }
    }
}

/// A legend's name for column `y` of `run`: the column with one run, the
/// run with one column, else both.
fn series_name(run: &PlotRun<'_>, y: &str, runs: usize, columns: usize) -> String {
    match (runs, columns) {
        (1, _) => y.to_string(),
        (_, 1) => run.name.clone(),
        _ => format!("{} {y}", run.name),
    }
}

fn y_label(spec: &PlotSpec, drawn: &[(&PlotRun<'_>, Columns)]) -> String {
    if let Some(label) = &spec.y_label {
        return label.clone();
    }
    let mut names: Vec<&str> = Vec::new();
    for (_, columns) in drawn {
        for y in &columns.y {
            if !names.contains(&y.as_str()) {
                names.push(y);
            }
        }
    }
    names.join(", ")
}

fn lines(spec: &PlotSpec, title: &str, drawn: &[(&PlotRun<'_>, Columns)]) -> Result<Figure> {
    let shape = match spec.kind {
        PlotKind::Scatter => Shape::Points,
        PlotKind::Step => Shape::Steps,
        _ => Shape::Line,
    };
    let mut series = Vec::new();
    for (run, columns) in drawn {
        let xs = run.data.numbers(&columns.x)?;
        for y in &columns.y {
            let ys = run.data.numbers(y)?;
            let points = thinned(xs.iter().copied().zip(ys).collect());
            let mut line = Series::new(series_name(run, y, drawn.len(), columns.y.len()), points)
                .with_shape(shape);
            if let Some(key) = &run.key {
                line = line.with_key(key.clone());
            }
            series.push(line);
        }
    }
    let x_label = spec
        .x_label
        .clone()
        .or_else(|| drawn.first().map(|(_, columns)| columns.x.clone()))
        .unwrap_or_default();
    let chart = LineChart {
        title: title.to_string(),
        x_label,
        y_label: y_label(spec, drawn),
        series,
    };
    Ok(Figure {
        title: title.to_string(),
        svg: chart.to_svg()?,
        table: None,
    })
}

/// Every n-th point and the last, at most [`MAX_DRAWN_POINTS`].
fn thinned(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    let stride = points.len().div_ceil(MAX_DRAWN_POINTS).max(1);
    if stride == 1 {
        return points;
    }
    let last = points.len() - 1;
    points
        .into_iter()
        .enumerate()
        .filter(|(index, _)| index % stride == 0 || *index == last)
        .map(|(_, point)| point)
        .collect()
}

/// A bar per row, x its category, one series per run and y column; a
/// category seen in several runs is one group.
fn bars(spec: &PlotSpec, title: &str, drawn: &[(&PlotRun<'_>, Columns)]) -> Result<Figure> {
    let mut categories: Vec<String> = Vec::new();
    let mut per_series: Vec<(String, Vec<(String, f64)>)> = Vec::new();
    for (run, columns) in drawn {
        let labels: Vec<String> = run
            .data
            .column(&columns.x)?
            .iter()
            .map(Datum::label)
            .collect();
        for label in &labels {
            if !categories.contains(label) {
                if categories.len() == MAX_DRAWN_POINTS {
                    return Err(ReportError::PlotData {
                        file: run.data.file.clone(),
                        message: format!(
                            "more than {MAX_DRAWN_POINTS} bars; a bar chart draws one per row"
                        ),
                    });
                }
                categories.push(label.clone());
            }
        }
        for y in &columns.y {
            let values = run.data.numbers(y)?;
            per_series.push((
                series_name(run, y, drawn.len(), columns.y.len()),
                labels.iter().cloned().zip(values).collect(),
            ));
        }
    }
    let series = per_series
        .into_iter()
        .map(|(name, values)| {
            let by_category = categories
                .iter()
                .map(|category| {
                    values
                        .iter()
                        .find(|(label, _)| label == category)
                        .map_or(f64::NAN, |(_, value)| *value)
                })
                .collect();
            (name, by_category)
        })
        .collect();
    let chart = BarChart {
        title: title.to_string(),
        value_label: y_label(spec, drawn),
        categories,
        series,
    };
    Ok(Figure {
        title: title.to_string(),
        svg: chart.to_svg()?,
        table: None,
    })
}

/// The labels of a confusion matrix in order: numerically when every
/// label is a number, else by text.
fn sorted_labels(mut labels: Vec<Datum>) -> Vec<String> {
    let numeric = labels.iter().all(|datum| matches!(datum, Datum::Number(_)));
    labels.sort_by(|a, b| match (a, b) {
        (Datum::Number(a), Datum::Number(b)) if numeric => a.total_cmp(b),
        _ => a.label().cmp(&b.label()),
    });
    let mut names: Vec<String> = labels.iter().map(Datum::label).collect();
    names.dedup();
    names
}

fn confusion(spec: &PlotSpec, title: &str, data: &DataTable, columns: &Columns) -> Result<Figure> {
    let actual = data.column(&columns.x)?;
    let predicted = data.column(&columns.y[0])?;
    let mut distinct: Vec<Datum> = Vec::new();
    for datum in actual
        .iter()
        .chain(predicted)
        .filter(|d| **d != Datum::Empty)
    {
        if !distinct.contains(datum) {
            if distinct.len() == MAX_CONFUSION_LABELS {
                return Err(ReportError::PlotData {
                    file: data.file.clone(),
                    message: format!(
                        "more than {MAX_CONFUSION_LABELS} labels in `{}` and `{}`: a confusion matrix of them cannot be read",
                        columns.x, columns.y[0]
                    ),
                });
            }
            distinct.push(datum.clone());
        }
    }
    let labels = sorted_labels(distinct);
    let at = |datum: &Datum| labels.iter().position(|label| *label == datum.label());
    let mut counts = vec![vec![0.0; labels.len()]; labels.len()];
    for (truth, guess) in actual.iter().zip(predicted) {
        if let (Some(row), Some(column)) = (at(truth), at(guess)) {
            counts[row][column] += 1.0;
        }
    }
    let mut table = Table::new(
        std::iter::once(format!("{} \\ {}", columns.x, columns.y[0]))
            .chain(labels.iter().cloned())
            .collect(),
    );
    for (label, row) in labels.iter().zip(&counts) {
        table.rows.push(
            std::iter::once(Cell::text(label.clone()))
                .chain(row.iter().map(|count| Cell::number(*count)))
                .collect(),
        );
    }
    let cells = if spec.kind == PlotKind::ConfusionNormalized {
        counts
            .iter()
            .map(|row| {
                let total: f64 = row.iter().sum();
                row.iter()
                    .map(|count| if total > 0.0 { count / total } else { 0.0 })
                    .collect()
            })
            .collect()
    } else {
        counts
    };
    let heat_map = HeatMap {
        title: title.to_string(),
        row_label: spec.x_label.clone().unwrap_or_else(|| columns.x.clone()),
        column_label: spec.y_label.clone().unwrap_or_else(|| columns.y[0].clone()),
        labels,
        cells,
    };
    let svg = if heat_map.labels.is_empty() {
        LineChart {
            title: title.to_string(),
            x_label: String::new(),
            y_label: String::new(),
            series: Vec::new(),
        }
        .to_svg()?
    } else {
        heat_map.to_svg()?
    };
    Ok(Figure {
        title: title.to_string(),
        svg,
        table: Some(table),
    })
}
