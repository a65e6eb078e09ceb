//! `pipe diff`'s text and Markdown: two runs' params, key changes,
//! stages and metrics side by side (stdout; deterministic).

use std::fmt::Write;

use pipe_engine::{
    digits_to_tell_apart, format_percent, FieldChange, MetricChange, RunDiff, StageChange,
    StageStatus, Verdict,
};
use pipe_protocol::format::{format_metric, format_metric_delta, Unit};
use pipe_report::{Cell, Document, Table};
use serde_json::Value;

use crate::style::Style;
use crate::views::field_changes::field_lines;
use crate::views::value_text::{paint_verdict, show_value, verdict_word, width};

/// How one metric change reads: the two values with the digits that tell
/// them apart, the delta, the percentage and the arrow with its verdict.
struct MetricLine {
    a: String,
    b: String,
    delta: String,
    percent: String,
    arrow: &'static str,
    verdict: Option<Verdict>,
}

fn metric_line(change: &MetricChange) -> MetricLine {
    let unit = Unit::of(&change.metric);
    let numbers = change
        .a
        .as_ref()
        .and_then(Value::as_f64)
        .zip(change.b.as_ref().and_then(Value::as_f64));
    let (a, b) = match numbers {
        Some((a, b)) => {
            let digits = digits_to_tell_apart(&[a, b]);
            (
                format_metric(unit, a, digits),
                format_metric(unit, b, digits),
            )
        }
        None => (show_value(&change.a), show_value(&change.b)),
    };
    let arrow = match change.delta {
        Some(delta) if delta > 0.0 => "▲",
        Some(delta) if delta < 0.0 => "▼",
        _ => "",
    };
    MetricLine {
        a,
        b,
        delta: change
            .delta
            .map(|delta| format_metric_delta(unit, delta))
            .unwrap_or_default(),
        percent: change.relative.map(format_percent).unwrap_or_default(),
        arrow,
        verdict: change.verdict,
    }
}

fn status_pair(change: &StageChange) -> String {
    let name = |status: Option<StageStatus>| status.map(|s| s.as_str()).unwrap_or("absent");
    format!("{} -> {}", name(change.status_a), name(change.status_b))
}

