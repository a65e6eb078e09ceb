//! `${...}` in strings, commands, argv and `with:` values: each reference
//! evaluated and its value put into the text; into a shell command only a
//! plain value (`pipefile::plain`).

use super::resolver::*;
use crate::pipefile::declare::{type_error, Decl, DeclKind};
use crate::pipefile::interp::ref_span;
use crate::pipefile::interp::{self, Piece, Reference};
use crate::pipefile::params;
use crate::pipefile::plain::{CommandText, Refusal};
use crate::project_files::collect::Diagnostics;
use crate::project_files::source::Span;
use crate::project_files::yaml::{Node, NodeValue, Resolved};
use crate::suggest::name_list;
use crate::{Diagnostic, Result};
use serde_json::Value;

impl<'a> Resolver<'a> {
    pub(crate) fn params_list(
        &mut self,
        decl: &Decl,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) {
        let Some(node) = decl.node.get("params") else {
            return;
        };
        let items: Vec<&Node> = match &node.value {
            NodeValue::Seq(items) => items.iter().collect(),
            NodeValue::Scalar(_) if node.as_str().is_some() => vec![node],
            _ => {
                diagnostics.push(type_error(
                    self.sources,
                    node,
                    format!(
                        "`params` of stage `{}` must be a list of param paths",
                        decl.name
                    ),
                    "write e.g. `params: [seed, train.lr]`",
                ));
                return;
            }
        };
        for item in items {
            let Some(path) = item.as_str() else {
                diagnostics.push(type_error(
                    self.sources,
                    item,
                    format!(
                        "each entry of `params` in stage `{}` must be a dotted param path",
                        decl.name
                    ),
                    "write e.g. `params: [seed, train.lr]`",
                ));
                continue;
            };
            let path = path.strip_prefix("params.").unwrap_or(path);
            match self.lookup_param(path) {
                Some(value) => {
                    effects
                        .params_used
                        .insert(path.to_string(), params::to_json(value));
                    effects.params_listed.push(path.to_string());
                    if matches!(decl.kind, DeclKind::Command(_) | DeclKind::Argv(_)) {
                        self.refuse_unseen_overrides(decl, path, item, diagnostics);
                        self.warn_of_yaml_1_1_readings(decl, path, value, diagnostics);
                    }
                }
                None => diagnostics.push(
                    Diagnostic::new(
                        "unknown-param",
                        format!(
                            "unknown param `{path}` in `params` of stage `{}`",
                            decl.name
                        ),
                    )
                    .at(self.location(item.span))
                    .with_hint(params::unknown_param_hint(self.params, path)),
                ),
            }
        }
    }

    /// A command reads `path` by itself (from `params.yaml`): an `-S` of it
    /// that the file cannot carry would be recorded but never seen.
    fn refuse_unseen_overrides(
        &self,
        decl: &Decl,
        path: &str,
        item: &Node,
        diagnostics: &mut Diagnostics,
    ) {
        for unseen in self.unseen_overrides {
            if !crate::pipeline::paths_overlap(path, &unseen.path) {
                continue;
            }
            let (why, fix) = unseen.explained();
            diagnostics.push(
                Diagnostic::new(
                    "override-unseen",
                    format!(
                        "`-S {}` would not reach stage `{}`, which reads `{path}` by itself (its `params:`): {why}",
                        unseen.argument, decl.name
                    ),
                )
                .at(self.location(item.span))
                .with_hint(format!(
                    "pass the param on the command line instead (`--{leaf} ${{params.{param}}}`) and drop it from `params:`, {fix}",
                    leaf = unseen.path.rsplit('.').next().unwrap_or(&unseen.path),
                    param = unseen.path
                )),
            );
        }
    }

    /// A command depends on `params.yaml` (`dep`), so it reads every param
    /// there by itself: an `-S` of one the file holds but cannot carry
    /// would be recorded, and the command read the file's value.
    pub(crate) fn refuse_unseen_in_params_file(
        &self,
        decl: &Decl,
        dep: &Node,
        diagnostics: &mut Diagnostics,
    ) {
        if !matches!(decl.kind, DeclKind::Command(_) | DeclKind::Argv(_)) {
            return;
        }
        for unseen in self.unseen_overrides {
            if !unseen.held_by_params_file() {
                continue;
            }
            let (why, fix) = unseen.explained();
            diagnostics.push(
                Diagnostic::new(
                    "override-unseen",
                    format!(
                        "`-S {}` would not reach stage `{}`, which reads params.yaml by itself (its `deps`): {why}",
                        unseen.argument, decl.name
                    ),
                )
                .at(self.location(dep.span))
                .with_hint(format!(
                    "{}; or take params.yaml out of `deps` if the command does not read it",
                    fix.strip_prefix("or ").unwrap_or(&fix)
                )),
            );
        }
    }

