//! `pipe runs` as text: one line per run, the columns that tell runs
//! apart (name and tags, the params that differ, key metrics) after the
//! ones every run has, all within the terminal's width. A column that
//! does not fit is left out and the line below the table says which.

use std::fmt::Write as _;

use pipe_engine::{ListedRun, MetricCell, RunListing, RunRecord, RunStatus};

use crate::views::value_text::{git_label, rounded, run_list, took};

/// Wide enough for the fixed columns, a name and two params and metrics.
const DEFAULT_WIDTH: usize = 100;
/// A status line (`restored #1,#2,...`) is cut here.
const STATUS_MAX: usize = 22;
/// A cell of a param or label column is cut here.
const CELL_MAX: usize = 18;

struct Column {
    header: String,
    cells: Vec<String>,
    right: bool,
    /// Left out first when the table is too wide: the larger, the sooner.
    drop_order: usize,
}

impl Column {
    fn width(&self) -> usize {
        self.cells
            .iter()
            .map(|cell| cell.chars().count())
            .chain([self.header.chars().count()])
            .max()
            .unwrap_or(0)
    }
}

/// `pipe runs` in a project that has recorded none.
pub fn no_runs() -> &'static str {
    "no runs recorded yet; `pipe run` records one\n"
}

pub fn runs_table(listing: &RunListing) -> String {
    let runs = &listing.runs;
    let mut columns = fixed_columns(runs);
    if runs.iter().any(|run| !labels(&run.record).is_empty()) {
        columns.push(Column {
            header: "name, tags".to_string(),
            cells: runs
                .iter()
                .map(|run| cut(&labels(&run.record), CELL_MAX))
                .collect(),
            right: false,
            drop_order: 2,
        });
    }
    let param_headers = short_names(&listing.params);
    for (index, header) in param_headers.into_iter().enumerate() {
        columns.push(Column {
            header,
            cells: runs
                .iter()
                .map(|run| cut(run.params[index].as_deref().unwrap_or("-"), CELL_MAX))
                .collect(),
            right: true,
            // The later params go first.
            drop_order: 10 + index,
        });
    }
    let metric_names: Vec<String> = listing
        .metrics
        .iter()
        .map(|column| format!("{}.{}", column.stage, column.metric))
        .collect();
    for (index, header) in short_names(&metric_names).into_iter().enumerate() {
        columns.push(Column {
            header,
            cells: runs
                .iter()
                .map(|run| metric_text(&listing.metrics[index].metric, run.metrics[index].as_ref()))
                .collect(),
            right: true,
            drop_order: 0,
        });
    }
    let left_out = fit(&mut columns, terminal_width());
    let mut out = String::new();
    let widths: Vec<usize> = columns.iter().map(Column::width).collect();
    let line = |cells: Vec<&str>| -> String {
        let mut line = String::new();
        for ((cell, column), width) in cells.iter().zip(&columns).zip(&widths) {
            let pad = width.saturating_sub(cell.chars().count());
            if column.right {
                let _ = write!(line, "{}{cell}  ", " ".repeat(pad));
            } else {
                let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
            }
        }
        line.trim_end().to_string()
    };
    let _ = writeln!(
        out,
        "{}",
        line(columns.iter().map(|c| c.header.as_str()).collect())
    );
    for row in 0..runs.len() {
        let _ = writeln!(
            out,
            "{}",
            line(columns.iter().map(|c| c.cells[row].as_str()).collect())
        );
    }
    footnotes(&mut out, runs, &listing.params, &left_out);
    out
}