pub fn diff_text(diff: &RunDiff, all: bool, style: Style) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} -> {}", diff.labels.0, diff.labels.1);
    if let Some((a, b)) = &diff.commits {
        let _ = writeln!(
            out,
            "commit {} -> {}  (the code differs too)",
            a.describe(),
            b.describe()
        );
    }
    for (run, fields) in &diff.unverified {
        let _ = writeln!(
            out,
            "unverified: run #{run}'s {fields}, as its record says (pulled; not borne out by its results)"
        );
    }
    for (run, stages) in &diff.withheld {
        let _ = writeln!(
            out,
            "not shown: run #{run}'s outputs and metrics of {stages}"
        );
    }
    let _ = writeln!(out, "\nparams");
    if diff.params.is_empty() {
        let _ = writeln!(out, "  (unchanged)");
    }
    field_lines(&mut out, &diff.params, "  ");
    let (key, other) = key_and_other_metrics(diff);
    let _ = writeln!(out, "\nkey metrics");
    if key.is_empty() {
        let _ = writeln!(out, "  (none: name yours in the pipeline's `key_metrics:`)");
    }
    metric_lines(&mut out, &key, style);
    if all {
        let _ = writeln!(out, "\nother metrics");
        if other.is_empty() {
            let _ = writeln!(out, "  (unchanged)");
        }
        metric_lines(&mut out, &other, style);
    } else if !other.is_empty() {
        let _ = writeln!(
            out,
            "{}",
            style.dim(&format!(
                "  {} other metric{} changed (--all lists {})",
                other.len(),
                if other.len() == 1 { "" } else { "s" },
                if other.len() == 1 { "it" } else { "them" }
            ))
        );
    }
    let _ = writeln!(out, "\nstages");
    if diff.stages.is_empty() {
        let _ = writeln!(out, "  (same keys, nothing reran)");
    }
    let every = crate::human_reporter::every_stage();
    let groups = match every {
        true => diff.stages.iter().map(|change| (change, 1)).collect(),
        false => crate::views::diff_fold::stage_groups(&diff.stages),
    };
    for (change, count) in groups {
        match count {
            1 => {
                let _ = writeln!(out, "  {}  {}", change.stage, status_pair(change));
            }
            n => {
                let _ = writeln!(
                    out,
                    "  {} ×{n}  {}  {}",
                    crate::views::diff_fold::base_of(&change.stage),
                    status_pair(change),
                    style.dim(&format!("(the first, {}, below)", change.stage))
                );
            }
        }
        // A stage that reports on the run is keyed on the whole run: its
        // fields repeat everything above, so they are counted, not listed.
        let (of_run, own): (Vec<FieldChange>, Vec<FieldChange>) = change
            .key_changes
            .iter()
            .cloned()
            .partition(|field| field.field.starts_with("run."));
        let (own, counted) = match every {
            true => (own, Vec::new()),
            false => crate::views::diff_fold::shown_fields(&own),
        };
        field_lines(&mut out, &own, "      ");
        for line in counted {
            let _ = writeln!(out, "      {}", style.dim(&line));
        }
        if !of_run.is_empty() {
            let _ = writeln!(
                out,
                "      {}",
                style.dim(&format!(
                    "the run it reports on ({} field{} above)",
                    of_run.len(),
                    if of_run.len() == 1 { "" } else { "s" }
                ))
            );
        }
    }
    let _ = writeln!(out, "\noutputs");
    if diff.outputs.is_empty() {
        let _ = writeln!(out, "  (unchanged)");
    }
    let outputs = match every {
        true => diff.outputs.iter().map(|output| (None, output)).collect(),
        false => crate::views::diff_fold::output_groups(&diff.outputs),
    };
    let path_width = width(outputs.iter().map(|(_, output)| output.path.as_str()));
    for (group, output) in outputs {
        let short = |digest: &Option<String>| {
            digest
                .as_deref()
                .map(|d| format!("{}…", d.get(..12).unwrap_or(d)))
                .unwrap_or("(absent)".into())
        };
        let _ = writeln!(
            out,
            "  {:<path_width$}  {} -> {}  ({})",
            output.path,
            short(&output.a),
            short(&output.b),
            output.stage
        );
        if let Some((base, count)) = group {
            let _ = writeln!(
                out,
                "  {}",
                style.dim(&format!(
                    "and {} more of `{base}`'s expansions (-v lists them)",
                    count - 1
                ))
            );
        }
    }
    out
}

/// The key metrics (changed or not), then the other metrics that changed.
fn key_and_other_metrics(diff: &RunDiff) -> (Vec<&MetricChange>, Vec<&MetricChange>) {
    diff.metrics.iter().partition(|metric| metric.key)
}

/// One aligned line per metric: `evaluate: accuracy  0.806 -> 0.8103
/// +0.00429 (+0.5%) ▲ better`; `unchanged` for a key metric that is.
fn metric_lines(out: &mut String, metrics: &[&MetricChange], style: Style) {
    let labels: Vec<String> = metrics
        .iter()
        .map(|metric| format!("{}: {}", metric.stage, metric.metric))
        .collect();
    let lines: Vec<MetricLine> = metrics.iter().map(|metric| metric_line(metric)).collect();
    let label_width = width(labels.iter().map(String::as_str));
    let values_width = width(lines.iter().map(|line| line.a.as_str())).max(1);
    let after_width = width(lines.iter().map(|line| line.b.as_str()));
    let delta_width = width(lines.iter().map(|line| line.delta.as_str()));
    let percent_width = width(lines.iter().map(|line| line.percent.as_str())) + 2;
    for ((label, line), metric) in labels.iter().zip(&lines).zip(metrics) {
        if metric.a == metric.b {
            let _ = writeln!(
                out,
                "  {label:<label_width$}  {:>values_width$}    {}",
                line.a,
                style.dim("unchanged")
            );
            continue;
        }
        let percent = if line.percent.is_empty() {
            String::new()
        } else {
            format!("({})", line.percent)
        };
        let change = format!(
            "{:<delta_width$} {percent:<percent_width$} {} {}",
            line.delta,
            line.arrow,
            verdict_word(line.verdict)
        );
        let _ = writeln!(
            out,
            "  {label:<label_width$}  {:>values_width$} -> {:<after_width$}  {}",
            line.a,
            line.b,
            paint_verdict(style, line.verdict, change.trim_end())
        );
    }
}

