//! Where each `-S` override lands: on a scalar of `params.yaml` that a run
//! can write there for its commands (`pipeline::ParamsFileEdits`), or
//! where a command that reads its params by itself could not see it, which
//! a stage listing that param is refused for (`override-unseen`).

use std::path::PathBuf;

use super::params;
use crate::overrides::ParamOverride;
use crate::pipeline::{paths_overlap, yaml_float, yaml_quoted, ParamEdit, ParamsFileEdits};
use crate::project_files::source::{FileId, Sources, Span};
use crate::project_files::yaml::{Node, NodeValue, Resolved};

/// An override no command could read from `params.yaml`.
#[derive(Debug, Clone)]
pub(crate) struct UnseenOverride {
    pub path: String,
    /// The `-S` argument as given.
    pub argument: String,
    pub reason: Unseen,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unseen {
    /// The param is set in the pipeline file (or nowhere else).
    NotInParamsFile,
    /// `params.yaml` sets it as a mapping, a list over several lines, a
    /// block scalar: nothing pipe rewrites in place.
    NotOneLineScalar,
    /// `params.yaml` writes it under an anchor (`&x`) or as an alias
    /// (`*x`): its text is read at several places, and an edit of it
    /// would change the other params that read it too.
    Shared,
    /// `+`/`++` added it; `params.yaml` does not have it.
    Added,
}

impl UnseenOverride {
    /// Whether `params.yaml` holds the param (so that a command reading
    /// the whole file reads its old value), rather than lacking it.
    pub fn held_by_params_file(&self) -> bool {
        matches!(self.reason, Unseen::NotOneLineScalar | Unseen::Shared)
    }

    /// Why a command reading `params.yaml` would not see it, and what
    /// would make it.
    pub fn explained(&self) -> (String, String) {
        let path = &self.path;
        match self.reason {
            Unseen::NotInParamsFile => (
                format!("`{path}` is set in the pipeline file, not in params.yaml, the file pipe writes `-S` values into while a run's commands run"),
                format!("or move `{path}` into params.yaml"),
            ),
            Unseen::NotOneLineScalar => (
                format!("params.yaml sets `{path}` as a mapping or over several lines, and pipe rewrites only one-line values in place"),
                format!("or write `{path}` on one line in params.yaml (`lr: 1.0e-4`, `layers: [64, 32]`) and set its keys one by one"),
            ),
            Unseen::Shared => (
                format!("params.yaml shares the value of `{path}` with other params through a YAML anchor (`&name`) or alias (`*name`), and writing it there would change them too"),
                format!("or write the value of `{path}` out in params.yaml in place of the anchor or alias"),
            ),
            Unseen::Added => (
                format!("params.yaml does not have `{path}`, and pipe adds no keys to the file"),
                format!("or add `{path}` to params.yaml first"),
            ),
        }
    }
}

/// Gathers, override by override, what each one does to `params.yaml`.
pub(crate) struct OverrideSites {
    /// `params.yaml`, its place among the sources, and the BLAKE3 of its
    /// text; `None` without one.
    file: Option<(PathBuf, FileId, String)>,
    edits: Vec<ParamEdit>,
    /// The pipeline file, likewise: where an override of a param its own
    /// `params:` sets would be written, which `pipe apply` does (a run
    /// never writes the pipeline file).
    pipeline_file: (PathBuf, FileId),
    pipeline_edits: Vec<ParamEdit>,
    unseen: Vec<UnseenOverride>,
}

/// Where `-S` values are written for good (`pipe apply`): in `params.yaml`
/// and in the pipeline file's own `params:`.
#[derive(Debug, Default)]
pub(crate) struct SiteEdits {
    pub params_file: Option<ParamsFileEdits>,
    pub pipeline_file: Option<ParamsFileEdits>,
}

/// What an override is about to replace.
pub(crate) struct Before {
    path: String,
    /// The one-line scalar of `params.yaml` it replaces.
    site: Option<Span>,
    /// The one-line scalar of the pipeline file's `params:` it replaces.
    pipeline_site: Option<Span>,
    existed: bool,
    /// Whether the value it replaces is written in `params.yaml`.
    in_file: bool,
    /// Whether that value is shared through an anchor or alias.
    shared: bool,
}

fn with_digest(path: PathBuf, id: FileId, sources: &Sources) -> (PathBuf, FileId, String) {
    let digest = blake3::hash(sources.file(id).text.as_bytes());
    (path, id, digest.to_hex().to_string())
}

impl OverrideSites {
    /// `file`: `params.yaml` and its place, if there is one;
    /// `pipeline_file` the pipeline file's.
    pub fn new(
        file: Option<(PathBuf, FileId)>,
        pipeline_file: (PathBuf, FileId),
        sources: &Sources,
    ) -> Self {
        OverrideSites {
            file: file.map(|(path, id)| with_digest(path, id, sources)),
            edits: Vec::new(),
            pipeline_file,
            pipeline_edits: Vec::new(),
            unseen: Vec::new(),
        }
    }

