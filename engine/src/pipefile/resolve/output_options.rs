//! Per-output options on `outs` and `metrics` entries, in DVC's forms:
//! a single-pair mapping in a list (`- eval/metrics.json: {cache: false}`,
//! `[model.pkl: {persist: true}]`) or, in the named form, a mapping with
//! `path:` (`model: {path: model.pkl, cache: false}`). Each option is
//! mapped to what it means here or refused at its key with what to do
//! instead.

use std::borrow::Cow;

use super::resolver::*;
use crate::pipefile::declare::type_error;
use crate::project_files::collect::Diagnostics;
use crate::project_files::yaml::{Entry, Node, NodeValue, Resolved, Scalar};
use crate::suggest::did_you_mean;
use crate::Diagnostic;

/// What an entry's options say about its output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OutputOptions {
    /// `cache: false`: the user keeps the file in git. pipe still stores
    /// it (a result is restored whole), but leaves it out of `.gitignore`.
    pub in_git: bool,
}

/// One output entry: its name in the named form, the node of its path
/// (the key of a single-pair mapping is made a node of its own), and its
/// options.
pub(crate) struct OutputEntry<'n> {
    pub name: Option<&'n str>,
    pub path: Cow<'n, Node>,
    pub options: OutputOptions,
}

/// Options a DVC output may carry that only annotate it: accepted, and
/// nothing changes.
const ANNOTATIONS: [&str; 4] = ["desc", "type", "labels", "meta"];
const KNOWN: [&str; 6] = ["cache", "persist", "desc", "type", "labels", "meta"];

