//! Params: inline `params:`, then `params.yaml` beside the pipeline file,
//! then `-S key.path=value` overrides, merged mapping by mapping.

use std::collections::HashMap;

use serde_json::Value;

use crate::overrides::{OverrideMode, ParamOverride, ParamValue};
use crate::project_files::source::{Sources, Span};
use crate::project_files::yaml::{Entry, Node, NodeValue, Resolved, Scalar};
use crate::suggest::{did_you_mean, hint_with_suggestion, name_list};
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
    match scalar.plain {
        true => crate::overrides::plain_json(&scalar.text),
        false => Value::String(scalar.text.clone()),
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

/// What of the pipeline file an unknown `-S` param is explained with.
pub(crate) struct OverrideContext<'f> {
    /// Where the file's `params:` is written: an unknown key of the top
    /// level is shown there.
    pub(crate) params_at: Option<Span>,
    /// The file's `stages:`: `-S train.weight_decay=…` names a param the
    /// built-in stage `train` takes but its `with:` does not set from the
    /// params.
    pub(crate) stages: Option<&'f Node>,
}

/// Applies one `-S key.path=value` argument to the merged params.
// The error goes straight into the list of diagnostics; boxing it would
// only move the allocation.
#[allow(clippy::result_large_err)]
pub(crate) fn apply_override(
    root: &mut Node,
    file: &OverrideContext<'_>,
    setting: &ParamOverride,
    sources: &mut Sources,
) -> Result<(), Diagnostic> {
    let shown = format!("-S {setting}");
    let mode = setting.mode;
    // The setting without its `+`.
    let body = &shown[3 + mode.prefix().len()..];
    let path = &setting.path.dotted();
    let Some(one) = setting.one() else {
        // Only a sweep's record holds several, and it loads as a sweep.
        return Err(Diagnostic::new(
            "bad-override",
            format!("`{shown}`: several values for one param"),
        )
        .with_hint("sweep them: `pipe run -m`"));
    };
    let value_text = &one.to_string();
    let value = value_node(one, value_text, sources);

    // Only a typo needs them, but the walk below holds the tree mutably.
    let known_paths = if mode == OverrideMode::Replace {
        all_paths(root)
    } else {
        Vec::new()
    };
    let keys: Vec<&str> = setting.path.keys().iter().map(String::as_str).collect();
    let (leaf, parents) = keys.split_last().expect("a path has at least one key");
    // The nearest mapping that exists, where an unknown key is shown.
    let mut anchor = file.params_at;
    let mut node: &mut Node = root;
    for (depth, key) in parents.iter().enumerate() {
        let found = node.describe();
        let NodeValue::Map(entries) = &mut node.value else {
            let walked = keys[..depth].join(".");
            return Err(not_a_mapping(&shown, &walked, key, found));
        };
        let index = match entries.iter().position(|entry| entry.key == *key) {
            Some(index) => index,
            None if mode == OverrideMode::Replace => {
                let unknown = UnknownKey {
                    shown: &shown,
                    body,
                    keys: &keys,
                    depth,
                    siblings: entries.iter().map(|entry| entry.key.as_str()).collect(),
                    known_paths: &known_paths,
                    stages: file.stages,
                };
                return Err(unknown
                    .diagnostic()
                    .at(anchor.and_then(|span| sources.location(span))));
            }
            None => {
                entries.push(Entry {
                    key: key.to_string(),
                    key_span: value.span,
                    value: Node {
                        value: NodeValue::Map(Vec::new()),
                        span: value.span,
                    },
                });
                entries.len() - 1
            }
        };
        anchor = Some(entries[index].key_span);
        node = &mut entries[index].value;
    }
    let found = node.describe();
    let NodeValue::Map(entries) = &mut node.value else {
        let parent = parents.join(".");
        return Err(not_a_mapping(&shown, &parent, leaf, found));
    };
    match entries.iter_mut().find(|entry| entry.key == *leaf) {
        Some(entry) if mode == OverrideMode::Add => Err(Diagnostic::new(
            "bad-override",
            format!("`{shown}`: `{path}` is already a param, and `+` adds a new one"),
        )
        .at(sources.location(entry.key_span))
        .with_hint(format!(
            "drop the `+` to replace it: `-S {body}`; `++` sets a param whether it exists or not"
        ))),
        Some(entry) => {
            check_same_kind(&shown, path, value_text, &entry.value, &value)?;
            entry.value = value;
            Ok(())
        }
        None if mode == OverrideMode::Replace => {
            let unknown = UnknownKey {
                shown: &shown,
                body,
                keys: &keys,
                depth: parents.len(),
                siblings: entries.iter().map(|entry| entry.key.as_str()).collect(),
                known_paths: &known_paths,
                stages: file.stages,
            };
            Err(unknown
                .diagnostic()
                .at(anchor.and_then(|span| sources.location(span))))
        }
        None => {
            let key_span = value.span;
            entries.push(Entry {
                key: leaf.to_string(),
                key_span,
                value,
            });
            Ok(())
        }
    }
}

