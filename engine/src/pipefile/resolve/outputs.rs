//! A stage's `outs` and `metrics`: their names and paths, normalised and
//! checked, and the outputs of a `uses:` stage.

use super::resolver::*;
use crate::pipefile::declare::{type_error, Decl, DeclKind};
use crate::pipefile::expand::Expansion;
use crate::pipeline::Out;
use crate::project_files::collect::Diagnostics;
use crate::project_files::collect::NUL_HINT;
use crate::project_files::paths::{self, PathProblem, ProjectPath};
use crate::project_files::source::Span;
use crate::project_files::yaml::{Node, NodeValue, Resolved};
use crate::Diagnostic;

impl<'a> Resolver<'a> {
    /// `outs` (mapping name -> path, list of paths, or one path) or
    /// `metrics` (list of paths or one path).
    pub(crate) fn outputs(
        &mut self,
        decl: &Decl,
        expansion: &Expansion,
        field: &'static str,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Vec<Out> {
        if field == "outs" {
            if let DeclKind::Worker { uses, version, .. } = &decl.kind {
                return self.worker_outputs(decl, uses, *version, expansion, diagnostics);
            }
        }
        let Some(node) = decl.node.get(field) else {
            return Vec::new();
        };
        let scope = Scope {
            stage: decl.name,
            field,
            combo: &expansion.combo,
            has_matrix: decl.has_matrix,
            deps: None,
            outs: None,
            allow_stage_refs: false,
        };
        let mut outs: Vec<Out> = Vec::new();
        for entry in self.output_entries(decl.name, field, node, field == "outs", diagnostics) {
            let path_node = entry.path.as_ref();
            let Some((texts, list)) = self.entry_texts(&scope, path_node, effects, diagnostics)
            else {
                continue;
            };
            for text in texts {
                let Some(path) = self.output_path(decl.name, field, &text, path_node, diagnostics)
                else {
                    continue;
                };
                let name = match (entry.name, list) {
                    (Some(name), true) => list_item_name(name, &path),
                    (Some(name), false) => name.to_string(),
                    (None, _) => path.to_string(),
                };
                outs.push(Out {
                    name,
                    path,
                    location: self.location(path_node.span),
                    in_git: entry.options.in_git,
                });
            }
        }
        // Kept for the whole command: no spare capacity per stage.
        outs.shrink_to_fit();
        outs
    }