impl<'a> Resolver<'a> {
    /// The entries of an `outs` (named: `outs` allows `name: path`) or
    /// `metrics` value, options read. Everything else goes through
    /// `path_entries`' rules and messages.
    pub(crate) fn output_entries<'n>(
        &self,
        stage: &str,
        field: &str,
        node: &'n Node,
        named: bool,
        diagnostics: &mut Diagnostics,
    ) -> Vec<OutputEntry<'n>> {
        let mut entries = Vec::new();
        let plain = |name, path: &'n Node| OutputEntry {
            name,
            path: Cow::Borrowed(path),
            options: OutputOptions::default(),
        };
        match &node.value {
            NodeValue::Seq(items) => {
                for item in items {
                    match item.as_map() {
                        Some([entry]) => {
                            let path = key_node(entry);
                            let options = self.options(stage, field, entry, false, diagnostics);
                            entries.push(OutputEntry {
                                name: None,
                                path: Cow::Owned(path),
                                options,
                            });
                        }
                        _ => entries.extend(
                            self.path_entries(stage, field, item, false, diagnostics)
                                .into_iter()
                                .map(|(name, path)| plain(name, path)),
                        ),
                    }
                }
            }
            NodeValue::Map(map) if named => {
                for entry in map {
                    if entry.value.as_map().is_none() {
                        entries.extend(
                            self.path_entries(stage, field, &entry.value, false, diagnostics)
                                .into_iter()
                                .map(|(_, path)| plain(Some(entry.key.as_str()), path)),
                        );
                        continue;
                    }
                    let Some(path) = entry.value.get("path") else {
                        diagnostics.push(type_error(
                            self.sources,
                            &entry.value,
                            format!("output `{}` of stage `{stage}` has options but no `path`", entry.key),
                            format!("write its path beside them, e.g.\n{field}:\n  {}: {{ path: models/model.pt, cache: false }}", entry.key),
                        ));
                        continue;
                    };
                    let options = self.options(stage, field, entry, true, diagnostics);
                    entries.extend(
                        self.path_entries(stage, field, path, false, diagnostics)
                            .into_iter()
                            .map(|(_, path)| OutputEntry {
                                name: Some(entry.key.as_str()),
                                path: Cow::Borrowed(path),
                                options,
                            }),
                    );
                }
            }
            _ => entries.extend(
                self.path_entries(stage, field, node, named, diagnostics)
                    .into_iter()
                    .map(|(name, path)| plain(name, path)),
            ),
        }
        entries
    }

    /// The options of `entry` (its value: a mapping, or nothing).
    fn options(
        &self,
        stage: &str,
        field: &str,
        entry: &Entry,
        named: bool,
        diagnostics: &mut Diagnostics,
    ) -> OutputOptions {
        let mut options = OutputOptions::default();
        let options_map = match &entry.value.value {
            NodeValue::Map(map) => map.as_slice(),
            _ if entry.value.is_null() => &[],
            _ => {
                diagnostics.push(type_error(
                    self.sources,
                    &entry.value,
                    format!(
                        "the options of output `{}` of stage `{stage}` must be a mapping",
                        entry.key
                    ),
                    format!(
                        "write e.g.\n{field}:\n  - {}: {{ cache: false }}",
                        entry.key
                    ),
                ));
                return options;
            }
        };
        for option in options_map {
            let key = option.key.as_str();
            let flag = || match option.value.as_scalar().map(Scalar::resolve) {
                Some(Resolved::Bool(value)) => Some(value),
                _ => None,
            };
            match key {
                "cache" => match flag() {
                    Some(cache) => options.in_git = !cache,
                    None => diagnostics.push(self.not_a_boolean(stage, entry, option)),
                },
                "persist" => match flag() {
                    Some(false) => {}
                    Some(true) => diagnostics.push(self.persist_refused(stage, entry, option)),
                    None => diagnostics.push(self.not_a_boolean(stage, entry, option)),
                },
                "path" if named => {}
                annotation if ANNOTATIONS.contains(&annotation) => {}
                "push" | "remote" => diagnostics.push(
                    Diagnostic::new(
                        "unsupported-option",
                        format!("output option `{key}` of `{}` in stage `{stage}` is DVC's, and pipe has no per-output remote", entry.key),
                    )
                    .at(self.location(option.key_span))
                    .with_hint("remove it: every result goes to the project's one remote (`cache: { remote: ... }` in the pipeline, or `--remote`), all of a stage's outputs or none, so that a result pulled elsewhere is whole (docs/remote-cache.md)"),
                ),
                other => {
                    let hint = match did_you_mean(other, KNOWN) {
                        Some(known) => format!("did you mean `{known}`? known options: cache, persist, desc"),
                        None => "known options: cache (false: you commit the file to git), persist, desc".to_string(),
                    };
                    diagnostics.push(
                        Diagnostic::new(
                            "unknown-key",
                            format!("unknown option `{other}` on output `{}` of stage `{stage}`", entry.key),
                        )
                        .at(self.location(option.key_span))
                        .with_hint(hint),
                    );
                }
            }
        }
        options
    }

    fn not_a_boolean(&self, stage: &str, entry: &Entry, option: &Entry) -> Diagnostic {
        type_error(
            self.sources,
            &option.value,
            format!(
                "option `{}` of output `{}` in stage `{stage}` must be true or false",
                option.key, entry.key
            ),
            format!("write `{}: false` or `{}: true`", option.key, option.key),
        )
    }

    fn persist_refused(&self, stage: &str, entry: &Entry, option: &Entry) -> Diagnostic {
        Diagnostic::new(
            "unsupported-option",
            format!(
                "output `{}` of stage `{stage}` is declared `persist: true`, which pipe does not do",
                entry.key
            ),
        )
        .at(self.location(option.key_span))
        .with_hint(
            "pipe deletes a stage's outputs before it runs, so that a file left by an earlier run never passes for a new result (no key covers what that run left). Remove `persist: true`; a stage that builds on earlier work reads it as a dependency (another stage's output), and a training stage resumes from its own state after an interruption (docs/pipeline-spec.md, \"Per-output options\")",
        )
    }
}

/// The key of a single-pair mapping as a node of its own: a string at the
/// key's place, which interpolation and path checks treat as any path.
fn key_node(entry: &Entry) -> Node {
    Node {
        value: NodeValue::Scalar(Scalar {
            text: entry.key.clone(),
            plain: false,
            verbatim_col: None,
            shared: false,
        }),
        span: entry.key_span,
    }
}
