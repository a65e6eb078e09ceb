//! The `executor:` section of a pipeline file or of `pipe.config.yaml`:
//! `executor: slurm`, or a mapping with the Slurm settings.

use crate::pipeline::{parse_suffixed_duration, ExecutorKind, ExecutorSpec};
use crate::project_files::collect::Diagnostics;
use crate::project_files::source::Sources;
use crate::project_files::yaml::{Entry, Node, NodeValue};
use crate::suggest::{did_you_mean, hint_with_suggestion};
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
        diagnostics.push(crate::project_files::collect::nul_byte(
            &format!("`executor.{}`", entry.key),
            sources.location(value.span),
        ));
        return false;
    }
    let text = value
        .as_str()
        .filter(|text| !text.is_empty() && !value.is_null());
    if let (Some(name), Some(at)) = (
        EXECUTOR_KEYS.iter().find(|name| **name == entry.key),
        sources.location(value.span),
    ) {
        spec.places.insert(name, at);
    }
    let set = match entry.key.as_str() {
        "type" => match executor_kind(value, sources, diagnostics) {
            Some(kind) => {
                spec.kind = Some(kind);
                return true;
            }
            None => return false,
        },
        key @ ("partition" | "account" | "qos") => set_name(spec, key, text),
        "flags" => set_flags(spec, value),
        "poll" => set_poll(spec, text),
        other => {
            diagnostics.push(
                Diagnostic::new(
                    "unknown-key",
                    format!("unknown key `{other}` in `executor`"),
                )
                .at(sources.location(entry.key_span))
                .with_hint(hint_with_suggestion(
                    did_you_mean(other, EXECUTOR_KEYS),
                    format!("known keys: {}", EXECUTOR_KEYS.join(", ")),
                )),
            );
            return false;
        }
    };
    let Err(what) = set else {
        return true;
    };
    diagnostics.push(
        Diagnostic::new(
            "bad-type",
            format!(
                "`executor.{}` must be {what}, found {}",
                entry.key,
                value.describe()
            ),
        )
        .at(sources.location(value.span))
        .with_hint(EXECUTOR_HINT),
    );
    false
}

/// `partition`, `account` or `qos`; what it must be when refused.
fn set_name(spec: &mut ExecutorSpec, key: &str, text: Option<&str>) -> Result<(), &'static str> {
    match text {
        Some(text) if !text.starts_with('-') && !text.contains(char::is_whitespace) => {
            let text = Some(text.to_string());
            match key {
                "partition" => spec.partition = text,
                "account" => spec.account = text,
                _ => spec.qos = text,
            }
            Ok(())
        }
        _ => Err("a name without spaces"),
    }
}

/// `flags`, passed to `sbatch` as they are; what they must be when refused.
fn set_flags(spec: &mut ExecutorSpec, value: &Node) -> Result<(), &'static str> {
    match &value.value {
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
                    Ok(())
                }
                None => Err("a list of sbatch options, each one item starting with `-` (`--constraint=a100`)"),
            }
        }
        _ => Err("a list of sbatch options (`flags: [--constraint=a100]`)"),
    }
}

/// `poll`, how often Slurm is asked; what it must be when refused.
fn set_poll(spec: &mut ExecutorSpec, text: Option<&str>) -> Result<(), &'static str> {
    match text.and_then(parse_suffixed_duration) {
        Some(poll) if poll.as_millis() >= 100 => {
            spec.poll = Some(poll);
            Ok(())
        }
        _ => Err("a duration of 100ms or more (`poll: 5s`)"),
    }
}
