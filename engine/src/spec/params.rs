//! Params: inline `params:`, then `params.yaml` beside the pipeline file,
//! then `-S key.path=value` overrides, merged mapping by mapping.

use std::collections::HashMap;

use serde_json::Value;

use super::source::{Sources, Span};
use super::suggest::{did_you_mean, hint_with_suggestion, name_list};
use super::yaml::{self, Entry, Node, NodeValue, Resolved, Scalar};
use crate::Diagnostic;

/// Lays `overlay` over `base`: mappings merge key by key, anything else
/// is replaced.
pub(crate) fn merge(base: &mut Node, overlay: Node) {
    match (&mut base.value, overlay.value) {
        (NodeValue::Map(base_entries), NodeValue::Map(overlay_entries)) => {
            let mut position: HashMap<String, usize> = base_entries
                .iter()
                .enumerate()
                .map(|(index, entry)| (entry.key.clone(), index))
                .collect();
            for overlay_entry in overlay_entries {
                match position.get(&overlay_entry.key) {
                    Some(&index) => merge(&mut base_entries[index].value, overlay_entry.value),
                    None => {
                        position.insert(overlay_entry.key.clone(), base_entries.len());
                        base_entries.push(overlay_entry);
                    }
                }
            }
        }
        (_, value) => {
            base.value = value;
            base.span = overlay.span;
        }
    }
}

/// The node at dotted `path` (`train.lr`), through mappings.
pub(crate) fn lookup<'a>(root: &'a Node, path: &str) -> Option<&'a Node> {
    path.split('.').try_fold(root, |node, key| node.get(key))
}

/// Every dotted path in `root`, mappings included, in file order: the
/// candidates for "did you mean".
pub(crate) fn all_paths(root: &Node) -> Vec<String> {
    fn walk(node: &Node, prefix: &str, paths: &mut Vec<String>) {
        if let Some(entries) = node.as_map() {
            for entry in entries {
                let path = if prefix.is_empty() {
                    entry.key.clone()
                } else {
                    format!("{prefix}.{}", entry.key)
                };
                paths.push(path.clone());
                walk(&entry.value, &path, paths);
            }
        }
    }
    let mut paths = Vec::new();
    walk(root, "", &mut paths);
    paths
}

pub(crate) fn unknown_param_hint(root: &Node, path: &str) -> String {
    let paths = all_paths(root);
    if paths.is_empty() {
        return "no params are defined; add them under `params:` or in `params.yaml`".to_string();
    }
    let suggestion = did_you_mean(path, paths.iter().map(String::as_str));
    hint_with_suggestion(
        suggestion,
        format!("known params: {}", name_list(&paths, 12)),
    )
}

pub(crate) fn to_json(node: &Node) -> Value {
    match &node.value {
        NodeValue::Scalar(scalar) => scalar_to_json(scalar),
        NodeValue::Seq(items) => Value::Array(items.iter().map(to_json).collect()),
        NodeValue::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|entry| (entry.key.clone(), to_json(&entry.value)))
                .collect(),
        ),
    }
}

