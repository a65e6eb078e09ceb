//! Text and Markdown for the data commands (stdout). Deterministic, so
//! it can be snapshot-tested and piped.

use std::fmt::Write;

use pipe_engine::{
    digits_to_tell_apart, format_percent, format_significant, FieldChange, Freshness, MetricChange,
    RunDiff, RunId, RunRecord, Verdict, Why, SIGNIFICANT_DIGITS,
};
use pipe_protocol::format::{format_metric, format_metric_delta, format_seconds, Unit};
use pipe_report::{Cell, Document, Table};
use serde_json::Value;

use crate::style::Style;

/// A run's or a stage's time, from the milliseconds it is recorded in.
pub(crate) fn took(ms: u64) -> String {
    format_seconds(ms as f64 / 1000.0)
}

pub(crate) fn width<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names.map(|name| name.chars().count()).max().unwrap_or(0)
}

pub(crate) fn show_value(value: &Option<Value>) -> String {
    match value {
        None => "(absent)".to_string(),
        Some(Value::String(text))
            if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            format!("{}…", &text[..12])
        }
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

fn field_lines(out: &mut String, changes: &[FieldChange], indent: &str) {
    let field_width = width(changes.iter().map(|change| change.field.as_str()));
    for change in changes {
        let _ = writeln!(
            out,
            "{indent}{:<field_width$}  {}",
            change.field,
            change_text(&show_value(&change.before), &show_value(&change.after))
        );
    }
}

/// Past this many characters on either side, a change is said by the
/// words it adds and removes: an aggregation's command over 200 paths is
/// kilobytes, and one path added is what changed. A command of a line or
/// two is shown whole.
const WHOLE_CHANGE_CHARS: usize = 400;

/// The words of `text`, a shell's separators (`;`, `|`, `&`, `(`, `)`,
/// `<`, `>`) each a word of its own, so that `a.txt;` is `a.txt` and `;`.
fn words_of(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    for word in text.split_whitespace() {
        let mut start = 0;
        for (at, ch) in word.char_indices() {
            if ";|&()<>".contains(ch) {
                if at > start {
                    words.push(&word[start..at]);
                }
                words.push(&word[at..at + ch.len_utf8()]);
                start = at + ch.len_utf8();
            }
        }
        if start < word.len() {
            words.push(&word[start..]);
        }
    }
    words
}

/// `before -> after`, or, for long texts, the words in which they differ
/// (`words removed: a; added: b, c`), after their common first and last
/// words.
fn change_text(before: &str, after: &str) -> String {
    if before.len().max(after.len()) <= WHOLE_CHANGE_CHARS {
        return format!("{before} -> {after}");
    }
    let old = words_of(before);
    let new = words_of(after);
    let head = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let tail = old[head..]
        .iter()
        .rev()
        .zip(new[head..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let words = |words: &[&str]| match words.len() {
        0 => "none".to_string(),
        _ => crate::terminal::first_few(
            &words
                .iter()
                .map(|word| word.to_string())
                .collect::<Vec<_>>(),
            3,
            " ",
        ),
    };
    format!(
        "{} -> {} characters, words removed: {}, added: {}",
        before.len(),
        after.len(),
        words(&old[head..old.len() - tail]),
        words(&new[head..new.len() - tail])
    )
}

pub fn why_text(why: &Why) -> String {
    let mut out = String::new();
    let state = &why.state;
    let verdict = match state.freshness {
        Freshness::Fresh => "is fresh",
        Freshness::Restorable => "is restorable from the cache",
        Freshness::Stale => "is stale",
        Freshness::Running => "is running",
    };
    let _ = writeln!(out, "stage `{}` {verdict}", state.stage);
    for reason in &state.reasons {
        let _ = writeln!(out, "  - {reason}");
    }
    match (&why.previous_run, &why.previous_key, why.key) {
        (Some(run), Some(_), Some(current)) if why.changes.is_empty() => {
            let _ = writeln!(
                out,
                "nothing it depends on changed since run #{run} (key {}…)",
                current.short()
            );
        }
        (Some(run), Some(previous), Some(current)) => {
            let _ = writeln!(
                out,
                "changed since run #{run} (key {}… then, {}… now):",
                previous.short(),
                current.short()
            );
            field_lines(&mut out, &why.changes, "  ");
        }
        // No key yet: it depends on outputs that do not exist yet, or on
        // a stage that runs now.
        (Some(run), Some(_), None) => {
            let waits = if state.freshness == Freshness::Running {
                "it is running"
            } else {
                "a stage before it has to run first"
            };
            let _ = writeln!(
                out,
                "its key is worked out once its inputs are there ({waits}); its last result was made in run #{run}"
            );
        }
        _ => {
            let _ = writeln!(out, "no earlier result of this stage is recorded");
        }
    }
    if let Some(run) = why.failed_run {
        // A failed run had no result: named only as failed.
        let how = if why.interrupted {
            "was interrupted"
        } else {
            "failed"
        };
        let _ = writeln!(out, "it {how} in run #{run}");
    }
    out
}

pub(crate) fn date(ms: u64) -> String {
    pipe_protocol::format::utc_date_time(ms)
}

/// The commit, `+` when tracked files differed from it, `?` while that is
/// not known (being worked out after a run's end, or a run killed first).
pub(crate) fn git_label(run: &RunRecord) -> String {
    match (&run.git_commit, run.git_dirty) {
        (Some(commit), dirty) => format!(
            "{}{}",
            &commit[..commit.len().min(8)],
            match dirty {
                Some(false) => "",
                Some(true) => "+",
                None => "?",
            }
        ),
        _ => "-".to_string(),
    }
}

/// `git_label` said in words, for `pipe show`.
pub(crate) fn git_label_explained(run: &RunRecord) -> String {
    let label = git_label(run);
    match (&run.git_commit, run.git_dirty) {
        (Some(_), Some(false)) => format!("{label} (clean)"),
        (Some(_), Some(true)) => format!("{label} (tracked files differed from it)"),
        (Some(_), None) => format!("{label} (not known whether tracked files differed from it)"),
        (None, _) => label,
    }
}

/// A run's status as `pipe runs` lists it: a run that ran nothing and
/// restored another's results says whose (`restored #1`).
/// `#1,#3`.
pub(crate) fn run_list(runs: &[RunId]) -> String {
    runs.iter()
        .map(|run| format!("#{run}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A metric as `pipe diff` prints one value: 4 significant digits, bytes,
/// durations, FLOPs and rates in human units.
pub(crate) fn rounded(name: &str, value: &Value) -> String {
    match (value.as_f64(), Unit::of(name)) {
        (Some(number), Some(unit)) => unit.format(number),
        (Some(number), None) if !value.is_i64() && !value.is_u64() => {
            format_significant(number, SIGNIFICANT_DIGITS)
        }
        _ => show_value(&Some(value.clone())),
    }
}

/// A metric as `pipe show` lists the ones after the key metrics: the
/// value as recorded, and in human units when its name gives one, so that
/// neither the exact number nor a readable one is lost.
pub(crate) fn unrounded(name: &str, value: &Value) -> String {
    match (value.as_f64(), Unit::of(name)) {
        (Some(number), Some(unit)) => format!("{} ({value})", unit.format(number)),
        _ => value.to_string(),
    }
}

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

fn verdict_word(verdict: Option<Verdict>) -> &'static str {
    match verdict {
        Some(Verdict::Better) => "better",
        Some(Verdict::Worse) => "worse",
        _ => "",
    }
}

/// Green when better, red when worse (on a terminal, without `NO_COLOR`).
pub fn paint_verdict(style: Style, verdict: Option<Verdict>, text: &str) -> String {
    match verdict {
        Some(Verdict::Better) => style.green(text),
        Some(Verdict::Worse) => style.red(text),
        _ => text.to_string(),
    }
}

fn status_pair(change: &pipe_engine::StageChange) -> String {
    let name =
        |status: Option<pipe_engine::StageStatus>| status.map(|s| s.as_str()).unwrap_or("absent");
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

pub fn stage_list(entries: &[pipe_engine::CatalogEntry]) -> String {
    let mut out = String::new();
    let name_width = width(entries.iter().map(|entry| entry.info.name.as_str())) + 3;
    for entry in entries {
        let id = format!("{}@{}", entry.info.name, entry.info.version);
        let _ = writeln!(out, "{id:<name_width$}  {}", entry.info.summary);
    }
    out
}

pub fn stage_detail(entry: &pipe_engine::CatalogEntry) -> String {
    let info = &entry.info;
    let mut out = String::new();
    let _ = writeln!(out, "{}@{}  {}", info.name, info.version, info.summary);
    let _ = writeln!(
        out,
        "implementation {}, worker {}",
        info.implementation,
        entry.worker.display()
    );
    let _ = writeln!(out, "\nparams (under `with:`)");
    let param_width = width(info.params.iter().map(|param| param.name.as_str()));
    for param in &info.params {
        let kind = match param.kind {
            pipe_protocol::ParamKind::Choice => param.choices.join("|"),
            other => serde_json::to_value(other)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
        };
        let default = match &param.default {
            None => "required".to_string(),
            Some(Value::Null) => "default: none".to_string(),
            Some(value) => format!("default: {value}"),
        };
        let _ = writeln!(
            out,
            "  {:<param_width$}  {kind}, {default}\n  {:<param_width$}  {}",
            param.name, "", param.doc
        );
    }
    let _ = writeln!(out, "\noutputs (`${{stages.STAGE.outs.NAME}}`)");
    let output_width = width(info.outputs.iter().map(|output| output.name.as_str()));
    for output in &info.outputs {
        let kind = match output.kind {
            pipe_protocol::OutputKind::File => "file",
            pipe_protocol::OutputKind::Dir => "directory",
        };
        let _ = writeln!(
            out,
            "  {:<output_width$}  {kind}: {}",
            output.name, output.doc
        );
    }
    if !info.metrics.is_empty() {
        let _ = writeln!(out, "\nmetrics: {}", info.metrics.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_change_is_said_by_the_words_it_adds_and_removes() {
        let paths: Vec<String> = (0..100).map(|i| format!("out/S{i:03}.json")).collect();
        let before = format!("agg {}; cat all.csv", paths[..99].join(" "));
        let after = format!("agg {}; cat all.csv", paths.join(" "));
        assert_eq!(
            super::change_text(&before, &after),
            format!(
                "{} -> {} characters, words removed: none, added: out/S099.json",
                before.len(),
                after.len()
            )
        );
        assert_eq!(super::change_text("lr 1", "lr 2"), "lr 1 -> lr 2");
    }
}
