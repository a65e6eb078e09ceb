//! `pipe compare` on stdout: an aligned table for the terminal, Markdown
//! for a pull-request comment, CSV. (JSON is the table model itself.)

use std::fmt::Write;

use std::collections::BTreeMap;

use pipe_engine::compare::steps::StepCurves;
use pipe_engine::compare::table::{
    row_label, Cell, Column, ColumnKind, CompareTable, Group, Pairs, Row,
};
use pipe_engine::metrics::{self, Verdict};
use pipe_engine::runs::{ComparedRun, RunId};
use pipe_engine::{EngineError, Result};
use pipe_protocol::format::{format_metric, format_metric_delta};
use pipe_report::{Cell as PageCell, Document, Table};
use pipe_report::{LineChart, Series};
use serde_json::Value;

use crate::render::paint_verdict;
use crate::style::Style;

/// One cell as shown: its value, and the change against the baseline.
struct Shown {
    value: String,
    change: String,
    arrow: &'static str,
    verdict: Option<Verdict>,
}

fn text_of(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(text) => text.clone(),
        Value::Array(items) => items.iter().map(text_of).collect::<Vec<_>>().join(","),
        Value::Number(number) => match number.as_f64() {
            Some(float) if !number.is_i64() && !number.is_u64() => {
                metrics::format_significant(float, metrics::SIGNIFICANT_DIGITS)
            }
            _ => number.to_string(),
        },
        other => other.to_string(),
    }
}

/// Per column, the significant digits that tell its values apart.
fn digits_of(table: &CompareTable, column: &Column) -> usize {
    let values: Vec<f64> = table
        .groups
        .iter()
        .filter_map(|group| group.cells.get(&column.id))
        .filter_map(|cell| cell.value.as_f64())
        .collect();
    metrics::digits_to_tell_apart(&values)
}

fn shown(column: &Column, cell: Option<&Cell>, digits: usize) -> Shown {
    let Some(cell) = cell else {
        return Shown {
            value: "-".to_string(),
            change: String::new(),
            arrow: "",
            verdict: None,
        };
    };
    // Bytes, durations, FLOPs and rates in human units; other numbers with
    // the digits that tell the column's values apart.
    let number = |value: f64| format_metric(column.unit, value, digits);
    let value = match (column.numeric, cell.value.as_f64()) {
        (true, Some(value)) => {
            let mean = number(value);
            // Rows that all had one value have that value, not `± 0`.
            match (cell.std.filter(|&std| std != 0.0), column.unit) {
                (Some(std), Some(unit)) => format!("{mean} ± {}", unit.format(std)),
                (Some(std), None) => format!("{mean} ± {}", metrics::format_significant(std, 2)),
                (None, _) => mean,
            }
        }
        _ => text_of(&cell.value),
    };
    let delta_text = |delta: f64| format_metric_delta(column.unit, delta);
    let change = match (cell.delta.filter(|&delta| delta != 0.0), cell.relative) {
        (Some(delta), Some(relative)) => {
            format!(
                "{} ({})",
                delta_text(delta),
                metrics::format_percent(relative)
            )
        }
        (Some(delta), None) => delta_text(delta),
        _ => String::new(),
    };
    let arrow = match cell.delta {
        Some(delta) if delta > 0.0 => "▲",
        Some(delta) if delta < 0.0 => "▼",
        _ => "",
    };
    Shown {
        value,
        change,
        arrow,
        verdict: cell.verdict,
    }
}

