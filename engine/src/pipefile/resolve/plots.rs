//! A stage's `plots:`: each item a path (drawn with defaults), a
//! one-pair mapping `PATH: {x, y, kind, ...}` (DVC's stage-level form,
//! `template:` included), or a mapping with `path:` (which, unlike a key,
//! can hold `${...}`). A plot's file is an output of its stage: the same
//! output when `outs` or `metrics` declares it or a directory holding it,
//! else one added to `outs`, cached and restored like the others.

use pipe_protocol::{PlotKind, PlotSpec};

use super::resolver::*;
use crate::pipefile::declare::{type_error, Decl, DeclKind};
use crate::pipefile::expand::Expansion;
use crate::pipeline::Out;
use crate::project_files::collect::Diagnostics;
use crate::project_files::paths::ProjectPath;
use crate::project_files::source::Span;
use crate::project_files::yaml::{Entry, Node, NodeValue};
use crate::suggest::{did_you_mean, hint_with_suggestion};
use crate::Diagnostic;

/// What a plot item may set. `cache` is DVC's and accepted without
/// effect here: whether a plot file is cached is another matter.
const PLOT_OPTIONS: [&str; 8] = [
    "x", "y", "kind", "template", "title", "x_label", "y_label", "cache",
];

const EXAMPLE: &str = "plots:\n  - eval/plots/roc.csv:\n      x: fpr\n      y: tpr\n  - eval/plots/confusion.csv:\n      kind: confusion\n      x: actual\n      y: predicted";