    /// A command reads `path` by itself, likely with a YAML 1.1 reader
    /// (PyYAML): a plain scalar of `params.yaml` under it that such a
    /// reader reads otherwise would make the run record a value the
    /// command did not use.
    fn warn_of_yaml_1_1_readings(
        &self,
        decl: &Decl,
        path: &str,
        node: &Node,
        diagnostics: &mut Diagnostics,
    ) {
        let Some(file) = self.params_file else {
            return;
        };
        let mut pending = vec![(path.to_string(), node)];
        while let Some((path, node)) = pending.pop() {
            match &node.value {
                NodeValue::Map(entries) => pending.extend(
                    entries
                        .iter()
                        .map(|entry| (format!("{path}.{}", entry.key), &entry.value)),
                ),
                NodeValue::Seq(items) => pending.extend(
                    items
                        .iter()
                        .enumerate()
                        .map(|(index, item)| (format!("{path}[{index}]"), item)),
                ),
                NodeValue::Scalar(scalar) if scalar.plain && node.span.file == file => {
                    let Some(reading) = crate::pipefile::yaml11::differs_in_yaml_1_1(
                        &scalar.text,
                        scalar.resolve(),
                    ) else {
                        continue;
                    };
                    diagnostics.push(
                        Diagnostic::warning(
                            "yaml-1-1",
                            format!(
                                "stage `{}` reads `{path}` by itself: a YAML 1.1 reader such as PyYAML reads `{}` as {}, pipe records {}",
                                decl.name, scalar.text, reading.theirs, reading.ours
                            ),
                        )
                        .at(self.location(node.span))
                        .with_hint(format!(
                            "write `{}`, which both read alike",
                            reading.fix
                        )),
                    );
                }
                NodeValue::Scalar(_) => {}
            }
        }
    }