fn runs_of(group: &Group) -> String {
    group
        .runs
        .iter()
        .map(|run| format!("#{run}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The first cell of a line: its runs, and how many rows a line of
/// several (seeds) is the mean of. In the label, not a column of its own,
/// so that no param or matrix key (`n`, `runs`) can take its name.
fn line_label(group: &Group) -> String {
    let mut label = if group.n > 1 {
        format!("{} (mean of {})", runs_of(group), group.n)
    } else {
        runs_of(group)
    };
    // A run that restored another's result is that result again, shown
    // once: said, so that no run seems missing.
    if !group.repeats.is_empty() {
        let same: Vec<String> = group
            .repeats
            .iter()
            .map(|repeat| format!("#{} = #{}", repeat.run, repeat.same_as))
            .collect();
        label.push_str(&format!(" ({}: same result)", same.join(", ")));
    }
    label
}

fn baseline_text(table: &CompareTable) -> String {
    group_label(&table.groups[table.baseline.group], &table.baseline.matrix)
}

/// `#3,#4` or `#3,#4 (precision=bf16-mixed)`: a group's runs and the
/// matrix combination they share. A line of several seeds shares no seed:
/// the first row's is left out.
fn group_label(group: &Group, matrix: &Pairs) -> String {
    let runs = runs_of(group);
    let pairs: Vec<String> = matrix
        .0
        .iter()
        .filter(|(key, _)| group.n == 1 || !is_seed_key(key))
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    if pairs.is_empty() {
        runs
    } else {
        format!("{runs} ({})", pairs.join(","))
    }
}

fn is_seed_key(key: &str) -> bool {
    key.rsplit('.').next() == Some("seed")
}

/// A curve's name in a legend: its row, and the value of each param that
/// differs between the rows (`#4 lr=0.0001 seed=2`), so that a reader
/// need not look the runs up.
fn curve_label(table: &CompareTable, row: &Row) -> String {
    let mut label = row_label(row.run, &row.matrix);
    for column in &table.columns {
        if column.kind != ColumnKind::Param {
            continue;
        }
        if let Some(value) = row.values.get(&column.id) {
            label.push_str(&format!(" {}={}", column.label, text_of(value)));
        }
    }
    label
}

/// ` ✓` after a change for the better, ` ✗` for the worse.
fn verdict_mark(verdict: Option<Verdict>) -> &'static str {
    match verdict {
        Some(Verdict::Better) => " ✓",
        Some(Verdict::Worse) => " ✗",
        _ => "",
    }
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

/// The terminal table: values aligned, changes against the baseline after
/// them, green when better and red when worse.
pub fn text(table: &CompareTable, style: Style) -> String {
    let mut header: Vec<String> = vec!["run".into()];
    header.extend(table.columns.iter().map(|column| column.label.clone()));
    let digits: Vec<usize> = table
        .columns
        .iter()
        .map(|column| digits_of(table, column))
        .collect();
    // Per line, per column: (value, change, verdict).
    let lines: Vec<Vec<Shown>> =
        table
            .groups
            .iter()
            .map(|group| {
                let mut cells = vec![plain(line_label(group))];
                cells.extend(
                    table.columns.iter().zip(&digits).map(|(column, &digits)| {
                        shown(column, group.cells.get(&column.id), digits)
                    }),
                );
                cells
            })
            .collect();
    let columns = header.len();
    let value_width: Vec<usize> = (0..columns)
        .map(|index| {
            lines
                .iter()
                .map(|line| chars(&line[index].value))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let change_width: Vec<usize> = (0..columns)
        .map(|index| {
            lines
                .iter()
                .map(|line| chars(&line[index].change))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let side_by_side: Vec<usize> = (0..columns)
        .map(|index| {
            let cell = value_width[index]
                + if change_width[index] > 0 {
                    change_width[index] + 1
                } else {
                    0
                };
            cell.max(chars(&header[index]))
        })
        .collect();
    // Changes beside their values when that fits the terminal; else under
    // them, one more line per row, so that a few columns still read at 80.
    let total = |widths: &[usize]| widths.iter().sum::<usize>() + 2 * widths.len();
    let stacked = total(&side_by_side) > terminal_width();
    let width: Vec<usize> = if stacked {
        (0..columns)
            .map(|index| {
                value_width[index]
                    .max(change_width[index])
                    .max(chars(&header[index]))
            })
            .collect()
    } else {
        side_by_side
    };
    let mut out = String::new();
    let heading: Vec<String> = header
        .iter()
        .zip(&width)
        .map(|(name, &width)| format!("{name:<width$}"))
        .collect();
    let _ = writeln!(out, "{}", heading.join("  ").trim_end());
    for line in &lines {
        let mut values = String::new();
        let mut changes = String::new();
        for (index, cell) in line.iter().enumerate() {
            if index > 0 {
                values.push_str("  ");
                changes.push_str("  ");
            }
            let painted = |width: usize| {
                let change = format!("{:<width$}", cell.change);
                paint_verdict(style, cell.verdict, &change)
            };
            if stacked {
                values.push_str(&format!("{:<width$}", cell.value, width = width[index]));
                changes.push_str(&painted(width[index]));
                continue;
            }
            values.push_str(&format!(
                "{:<width$}",
                cell.value,
                width = value_width[index]
            ));
            let mut used = value_width[index];
            if change_width[index] > 0 {
                values.push(' ');
                values.push_str(&painted(change_width[index]));
                used += change_width[index] + 1;
            }
            values.push_str(&" ".repeat(width[index].saturating_sub(used)));
        }
        let _ = writeln!(out, "{}", values.trim_end());
        if stacked && line.iter().any(|cell| !cell.change.is_empty()) {
            let _ = writeln!(out, "{}", changes.trim_end());
        }
    }
    let _ = writeln!(out, "baseline: {}", baseline_text(table));
    if let Some(note) = hidden_note(table) {
        let _ = writeln!(out, "{}", style.dim(&note));
    }
    out
}

/// What the key metrics leave out, when something differs there, in
/// one line that fits 100 columns: `19 more metrics differ (--all shows
/// them, --metrics GLOB some): train.peak_rss_mb, ...`.
fn hidden_note(table: &CompareTable) -> Option<String> {
    const WIDTH: usize = 100;
    let hidden = &table.hidden_metrics;
    let mut note = match hidden.len() {
        0 => return None,
        1 => "1 more metric differs (--all shows it): ".to_string(),
        n => format!("{n} more metrics differ (--all shows them, --metrics GLOB some): "),
    };
    for (index, name) in hidden.iter().enumerate() {
        let last = index + 1 == hidden.len();
        let piece = if index == 0 {
            name.clone()
        } else {
            format!(", {name}")
        };
        if chars(&note) + chars(&piece) + if last { 0 } else { 5 } > WIDTH {
            note.push_str(if index == 0 { "..." } else { ", ..." });
            break;
        }
        note.push_str(&piece);
    }
    Some(note)
}

fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|columns| columns.parse().ok())
        .filter(|&columns| columns > 0)
        .unwrap_or(80)
}

fn plain(value: String) -> Shown {
    Shown {
        value,
        change: String::new(),
        arrow: "",
        verdict: None,
    }
}

/// A cell, header or note as the report's Markdown writer escapes it:
/// names and values come from run records, and a `|`, a backtick or a
/// line break in one must not break the table a comment shows.
fn markdown_cell(text: &str) -> String {
    pipe_report::text::escape_markdown(text)
}

/// A pull-request comment: the table with ▲/▼ and % against the baseline,
/// ✓ better and ✗ worse by each metric's direction, warnings as a note.
pub fn markdown(table: &CompareTable) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## pipe compare\n");
    let _ = writeln!(
        out,
        "Baseline: run {}. Changes are against it; ✓ better, ✗ worse by the metric's direction.\n",
        markdown_cell(&baseline_text(table))
    );
    let mut header = vec!["run".to_string()];
    header.extend(
        table
            .columns
            .iter()
            .map(|column| markdown_cell(&column.label)),
    );
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let alignment: Vec<&str> = header
        .iter()
        .enumerate()
        .map(|(index, _)| {
            let column = index.checked_sub(1);
            match column.map(|column| &table.columns[column]) {
                Some(column) if column.numeric => "--:",
                _ => "---",
            }
        })
        .collect();
    let _ = writeln!(out, "|{}|", alignment.join("|"));
    let digits: Vec<usize> = table
        .columns
        .iter()
        .map(|column| digits_of(table, column))
        .collect();
    for (index, group) in table.groups.iter().enumerate() {
        let mut cells = vec![markdown_cell(&if index == table.baseline.group {
            format!("{} (baseline)", line_label(group))
        } else {
            line_label(group)
        })];
        for (column, &digits) in table.columns.iter().zip(&digits) {
            let cell = shown(column, group.cells.get(&column.id), digits);
            let mut text = markdown_cell(&cell.value);
            if !cell.change.is_empty() {
                let mark = verdict_mark(cell.verdict);
                let _ = write!(text, " {} {}{mark}", cell.arrow, cell.change);
            }
            cells.push(text);
        }
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    if let Some(note) = hidden_note(table) {
        let _ = writeln!(out, "\n{}", markdown_cell(&note));
    }
    if !table.warnings.is_empty() {
        let _ = writeln!(out, "\n> [!WARNING]");
        for warning in &table.warnings {
            let _ = writeln!(out, "> - {}", markdown_cell(&warning.message));
        }
    }
    out
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn raw(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

/// One line per row (seeds not grouped), raw values, the shown columns.
pub fn csv(table: &CompareTable) -> String {
    let mut out = String::new();
    let mut header = vec!["run".to_string()];
    header.extend(table.columns.iter().map(|column| csv_field(&column.name)));
    let _ = writeln!(out, "{}", header.join(","));
    for row in &table.rows {
        let mut fields = vec![row.run.to_string()];
        fields.extend(
            table
                .columns
                .iter()
                .map(|column| csv_field(&raw(row.values.get(&column.id)))),
        );
        let _ = writeln!(out, "{}", fields.join(","));
    }
    out
}

/// The per-epoch metrics drawn as overlaid curves, one chart each per
/// training stage, one line per row.
const CURVES: &[(&str, &str)] = &[
    ("train_loss", "train loss"),
    ("val_loss", "validation loss"),
    ("val_acc", "validation accuracy"),
];

/// One self-contained page (pipe-report's): the table as `--md` has it, the
/// warnings, and for every training stage the per-epoch curves of all rows
/// overlaid, read from the runs' recorded metrics (`epochs.N.*`), so a page
/// can be drawn for runs whose outputs are long gone from the workspace;
/// then the rows' per-step curves overlaid (`steps`, read from the cache).
pub fn html(table: &CompareTable, runs: &[ComparedRun], steps: &StepCurves) -> Result<String> {
    let mut page = Document::new(format!(
        "pipe compare: {} row{}",
        table.groups.len(),
        if table.groups.len() == 1 { "" } else { "s" }
    ));
    page.paragraph(format!(
        "Baseline: run {}. Changes are against it; ▲/▼ is the direction of the change, ✓ better and ✗ worse by the metric's direction.",
        baseline_text(table)
    ));
    for warning in &table.warnings {
        page.paragraph(format!("Warning: {}", warning.message));
    }
    let mut columns = vec!["run".to_string()];
    columns.extend(table.columns.iter().map(|column| column.name.clone()));
    let mut shown_table = Table::new(columns);
    let digits: Vec<usize> = table
        .columns
        .iter()
        .map(|column| digits_of(table, column))
        .collect();
    for group in &table.groups {
        let first = &table.rows[group.rows[0]];
        let mut label = group_label(group, &first.matrix);
        if group.n > 1 {
            label = format!("{label} (mean of {})", group.n);
        }
        let mut cells = vec![PageCell::text(label)];
        for (column, digits) in table.columns.iter().zip(&digits) {
            let cell = group.cells.get(&column.id);
            let shown = shown(column, cell, *digits);
            let mark = verdict_mark(shown.verdict);
            let text = if shown.change.is_empty() {
                shown.value
            } else {
                format!("{} ({} {}{mark})", shown.value, shown.arrow, shown.change)
            };
            cells.push(match cell.and_then(|cell| cell.value.as_f64()) {
                Some(number) if column.numeric => PageCell::number_as(number, text),
                _ => PageCell::text(text),
            });
        }
        shown_table.rows.push(cells);
    }
    page.heading(2, "Runs");
    page.table(shown_table);

    let curves = overlaid_curves(table, runs);
    if !curves.is_empty() {
        page.heading(2, "Curves");
    }
    for ((stage, metric), series) in curves {
        let label = label_of(CURVES, metric);
        let file = format!("{stage}-{metric}");
        overlaid_plot(&mut page, &file, label, "epoch", &stage, series)?;
    }
    step_plots(&mut page, table, steps)?;
    Ok(page.to_html())
}

/// (base stage, metric) -> one series per row that has that curve, from
/// the stages the table found for the row.
fn overlaid_curves(
    table: &CompareTable,
    runs: &[ComparedRun],
) -> BTreeMap<(String, &'static str), Vec<Series>> {
    let by_id: BTreeMap<RunId, &ComparedRun> = runs.iter().map(|run| (run.run.id, run)).collect();
    let mut curves: BTreeMap<(String, &'static str), Vec<Series>> = BTreeMap::new();
    for row in &table.rows {
        let Some(run) = by_id.get(&row.run) else {
            continue;
        };
        for stage in row.stages.iter().filter_map(|&index| run.stages.get(index)) {
            let base = &stage.identity.base_name;
            for (metric, _) in CURVES {
                let suffix = format!(".{metric}");
                let mut points: Vec<(f64, f64)> = stage
                    .metrics
                    .iter()
                    .filter_map(|(name, value)| {
                        let epoch = name.strip_prefix("epochs.")?.strip_suffix(&suffix)?;
                        Some((epoch.parse::<f64>().ok()?, value.as_f64()?))
                    })
                    .collect();
                if points.is_empty() {
                    continue;
                }
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                curves
                    .entry((base.clone(), metric))
                    .or_default()
                    .push(Series::new(curve_label(table, row), points));
            }
        }
    }
    curves
}

/// The per-step columns overlaid on `compare --html`, one chart each per
/// training stage, one line per row.
const STEP_CURVES: &[(&str, &str)] = &[("loss", "train loss"), ("lr", "learning rate")];

/// The most points of one row's step curve drawn (report/html's limit).
const MAX_STEP_POINTS: usize = 2000;

/// The rows' step curves overlaid: with one epoch, the per-epoch charts are
/// a dot per row, and these show how each row trained.
fn step_plots(page: &mut Document, table: &CompareTable, steps: &StepCurves) -> Result<()> {
    let mut charts: BTreeMap<(&str, &str), Vec<Series>> = BTreeMap::new();
    for curve in &steps.curves {
        let Some(x) = curve.columns.get("step") else {
            continue;
        };
        let row = &table.rows[curve.row];
        for (column, _) in STEP_CURVES {
            let Some(y) = curve.columns.get(*column) else {
                continue;
            };
            // A long run's step log is thinned to every n-th point and the
            // last, as the report does: a few thousand show all there is.
            let all = x.len().min(y.len());
            let stride = all.div_ceil(MAX_STEP_POINTS).max(1);
            let points: Vec<(f64, f64)> = (0..all)
                .filter(|&index| index % stride == 0 || index + 1 == all)
                .map(|index| (x[index], y[index]))
                .collect();
            charts
                .entry((curve.stage.as_str(), column))
                .or_default()
                .push(Series::new(row_label(row.run, &row.matrix), points));
        }
    }
    if !charts.is_empty() || !steps.unreadable.is_empty() {
        page.heading(2, "Curves per step");
    }
    if !steps.unreadable.is_empty() {
        page.paragraph(format!(
            "Per-step curves that could not be read, so are not drawn: {}.",
            steps.unreadable.join("; ")
        ));
    }
    for ((stage, column), series) in charts {
        let label = label_of(STEP_CURVES, column);
        let file = format!("{stage}-{column}-per-step");
        overlaid_plot(page, &file, label, "step", stage, series)?;
    }
    Ok(())
}

/// The label a curve is drawn with: `labels`' own, else its name.
fn label_of<'a>(labels: &[(&str, &'a str)], name: &'a str) -> &'a str {
    labels
        .iter()
        .find(|(each, _)| *each == name)
        .map_or(name, |(_, label)| label)
}

/// One chart of the rows' curves of `label` per `x` (epoch or step) of
/// `stage`, as plot `file` of the page.
fn overlaid_plot(
    page: &mut Document,
    file: &str,
    label: &str,
    x: &str,
    stage: &str,
    series: Vec<Series>,
) -> Result<()> {
    let title = format!(
        "{} per {x} of {stage}",
        pipe_report::text::capitalised(label)
    );
    let chart = LineChart {
        title: title.clone(),
        x_label: x.into(),
        y_label: label.to_string(),
        series,
    };
    let svg = chart
        .to_svg()
        .map_err(|e| EngineError::Internal(format!("cannot draw `{title}`: {e}")))?;
    page.plot(file, title, svg);
    Ok(())
}
