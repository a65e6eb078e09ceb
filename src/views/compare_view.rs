//! `pipe compare` on stdout: an aligned table for the terminal, Markdown
//! for a pull-request comment, CSV. (JSON is the table model itself; the
//! HTML page is `compare_page`.)

use std::fmt::Write;
use std::path::Path;

use pipe_engine::{
    digits_to_tell_apart, format_percent, format_significant, run_place, Cell, Column,
    CompareTable, Group, Pairs, RunId, RunRecord, Verdict, SIGNIFICANT_DIGITS,
};
use pipe_protocol::format::{format_metric, format_metric_delta};
use serde_json::Value;

use crate::style::Style;
use crate::views::value_text::paint_verdict;

/// One cell as shown: its value, and the change against the baseline.
pub(crate) struct Shown {
    pub(crate) value: String,
    pub(crate) change: String,
    pub(crate) arrow: &'static str,
    pub(crate) verdict: Option<Verdict>,
}

pub(crate) fn text_of(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(text) => text.clone(),
        Value::Array(items) => items.iter().map(text_of).collect::<Vec<_>>().join(","),
        Value::Number(number) => match number.as_f64() {
            Some(float) if !number.is_i64() && !number.is_u64() => {
                format_significant(float, SIGNIFICANT_DIGITS)
            }
            _ => number.to_string(),
        },
        other => other.to_string(),
    }
}

/// Per column, the significant digits that tell its values apart.
pub(crate) fn digits_of(table: &CompareTable, column: &Column) -> usize {
    let values: Vec<f64> = table
        .groups
        .iter()
        .filter_map(|group| group.cells.get(&column.id))
        .filter_map(|cell| cell.value.as_f64())
        .collect();
    digits_to_tell_apart(&values)
}

