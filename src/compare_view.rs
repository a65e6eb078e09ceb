//! `pipe compare` on stdout: an aligned table for the terminal, Markdown
//! for a pull-request comment, CSV. (JSON is the table model itself.)

use std::fmt::Write;

use pipe_engine::compare::table::{Cell, Column, ColumnKind, CompareTable, Group};
use pipe_engine::metrics::{self, Verdict};
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
    let value = match (column.numeric, cell.value.as_f64()) {
        (true, Some(number)) => {
            let mean = metrics::format_significant(number, digits);
            match cell.std {
                Some(std) => format!("{mean} ± {}", metrics::format_significant(std, 2)),
                None => mean,
            }
        }
        _ => text_of(&cell.value),
    };
    let change = match (cell.delta.filter(|&delta| delta != 0.0), cell.relative) {
        (Some(delta), Some(relative)) => format!(
            "{} ({})",
            metrics::format_delta(delta),
            metrics::format_percent(relative)
        ),
        (Some(delta), None) => metrics::format_delta(delta),
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

fn show_n(table: &CompareTable) -> bool {
    table.groups.iter().any(|group| group.n > 1)
}

fn baseline_text(table: &CompareTable) -> String {
    let matrix: Vec<String> = table
        .baseline
        .matrix
        .0
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    let group = &table.groups[table.baseline.group];
    let runs = runs_of(group);
    if matrix.is_empty() {
        runs
    } else {
        format!("{runs} ({})", matrix.join(","))
    }
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

/// The terminal table: values aligned, changes against the baseline after
/// them, green when better and red when worse.
pub fn text(table: &CompareTable, style: Style) -> String {
    let with_n = show_n(table);
    let mut header: Vec<String> = vec!["run".into()];
    if with_n {
        header.push("n".into());
    }
    header.extend(table.columns.iter().map(|column| column.name.clone()));
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
                let mut cells = vec![plain(runs_of(group))];
                if with_n {
                    cells.push(plain(group.n.to_string()));
                }
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
    out
}

/// `COLUMNS` when the shell exports it, else 80.
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

fn markdown_cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// A pull-request comment: the table with ▲/▼ and % against the baseline,
/// ✓ better and ✗ worse by each metric's direction, warnings as a note.
pub fn markdown(table: &CompareTable) -> String {
    let with_n = show_n(table);
    let mut out = String::new();
    let _ = writeln!(out, "## pipe compare\n");
    let _ = writeln!(
        out,
        "Baseline: run {}. Changes are against it; ✓ better, ✗ worse by the metric's direction.\n",
        baseline_text(table)
    );
    let mut header = vec!["run".to_string()];
    if with_n {
        header.push("n".into());
    }
    header.extend(table.columns.iter().map(|column| match column.kind {
        ColumnKind::Metric => format!("`{}`", column.name),
        _ => column.name.clone(),
    }));
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let alignment: Vec<&str> = header
        .iter()
        .enumerate()
        .map(|(index, _)| {
            let column = index.checked_sub(1 + usize::from(with_n));
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
        let mut cells = vec![if index == table.baseline.group {
            format!("{} (baseline)", runs_of(group))
        } else {
            runs_of(group)
        }];
        if with_n {
            cells.push(group.n.to_string());
        }
        for (column, &digits) in table.columns.iter().zip(&digits) {
            let cell = shown(column, group.cells.get(&column.id), digits);
            let mut text = markdown_cell(&cell.value);
            if !cell.change.is_empty() {
                let mark = match cell.verdict {
                    Some(Verdict::Better) => " ✓",
                    Some(Verdict::Worse) => " ✗",
                    _ => "",
                };
                let _ = write!(text, " {} {}{mark}", cell.arrow, cell.change);
            }
            cells.push(text);
        }
        let _ = writeln!(out, "| {} |", cells.join(" | "));
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