    /// `with:` values: strings are interpolated; a string that is exactly
    /// one reference keeps the referenced value's type.
    pub(crate) fn resolve_json(
        &mut self,
        scope: &Scope,
        node: &Node,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Value {
        match &node.value {
            NodeValue::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|entry| {
                        (
                            entry.key.clone(),
                            self.resolve_json(scope, &entry.value, effects, diagnostics),
                        )
                    })
                    .collect(),
            ),
            NodeValue::Seq(items) => Value::Array(
                items
                    .iter()
                    .map(|item| self.resolve_json(scope, item, effects, diagnostics))
                    .collect(),
            ),
            NodeValue::Scalar(scalar) if scalar.resolve() != Resolved::Str => {
                params::scalar_to_json(scalar)
            }
            NodeValue::Scalar(scalar) => {
                // `${raw:...}` is left to `resolve_string`, which says
                // where `raw:` belongs.
                if let Some(reference) = whole_reference(&scalar.text) {
                    return match self.evaluate(
                        scope,
                        &reference,
                        ref_span(node, &reference),
                        effects,
                    ) {
                        Ok(Evaluated::Param(found)) => params::to_json(found),
                        Ok(Evaluated::Matrix(value)) => value.json,
                        Ok(Evaluated::Path(path)) => Value::String(path),
                        Ok(Evaluated::Paths(paths)) => {
                            Value::Array(paths.into_iter().map(Value::String).collect())
                        }
                        Err(failure) => {
                            self.report(node, &reference, failure, diagnostics);
                            Value::Null
                        }
                    };
                }
                self.resolve_string(scope, node, effects, diagnostics)
                    .map_or(Value::Null, Value::String)
            }
        }
    }

    /// Interpolates the scalar `node` as plain text; every bad reference is
    /// reported.
    pub(crate) fn resolve_string(
        &mut self,
        scope: &Scope,
        node: &Node,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Option<String> {
        self.interpolate(scope, node, Interpolation::Plain, effects, diagnostics)
    }

    /// `run: [program, arg, ...]`: each item is one argument. An item that
    /// is exactly one reference to a list gives one argument per value.
    pub(crate) fn argv(
        &mut self,
        scope: &Scope,
        node: &Node,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Option<Vec<String>> {
        let NodeValue::Seq(items) = &node.value else {
            return None;
        };
        let mut argv = Vec::with_capacity(items.len());
        let mut ok = true;
        for item in items {
            let before = argv.len();
            match item.as_str().and_then(whole_reference) {
                Some(reference) => {
                    let span = ref_span(item, &reference);
                    match self.reference_words(scope, &reference, span, effects) {
                        Ok(words) => argv.extend(words),
                        Err(failure) => {
                            self.report(item, &reference, failure, diagnostics);
                            ok = false;
                        }
                    }
                }
                None => {
                    if let Some(arg) =
                        self.interpolate(scope, item, Interpolation::Argv, effects, diagnostics)
                    {
                        argv.push(arg);
                    } else {
                        ok = false;
                    }
                }
            }
            if argv[before..].iter().any(|arg| arg.contains('\0')) {
                diagnostics.push(self.nul_byte(format!("`run` of stage `{}`", scope.stage), item));
                ok = false;
            }
        }
        ok.then_some(argv)
    }

    /// The words a reference stands for: a list param gives one per item,
    /// anything else one.
    pub(crate) fn reference_words(
        &mut self,
        scope: &Scope,
        reference: &Reference,
        span: Span,
        effects: &mut Effects,
    ) -> Result<Vec<String>, Failure> {
        let evaluated = self.evaluate(scope, reference, span, effects)?;
        self.words_of(evaluated, reference)
    }

    /// The words of a value: a list gives one per item.
    pub(crate) fn words_of(
        &self,
        evaluated: Evaluated,
        reference: &Reference,
    ) -> Result<Vec<String>, Failure> {
        match evaluated {
            Evaluated::Param(found) => param_words(found, &reference.expr),
            Evaluated::Matrix(value) => Ok(vec![value.text]),
            Evaluated::Path(path) => Ok(vec![path]),
            Evaluated::Paths(paths) => Ok(paths),
        }
    }

    /// Interpolates the scalar `node`; every bad reference is reported.
    /// Into a shell command only plain values go, as they are, unless the
    /// reference says `raw:`.
    pub(crate) fn interpolate(
        &mut self,
        scope: &Scope,
        node: &Node,
        mode: Interpolation,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Option<String> {
        let scalar = node.as_scalar()?;
        let key = (
            std::ptr::from_ref(node),
            node.span.file,
            node.span.line,
            node.span.col,
        );
        let parsed = match self.templates.get(&key) {
            Some(pieces) => Ok(std::rc::Rc::clone(pieces)),
            None => interp::parse(&scalar.text).map(|pieces| {
                let pieces: std::rc::Rc<[Piece]> = pieces.into();
                self.templates.insert(key, std::rc::Rc::clone(&pieces));
                pieces
            }),
        };
        let pieces = match parsed {
            Ok(pieces) => pieces,
            Err(error) => {
                let span = match scalar.verbatim_col {
                    Some(col) => Span {
                        col: col + error.offset,
                        len: error.len,
                        ..node.span
                    },
                    None => node.span,
                };
                diagnostics.push(
                    Diagnostic::new(
                        "bad-reference",
                        format!(
                            "{} in `{}` of stage `{}`",
                            error.message, scope.field, scope.stage
                        ),
                    )
                    .at(self.location(span))
                    .with_hint(error.hint),
                );
                return None;
            }
        };
        let mut text = CommandText::default();
        let mut ok = true;
        for (index, piece) in pieces.iter().enumerate() {
            match piece {
                Piece::Text(literal) => text.push_text(literal),
                Piece::Ref(reference) => {
                    let span = ref_span(node, reference);
                    let inserted = match reference.expr.strip_prefix(RAW_PREFIX) {
                        Some(inner) => self
                            .raw_text(scope, reference, inner, mode, span, effects)
                            .map(|raw| text.push_text(&raw)),
                        None => {
                            let words = self.reference_words(scope, reference, span, effects);
                            match mode {
                                Interpolation::Plain | Interpolation::Argv => {
                                    words.map(|words| text.push_text(&words.join(" ")))
                                }
                                Interpolation::Shell { .. } => words.and_then(|words| {
                                    text.push_value(&words, index)
                                        .map_err(|refusal| refused(&refusal, reference, scope))
                                }),
                            }
                        }
                    };
                    if let Err(failure) = inserted {
                        self.report(node, reference, failure, diagnostics);
                        ok = false;
                    }
                }
            }
        }
        if let (Interpolation::Shell { variables }, true) = (mode, ok) {
            // Some places are known only once the whole command is in (the
            // delimiter of a here-document, the `}` of a brace expansion).
            for (index, refusal) in text.landings(variables) {
                if let Some(Piece::Ref(reference)) = pieces.get(index) {
                    self.report(
                        node,
                        reference,
                        refused(&refusal, reference, scope),
                        diagnostics,
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(text.into_text())
    }

    /// `${raw:NAME}`: the value as the shell is to read it, in a `run:`
    /// string only.
    fn raw_text(
        &mut self,
        scope: &Scope,
        reference: &Reference,
        inner: &str,
        mode: Interpolation,
        span: Span,
        effects: &mut Effects,
    ) -> Result<String, Failure> {
        let inner = Reference {
            expr: inner.trim().to_string(),
            ..reference.clone()
        };
        match mode {
            Interpolation::Shell { .. } => self
                .reference_words(scope, &inner, span, effects)
                .map(|words| words.join(" ")),
            Interpolation::Argv => Err(failure(
                format!("`${{{}}}` in the list form of `run` (stage `{}`), which runs without a shell", reference.expr, scope.stage),
                format!("each list item is passed to the program as it is; write `${{{}}}`, or use the string form `run: \"...\"` to have a shell read the value", inner.expr),
            )),
            Interpolation::Plain => Err(failure(
                format!("`${{{}}}` in `{}` of stage `{}`: `raw:` is only for `run` commands", reference.expr, scope.field, scope.stage),
                format!("only a shell command can splice text unquoted; write `${{{}}}` here", inner.expr),
            )),
        }
    }

    pub(crate) fn report(
        &self,
        node: &Node,
        reference: &Reference,
        failure: Failure,
        diagnostics: &mut Diagnostics,
    ) {
        if failure.already_reported {
            return;
        }
        diagnostics.push(
            Diagnostic::new("bad-reference", failure.message)
                .at(self.location(ref_span(node, reference)))
                .with_hint(failure.hint),
        );
    }
}

/// A value that does not go into a command's text: refused at its
/// reference, naming the ways that carry any bytes.
fn refused(refusal: &Refusal, reference: &Reference, scope: &Scope) -> Failure {
    failure(
        format!(
            "`${{{}}}` in `run` of stage `{}`: {}",
            reference.expr,
            scope.stage,
            refusal.why()
        ),
        ways_out(refusal, &reference.expr),
    )
}

/// How a value that is not plain reaches a command: through `env:`, the
/// list form of `run:`, or (a param) the params file the command reads.
fn ways_out(refusal: &Refusal, expr: &str) -> String {
    let name: String = expr
        .rsplit('.')
        .next()
        .unwrap_or(expr)
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() {
                ch.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    let name = if name.starts_with(|ch: char| ch.is_ascii_digit()) || name.is_empty() {
        format!("V_{name}")
    } else {
        name
    };
    let env = format!("pass it through `env:` (`env: {{ {name}: \"${{{expr}}}\" }}`) and write \"${name}\" in the command");
    let argv =
        format!("run the program without a shell (`run: [python, train.py, \"${{{expr}}}\"]`)");
    let mut hint = match expr.strip_prefix("params.") {
        Some(param) => format!(
            "{env}; {argv}; or have the command read it from the params file (`params: [{param}]`)"
        ),
        None => format!("{env}, or {argv}"),
    };
    if matches!(refusal, Refusal::NotPlain { .. } | Refusal::Empty)
        && (expr.starts_with("deps.") || expr.starts_with("outs.") || expr.starts_with("stages."))
    {
        hint.push_str("; or rename the path to letters, digits and `_ - . / : @ % + ,`");
    }
    hint
}

/// A param as it appears in a command: a scalar as written, a list as one
/// word per item.
pub(crate) fn param_words(node: &Node, expr: &str) -> Result<Vec<String>, Failure> {
    match &node.value {
        NodeValue::Scalar(scalar) => Ok(vec![scalar.text.clone()]),
        NodeValue::Seq(items) => {
            let mut parts = Vec::with_capacity(items.len());
            for item in items {
                match item.as_scalar() {
                    Some(scalar) => parts.push(scalar.text.clone()),
                    None => {
                        return Err(failure(
                            format!(
                            "`${{{expr}}}` is a list of lists or mappings, which has no text form"
                        ),
                            "refer to a list of plain values, or to one item's key",
                        ))
                    }
                }
            }
            Ok(parts)
        }
        NodeValue::Map(entries) => {
            let keys: Vec<String> = entries
                .iter()
                .map(|entry| format!("{expr}.{}", entry.key))
                .collect();
            Err(failure(
                format!("`${{{expr}}}` is a mapping, which cannot be put into text"),
                format!(
                    "refer to one of its keys: {}",
                    name_list(
                        &keys
                            .iter()
                            .map(|key| format!("${{{key}}}"))
                            .collect::<Vec<_>>(),
                        6
                    )
                ),
            ))
        }
    }
}