/// `-S a.b.c=1` where `a.b` is not a mapping.
fn not_a_mapping(shown: &str, parent: &str, key: &str, found: &str) -> Diagnostic {
    Diagnostic::new(
        "param-type",
        format!("`{shown}`: `{parent}` is {found}, so it has no key `{key}`"),
    )
    .with_hint(format!("set `{parent}` itself: `-S {parent}=VALUE`"))
}

/// The value `-S` gives must be of the kind of the value it replaces.
#[allow(clippy::result_large_err)]
fn check_same_kind(
    shown: &str,
    path: &str,
    value_text: &str,
    old: &Node,
    new: &Node,
) -> Result<(), Diagnostic> {
    let (old_kind, new_kind) = (kind(old), kind(new));
    let compatible = old_kind == new_kind
        || old_kind == Kind::Null
        || new_kind == Kind::Null
        || (old_kind == Kind::Float && new_kind == Kind::Int);
    if compatible {
        return Ok(());
    }
    let expected = old.describe();
    let found = new.describe();
    let mut hint = format!("`{path}` is {expected} in the params; pass {expected} value");
    if old_kind == Kind::Str {
        hint = format!(
            "`{path}` is a string; quote the value to keep it one: -S '{path}=\"{value_text}\"'"
        );
    } else if new_kind == Kind::Str && value_text.contains(',') {
        hint = format!(
            "{hint}; to run once per value, sweep them: `pipe run -m -S {path}={value_text}`"
        );
    }
    Err(Diagnostic::new(
        "param-type",
        format!("`{shown}`: `{path}` is {expected}, but the value is {found}"),
    )
    .with_hint(hint))
}

/// A `-S` path whose key `keys[depth]` is not in the params: most often a
/// typo, which would otherwise set a param nothing reads.
struct UnknownKey<'k> {
    shown: &'k str,
    /// The argument without its `+`.
    body: &'k str,
    keys: &'k [&'k str],
    depth: usize,
    /// The keys of the mapping that lacks `keys[depth]`.
    siblings: Vec<&'k str>,
    known_paths: &'k [String],
    stages: Option<&'k Node>,
}