/// Where an item's path is written: a scalar that may interpolate, or a
/// mapping's key that may not.
enum PathAt<'n> {
    Node(&'n Node),
    Key(&'n Entry),
}

impl<'a> Resolver<'a> {
    /// The plots of one expansion; a plot file no output declares is
    /// added to `outs`.
    pub(crate) fn plots(
        &mut self,
        decl: &Decl,
        expansion: &Expansion,
        outs: &mut Vec<Out>,
        metrics: &[Out],
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Vec<PlotSpec> {
        let Some(entry) = decl
            .node
            .as_map()
            .and_then(|fields| fields.iter().find(|field| field.key == "plots"))
        else {
            return Vec::new();
        };
        if let DeclKind::Worker { .. } = decl.kind {
            diagnostics.push(
                Diagnostic::new(
                    "misplaced-key",
                    format!("`plots` in stage `{}`, which has `uses`", decl.name),
                )
                .at(self.location(entry.key_span))
                .with_hint(
                    "`plots` draws files a `run:` stage writes; a built-in stage's curves and \
                     matrices are drawn by the report (`uses: report/html@1`)",
                ),
            );
            return Vec::new();
        }
        let items: Vec<&Node> = match &entry.value.value {
            NodeValue::Seq(items) => items.iter().collect(),
            NodeValue::Scalar(_) if entry.value.as_str().is_some() => vec![&entry.value],
            _ => {
                diagnostics.push(type_error(
                    self.sources,
                    &entry.value,
                    format!("`plots` of stage `{}` must be a list", decl.name),
                    format!("write e.g.\n{EXAMPLE}"),
                ));
                return Vec::new();
            }
        };
        let scope = Scope {
            stage: decl.name,
            field: "plots",
            combo: &expansion.combo,
            has_matrix: decl.has_matrix,
            deps: None,
            outs: None,
            allow_stage_refs: false,
        };
        let mut plots: Vec<PlotSpec> = Vec::new();
        for item in items {
            let Some((spec, path, span)) = self.plot(decl.name, &scope, item, effects, diagnostics)
            else {
                continue;
            };
            if plots.iter().any(|plot| plot.path == spec.path) {
                diagnostics.push(
                    Diagnostic::new(
                        "duplicate-plot",
                        format!("`{}` is plotted twice in stage `{}`", spec.path, decl.name),
                    )
                    .at(self.location(span))
                    .with_hint("draw several columns of one file in one plot: `y: [a, b]`"),
                );
                continue;
            }
            let declared = outs.iter().chain(metrics).any(|out| {
                out.path == spec.path
                    || spec
                        .path
                        .strip_prefix(out.path.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            });
            if !declared {
                outs.push(Out {
                    name: spec.path.clone(),
                    path,
                    location: self.location(span),
                    in_git: declared_cache_false(item),
                });
            }
            plots.push(spec);
        }
        plots
    }

    /// One item of `plots:` and where its path is written.
    fn plot(
        &mut self,
        stage: &str,
        scope: &Scope,
        item: &Node,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Option<(PlotSpec, ProjectPath, Span)> {
        let (path_at, options): (PathAt, &[Entry]) = match &item.value {
            NodeValue::Scalar(_) if item.as_str().is_some() => (PathAt::Node(item), &[]),
            NodeValue::Map(entries) => match entries.iter().find(|entry| entry.key == "path") {
                Some(path) => (PathAt::Node(&path.value), entries),
                None => match entries.as_slice() {
                    [only] if only.value.is_null() => (PathAt::Key(only), &[]),
                    [only] => match only.value.as_map() {
                        Some(options) => (PathAt::Key(only), options),
                        None => {
                            diagnostics.push(self.bad_item(stage, &only.value));
                            return None;
                        }
                    },
                    _ => {
                        diagnostics.push(self.bad_item(stage, item));
                        return None;
                    }
                },
            },
            _ => {
                diagnostics.push(self.bad_item(stage, item));
                return None;
            }
        };
        let (text, span) = match path_at {
            PathAt::Node(node) => {
                if node.as_str().is_none() {
                    diagnostics.push(self.bad_item(stage, node));
                    return None;
                }
                (
                    self.resolve_string(scope, node, effects, diagnostics)?,
                    node.span,
                )
            }
            PathAt::Key(entry) if entry.key.contains("${") => {
                diagnostics.push(
                    Diagnostic::new(
                        "bad-reference",
                        format!(
                            "the plot path `{}` of stage `{stage}` is a key, where `${{...}}` is not read",
                            entry.key
                        ),
                    )
                    .at(self.location(entry.key_span))
                    .with_hint(format!(
                        "write the path under `path:`, e.g.\n  - path: {}\n    x: fpr",
                        entry.key
                    )),
                );
                return None;
            }
            PathAt::Key(entry) => (entry.key.clone(), entry.key_span),
        };
        let path = self.output_path_at(stage, "plots", &text, span, diagnostics)?;
        let mut spec = PlotSpec::new(path.to_string());
        let before = diagnostics.reported();
        self.plot_options(stage, scope, options, &mut spec, effects, diagnostics);
        (diagnostics.reported() == before).then_some((spec, path, span))
    }

    fn bad_item(&self, stage: &str, node: &Node) -> Diagnostic {
        type_error(
            self.sources,
            node,
            format!(
                "each item of `plots` of stage `{stage}` must be a path, or a path with its options"
            ),
            format!("write e.g.\n{EXAMPLE}"),
        )
    }

    /// The options of one plot, each checked where it is written.
    fn plot_options(
        &mut self,
        stage: &str,
        scope: &Scope,
        options: &[Entry],
        spec: &mut PlotSpec,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) {
        let mut kind_at: Option<&Entry> = None;
        for option in options {
            let value = &option.value;
            match option.key.as_str() {
                "path" => {}
                "x" => spec.x = self.option_text(stage, scope, option, effects, diagnostics),
                "title" => {
                    spec.title = self.option_text(stage, scope, option, effects, diagnostics)
                }
                "x_label" => {
                    spec.x_label = self.option_text(stage, scope, option, effects, diagnostics)
                }
                "y_label" => {
                    spec.y_label = self.option_text(stage, scope, option, effects, diagnostics)
                }
                "y" => match &value.value {
                    NodeValue::Seq(items) => {
                        for item in items {
                            if item.as_scalar().is_none() || item.is_null() {
                                diagnostics.push(type_error(
                                    self.sources,
                                    item,
                                    format!("each `y` of a plot of stage `{stage}` must be a column name"),
                                    "write e.g. `y: [precision, recall]`",
                                ));
                                continue;
                            }
                            spec.y
                                .extend(self.resolve_string(scope, item, effects, diagnostics));
                        }
                    }
                    _ => {
                        spec.y
                            .extend(self.option_text(stage, scope, option, effects, diagnostics))
                    }
                },
                "kind" | "template" => {
                    if let Some(first) = kind_at {
                        diagnostics.push(
                            Diagnostic::new(
                                "misplaced-key",
                                format!(
                                    "a plot of stage `{stage}` has both `{}` and `{}`",
                                    first.key, option.key
                                ),
                            )
                            .at(self.location(option.key_span))
                            .with_hint("`template` is DVC's name for `kind`; keep one"),
                        );
                        continue;
                    }
                    kind_at = Some(option);
                    if let Some(kind) = self.plot_kind(stage, option, diagnostics) {
                        spec.kind = kind;
                    }
                }
                // DVC's: pipe caches every output; accepted so that a
                // DVC file loads.
                "cache" => {}
                unknown => {
                    let known = format!("known keys: {}", PLOT_OPTIONS.join(", "));
                    diagnostics.push(
                        Diagnostic::new(
                            "unknown-key",
                            format!("unknown key `{unknown}` in a plot of stage `{stage}`"),
                        )
                        .at(self.location(option.key_span))
                        .with_hint(hint_with_suggestion(
                            did_you_mean(unknown, PLOT_OPTIONS),
                            known,
                        )),
                    );
                }
            }
        }
        if spec.kind.is_confusion() && spec.y.len() > 1 {
            let at = options.iter().find(|option| option.key == "y");
            diagnostics.push(
                Diagnostic::new(
                    "bad-plot",
                    format!(
                        "a confusion matrix of stage `{stage}` has {} `y` columns",
                        spec.y.len()
                    ),
                )
                .at(at.and_then(|at| self.location(at.value.span)))
                .with_hint(
                    "a confusion matrix counts pairs of labels: `x` the actual label's column, \
                     `y` the predicted label's (one column)",
                ),
            );
        }
    }

    /// An option whose value is one text (a column, a title), interpolated.
    fn option_text(
        &mut self,
        stage: &str,
        scope: &Scope,
        option: &Entry,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Option<String> {
        let value = &option.value;
        if value.as_scalar().is_none() || value.is_null() {
            diagnostics.push(type_error(
                self.sources,
                value,
                format!("`{}` of a plot of stage `{stage}` must be text", option.key),
                format!("write e.g. `{}: fpr`", option.key),
            ));
            return None;
        }
        self.resolve_string(scope, value, effects, diagnostics)
    }

    /// `kind: NAME`, or DVC's `template: NAME`.
    fn plot_kind(
        &self,
        stage: &str,
        option: &Entry,
        diagnostics: &mut Diagnostics,
    ) -> Option<PlotKind> {
        let dvc = option.key == "template";
        let text = option.value.as_scalar().map(|scalar| scalar.text.as_str());
        let kind = text.and_then(|text| {
            if dvc {
                PlotKind::of_dvc_template(text)
            } else {
                PlotKind::parse(text)
            }
        });
        if kind.is_some() {
            return kind;
        }
        let names: Vec<&str> = if dvc {
            PlotKind::DVC_TEMPLATES.to_vec()
        } else {
            PlotKind::ALL.iter().map(|kind| kind.as_str()).collect()
        };
        let known = format!("`{}` is one of: {}", option.key, names.join(", "));
        let mut hint = hint_with_suggestion(
            text.and_then(|text| did_you_mean(text, names.iter().copied())),
            known,
        );
        if !dvc && text.and_then(PlotKind::of_dvc_template).is_some() {
            hint = format!(
                "`{}` is a DVC template: write it as `template:`; {hint}",
                text.unwrap_or("")
            );
        }
        diagnostics.push(
            Diagnostic::new(
                "bad-plot",
                format!(
                    "`{}` of a plot of stage `{stage}` is {}",
                    option.key,
                    match text {
                        Some(text) => format!(
                            "`{}`, which pipe does not draw",
                            pipe_protocol::excerpt(text)
                        ),
                        None => option.value.describe().to_string(),
                    }
                ),
            )
            .at(self.location(option.value.span))
            .with_hint(hint),
        );
        None
    }
}

/// `- PATH: {cache: false}` (DVC's, or `path:` beside it): the user keeps
/// the plot file in git, so it stays out of `.gitignore` as an output's
/// `cache: false` does.
fn declared_cache_false(item: &Node) -> bool {
    let options = match item.as_map() {
        Some([entry]) if entry.value.as_map().is_some() => &entry.value,
        Some(_) => item,
        None => return false,
    };
    options
        .get("cache")
        .and_then(Node::as_scalar)
        .is_some_and(|scalar| scalar.resolve() == crate::project_files::yaml::Resolved::Bool(false))
}
