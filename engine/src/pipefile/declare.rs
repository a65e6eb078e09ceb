//! Phase 1 of building the stages: each entry under `stages:` checked on
//! its own (name, keys, `run` or `uses`, matrix axes) into a declaration.

use std::collections::HashSet;

use super::interp::ref_span;
use super::interp::{self, Piece};
pub(super) use super::matrix_records::is_valid_identifier;
use super::matrix_records::matrix_value;
use super::params;
use super::uses::parse_uses;
use crate::pipeline::matrix::{MatrixAxis, MatrixValue};
use crate::project_files::collect::Diagnostics;
use crate::project_files::source::{Sources, Span};
use crate::project_files::yaml::{Entry, Node, NodeValue};
use crate::suggest::{did_you_mean, hint_with_suggestion};
use crate::Diagnostic;

/// The keys of a stage, for a tool that writes pipeline files.
pub(crate) fn stage_keys() -> &'static [&'static str] {
    &STAGE_KEYS
}

pub(crate) const STAGE_KEYS: [&str; 15] = [
    "run",
    "uses",
    "with",
    "deps",
    "outs",
    "metrics",
    "plots",
    "params",
    "env",
    "resources",
    "matrix",
    "desc",
    "always_run",
    "local",
    "makes_data",
];

/// Keys other tools use, and what they are called here.
pub(super) const FOREIGN_KEYS: [(&str, &str); 11] = [
    ("cmd", "run"),
    ("shell", "run"),
    ("command", "run"),
    ("always_changed", "always_run"),
    ("foreach", "matrix"),
    ("input", "deps"),
    ("inputs", "deps"),
    ("output", "outs"),
    ("outputs", "outs"),
    ("threads", "resources"),
    ("description", "desc"),
];

pub(super) struct Decl<'a> {
    pub(super) name: &'a str,
    pub(super) name_span: Span,
    pub(super) node: &'a Node,
    pub(super) kind: DeclKind<'a>,
    pub(super) has_matrix: bool,
}

pub(super) enum DeclKind<'a> {
    /// `run: "a shell command"`.
    Command(&'a Node),
    /// `run: [program, arg, ...]`, run without a shell.
    Argv(&'a Node),
    /// `uses: name@version`, run by the worker that offers it.
    Worker {
        uses: String,
        version: u32,
        uses_span: Span,
    },
}

/// Stage and pipeline names: they become directory names under `.pipe/out/`.
pub(super) fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphanumeric() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '.' | '-'))
}

pub(super) fn type_error(
    sources: &Sources,
    node: &Node,
    what: String,
    hint: impl Into<String>,
) -> Diagnostic {
    Diagnostic::new("bad-type", format!("{what}, found {}", node.describe()))
        .at(sources.location(node.span))
        .with_hint(hint)
}

/// One entry under `stages:` checked on its own into a declaration and
/// its matrix axes; `None` when what it runs cannot be known.
pub(super) fn declare<'a>(
    entry: &'a Entry,
    root: &std::path::Path,
    sources: &Sources,
    params: &Node,
    diagnostics: &mut Diagnostics,
) -> Option<(Decl<'a>, Vec<MatrixAxis>)> {
    let name = entry.key.as_str();
    let node = &entry.value;
    if !is_valid_name(name) {
        diagnostics.push(invalid_name(entry, sources));
        return None;
    }
    let Some(fields) = node.as_map() else {
        diagnostics.push(not_a_mapping(name, node, sources));
        return None;
    };
    report_unknown_keys(name, fields, sources, diagnostics);
    let field_entry = |key: &str| fields.iter().find(|field| field.key == key);
    let kind = match (field_entry("run"), field_entry("uses")) {
        (Some(_), Some(uses)) => {
            diagnostics.push(
                Diagnostic::new("run-and-uses", format!("stage `{name}` has both `run` and `uses`"))
                    .at(sources.location(uses.key_span))
                    .with_hint("a stage is either a shell command (`run:`) or a built-in stage (`uses:`); keep one"),
            );
            return None;
        }
        (None, None) => {
            // `cmd:` and friends were already reported as "called `run` in pipe".
            let has_foreign_run = fields.iter().any(|field| {
                FOREIGN_KEYS
                    .iter()
                    .any(|(foreign, ours)| *ours == "run" && *foreign == field.key)
            });
            if has_foreign_run {
                return None;
            }
            diagnostics.push(
                Diagnostic::new("missing-run", format!("stage `{name}` has neither `run` nor `uses`"))
                    .at(sources.location(entry.key_span))
                    .with_hint("add `run: <shell command>`, or `uses: <stage>@<version>` for a built-in stage such as `uses: data/download@1`"),
            );
            return None;
        }
        (Some(run), None) => run_kind(name, run, sources, diagnostics)?,
        (None, Some(uses_entry)) => uses_kind(name, uses_entry, sources, diagnostics)?,
    };
    if let (DeclKind::Command(_) | DeclKind::Argv(_), Some(with)) = (&kind, field_entry("with")) {
        diagnostics.push(
            Diagnostic::new("misplaced-key", format!("`with` in stage `{name}`, which has no `uses`"))
                .at(sources.location(with.key_span))
                .with_hint("`with` passes params to a built-in stage (`uses:`); a `run` stage takes them in its command: `${params.NAME}`"),
        );
    }

    let axes = match field_entry("matrix") {
        Some(matrix) => matrix_axes(name, &matrix.value, root, sources, params, diagnostics)?,
        None => Vec::new(),
    };
    let decl = Decl {
        name,
        name_span: entry.key_span,
        node,
        kind,
        has_matrix: !axes.is_empty(),
    };
    Some((decl, axes))
}