impl UnknownKey<'_> {
    fn diagnostic(&self) -> Diagnostic {
        let missing = self.keys[..=self.depth].join(".");
        let parent = self.keys[..self.depth].join(".");
        let path = self.keys.join(".");
        let add = format!("to add a new param, write `-S +{}`", self.body);
        let known = if self.siblings.is_empty() && parent.is_empty() {
            "no params are defined (`params:` or `params.yaml`)".to_string()
        } else if self.siblings.is_empty() {
            format!("`{parent}` is an empty mapping")
        } else if parent.is_empty() {
            format!("params: {}", name_list(&self.siblings, 12))
        } else {
            format!("keys of `{parent}`: {}", name_list(&self.siblings, 12))
        };
        let mut hint =
            hint_with_suggestion(self.suggestion(&path).as_deref(), format!("{known}; {add}"));
        if let Some(note) = self.stage_param_note() {
            hint = format!("{note}\n{hint}");
        }
        Diagnostic::new(
            "unknown-param",
            format!("`{}`: there is no param `{missing}`", self.shown),
        )
        .with_hint(hint)
    }

    /// `-S STAGE.PARAM=…` where the built-in stage `STAGE` takes `PARAM`
    /// but its `with:` does not set it from the params: `-S` sets
    /// `params:` only, so the way to reach it is a reference.
    fn stage_param_note(&self) -> Option<String> {
        let [stage_name, param] = self.keys else {
            return None;
        };
        let stage = self.stages?.get(stage_name)?;
        let uses_text = stage.get("uses")?.as_str()?;
        let (uses, version) = super::uses::parse_uses(stage.get("uses")?)?;
        let declared = [
            crate::builtin_workers::BuiltinWorker::Data,
            crate::builtin_workers::BuiltinWorker::Training,
        ]
        .into_iter()
        .flat_map(crate::builtin_workers::built_in_stages)
        .find(|info| info.name == uses && info.version == version)?
        .params
        .into_iter()
        .any(|spec| spec.name == *param);
        if !declared {
            return None;
        }
        let reference = format!("${{params.{stage_name}.{param}}}");
        Some(match stage.get("with").and_then(|with| with.get(param)) {
            Some(_) => format!(
                "stage `{stage_name}` ({uses_text}) sets `{param}` in its `with:` without a param; `-S` sets params only: write `{param}: {reference}` there and add `{param}` under `params: {stage_name}:`"
            ),
            None => format!(
                "stage `{stage_name}` ({uses_text}) takes a param `{param}` its `with:` does not set; `-S` sets params only: add `{param}: {reference}` under its `with:`, then `-S +{}`",
                self.body
            ),
        })
    }

    /// The key at this level closest to the one written (the rest of the
    /// path kept when it exists there), else a param elsewhere whose path
    /// is close or ends in the same name: `-S smoothing=1` for
    /// `train.smoothing`.
    fn suggestion(&self, path: &str) -> Option<String> {
        let written = self.keys[self.depth];
        if let Some(close) = did_you_mean(written, self.siblings.iter().copied()) {
            let mut keys = self.keys.to_vec();
            keys[self.depth] = close;
            let corrected = keys.join(".");
            if self.known_paths.contains(&corrected) {
                return Some(corrected);
            }
            return Some(keys[..=self.depth].join("."));
        }
        if let Some(close) = did_you_mean(path, self.known_paths.iter().map(String::as_str)) {
            return Some(close.to_string());
        }
        let leaf = self.keys.last()?;
        self.known_paths
            .iter()
            .find(|known| known.rsplit('.').next() == Some(*leaf))
            .cloned()
    }
}

/// `value` as a node of the params, each part placed at a source of its
/// own that holds its text: no file, so a diagnostic about it names the
/// `-S` setting rather than a place.
fn value_node(value: &ParamValue, text: &str, sources: &mut Sources) -> Node {
    let file = sources.add(None, text.to_string());
    let span = Span {
        file,
        line: 1,
        col: 1,
        len: text.chars().count().max(1),
    };
    fn node(value: &ParamValue, span: Span) -> Node {
        let scalar = |text: &String, plain: bool| {
            NodeValue::Scalar(Scalar {
                text: text.clone(),
                plain,
                verbatim_col: None,
                shared: false,
            })
        };
        let value = match value {
            ParamValue::Plain(text) => scalar(text, true),
            ParamValue::Quoted(text) => scalar(text, false),
            ParamValue::List(items) => {
                NodeValue::Seq(items.iter().map(|item| node(item, span)).collect())
            }
            ParamValue::Map(entries) => NodeValue::Map(
                entries
                    .iter()
                    .map(|(key, value)| Entry {
                        key: key.clone(),
                        key_span: span,
                        value: node(value, span),
                    })
                    .collect(),
            ),
        };
        Node { value, span }
    }
    node(value, span)
}
