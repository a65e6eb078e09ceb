//! The small formatters the views share: times, dates, a run's commit,
//! a value or a metric as one word, a verdict's colour. Deterministic, so
//! every view built on them can be snapshot-tested and piped.

use pipe_engine::{format_significant, RunId, RunRecord, Verdict, SIGNIFICANT_DIGITS};
use pipe_protocol::format::{format_seconds, Unit};
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

/// Run ids as one list: `#1,#3`.
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

pub(crate) fn verdict_word(verdict: Option<Verdict>) -> &'static str {
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