fn invalid_name(entry: &Entry, sources: &Sources) -> Diagnostic {
    let name = entry.key.as_str();
    let mut hint =
        "stage names use letters, digits, `_`, `.` and `-`, and start with a letter, digit or `_`"
            .to_string();
    if name.contains('@') {
        hint.push_str("; `@` is reserved for the names of matrix expansions");
    }
    Diagnostic::new("bad-stage-name", format!("invalid stage name `{name}`"))
        .at(sources.location(entry.key_span))
        .with_hint(hint)
}

/// A stage written as a bare command, or as nothing.
fn not_a_mapping(name: &str, node: &Node, sources: &Sources) -> Diagnostic {
    let hint = if node.as_scalar().is_some() && !node.is_null() {
        format!(
            "put the command under `run:`:\n{name}:\n  run: {}",
            node.as_scalar().map_or("", |s| s.text.as_str())
        )
    } else {
        format!("give the stage a command:\n{name}:\n  run: python train.py")
    };
    type_error(
        sources,
        node,
        format!("stage `{name}` must be a mapping of keys such as `run` and `deps`"),
        hint,
    )
}

/// Each key that is not a stage key, with what pipe calls it when another
/// tool's name for it was used.
fn report_unknown_keys(
    name: &str,
    fields: &[Entry],
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) {
    for field in fields {
        if STAGE_KEYS.contains(&field.key.as_str()) {
            continue;
        }
        let known = format!("known keys: {}", STAGE_KEYS.join(", "));
        let hint = match FOREIGN_KEYS
            .iter()
            .find(|(foreign, _)| *foreign == field.key)
        {
            Some((foreign, ours)) => format!("`{foreign}` is called `{ours}` in pipe; {known}"),
            None => hint_with_suggestion(did_you_mean(&field.key, STAGE_KEYS), known),
        };
        diagnostics.push(
            Diagnostic::new(
                "unknown-key",
                format!("unknown key `{}` in stage `{name}`", field.key),
            )
            .at(sources.location(field.key_span))
            .with_hint(hint),
        );
    }
}

/// `run:` as a shell command (text) or an argument list.
fn run_kind<'a>(
    name: &str,
    run: &'a Entry,
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> Option<DeclKind<'a>> {
    match &run.value.value {
        NodeValue::Seq(items) => {
            let hint = "write each argument as one item, e.g. `run: [python, train.py, --lr, \"${params.lr}\"]`";
            if items.is_empty() {
                diagnostics.push(type_error(
                    sources,
                    &run.value,
                    format!("`run` of stage `{name}` is an empty list"),
                    hint,
                ));
                return None;
            }
            let mut ok = true;
            for item in items {
                if item.as_scalar().is_none() || item.is_null() {
                    diagnostics.push(type_error(
                        sources,
                        item,
                        format!("each item of the list `run` of stage `{name}` must be one argument (text or a number)"),
                        hint,
                    ));
                    ok = false;
                }
            }
            if !ok {
                return None;
            }
            Some(DeclKind::Argv(&run.value))
        }
        _ if run.value.as_str().is_some() => Some(DeclKind::Command(&run.value)),
        _ => {
            diagnostics.push(type_error(
                sources,
                &run.value,
                format!("`run` of stage `{name}` must be a shell command (a string) or a list of arguments"),
                "write the command as text, e.g. `run: python train.py`, quoted if it looks like a number or boolean; or as a list run without a shell, e.g. `run: [python, train.py]`",
            ));
            None
        }
    }
}