pub(crate) fn shown(column: &Column, cell: Option<&Cell>, digits: usize) -> Shown {
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
                (Some(std), None) => format!("{mean} ± {}", format_significant(std, 2)),
                (None, _) => mean,
            }
        }
        _ => text_of(&cell.value),
    };
    let delta_text = |delta: f64| format_metric_delta(column.unit, delta);
    let change = match (cell.delta.filter(|&delta| delta != 0.0), cell.relative) {
        (Some(delta), Some(relative)) => {
            format!("{} ({})", delta_text(delta), format_percent(relative))
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
    runs_text(&group.runs)
}

fn runs_text(runs: &[RunId]) -> String {
    runs.iter()
        .map(|run| format!("#{run}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// ` (mean of 3)` after the runs of a line of several results (seeds).
fn mean_part(group: &Group) -> String {
    if group.n > 1 {
        format!(" (mean of {})", group.n)
    } else {
        String::new()
    }
}

/// The first cell of a line: its runs, and how many rows a line of
/// several (seeds) is the mean of. In the label, not a column of its own,
/// so that no param or matrix key (`n`, `runs`) can take its name. Runs
/// that repeat an earlier one's result are among its runs, and said under
/// the table ([`repeats_note`]), so that the label stays short.
fn line_label(group: &Group) -> String {
    format!("{}{}", runs_of(group), mean_part(group))
}

/// [`line_label`] in at most `width` characters, when it can be: the
/// runs between the first few and the last left out (`#1,#2,…,#10 (mean
/// of 10)`); `None` when the label fits as it is.
fn shortened_label(group: &Group, width: usize) -> Option<String> {
    let whole = line_label(group);
    if chars(&whole) <= width || group.runs.len() < 3 {
        return None;
    }
    let mean = mean_part(group);
    let last = group.runs[group.runs.len() - 1];
    let with_first = |count: usize| format!("{},…,#{last}{mean}", runs_text(&group.runs[..count]));
    let fitting = (1..group.runs.len() - 1)
        .rev()
        .map(with_first)
        .find(|label| chars(label) <= width);
    Some(fitting.unwrap_or_else(|| with_first(1)))
}

/// A run that restored another's result is that result again, shown once,
/// on the line of the run that made it: said under the table, so that no
/// run seems missing (`same result as an earlier run, shown on its line:
/// #3 = #1`).
fn repeats_note(table: &CompareTable) -> Option<String> {
    let same: Vec<String> = table
        .groups
        .iter()
        .flat_map(|group| &group.repeats)
        .map(|repeat| format!("#{} = #{}", repeat.run, repeat.same_as))
        .collect();
    (!same.is_empty()).then(|| {
        format!(
            "same result as an earlier run (restored it), shown on its line: {}",
            same.join(", ")
        )
    })
}

/// `text` broken at spaces into lines of at most `width` characters where
/// it can be, the lines after the first indented by two.
fn wrapped(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.trim().is_empty() && chars(&line) + 1 + chars(word) > width {
            lines.push(std::mem::replace(&mut line, "  ".to_string()));
        } else if !line.trim().is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

pub(crate) fn baseline_text(table: &CompareTable) -> String {
    group_label(&table.groups[table.baseline.group], &table.baseline.matrix)
}

/// `#3,#4` or `#3,#4 (precision=bf16-mixed)`: a group's runs and the
/// matrix combination they share. A line of several seeds shares no seed:
/// the first row's is left out.
pub(crate) fn group_label(group: &Group, matrix: &Pairs) -> String {
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

pub(crate) fn is_seed_key(key: &str) -> bool {
    key.rsplit('.').next() == Some("seed")
}

/// ` ✓` after a change for the better, ` ✗` for the worse.
pub(crate) fn verdict_mark(verdict: Option<Verdict>) -> &'static str {
    match verdict {
        Some(Verdict::Better) => " ✓",
        Some(Verdict::Worse) => " ✗",
        _ => "",
    }
}

/// `+219 ms (+0.052%)` -> `+0.052%`; a change without a relative part
/// as it is.
fn relative_part(change: &str) -> String {
    match change.rsplit_once(" (") {
        Some((_, relative)) if relative.ends_with(')') => {
            relative.trim_end_matches(')').to_string()
        }
        _ => change.to_string(),
    }
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

/// The fewest characters a line's label is cut to.
const MIN_LABEL: usize = 12;

/// The terminal table: values aligned, changes against the baseline after
/// them, green when better and red when worse; under it the baseline, and
/// what the labels leave out, in lines that fit the terminal.
pub fn text(table: &CompareTable, style: Style) -> String {
    let width = terminal_width();
    let mut header: Vec<String> = vec!["run".into()];
    header.extend(table.columns.iter().map(|column| column.label.clone()));
    let digits: Vec<usize> = table
        .columns
        .iter()
        .map(|column| digits_of(table, column))
        .collect();
    // Per line, per column: (value, change, verdict).
    let mut lines: Vec<Vec<Shown>> =
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
    let cut = fit_labels(table, &mut lines, &header, width);
    let mut out = table_text(lines, &header, width, style);
    let _ = writeln!(out, "baseline: {}", baseline_text(table));
    for note in [repeats_note(table), cut].into_iter().flatten() {
        for line in wrapped(&note, width) {
            let _ = writeln!(out, "{line}");
        }
    }
    if let Some(note) = hidden_note(table) {
        let _ = writeln!(out, "{}", style.dim(&note));
    }
    out
}

/// Labels cut to the room the other columns leave at their narrowest
/// (changes under values, relative only), so that a line of many runs
/// never widens the table past the terminal; a note names the runs of
/// each label cut.
fn fit_labels(
    table: &CompareTable,
    lines: &mut [Vec<Shown>],
    header: &[String],
    width: usize,
) -> Option<String> {
    let others: usize = (1..header.len())
        .map(|index| {
            lines
                .iter()
                .map(|line| {
                    chars(&line[index].value).max(chars(&relative_part(&line[index].change)))
                })
                .max()
                .unwrap_or(0)
                .max(chars(&header[index]))
                + 2
        })
        .sum();
    let room = width.saturating_sub(others + 2).max(MIN_LABEL);
    let mut cut = Vec::new();
    for (group, line) in table.groups.iter().zip(lines.iter_mut()) {
        if let Some(short) = shortened_label(group, room) {
            cut.push(format!("{short} is {}", runs_of(group)));
            line[0].value = short;
        }
    }
    (!cut.is_empty()).then(|| format!("runs of the lines cut short: {}", cut.join("; ")))
}

/// Per column, the widest of `part` over the lines.
fn widest(lines: &[Vec<Shown>], columns: usize, part: impl Fn(&Shown) -> &str) -> Vec<usize> {
    (0..columns)
        .map(|index| {
            lines
                .iter()
                .map(|line| chars(part(&line[index])))
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// The table's lines for a terminal `width` wide: changes beside their
/// values, or under them, or only their relative part, whichever fits.
fn table_text(mut lines: Vec<Vec<Shown>>, header: &[String], width: usize, style: Style) -> String {
    let columns = header.len();
    // Changes under their values, as wide as the wider of the two, may
    // still be wider than the terminal: then each change is its relative
    // part alone (`+1.2%`), the absolute one is a subtraction away.
    let under = |lines: &[Vec<Shown>]| -> usize {
        (0..columns)
            .map(|index| {
                lines
                    .iter()
                    .map(|line| chars(&line[index].value).max(chars(&line[index].change)))
                    .max()
                    .unwrap_or(0)
                    .max(chars(&header[index]))
                    + 2
            })
            .sum()
    };
    if under(&lines) > width {
        for cell in lines.iter_mut().flatten() {
            cell.change = relative_part(&cell.change);
        }
    }
    let value_width = widest(&lines, columns, |shown| &shown.value);
    let change_width = widest(&lines, columns, |shown| &shown.change);
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
    let stacked = total(&side_by_side) > width;
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
    crate::terminal::columns(80)
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
/// What the table warns of (runs of different data or hardware, ...),
/// one `warning:` line each, for stderr.
pub fn warnings(table: &CompareTable) -> String {
    let mut text = String::new();
    for warning in &table.warnings {
        let _ = writeln!(text, "warning: {}", warning.message);
    }
    text
}

/// Each run as a reviewer knows it, its branch and commit (`#3 = main @
/// 1a2b3c4`), for the Markdown's `Runs:` line; a run with no name, branch
/// or commit is left out.
pub fn run_labels(root: &Path, runs: &[RunRecord]) -> Vec<String> {
    runs.iter()
        .filter_map(|compared| {
            let place = run_place(root, compared)?;
            Some(format!("#{} = {place}", compared.id))
        })
        .collect()
}

pub fn markdown(table: &CompareTable, labels: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## pipe compare\n");
    let _ = writeln!(
        out,
        "Baseline: run {}. Changes are against it; ✓ better, ✗ worse by the metric's direction.\n",
        markdown_cell(&baseline_text(table))
    );
    if !labels.is_empty() {
        let shown: Vec<String> = labels.iter().map(|label| markdown_cell(label)).collect();
        let _ = writeln!(out, "Runs: {}.\n", shown.join("; "));
    }
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
    for note in [repeats_note(table), hidden_note(table)]
        .into_iter()
        .flatten()
    {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn group(runs: &[i64], n: usize) -> Group {
        Group {
            rows: Vec::new(),
            runs: runs.iter().map(|&run| RunId(run)).collect(),
            n,
            repeats: Vec::new(),
            distinct: Vec::new(),
            cells: Default::default(),
        }
    }

    #[test]
    fn a_label_of_many_runs_keeps_the_first_and_the_last_that_fit() {
        let seeds = group(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 10);
        assert_eq!(
            line_label(&seeds),
            "#1,#2,#3,#4,#5,#6,#7,#8,#9,#10 (mean of 10)"
        );
        assert_eq!(shortened_label(&seeds, 60), None);
        assert_eq!(
            shortened_label(&seeds, 27).as_deref(),
            Some("#1,#2,#3,…,#10 (mean of 10)")
        );
        assert_eq!(
            shortened_label(&seeds, 26).as_deref(),
            Some("#1,#2,…,#10 (mean of 10)")
        );
        // Narrower than any: the first and the last.
        assert_eq!(
            shortened_label(&seeds, 12).as_deref(),
            Some("#1,…,#10 (mean of 10)")
        );
        assert_eq!(shortened_label(&group(&[1, 2], 2), 3), None);
    }

    #[test]
    fn a_note_wraps_at_spaces_within_the_width() {
        let note =
            "same result as an earlier run (restored it), shown on its line: #3 = #1, #5 = #1";
        let lines = wrapped(note, 40);
        assert!(lines.iter().all(|line| chars(line) <= 40), "{lines:?}");
        assert!(lines[1].starts_with("  "), "{lines:?}");
        assert_eq!(
            lines
                .iter()
                .map(|line| line.trim())
                .collect::<Vec<_>>()
                .join(" "),
            note
        );
        assert_eq!(wrapped("short", 40), ["short"]);
    }
}