pub(crate) fn scalar_to_json(scalar: &Scalar) -> Value {
    match scalar.resolve() {
        Resolved::Null => Value::Null,
        Resolved::Bool(value) => Value::Bool(value),
        Resolved::Int(value) => Value::from(value),
        // JSON has no infinities or NaN; they stay as the text written.
        Resolved::Float(value) => serde_json::Number::from_f64(value)
            .map_or_else(|| Value::String(scalar.text.clone()), Value::Number),
        Resolved::Str => Value::String(scalar.text.clone()),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Int,
    Float,
    Str,
    List,
    Mapping,
}

fn kind(node: &Node) -> Kind {
    match &node.value {
        NodeValue::Seq(_) => Kind::List,
        NodeValue::Map(_) => Kind::Mapping,
        NodeValue::Scalar(scalar) => match scalar.resolve() {
            Resolved::Null => Kind::Null,
            Resolved::Bool(_) => Kind::Bool,
            Resolved::Int(_) => Kind::Int,
            Resolved::Float(_) => Kind::Float,
            Resolved::Str => Kind::Str,
        },
    }
}

/// Applies one `-S key.path=value` argument to the merged params.
// The error goes straight into the list of diagnostics; boxing it would
// only move the allocation.
#[allow(clippy::result_large_err)]
pub(crate) fn apply_override(
    root: &mut Node,
    argument: &str,
    sources: &mut Sources,
) -> Result<(), Diagnostic> {
    let shown = format!("-S {argument}");
    let Some((path, value_text)) = argument.split_once('=') else {
        return Err(Diagnostic::new("bad-override", format!("`{shown}`: expected `key.path=value`"))
            .with_hint(format!("write e.g. `-S {argument}=VALUE`; nested params are joined with dots: `-S train.lr=1e-4`")));
    };
    let path = path.trim();
    if path.is_empty() || path.split('.').any(str::is_empty) {
        return Err(Diagnostic::new(
            "bad-override",
            format!("`{shown}`: `{path}` is not a param path"),
        )
        .with_hint("name the param with its dotted path, e.g. `-S train.lr=1e-4`"));
    }
    let value = parse_override_value(value_text, sources).map_err(|info| {
        Diagnostic::new("bad-override", format!("`{shown}`: the value is not valid YAML: {info}"))
            .with_hint("quote the value for the shell, e.g. -S 'tags=[a, b]', or pass plain text without brackets")
    })?;

    let (parent_path, leaf) = path
        .rsplit_once('.')
        .map_or(("", path), |(parent, leaf)| (parent, leaf));
    let hint = unknown_param_hint(root, path);
    let parent = if parent_path.is_empty() {
        Some(&mut *root)
    } else {
        lookup_mut(root, parent_path)
    };
    let Some(parent) = parent else {
        return Err(Diagnostic::new(
            "unknown-param",
            format!("`{shown}`: there is no param `{parent_path}`"),
        )
        .with_hint(hint));
    };
    let NodeValue::Map(entries) = &mut parent.value else {
        let found = parent.describe();
        return Err(Diagnostic::new(
            "param-type",
            format!("`{shown}`: `{parent_path}` is {found}, so it has no key `{leaf}`"),
        )
        .with_hint(format!(
            "set `{parent_path}` itself: `-S {parent_path}=VALUE`"
        )));
    };
    match entries.iter_mut().find(|entry| entry.key == leaf) {
        Some(entry) => {
            let (old, new) = (kind(&entry.value), kind(&value));
            let compatible = old == new
                || old == Kind::Null
                || new == Kind::Null
                || (old == Kind::Float && new == Kind::Int);
            if !compatible {
                let expected = entry.value.describe();
                let found = value.describe();
                let mut hint =
                    format!("`{path}` is {expected} in the params; pass {expected} value");
                if old == Kind::Str {
                    hint = format!("`{path}` is a string; quote the value to keep it one: -S '{path}=\"{value_text}\"'");
                }
                return Err(Diagnostic::new(
                    "param-type",
                    format!("`{shown}`: `{path}` is {expected}, but the value is {found}"),
                )
                .with_hint(hint));
            }
            entry.value = value;
        }
        None => {
            let key_span = value.span;
            entries.push(Entry {
                key: leaf.to_string(),
                key_span,
                value,
            });
        }
    }
    Ok(())
}

fn lookup_mut<'a>(root: &'a mut Node, path: &str) -> Option<&'a mut Node> {
    path.split('.')
        .try_fold(root, |node, key| match &mut node.value {
            NodeValue::Map(entries) => entries
                .iter_mut()
                .find(|entry| entry.key == key)
                .map(|entry| &mut entry.value),
            _ => None,
        })
}

/// The value `text` stands for in `-S key=TEXT`, as JSON: what `pipe
/// compare --where key=TEXT` matches, so `--where seed=0x10` finds the run
/// made with `-S seed=0x10`. An error says why the text is not YAML.
pub fn override_value(text: &str) -> Result<Value, String> {
    let mut sources = Sources::default();
    parse_override_value(text, &mut sources).map(|node| to_json(&node))
}

/// Plain text is a YAML plain scalar (`1e-4`, `true`, `bf16-mixed`);
/// text starting with a bracket or quote is parsed as YAML, so lists and
/// quoted strings can be passed too.
fn parse_override_value(text: &str, sources: &mut Sources) -> Result<Node, String> {
    let file = sources.add(None, text.to_string());
    let span = Span {
        file,
        line: 1,
        col: 1,
        len: text.chars().count().max(1),
    };
    let trimmed = text.trim();
    if !trimmed.starts_with(['[', '{', '"', '\'']) {
        let scalar = Scalar {
            text: trimmed.to_string(),
            plain: true,
            verbatim_col: None,
        };
        return Ok(Node {
            value: NodeValue::Scalar(scalar),
            span,
        });
    }
    match yaml::parse(sources, file) {
        Ok(Some(node)) => Ok(node),
        Ok(None) => Ok(Node {
            value: NodeValue::Scalar(Scalar {
                text: String::new(),
                plain: true,
                verbatim_col: None,
            }),
            span,
        }),
        Err(diagnostics) => Err(diagnostics
            .first()
            .map(|diagnostic| {
                diagnostic
                    .message
                    .trim_start_matches("invalid YAML: ")
                    .to_string()
            })
            .unwrap_or_default()),
    }
}