/// `uses: name@version`.
fn uses_kind<'a>(
    name: &str,
    uses_entry: &Entry,
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> Option<DeclKind<'a>> {
    match parse_uses(&uses_entry.value) {
        Some((uses, version)) => Some(DeclKind::Worker {
            uses,
            version,
            uses_span: uses_entry.value.span,
        }),
        None => {
            diagnostics.push(
                Diagnostic::new(
                    "bad-uses",
                    format!("`uses` of stage `{name}` must be `name@version`"),
                )
                .at(sources.location(uses_entry.value.span))
                .with_hint(
                    "name a built-in stage and its major version, e.g. `uses: data/download@1`",
                ),
            );
            None
        }
    }
}

pub(super) fn matrix_axes(
    stage: &str,
    node: &Node,
    root: &std::path::Path,
    sources: &Sources,
    params: &Node,
    diagnostics: &mut Diagnostics,
) -> Option<Vec<MatrixAxis>> {
    let example = "e.g.\nmatrix:\n  precision: [32-true, bf16-mixed]\n  seed: ${params.seeds}";
    // A list of records; a list of anything else is the mistake below.
    if let Some(records) = record_list(node, params).filter(|records| {
        records
            .first()
            .is_some_and(|first| first.as_map().is_some())
    }) {
        return super::matrix_records::record_axes(stage, records, sources, diagnostics);
    }
    let Some(entries) = node.as_map() else {
        diagnostics.push(type_error(
            sources,
            node,
            format!("`matrix` of stage `{stage}` must be a mapping of keys to lists of values"),
            example,
        ));
        return None;
    };
    if entries.is_empty() {
        diagnostics.push(
            Diagnostic::new(
                "empty-matrix",
                format!("`matrix` of stage `{stage}` has no keys"),
            )
            .at(sources.location(node.span))
            .with_hint(format!(
                "add a key with its values, {example}; or remove `matrix`"
            )),
        );
        return None;
    }
    let mut axes: Vec<MatrixAxis> = Vec::new();
    let mut ok = true;
    for (group, entry) in entries.iter().enumerate() {
        let group = group as u16;
        if let Some(pattern) = file_pattern(stage, entry, sources, params, diagnostics) {
            let Some(pattern) = pattern else {
                ok = false;
                continue;
            };
            match super::matrix_files::file_axes(
                stage,
                &entry.value,
                &pattern,
                root,
                group,
                sources,
                diagnostics,
            ) {
                Some(found) => {
                    for axis in &found {
                        if entries.iter().any(|other| other.key == axis.key) {
                            diagnostics.push(
                                Diagnostic::new("bad-matrix-key", format!("matrix key `{}` of stage `{stage}` is both a key and a `{{{}}}` of `files`", axis.key, axis.key))
                                    .at(sources.location(entry.value.span))
                                    .with_hint("give the pattern's key another name"),
                            );
                            ok = false;
                        }
                    }
                    axes.extend(found);
                }
                None => ok = false,
            }
            continue;
        }
        if !is_valid_identifier(&entry.key) {
            diagnostics.push(
                Diagnostic::new("bad-matrix-key", format!("invalid matrix key `{}` in stage `{stage}`", entry.key))
                    .at(sources.location(entry.key_span))
                    .with_hint("matrix keys use letters, digits and `_`, and start with a letter or `_`, so `${matrix.KEY}` can name them"),
            );
            ok = false;
            continue;
        }
        match matrix_values(
            stage,
            &entry.key,
            &entry.value,
            sources,
            params,
            diagnostics,
        ) {
            Some(values) => axes.push(MatrixAxis {
                key: entry.key.clone(),
                values,
                group,
            }),
            None => ok = false,
        }
    }
    ok.then_some(axes)
}