    /// Read before `setting` is applied to `merged`.
    pub fn before(&self, merged: &Node, setting: &ParamOverride, sources: &Sources) -> Before {
        let path = setting.path.dotted();
        let node = params::lookup(merged, &path);
        let in_file = match (&self.file, node) {
            (Some((_, id, _)), Some(node)) => node.span.file == *id,
            _ => false,
        };
        let in_pipeline_file = node.is_some_and(|node| node.span.file == self.pipeline_file.1);
        Before {
            path,
            site: node
                .filter(|_| in_file)
                .and_then(|node| one_line_scalar(node, sources)),
            pipeline_site: node
                .filter(|_| in_pipeline_file)
                .and_then(|node| one_line_scalar(node, sources)),
            existed: node.is_some(),
            in_file,
            shared: node
                .and_then(Node::as_scalar)
                .is_some_and(|scalar| scalar.shared),
        }
    }

    /// Read once `setting` was applied to `merged` without error.
    pub fn after(&mut self, before: Before, merged: &Node, setting: &ParamOverride) {
        let path = before.path;
        let Some(node) = params::lookup(merged, &path) else {
            return;
        };
        let text = flow_yaml(node);
        if let Some(edit) = self
            .pipeline_edits
            .iter_mut()
            .find(|edit| edit.path == path)
        {
            edit.text = text.clone();
        } else if let Some(span) = before.pipeline_site {
            self.pipeline_edits.push(ParamEdit {
                path: path.clone(),
                line: span.line,
                col: span.col,
                len: span.len,
                text: text.clone(),
            });
        }
        // A second `-S` of one param replaces the first one's value.
        if let Some(edit) = self.edits.iter_mut().find(|edit| edit.path == path) {
            edit.text = text;
            return;
        }
        match before.site {
            Some(span) => self.edits.push(ParamEdit {
                path,
                line: span.line,
                col: span.col,
                len: span.len,
                text,
            }),
            None => {
                let reason = if !before.existed {
                    Unseen::Added
                } else if before.in_file && before.shared {
                    Unseen::Shared
                } else if before.in_file {
                    Unseen::NotOneLineScalar
                } else {
                    Unseen::NotInParamsFile
                };
                // A mapping replaced whole takes the edits of its keys with it.
                self.edits
                    .retain(|edit| !paths_overlap(&edit.path, &path) || edit.path == path);
                self.unseen.push(UnseenOverride {
                    path,
                    argument: setting.to_string(),
                    reason,
                });
            }
        }
    }

    pub fn finish(self, sources: &Sources) -> (SiteEdits, Vec<UnseenOverride>) {
        let params_file = match self.file {
            Some((file, _, loaded)) if !self.edits.is_empty() => Some(ParamsFileEdits {
                file,
                loaded,
                edits: self.edits,
            }),
            _ => None,
        };
        let (file, id) = self.pipeline_file;
        // Hashed only when there is something to write: most loads have
        // no override of the pipeline file's own params.
        let pipeline_file = (!self.pipeline_edits.is_empty()).then(|| {
            let (file, _, loaded) =
                with_digest(crate::params_override::absolute(&file), id, sources);
            ParamsFileEdits {
                file,
                loaded,
                edits: self.pipeline_edits,
            }
        });
        let edits = SiteEdits {
            params_file,
            pipeline_file,
        };
        (edits, self.unseen)
    }
}

/// The span of `node` when it is a scalar written on one line exactly as
/// its span says (plain, or quoted without escapes), and read there alone
/// (no anchor or alias shares it): what an edit can replace character for
/// character.
fn one_line_scalar(node: &Node, sources: &Sources) -> Option<Span> {
    let NodeValue::Scalar(scalar) = &node.value else {
        return None;
    };
    scalar.verbatim_col?;
    if scalar.shared {
        return None;
    }
    if scalar.text.is_empty() && scalar.plain {
        return None;
    }
    let line: Vec<char> = sources
        .file(node.span.file)
        .line_text(node.span.line)
        .chars()
        .collect();
    let start = node.span.col.checked_sub(1)?;
    let written: String = line.get(start..start + node.span.len)?.iter().collect();
    let expected_inner = written
        .strip_prefix(['"', '\''])
        .and_then(|rest| rest.strip_suffix(['"', '\'']))
        .unwrap_or(&written);
    (expected_inner == scalar.text).then_some(node.span)
}

/// `node` as one line of YAML flow that YAML 1.1 and 1.2 readers read
/// alike: strings double-quoted, floats with a dot and a signed exponent.
pub(crate) fn flow_yaml(node: &Node) -> String {
    match &node.value {
        NodeValue::Scalar(scalar) => match scalar.resolve() {
            Resolved::Null => "null".to_string(),
            Resolved::Bool(value) => value.to_string(),
            Resolved::Int(value) => value.to_string(),
            Resolved::Float(value) => yaml_float(value),
            Resolved::Str => yaml_quoted(&scalar.text),
        },
        NodeValue::Seq(items) => {
            let items: Vec<String> = items.iter().map(flow_yaml).collect();
            format!("[{}]", items.join(", "))
        }
        NodeValue::Map(entries) => {
            let entries: Vec<String> = entries
                .iter()
                .map(|entry| format!("{}: {}", yaml_quoted(&entry.key), flow_yaml(&entry.value)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}