    /// The (name, path node) pairs of a `deps`/`outs`/`metrics` value.
    pub(crate) fn path_entries<'n>(
        &self,
        stage: &str,
        field: &str,
        node: &'n Node,
        named: bool,
        diagnostics: &mut Diagnostics,
    ) -> Vec<(Option<&'n str>, &'n Node)> {
        let shape = if named {
            "a mapping of name: path, or a list of paths"
        } else {
            "a path or a list of paths"
        };
        let example = match field {
            "deps" => "deps:\n  data: data/train.csv\n  code: train.py",
            "outs" => "outs:\n  model: models/model.pt",
            _ => "metrics: metrics/eval.json",
        };
        let mut pairs = Vec::new();
        let mut push_path =
            |name: Option<&'n str>, item: &'n Node, diagnostics: &mut Diagnostics| {
                let scalar_ok = item.as_scalar().is_some_and(|scalar| {
                    matches!(
                        scalar.resolve(),
                        Resolved::Str | Resolved::Int(_) | Resolved::Float(_)
                    )
                });
                if scalar_ok {
                    pairs.push((name, item));
                } else {
                    diagnostics.push(type_error(
                        self.sources,
                        item,
                        format!("each path in `{field}` of stage `{stage}` must be a string"),
                        format!("write a project-relative path, e.g.\n{example}"),
                    ));
                }
            };
        match &node.value {
            NodeValue::Map(entries) if named => {
                for entry in entries {
                    push_path(Some(entry.key.as_str()), &entry.value, diagnostics);
                }
            }
            NodeValue::Seq(items) => {
                for item in items {
                    push_path(None, item, diagnostics);
                }
            }
            NodeValue::Scalar(scalar) if scalar.resolve() == Resolved::Str => {
                push_path(None, node, diagnostics)
            }
            _ => diagnostics.push(type_error(
                self.sources,
                node,
                format!("`{field}` of stage `{stage}` must be {shape}"),
                format!("write e.g.\n{example}"),
            )),
        }
        pairs
    }

    pub(crate) fn output_path(
        &self,
        stage: &str,
        field: &str,
        text: &str,
        node: &Node,
        diagnostics: &mut Diagnostics,
    ) -> Option<ProjectPath> {
        self.output_path_at(stage, field, text, node.span, diagnostics)
    }

    /// [`Resolver::output_path`] of a path written at `span` (a mapping's
    /// key: a plot's path).
    pub(crate) fn output_path_at(
        &self,
        stage: &str,
        field: &str,
        text: &str,
        span: Span,
        diagnostics: &mut Diagnostics,
    ) -> Option<ProjectPath> {
        let located = |code: &'static str, message: String, hint: &str| {
            Diagnostic::new(code, message)
                .at(self.location(span))
                .with_hint(hint.to_string())
        };
        match ProjectPath::new(text) {
            Ok(path) if path.protected_dir() == Some(paths::PIPE_DIR) => {
                diagnostics.push(located(
                    "output-in-pipe-dir",
                    format!("`{field}` path `{text}` of stage `{stage}` is inside `.pipe/`"),
                    "`.pipe/` belongs to pipe (cache and run records); write outputs elsewhere in the project, e.g. `models/`",
                ));
                None
            }
            Ok(path) if path.protected_dir().is_some() => {
                diagnostics.push(located(
                    "output-in-git-dir",
                    format!("`{field}` path `{text}` of stage `{stage}` is inside `.git/`"),
                    "pipe deletes an output before its stage runs, and `.git/` holds the repository and its history; write outputs elsewhere in the project, e.g. `models/`",
                ));
                None
            }
            // What the cache's rule refuses it would never store or give
            // back, and a record holding it would not be read: a `.git`
            // further down (a nested repository, which the run would
            // delete) or a control character.
            Ok(path) => match paths::check_relative_path(&path) {
                Ok(()) => Some(path),
                Err(problem) => {
                    let nested_git = path
                        .split('/')
                        .any(|part| part.eq_ignore_ascii_case(paths::GIT_DIR));
                    diagnostics.push(located(
                        if nested_git { "output-in-git-dir" } else { "bad-path" },
                        format!(
                            "`{field}` path `{}` of stage `{stage}` {problem}",
                            text.escape_debug()
                        ),
                        "pipe deletes an output before its stage runs and caches it by its path: write it where no `.git/` (a repository, nested ones too) holds it, under a name without control characters, e.g. `models/`",
                    ));
                    None
                }
            },
            Err(PathProblem::Absolute | PathProblem::EscapesRoot) => {
                diagnostics.push(located(
                    "output-outside-project",
                    format!("`{field}` path `{text}` of stage `{stage}` is outside the project"),
                    "outputs are cached and restored inside the project (the nearest directory above the pipeline file with `.git` or `.pipe`); use a relative path such as `models/model.pt`",
                ));
                None
            }
            Err(PathProblem::IsRoot) => {
                diagnostics.push(located(
                    "bad-path",
                    format!("`{field}` path `{text}` of stage `{stage}` is the project root"),
                    "name a file or directory inside the project, e.g. `models/`",
                ));
                None
            }
            Err(PathProblem::Empty) => {
                diagnostics.push(located(
                    "bad-path",
                    format!("empty path in `{field}` of stage `{stage}`"),
                    "write a project-relative path such as `data/train.csv`",
                ));
                None
            }
            Err(PathProblem::Nul) => {
                diagnostics.push(located(
                    "bad-path",
                    format!(
                        "`{field}` path `{}` of stage `{stage}` holds a NUL byte",
                        text.escape_debug()
                    ),
                    NUL_HINT,
                ));
                None
            }
        }
    }
}