/// The file pattern of `files: data/raw/{sample}.csv` in a matrix:
/// `None` when `entry` is an ordinary key (a list, or a param naming one),
/// `Some(None)` when it is a pattern that failed (reported).
fn file_pattern(
    stage: &str,
    entry: &Entry,
    sources: &Sources,
    params: &Node,
    diagnostics: &mut Diagnostics,
) -> Option<Option<String>> {
    if entry.key != super::matrix_files::FILES_KEY {
        return None;
    }
    let text = entry.value.as_str()?;
    let pieces = interp::parse(text).ok()?;
    let mut pattern = String::new();
    for piece in &pieces {
        match piece {
            Piece::Text(literal) => pattern.push_str(literal),
            Piece::Ref(reference) => {
                let found = reference
                    .expr
                    .strip_prefix("params.")
                    .and_then(|path| params::lookup(params, path));
                match found.and_then(|found| found.as_scalar().map(|scalar| (found, scalar))) {
                    Some((_, scalar)) => pattern.push_str(&scalar.text),
                    // `files: ${params.files}` naming a list is a key
                    // called `files`.
                    None if pieces.len() == 1 && found.is_some() => return None,
                    None => {
                        diagnostics.push(
                            Diagnostic::new(
                                "bad-reference",
                                format!("`${{{}}}` in `matrix.files` of stage `{stage}` is not a param holding text", reference.expr),
                            )
                            .at(sources.location(ref_span(&entry.value, reference)))
                            .with_hint("a file pattern may name params holding text (`${params.data_dir}/{sample}.csv`), nothing else"),
                        );
                        return Some(None);
                    }
                }
            }
        }
    }
    Some(Some(pattern))
}

pub(super) fn matrix_values(
    stage: &str,
    key: &str,
    node: &Node,
    sources: &Sources,
    params: &Node,
    diagnostics: &mut Diagnostics,
) -> Option<Vec<MatrixValue>> {
    // `${params.x}` supplies the whole list.
    let list_node: &Node = if let Some(text) = node.as_str() {
        match interp::parse(text).ok().as_deref() {
            Some([Piece::Ref(reference)]) if reference.expr.starts_with("params.") => {
                let path = &reference.expr["params.".len()..];
                match params::lookup(params, path) {
                    Some(found) => found,
                    None => {
                        diagnostics.push(
                            Diagnostic::new(
                                "unknown-param",
                                format!(
                                    "unknown param `{path}` in `matrix.{key}` of stage `{stage}`"
                                ),
                            )
                            .at(sources.location(ref_span(node, reference)))
                            .with_hint(params::unknown_param_hint(params, path)),
                        );
                        return None;
                    }
                }
            }
            _ => {
                diagnostics.push(type_error(
                    sources,
                    node,
                    format!("`matrix.{key}` of stage `{stage}` must be a list of values or `${{params.NAME}}` naming one"),
                    format!("write e.g. `{key}: [1, 2, 3]`"),
                ));
                return None;
            }
        }
    } else {
        node
    };
    let NodeValue::Seq(items) = &list_node.value else {
        diagnostics.push(type_error(
            sources,
            list_node,
            format!("`matrix.{key}` of stage `{stage}` must be a list"),
            format!("write e.g. `{key}: [1, 2, 3]`"),
        ));
        return None;
    };
    if items.is_empty() {
        diagnostics.push(
            Diagnostic::new(
                "empty-matrix",
                format!("`matrix.{key}` of stage `{stage}` is an empty list"),
            )
            .at(sources.location(list_node.span))
            .with_hint(format!(
                "give `{key}` at least one value, or remove it from the matrix"
            )),
        );
        return None;
    }
    let mut seen_texts: HashSet<String> = HashSet::with_capacity(items.len());
    let mut values: Vec<MatrixValue> = Vec::with_capacity(items.len());
    let mut ok = true;
    for item in items {
        let Some(value) = matrix_value(stage, key, item, sources, diagnostics) else {
            ok = false;
            continue;
        };
        let text = value.text.clone();
        if !seen_texts.insert(text.clone()) {
            diagnostics.push(
                Diagnostic::new(
                    "duplicate-matrix-value",
                    format!("`{text}` appears twice in `matrix.{key}` of stage `{stage}`"),
                )
                .at(sources.location(item.span))
                .with_hint(
                    "remove the repeated value; each combination must name a different stage",
                ),
            );
            ok = false;
            continue;
        }
        values.push(value);
    }
    ok.then_some(values)
}

/// The matrix that `node` is when it is a list (of records, each field an
/// axis), written out or `${params.NAME}` naming one.
fn record_list<'n>(node: &'n Node, params: &'n Node) -> Option<&'n [Node]> {
    let list = match node.as_str() {
        Some(text) => match interp::parse(text).ok().as_deref() {
            Some([Piece::Ref(reference)]) => {
                let path = reference.expr.strip_prefix("params.")?;
                params::lookup(params, path)?
            }
            _ => return None,
        },
        None => node,
    };
    match &list.value {
        NodeValue::Seq(items) => Some(items.as_slice()),
        _ => None,
    }
}
