//! The `executor:` section of a pipeline file or of `pipe.config.yaml`:
//! `executor: slurm`, or a mapping with the Slurm settings.

use super::collect::Diagnostics;
use super::source::Sources;
use super::suggest::{did_you_mean, hint_with_suggestion};
use super::yaml::{Entry, Node, NodeValue};
use crate::pipeline::{parse_suffixed_duration, ExecutorKind, ExecutorSpec};
use crate::Diagnostic;

const EXECUTOR_KEYS: [&str; 6] = ["type", "partition", "account", "qos", "flags", "poll"];
const EXECUTOR_HINT: &str = "write `executor: slurm`, or e.g. `executor: { type: slurm, partition: gpu, account: ml-lab, flags: [--constraint=a100] }`";

pub(crate) fn parse(
    node: &Node,
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> Option<ExecutorSpec> {
    if node.as_str().is_some() {
        return executor_kind(node, sources, diagnostics).map(|kind| ExecutorSpec {
            kind: Some(kind),
            places: sources
                .location(node.span)
                .map(|at| ("type", at))
                .into_iter()
                .collect(),
            ..ExecutorSpec::default()
        });
    }
    let Some(entries) = node.as_map() else {
        diagnostics.push(
            Diagnostic::new(
                "bad-type",
                format!(
                    "`executor` must be a name or a mapping, found {}",
                    node.describe()
                ),
            )
            .at(sources.location(node.span))
            .with_hint(EXECUTOR_HINT),
        );
        return None;
    };
    let mut spec = ExecutorSpec::default();
    let mut ok = true;
    for entry in entries {
        if !set(&mut spec, entry, sources, diagnostics) {
            ok = false;
        }
    }
    ok.then_some(spec)
}

/// `executor: NAME` or `type: NAME`.
fn executor_kind(
    value: &Node,
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> Option<ExecutorKind> {
    let kind = value.as_str().and_then(ExecutorKind::parse);
    if kind.is_none() {
        diagnostics.push(
            Diagnostic::new(
                "bad-executor",
                format!(
                    "unknown executor {}",
                    value
                        .as_str()
                        .map_or_else(|| value.describe().to_string(), |text| format!("`{text}`"))
                ),
            )
            .at(sources.location(value.span))
            .with_hint(
                "executors: local (this machine, the default), slurm (a batch job per stage)",
            ),
        );
    }
    kind
}

/// One key of the mapping form, put into `spec`; `false` when its value
/// is refused (and reported).
fn set(
    spec: &mut ExecutorSpec,
    entry: &Entry,
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> bool {
    let value = &entry.value;
    let holds_nul = |node: &Node| node.as_str().is_some_and(|text| text.contains('\0'));
    let items_hold_nul = match &value.value {
        NodeValue::Seq(items) => items.iter().any(holds_nul),
        _ => holds_nul(value),
    };
    if items_hold_nul {
        // Each setting becomes an argument of `sbatch`.
        diagnostics.push(super::collect::nul_byte(
            &format!("`executor.{}`", entry.key),
            sources.location(value.span),
        ));
        return false;
    }
    let bad = |what: &str| {
        Diagnostic::new(
            "bad-type",
            format!(
                "`executor.{}` must be {what}, found {}",
                entry.key,
                value.describe()
            ),
        )
        .at(sources.location(value.span))
        .with_hint(EXECUTOR_HINT)
    };
    let text = value
        .as_str()
        .filter(|text| !text.is_empty() && !value.is_null());
    if let (Some(name), Some(at)) = (
        EXECUTOR_KEYS.iter().find(|name| **name == entry.key),
        sources.location(value.span),
    ) {
        spec.places.insert(name, at);
    }
    let refusal = match entry.key.as_str() {
        "type" => match executor_kind(value, sources, diagnostics) {
            Some(kind) => {
                spec.kind = Some(kind);
                None
            }
            None => return false,
        },
        "partition" | "account" | "qos" => match text {
            Some(text) if !text.starts_with('-') && !text.contains(char::is_whitespace) => {
                let text = Some(text.to_string());
                match entry.key.as_str() {
                    "partition" => spec.partition = text,
                    "account" => spec.account = text,
                    _ => spec.qos = text,
                }
                None
            }
            _ => Some(bad("a name without spaces")),
        },
        "flags" => match &value.value {
            NodeValue::Seq(items) => {
                let flags: Option<Vec<String>> = items
                    .iter()
                    .map(|item| {
                        item.as_str()
                            .filter(|flag| flag.starts_with('-'))
                            .map(str::to_string)
                    })
                    .collect();
                match flags {
                    Some(flags) => {
                        spec.flags = Some(flags);
                        None
                    }
                    None => Some(bad("a list of sbatch options, each one item starting with `-` (`--constraint=a100`)")),
                }
            }
            _ => Some(bad(
                "a list of sbatch options (`flags: [--constraint=a100]`)",
            )),
        },
        "poll" => match text.and_then(parse_suffixed_duration) {
            Some(poll) if poll.as_millis() >= 100 => {
                spec.poll = Some(poll);
                None
            }
            _ => Some(bad("a duration of 100ms or more (`poll: 5s`)")),
        },
        other => Some(
            Diagnostic::new(
                "unknown-key",
                format!("unknown key `{other}` in `executor`"),
            )
            .at(sources.location(entry.key_span))
            .with_hint(hint_with_suggestion(
                did_you_mean(other, EXECUTOR_KEYS),
                format!("known keys: {}", EXECUTOR_KEYS.join(", ")),
            )),
        ),
    };
    match refusal {
        Some(diagnostic) => {
            diagnostics.push(diagnostic);
            false
        }
        None => true,
    }
}