/// `pipe diff --md`: the diff as a [`Document`], so a pull-request
/// comment gets the report's one Markdown writer, whose escaping holds
/// for whatever names and values a run record carries.
pub fn diff_markdown(diff: &RunDiff, all: bool) -> String {
    let mut page = Document::new(format!("pipe diff: {} → {}", diff.labels.0, diff.labels.1));
    let run_a = diff.labels.0.clone();
    let run_b = diff.labels.1.clone();
    let columns = |names: &[&str]| names.iter().map(|name| name.to_string()).collect();
    if let Some((a, b)) = &diff.commits {
        page.paragraph(format!(
            "The code differs too: {run_a} ran at {}, {run_b} at {}.",
            a.describe(),
            b.describe()
        ));
    }
    page.heading(2, "Params");
    if diff.params.is_empty() {
        page.paragraph("No changes.");
    } else {
        let mut table = Table::new(columns(&["param", &run_a, &run_b]));
        for change in &diff.params {
            table.rows.push(vec![
                Cell::text(&change.field),
                Cell::text(show_value(&change.before)),
                Cell::text(show_value(&change.after)),
            ]);
        }
        page.table(table);
    }
    let (key, other) = key_and_other_metrics(diff);
    let shown: Vec<&MetricChange> = if all {
        key.iter().chain(&other).copied().collect()
    } else {
        key
    };
    page.heading(2, "Key metrics");
    if shown.is_empty() {
        page.paragraph("None named: the pipeline's key_metrics: names them.");
    } else {
        let mut table = Table::new(columns(&["stage", "metric", &run_a, &run_b, "Δ", "%", ""]));
        for metric in &shown {
            let mut line = metric_line(metric);
            if metric.a == metric.b {
                line.delta.clear();
                line.percent = "unchanged".to_string();
                line.arrow = "";
                line.verdict = None;
            }
            let value = |value: &Option<Value>, text: String| match value
                .as_ref()
                .and_then(Value::as_f64)
            {
                Some(number) => Cell::number_as(number, text),
                None => Cell::text(text),
            };
            table.rows.push(vec![
                Cell::text(&metric.stage),
                Cell::text(&metric.metric),
                value(&metric.a, line.a),
                value(&metric.b, line.b),
                Cell::text(line.delta),
                Cell::text(line.percent),
                Cell::text(format!("{} {}", line.arrow, verdict_word(line.verdict)).trim()),
            ]);
        }
        page.table(table);
    }
    if !all && !other.is_empty() {
        page.paragraph(format!(
            "{} other metric{} changed (pipe diff --all lists them).",
            other.len(),
            if other.len() == 1 { "" } else { "s" }
        ));
    }
    page.heading(2, "Stages");
    if diff.stages.is_empty() {
        page.paragraph("Same keys; nothing reran.");
    } else {
        let mut table = Table::new(columns(&["stage", "status", "changed key fields"]));
        for change in &diff.stages {
            let fields: Vec<&str> = change
                .key_changes
                .iter()
                .map(|change| change.field.as_str())
                .collect();
            table.rows.push(vec![
                Cell::text(&change.stage),
                Cell::text(status_pair(change).replace(" -> ", " → ")),
                Cell::text(fields.join(", ")),
            ]);
        }
        page.table(table);
    }
    page.heading(2, "Outputs");
    if diff.outputs.is_empty() {
        page.paragraph("No changes.");
    } else {
        let mut table = Table::new(columns(&["output", "stage", &run_a, &run_b]));
        let short = |digest: &Option<String>| match digest.as_deref() {
            Some(digest) => Cell::text(digest.get(..12).unwrap_or(digest)),
            None => Cell::missing(),
        };
        for output in &diff.outputs {
            table.rows.push(vec![
                Cell::text(&output.path),
                Cell::text(&output.stage),
                short(&output.a),
                short(&output.b),
            ]);
        }
        page.table(table);
    }
    page.to_pasteable_markdown("")
}