fn fixed_columns(runs: &[ListedRun]) -> Vec<Column> {
    let this_year = pipe_protocol::format::utc_date_time(pipe_engine::now_ms());
    let same_year = runs.iter().all(|run| {
        pipe_protocol::format::utc_date_time(run.record.started_ms)[..4] == this_year[..4]
    });
    let pipelines: std::collections::BTreeSet<&str> = runs
        .iter()
        .map(|run| run.record.pipeline.as_str())
        .collect();
    let mut columns = vec![
        Column {
            header: "run".to_string(),
            cells: runs
                .iter()
                .map(|run| {
                    let pulled = if run.record.origin.is_some() {
                        "↓"
                    } else {
                        ""
                    };
                    format!("#{}{pulled}", run.record.id)
                })
                .collect(),
            right: false,
            drop_order: 0,
        },
        Column {
            header: "uid".to_string(),
            cells: runs
                .iter()
                .map(|run| run.record.short_uid().unwrap_or("-").to_string())
                .collect(),
            right: false,
            // What tells runs apart (params, metrics) matters more here:
            // `pipe runs --json` and `pipe show` have the uid.
            drop_order: 40,
        },
        Column {
            header: "started (UTC)".to_string(),
            cells: runs
                .iter()
                .map(|run| {
                    let date = pipe_protocol::format::utc_date_time(run.record.started_ms);
                    // To the minute, and without the year when it is this one.
                    let from = if same_year { 5 } else { 0 };
                    date.get(from..16).unwrap_or(&date).to_string()
                })
                .collect(),
            right: false,
            drop_order: 1,
        },
        Column {
            header: "status".to_string(),
            cells: runs
                .iter()
                .map(|run| cut(&status(run), STATUS_MAX))
                .collect(),
            right: false,
            drop_order: 0,
        },
        Column {
            header: "took".to_string(),
            cells: runs
                .iter()
                .map(|run| match run.record.ended_ms {
                    Some(end) => took(end.saturating_sub(run.record.started_ms)),
                    None => "-".to_string(),
                })
                .collect(),
            right: true,
            drop_order: 30,
        },
        Column {
            header: "commit".to_string(),
            cells: runs.iter().map(|run| git_label(&run.record)).collect(),
            right: false,
            drop_order: 0,
        },
    ];
    if pipelines.len() > 1 {
        columns.push(Column {
            header: "pipeline".to_string(),
            cells: runs
                .iter()
                .map(|run| cut(&run.record.pipeline, CELL_MAX))
                .collect(),
            right: false,
            drop_order: 0,
        });
    }
    columns
}

fn status(run: &ListedRun) -> String {
    match run.restored.only_restored() {
        Some(origins) if run.record.status == RunStatus::Succeeded => {
            format!("restored {}", run_list(&origins))
        }
        _ => run.record.status.to_string(),
    }
}

/// `baseline #best #v2`.
fn labels(run: &RunRecord) -> String {
    let mut parts: Vec<String> = run.name.iter().cloned().collect();
    parts.extend(run.tags.iter().map(|tag| format!("#{tag}")));
    parts.join(" ")
}

fn metric_text(metric: &str, cell: Option<&MetricCell>) -> String {
    match cell {
        None => "-".to_string(),
        Some(cell) => {
            let value = rounded(metric, &serde_json::json!(cell.value));
            match cell.best_of {
                Some(count) => format!("{value} best of {count}"),
                None => value,
            }
        }
    }
}

/// Leaves out columns, in their drop order, until the table fits `max`;
/// returns the headers left out.
fn fit(columns: &mut Vec<Column>, max: usize) -> Vec<String> {
    let total = |columns: &[Column]| -> usize {
        columns
            .iter()
            .map(|column| column.width() + 2)
            .sum::<usize>()
    };
    let mut left_out = Vec::new();
    while total(columns) > max + 2 {
        let Some((index, _)) = columns
            .iter()
            .enumerate()
            .filter(|(_, column)| column.drop_order > 0)
            .max_by_key(|(index, column)| (column.drop_order, *index))
        else {
            break;
        };
        left_out.push(columns.remove(index).header);
    }
    left_out
}

fn footnotes(out: &mut String, runs: &[ListedRun], params: &[String], left_out: &[String]) {
    let origins: std::collections::BTreeSet<&str> = runs
        .iter()
        .filter_map(|run| run.record.origin.as_deref())
        .collect();
    for origin in origins {
        let _ = writeln!(out, "↓ pulled from {origin}");
    }
    if !left_out.is_empty() {
        let names: Vec<String> = left_out
            .iter()
            .map(|header| {
                // A param's full path, not its short header.
                params
                    .iter()
                    .find(|param| {
                        param.as_str() == header || param.ends_with(&format!(".{header}"))
                    })
                    .cloned()
                    .unwrap_or_else(|| header.clone())
            })
            .collect();
        let _ = writeln!(
            out,
            "left out to fit {} columns: {} (a wider COLUMNS shows them; `pipe compare` shows every param)",
            terminal_width(),
            names.join(", ")
        );
    }
}

/// The shortest dotted suffix of each name that no other name ends with
/// (`train.n_est` -> `n_est`).
fn short_names(names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|name| {
            let parts: Vec<&str> = name.split('.').collect();
            for take in 1..=parts.len() {
                let suffix = parts[parts.len() - take..].join(".");
                let unique = names
                    .iter()
                    .filter(|other| *other != name)
                    .all(|other| other != &suffix && !other.ends_with(&format!(".{suffix}")));
                if unique {
                    return suffix;
                }
            }
            name.clone()
        })
        .collect()
}

/// `text`, cut to `max` characters with `…` when longer.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{kept}…")
}

fn terminal_width() -> usize {
    crate::terminal::columns(DEFAULT_WIDTH)
}
