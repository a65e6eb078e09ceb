//! Stages: declarations -> matrix expansions -> resolved paths and
//! references -> output ownership and implicit edges.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use pipe_protocol::ParamKind;
use serde_json::Value;

use super::collect::Diagnostics;
use super::interp::{self, Piece, Reference};
use super::params;
use super::paths::{self, PathProblem, RealPath};
use super::shell::{self, QuoteContext, QuoteTracker};
use super::source::{Sources, Span};
use super::suggest::{did_you_mean, hint_with_suggestion, name_list};
use super::yaml::{Entry, Node, NodeValue, Resolved};
use super::CatalogSource;
use crate::pipeline::matrix::{MatrixAxis, MatrixValue, StageMatrix};
use crate::pipeline::{Dep, Out, Resources, Stage, StageKind, StageOutRef, WorkerStage};
use crate::project::stage_output_dir;
use crate::worker::{Catalog, CatalogEntry};
use crate::{Diagnostic, Result};

pub(crate) const STAGE_KEYS: [&str; 12] = [
    "run",
    "uses",
    "with",
    "deps",
    "outs",
    "metrics",
    "params",
    "env",
    "resources",
    "matrix",
    "desc",
    "always_run",
];

/// Keys other tools use, and what they are called here.
const FOREIGN_KEYS: [(&str, &str); 11] = [
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

/// A matrix can multiply a small file into any number of stages; this
/// bounds the work and memory one pipeline file can ask for.
pub(crate) const MAX_STAGES: usize = 1_000_000;

/// `${raw:params.flags}` splices a value into a `run` command unquoted.
const RAW_PREFIX: &str = "raw:";

/// How values are put into the text of a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interpolation {
    /// As they are (paths, `env`, `with`).
    Plain,
    /// Into a `run:` shell command: each value quoted as one word.
    Shell,
    /// Into one item of `run: [...]`, which no shell reads.
    Argv,
}

struct Decl<'a> {
    name: &'a str,
    name_span: Span,
    node: &'a Node,
    kind: DeclKind<'a>,
    has_matrix: bool,
}

enum DeclKind<'a> {
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

struct Expansion {
    decl: usize,
    name: String,
    combo: StageMatrix,
}

struct Scope<'s> {
    stage: &'s str,
    field: &'static str,
    combo: &'s StageMatrix,
    has_matrix: bool,
    deps: Option<&'s [Dep]>,
    outs: Option<&'s [Out]>,
    allow_stage_refs: bool,
}

#[derive(Default)]
struct Effects {
    params_used: BTreeMap<String, Value>,
    stage_refs: Vec<(StageOutRef, String, Span)>,
}

enum Evaluated<'n> {
    Param(&'n Node),
    Matrix(MatrixValue),
    Path(String),
}

struct Failure {
    message: String,
    hint: String,
}

fn failure(message: impl Into<String>, hint: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        hint: hint.into(),
    }
}

/// What every phase of building the stages reads.
pub(crate) struct Context<'a> {
    pub sources: &'a Sources,
    /// The merged params.
    pub params: &'a Node,
    /// The project root, absolute.
    pub root: &'a Path,
    /// The pipeline's name: its namespace under `.pipe/out/`.
    pub pipeline: &'a str,
    pub catalogs: &'a dyn CatalogSource,
}

pub(crate) fn build(
    cx: &Context,
    stages_node: &Node,
    diagnostics: &mut Diagnostics,
) -> Result<Vec<Stage>> {
    let (sources, params, root) = (cx.sources, cx.params, cx.root);
    let Some(entries) = stages_node.as_map() else {
        diagnostics.push(
            Diagnostic::new("bad-type", format!("`stages` must be a mapping of stage names, found {}", stages_node.describe()))
                .at(sources.location(stages_node.span))
                .with_hint("write `stages:` followed by indented stage names, e.g.\nstages:\n  train:\n    run: python train.py"),
        );
        return Ok(Vec::new());
    };
    if entries.is_empty() {
        diagnostics.push(
            Diagnostic::new("no-stages", "`stages` is empty")
                .at(sources.location(stages_node.span))
                .with_hint(
                    "add at least one stage, e.g.\nstages:\n  train:\n    run: python train.py",
                ),
        );
        return Ok(Vec::new());
    }

    let mut decls = Vec::new();
    let mut axes_per_decl = Vec::new();
    for entry in entries {
        if let Some((decl, axes)) = declare(entry, sources, params, diagnostics) {
            decls.push(decl);
            axes_per_decl.push(Arc::<[MatrixAxis]>::from(axes));
        }
    }

    // The catalog is asked for only when the declarations are sound: in a
    // source checkout it may build the workers first, which takes minutes
    // that a typo should not cost.
    let uses: Vec<(&str, u32)> = decls
        .iter()
        .filter_map(|decl| match &decl.kind {
            DeclKind::Worker { uses, version, .. } => Some((uses.as_str(), *version)),
            _ => None,
        })
        .collect();
    let catalog = if !uses.is_empty() && diagnostics.is_empty() {
        Some(cx.catalogs.catalog(root, &uses)?)
    } else {
        None
    };
    let catalog_entries: Vec<Option<&CatalogEntry>> = decls
        .iter()
        .map(|decl| {
            let catalog = catalog.as_ref()?;
            let DeclKind::Worker {
                uses,
                version,
                uses_span,
            } = &decl.kind
            else {
                return None;
            };
            let entry = catalog.get(uses, *version);
            if entry.is_none() {
                diagnostics.push(unknown_worker_stage(
                    catalog,
                    uses,
                    *version,
                    decl.name,
                    sources.location(*uses_span),
                ));
            }
            entry
        })
        .collect();

    let expansions = expand(&decls, &axes_per_decl, sources, diagnostics);
    if expansions.is_empty() {
        return Ok(Vec::new());
    }
    let mut resolver = Resolver::new(cx, &decls, &catalog_entries, &expansions);

    // Outputs first: references between stages need every stage's outputs.
    let mut outs_per_stage: Vec<Vec<Out>> = Vec::with_capacity(expansions.len());
    let mut metrics_per_stage = Vec::with_capacity(expansions.len());
    let mut effects_per_stage = Vec::with_capacity(expansions.len());
    for expansion in &expansions {
        let decl = &decls[expansion.decl];
        let mut effects = Effects::default();
        let outs = resolver.outputs(decl, expansion, "outs", &mut effects, diagnostics);
        let metrics = resolver.outputs(decl, expansion, "metrics", &mut effects, diagnostics);
        outs_per_stage.push(outs);
        metrics_per_stage.push(metrics);
        effects_per_stage.push(effects);
    }
    // The only copy of each stage's outs until its `Stage` is built: a
    // million-stage sweep must not hold them twice.
    resolver.outputs_by_stage = outs_per_stage;

    let mut stages = Vec::with_capacity(expansions.len());
    for (index, expansion) in expansions.iter().enumerate() {
        let metrics = std::mem::take(&mut metrics_per_stage[index]);
        let effects = std::mem::take(&mut effects_per_stage[index]);
        stages.push(resolver.stage(
            &decls[expansion.decl],
            expansion,
            index,
            metrics,
            effects,
            diagnostics,
        ));
    }
    for (stage, outs) in stages.iter_mut().zip(resolver.outputs_by_stage.drain(..)) {
        stage.outs = outs;
    }

    // What built the stages is not needed to check them; in a large sweep
    // it is a good part of the peak.
    drop(resolver);
    drop(expansions);
    drop((metrics_per_stage, effects_per_stage));
    let moved = follow_symlinks(root, &stages, diagnostics);
    check_output_ownership(&mut stages, &moved, diagnostics);
    Ok(stages)
}

/// Declared paths that lead elsewhere in the project through a symlink,
/// with where they really are. Keyed by (stage, index in outs then
/// metrics) and (stage, index in deps), ordered so that messages are too.
#[derive(Default)]
struct MovedPaths {
    outs: BTreeMap<(usize, usize), String>,
    deps: HashMap<(usize, usize), String>,
}

/// Outputs are refused when a symlink on the way leads out of the project
/// or into `.git/` or `.pipe/`: pipe deletes an output before its stage
/// runs and restores it from the cache, and must only do that to files it
/// owns. Outputs and dependencies that lead elsewhere in the project are
/// returned, so that overlaps and edges are found by where files really
/// are. A dependency may lead outside the project: it is only read.
fn follow_symlinks(root: &Path, stages: &[Stage], diagnostics: &mut Diagnostics) -> MovedPaths {
    let mut real_paths = paths::RealPaths::new(root);
    let mut moved = MovedPaths::default();
    for (stage_index, stage) in stages.iter().enumerate() {
        for (out_index, out) in stage.outs.iter().chain(&stage.metrics).enumerate() {
            // Built-in stages' outputs: placed in `.pipe/out/` by pipe.
            if paths::protected_dir(&out.path).is_some() {
                continue;
            }
            match real_paths.parent(&out.path) {
                RealPath::AsWritten { .. } => {}
                RealPath::Outside { link, target } => diagnostics.push(
                    Diagnostic::new(
                        "output-outside-project",
                        format!(
                            "output `{}` of stage `{}` is outside the project: `{link}` is a symbolic link to `{}`",
                            out.path,
                            stage.name,
                            target.display()
                        ),
                    )
                    .at(out.location.clone())
                    .with_hint(format!("pipe deletes an output before its stage runs and puts cached results in its place, so outputs must be inside the project; write it to a real directory of the project, or replace the link `{link}` with a directory")),
                ),
                RealPath::Moved { path: real_dir, .. } => {
                    let file_name = out.path.rsplit('/').next().unwrap_or(&out.path);
                    let real = paths::join(&real_dir, file_name);
                    match paths::protected_dir(&real) {
                        Some(dir) => diagnostics.push(
                            Diagnostic::new(
                                if dir == paths::PIPE_DIR { "output-in-pipe-dir" } else { "output-in-git-dir" },
                                format!(
                                    "output `{}` of stage `{}` is `{real}` through a symbolic link, inside `{dir}/`",
                                    out.path, stage.name
                                ),
                            )
                            .at(out.location.clone())
                            .with_hint(format!("pipe deletes an output before its stage runs, and `{dir}/` is not pipe's to change through a link; write the output elsewhere in the project")),
                        ),
                        None => {
                            moved.outs.insert((stage_index, out_index), real);
                        }
                    }
                }
            }
        }
        for (dep_index, dep) in stage.deps.iter().enumerate() {
            if dep.producer.is_some() || paths::protected_dir(&dep.path).is_some() {
                continue;
            }
            if let RealPath::Moved { path, .. } = real_paths.path(&dep.path) {
                moved.deps.insert((stage_index, dep_index), path);
            }
        }
    }
    moved
}

fn is_valid_stage_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphanumeric() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '.' | '-'))
}

fn is_valid_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn type_error(sources: &Sources, node: &Node, what: String, hint: impl Into<String>) -> Diagnostic {
    Diagnostic::new("bad-type", format!("{what}, found {}", node.describe()))
        .at(sources.location(node.span))
        .with_hint(hint)
}

fn declare<'a>(
    entry: &'a Entry,
    sources: &Sources,
    params: &Node,
    diagnostics: &mut Diagnostics,
) -> Option<(Decl<'a>, Vec<MatrixAxis>)> {
    let name = entry.key.as_str();
    let node = &entry.value;
    if !is_valid_stage_name(name) {
        let mut hint = "stage names use letters, digits, `_`, `.` and `-`, and start with a letter, digit or `_`".to_string();
        if name.contains('@') {
            hint.push_str("; `@` is reserved for the names of matrix expansions");
        }
        diagnostics.push(
            Diagnostic::new("bad-stage-name", format!("invalid stage name `{name}`"))
                .at(sources.location(entry.key_span))
                .with_hint(hint),
        );
        return None;
    }
    let Some(fields) = node.as_map() else {
        let hint = if node.as_scalar().is_some() && !node.is_null() {
            format!(
                "put the command under `run:`:\n{name}:\n  run: {}",
                node.as_scalar().map_or("", |s| s.text.as_str())
            )
        } else {
            format!("give the stage a command:\n{name}:\n  run: python train.py")
        };
        diagnostics.push(type_error(
            sources,
            node,
            format!("stage `{name}` must be a mapping of keys such as `run` and `deps`"),
            hint,
        ));
        return None;
    };

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
        (Some(run), None) => match &run.value.value {
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
                DeclKind::Argv(&run.value)
            }
            _ if run.value.as_str().is_some() => DeclKind::Command(&run.value),
            _ => {
                diagnostics.push(type_error(
                    sources,
                    &run.value,
                    format!("`run` of stage `{name}` must be a shell command (a string) or a list of arguments"),
                    "write the command as text, e.g. `run: python train.py`, quoted if it looks like a number or boolean; or as a list run without a shell, e.g. `run: [python, train.py]`",
                ));
                return None;
            }
        },
        (None, Some(uses_entry)) => {
            match parse_uses(&uses_entry.value) {
                Some((uses, version)) => DeclKind::Worker {
                    uses,
                    version,
                    uses_span: uses_entry.value.span,
                },
                None => {
                    diagnostics.push(
                    Diagnostic::new("bad-uses", format!("`uses` of stage `{name}` must be `name@version`"))
                        .at(sources.location(uses_entry.value.span))
                        .with_hint("name a built-in stage and its major version, e.g. `uses: data/download@1`"),
                );
                    return None;
                }
            }
        }
    };
    if let (DeclKind::Command(_) | DeclKind::Argv(_), Some(with)) = (&kind, field_entry("with")) {
        diagnostics.push(
            Diagnostic::new("misplaced-key", format!("`with` in stage `{name}`, which has no `uses`"))
                .at(sources.location(with.key_span))
                .with_hint("`with` passes params to a built-in stage (`uses:`); a `run` stage takes them in its command: `${params.NAME}`"),
        );
    }

    let axes = match field_entry("matrix") {
        Some(matrix) => matrix_axes(name, &matrix.value, sources, params, diagnostics)?,
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

/// `data/download@1` -> (`data/download`, 1).
fn parse_uses(node: &Node) -> Option<(String, u32)> {
    let text = node.as_str()?;
    let (name, version) = text.rsplit_once('@')?;
    let segment_ok = |segment: &str| {
        let mut chars = segment.chars();
        chars
            .next()
            .is_some_and(|first| first.is_ascii_alphanumeric())
            && chars.all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.'))
    };
    if !name.split('/').all(segment_ok) || !version.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let version: u32 = version.parse().ok()?;
    (version > 0).then(|| (name.to_string(), version))
}

fn matrix_axes(
    stage: &str,
    node: &Node,
    sources: &Sources,
    params: &Node,
    diagnostics: &mut Diagnostics,
) -> Option<Vec<MatrixAxis>> {
    let example = "e.g.\nmatrix:\n  precision: [32-true, bf16-mixed]\n  seed: ${params.seeds}";
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
    let mut axes = Vec::new();
    let mut ok = true;
    for entry in entries {
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
            }),
            None => ok = false,
        }
    }
    ok.then_some(axes)
}

fn matrix_values(
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
        let Some(scalar) = item.as_scalar().filter(|_| !item.is_null()) else {
            diagnostics.push(type_error(
                sources,
                item,
                format!("values of `matrix.{key}` in stage `{stage}` must be strings, numbers or booleans"),
                "each value becomes part of a stage name, like `train@seed=1`; use scalars",
            ));
            ok = false;
            continue;
        };
        let text = scalar.text.clone();
        let bad_char = text
            .chars()
            .find(|ch| ch.is_whitespace() || ch.is_control() || ",=@${}/\\\"'`".contains(*ch));
        if text.is_empty() || bad_char.is_some() {
            let what = bad_char.map_or("is empty".to_string(), |ch| {
                format!("contains `{}`", ch.escape_default())
            });
            diagnostics.push(
                Diagnostic::new("bad-matrix-value", format!("matrix value `{text}` of `{key}` in stage `{stage}` {what}"))
                    .at(sources.location(item.span))
                    .with_hint("matrix values name the expanded stages (`train@seed=1`): use letters, digits and `_ . - + :`"),
            );
            ok = false;
            continue;
        }
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
        values.push(MatrixValue {
            json: params::scalar_to_json(scalar),
            text,
        });
    }
    ok.then_some(values)
}

fn expand(
    decls: &[Decl],
    axes_per_decl: &[Arc<[MatrixAxis]>],
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> Vec<Expansion> {
    let mut total: usize = 0;
    for (decl, axes) in decls.iter().zip(axes_per_decl) {
        let count = axes
            .iter()
            .try_fold(1usize, |count, axis| count.checked_mul(axis.values.len()));
        match count
            .and_then(|count| total.checked_add(count))
            .filter(|total| *total <= MAX_STAGES)
        {
            Some(new_total) => total = new_total,
            None => {
                let matrix_span = decl
                    .node
                    .as_map()
                    .and_then(|fields| fields.iter().find(|f| f.key == "matrix"))
                    .map(|f| f.key_span);
                let expands_to = match count {
                    Some(1) => "1 stage".to_string(),
                    Some(count) => format!("{} stages", with_thousands(count)),
                    None => "more stages than can be counted".to_string(),
                };
                let before = if total > 0 {
                    format!(" (after {} before it)", with_thousands(total))
                } else {
                    String::new()
                };
                diagnostics.push(
                    Diagnostic::new(
                        "matrix-too-large",
                        format!(
                            "the matrix of stage `{}` expands to {expands_to}{before}; a pipeline may have at most {} stages",
                            decl.name,
                            with_thousands(MAX_STAGES)
                        ),
                    )
                    .at(sources.location(matrix_span.unwrap_or(decl.name_span)))
                    .with_hint(
                        "split the sweep into several runs with `-S`, or sample fewer combinations",
                    ),
                );
                return Vec::new();
            }
        }
    }

    let mut expansions = Vec::with_capacity(total);
    for (decl_index, (decl, axes)) in decls.iter().zip(axes_per_decl).enumerate() {
        if axes.is_empty() {
            expansions.push(Expansion {
                decl: decl_index,
                name: decl.name.to_string(),
                combo: StageMatrix::default(),
            });
            continue;
        }
        // Odometer over the axes, last key fastest, so names come out in
        // the order the values are written.
        let mut positions = vec![0u32; axes.len()];
        loop {
            let mut name = String::from(decl.name);
            for (index, (axis, &position)) in axes.iter().zip(&positions).enumerate() {
                name.push(if index == 0 { '@' } else { ',' });
                name.push_str(&axis.key);
                name.push('=');
                name.push_str(&axis.values[position as usize].text);
            }
            expansions.push(Expansion {
                decl: decl_index,
                name,
                combo: StageMatrix::new(Arc::clone(axes), positions.clone().into_boxed_slice()),
            });
            let mut axis = axes.len();
            loop {
                if axis == 0 {
                    break;
                }
                axis -= 1;
                positions[axis] += 1;
                if (positions[axis] as usize) < axes[axis].values.len() {
                    break;
                }
                positions[axis] = 0;
                if axis == 0 {
                    axis = usize::MAX;
                    break;
                }
            }
            if axis == usize::MAX {
                break;
            }
        }
    }
    expansions
}

/// `1000000` -> `1,000,000`.
fn with_thousands(count: usize) -> String {
    let digits = count.to_string();
    let mut text = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}

/// The span of `reference` inside the scalar `node`, when the scalar's
/// text can be found character for character in the source.
fn ref_span(node: &Node, reference: &Reference) -> Span {
    match node.as_scalar().and_then(|scalar| scalar.verbatim_col) {
        Some(col) => Span {
            col: col + reference.offset,
            len: reference.len,
            ..node.span
        },
        None => node.span,
    }
}

struct Resolver<'a> {
    sources: &'a Sources,
    params: &'a Node,
    root: &'a Path,
    pipeline: &'a str,
    decls: &'a [Decl<'a>],
    /// Per declaration: the catalog entry of a `uses:` stage, when the
    /// catalog has it (`None` for `run:` stages, and when the file has
    /// errors found before the catalog was needed).
    catalog_entries: &'a [Option<&'a CatalogEntry>],
    expansions: &'a [Expansion],
    index_by_name: HashMap<&'a str, usize>,
    /// Expanded names of each matrix stage, for "refer to one expansion".
    expansions_by_base: HashMap<&'a str, Vec<usize>>,
    outputs_by_stage: Vec<Vec<Out>>,
    /// Every expansion looks up the same few params; mappings are
    /// searched linearly, so each path is looked up once.
    param_cache: HashMap<String, Option<&'a Node>>,
}

impl<'a> Resolver<'a> {
    fn new(
        cx: &Context<'a>,
        decls: &'a [Decl<'a>],
        catalog_entries: &'a [Option<&'a CatalogEntry>],
        expansions: &'a [Expansion],
    ) -> Self {
        let mut index_by_name = HashMap::with_capacity(expansions.len());
        let mut expansions_by_base: HashMap<&str, Vec<usize>> = HashMap::new();
        for (index, expansion) in expansions.iter().enumerate() {
            index_by_name.insert(expansion.name.as_str(), index);
            let decl = &decls[expansion.decl];
            if decl.has_matrix {
                expansions_by_base.entry(decl.name).or_default().push(index);
            }
        }
        Resolver {
            sources: cx.sources,
            params: cx.params,
            root: cx.root,
            pipeline: cx.pipeline,
            decls,
            catalog_entries,
            expansions,
            index_by_name,
            expansions_by_base,
            outputs_by_stage: Vec::new(),
            param_cache: HashMap::new(),
        }
    }

    fn lookup_param(&mut self, path: &str) -> Option<&'a Node> {
        if let Some(found) = self.param_cache.get(path) {
            return *found;
        }
        let found = params::lookup(self.params, path);
        self.param_cache.insert(path.to_string(), found);
        found
    }

    fn location(&self, span: Span) -> Option<crate::Location> {
        self.sources.location(span)
    }

    /// `outs` (mapping name -> path, list of paths, or one path) or
    /// `metrics` (list of paths or one path).
    fn outputs(
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
        for (name, path_node) in
            self.path_entries(decl.name, field, node, field == "outs", diagnostics)
        {
            let Some(text) = self.resolve_string(&scope, path_node, effects, diagnostics) else {
                continue;
            };
            let Some(path) = self.output_path(decl.name, field, &text, path_node, diagnostics)
            else {
                continue;
            };
            let name = name.map_or_else(|| path.clone(), str::to_string);
            outs.push(Out {
                name,
                path,
                location: self.location(path_node.span),
            });
        }
        outs
    }

    /// A `uses:` stage's outputs: those its catalog entry names, placed by
    /// pipe in the stage's directory of the pipeline's namespace.
    fn worker_outputs(
        &self,
        decl: &Decl,
        uses: &str,
        version: u32,
        expansion: &Expansion,
        diagnostics: &mut Diagnostics,
    ) -> Vec<Out> {
        let Some(entry) = self.catalog_entries[expansion.decl] else {
            return Vec::new();
        };
        let names: Vec<&str> = entry
            .info
            .outputs
            .iter()
            .map(|output| output.name.as_str())
            .collect();
        if let Some(outs) = decl.node.get("outs") {
            diagnostics.push(
                Diagnostic::new(
                    "builtin-outs",
                    format!("stage `{}` declares `outs`, but `{uses}@{version}` decides its outputs", decl.name),
                )
                .at(self.location(outs.span))
                .with_hint(format!(
                    "remove `outs:`; refer to its outputs as `${{stages.{}.outs.NAME}}` with NAME one of: {}",
                    decl.name,
                    names.join(", ")
                )),
            );
        }
        let dir = stage_output_dir(self.pipeline, &expansion.name);
        let location = self.location(decl.name_span);
        names
            .into_iter()
            .map(|name| Out {
                name: name.to_string(),
                path: format!("{dir}/{name}"),
                location: location.clone(),
            })
            .collect()
    }

    /// The (name, path node) pairs of a `deps`/`outs`/`metrics` value.
    fn path_entries<'n>(
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

    fn output_path(
        &self,
        stage: &str,
        field: &str,
        text: &str,
        node: &Node,
        diagnostics: &mut Diagnostics,
    ) -> Option<String> {
        let located = |code: &'static str, message: String, hint: &str| {
            Diagnostic::new(code, message)
                .at(self.location(node.span))
                .with_hint(hint.to_string())
        };
        match paths::normalize(text) {
            Ok(path) if paths::protected_dir(&path) == Some(paths::PIPE_DIR) => {
                diagnostics.push(located(
                    "output-in-pipe-dir",
                    format!("`{field}` path `{text}` of stage `{stage}` is inside `.pipe/`"),
                    "`.pipe/` belongs to pipe (cache and run records); write outputs elsewhere in the project, e.g. `models/`",
                ));
                None
            }
            Ok(path) if paths::protected_dir(&path).is_some() => {
                diagnostics.push(located(
                    "output-in-git-dir",
                    format!("`{field}` path `{text}` of stage `{stage}` is inside `.git/`"),
                    "pipe deletes an output before its stage runs, and `.git/` holds the repository and its history; write outputs elsewhere in the project, e.g. `models/`",
                ));
                None
            }
            Ok(path) => Some(path),
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
        }
    }

    fn stage(
        &mut self,
        decl: &Decl,
        expansion: &Expansion,
        index: usize,
        metrics: Vec<Out>,
        mut effects: Effects,
        diagnostics: &mut Diagnostics,
    ) -> Stage {
        let mut scope = Scope {
            stage: decl.name,
            field: "deps",
            combo: &expansion.combo,
            has_matrix: decl.has_matrix,
            deps: None,
            outs: None,
            allow_stage_refs: true,
        };

        let mut deps: Vec<Dep> = Vec::new();
        if let Some(node) = decl.node.get("deps") {
            for (name, path_node) in self.path_entries(decl.name, "deps", node, true, diagnostics) {
                let mut dep_effects = Effects::default();
                let Some(text) =
                    self.resolve_string(&scope, path_node, &mut dep_effects, diagnostics)
                else {
                    continue;
                };
                effects.params_used.append(&mut dep_effects.params_used);
                let path = match paths::normalize(&text) {
                    Ok(path) => path,
                    Err(problem) => {
                        let (message, hint) = match problem {
                            PathProblem::Absolute | PathProblem::EscapesRoot => (
                                format!("dependency `{text}` of stage `{}` is outside the project", decl.name),
                                "pipe hashes dependencies inside the project (the nearest directory above the pipeline file with `.git` or `.pipe`); copy or link the file into the project, or add a stage that downloads it",
                            ),
                            PathProblem::IsRoot => (
                                format!("stage `{}` depends on the whole project (`{text}`)", decl.name),
                                "name the files or directories the stage reads",
                            ),
                            PathProblem::Empty => (
                                format!("empty path in `deps` of stage `{}`", decl.name),
                                "write a project-relative path such as `data/train.csv`",
                            ),
                        };
                        diagnostics.push(
                            Diagnostic::new("bad-path", message)
                                .at(self.location(path_node.span))
                                .with_hint(hint),
                        );
                        continue;
                    }
                };
                let producer = match dep_effects.stage_refs.as_slice() {
                    [(reference, out_path, _)] if *out_path == path => Some(reference.clone()),
                    _ => None,
                };
                let name = name.map_or_else(|| path.clone(), str::to_string);
                deps.push(Dep {
                    name,
                    path,
                    producer,
                    location: self.location(path_node.span),
                });
            }
        }

        // `outs` move into the stage once every stage is built; other
        // stages' references read them until then.
        let all_outs: Vec<Out> = self.outputs_by_stage[index]
            .iter()
            .chain(&metrics)
            .cloned()
            .collect();
        scope.deps = Some(&deps);
        scope.outs = Some(&all_outs);

        // A `uses:` stage is resolved against its catalog entry once its
        // dependencies are all known (below); until then it is its `with:`.
        let mut worker_with: Option<Value> = None;
        let kind = match &decl.kind {
            DeclKind::Command(node) => {
                scope.field = "run";
                let command = self
                    .interpolate(
                        &scope,
                        node,
                        Interpolation::Shell,
                        &mut effects,
                        diagnostics,
                    )
                    .unwrap_or_default();
                StageKind::Command { command }
            }
            DeclKind::Argv(node) => {
                scope.field = "run";
                let argv = self.argv(&scope, node, &mut effects, diagnostics);
                if argv.as_ref().is_some_and(Vec::is_empty) {
                    diagnostics.push(
                        Diagnostic::new("bad-type", format!("`run` of stage `{}` has no program: its list is empty once interpolated", decl.name))
                            .at(self.location(node.span))
                            .with_hint("the first item names the program to run; a reference to an empty list gives no arguments"),
                    );
                }
                StageKind::Argv {
                    argv: argv.unwrap_or_default(),
                }
            }
            DeclKind::Worker { .. } => {
                scope.field = "with";
                let reported = diagnostics.reported();
                let with = match decl.node.get("with") {
                    None => Value::Object(serde_json::Map::new()),
                    Some(node) if node.is_null() => Value::Object(serde_json::Map::new()),
                    Some(node) if node.as_map().is_some() => {
                        self.resolve_json(&scope, node, &mut effects, diagnostics)
                    }
                    Some(node) => {
                        diagnostics.push(type_error(
                            self.sources,
                            node,
                            format!("`with` of stage `{}` must be a mapping of the built-in stage's params", decl.name),
                            "write e.g.\nwith:\n  url: https://example.org/data.tar.gz",
                        ));
                        Value::Null
                    }
                };
                // A value that failed to resolve was reported; checking
                // what is left of it would only add a second message.
                worker_with = (diagnostics.reported() == reported).then_some(with);
                // Stands in only until `worker_stage` below; when that
                // fails, a diagnostic is recorded and the pipeline is
                // never returned.
                StageKind::Argv { argv: Vec::new() }
            }
        };

        scope.field = "env";
        let (env, secret_env) = self.env(decl, &scope, &mut effects, diagnostics);
        scope.field = "resources";
        let resources = self.resources(decl, &scope, &mut effects, diagnostics);
        self.params_list(decl, &mut effects, diagnostics);

        let desc = decl
            .node
            .get("desc")
            .and_then(|node| match node.as_scalar() {
                Some(scalar) if !node.is_null() => Some(scalar.text.clone()),
                _ => {
                    if !node.is_null() {
                        diagnostics.push(type_error(
                            self.sources,
                            node,
                            format!("`desc` of stage `{}` must be text", decl.name),
                            "write a one-line description, e.g. `desc: Train the classifier`",
                        ));
                    }
                    None
                }
            });
        let always_run = match decl.node.get("always_run") {
            None => false,
            Some(node) => match node.as_scalar().map(|scalar| scalar.resolve()) {
                Some(Resolved::Bool(value)) => value,
                _ => {
                    diagnostics.push(type_error(
                        self.sources,
                        node,
                        format!("`always_run` of stage `{}` must be `true` or `false`", decl.name),
                        "write `always_run: true` (without quotes; `yes` and `on` are strings in YAML 1.2)",
                    ));
                    false
                }
            },
        };

        // References to other stages' outputs outside `deps:` are
        // dependencies too, named by the reference text.
        for (reference, path, span) in std::mem::take(&mut effects.stage_refs) {
            if deps.iter().any(|dep| dep.path == path) {
                continue;
            }
            let name = format!("stages.{}.outs.{}", reference.stage, reference.out);
            deps.push(Dep {
                name,
                path,
                producer: Some(reference),
                location: self.location(span),
            });
        }

        let kind = match worker_with {
            Some(with) => self
                .worker_stage(decl, expansion, with, &mut deps, &resources, diagnostics)
                .map_or(kind, StageKind::Worker),
            None => kind,
        };

        Stage {
            name: expansion.name.clone(),
            base_name: decl.name.to_string(),
            matrix: expansion.combo.clone(),
            kind,
            desc,
            deps,
            outs: Vec::new(),
            metrics,
            env,
            secret_env,
            params_used: effects.params_used,
            resources,
            always_run,
            location: self.location(decl.name_span),
        }
    }

    /// Checks a `uses:` stage's `with:` against its catalog entry, at the
    /// place of each value: defaults and params the stage takes from the
    /// pipeline (`seed`) filled in, `path` params made project-relative and
    /// added as dependencies (edges to the stages that write them are
    /// found with every other dependency's), and the devices it asks for
    /// matched with `resources.gpus`. `None` when a diagnostic was recorded.
    fn worker_stage(
        &mut self,
        decl: &Decl,
        expansion: &Expansion,
        with: Value,
        deps: &mut Vec<Dep>,
        resources: &Resources,
        diagnostics: &mut Diagnostics,
    ) -> Option<WorkerStage> {
        let DeclKind::Worker {
            uses,
            version,
            uses_span,
        } = &decl.kind
        else {
            return None;
        };
        let entry = self.catalog_entries[expansion.decl]?;
        let info = &entry.info;
        let Value::Object(mut given) = with else {
            return None;
        };
        let with_node = decl.node.get("with");
        let with_entry = |param: &str| {
            with_node
                .and_then(Node::as_map)
                .and_then(|entries| entries.iter().find(|entry| entry.key == param))
        };
        // Where to point at a param: its value, or its key when the name is
        // the problem, or `with:` (then `uses:`) when it is not written.
        let place = |param: &str, at_key: bool| {
            let span = match with_entry(param) {
                Some(entry) if at_key => entry.key_span,
                Some(entry) => entry.value.span,
                None => with_node.map_or(*uses_span, |node| node.span),
            };
            self.location(span)
        };

        for spec in &info.params {
            let Some(source) = &spec.pipeline_param else {
                continue;
            };
            if given.get(&spec.name).is_some_and(|value| !value.is_null()) {
                continue;
            }
            if let Some(value) = params::lookup(self.params, source).filter(|node| !node.is_null())
            {
                given.insert(spec.name.clone(), params::to_json(value));
            }
        }
        let mut resolved = match pipe_protocol::check_params(info, &given) {
            Ok(resolved) => resolved,
            Err(problems) => {
                let names: Vec<&str> = info.params.iter().map(|spec| spec.name.as_str()).collect();
                for mut problem in problems {
                    let unknown = !names.contains(&problem.param.as_str());
                    if unknown {
                        if let Some(suggestion) =
                            did_you_mean(&problem.param, names.iter().copied())
                        {
                            problem.hint = format!("did you mean `{suggestion}`? {}", problem.hint);
                        }
                    }
                    diagnostics.push(
                        Diagnostic::new(
                            "bad-stage-param",
                            format!("stage `{}`: {}", expansion.name, problem.message),
                        )
                        .at(place(&problem.param, unknown))
                        .with_hint(problem.hint),
                    );
                }
                return None;
            }
        };

        let mut path_params = Vec::new();
        let mut ok = true;
        for spec in info
            .params
            .iter()
            .filter(|spec| spec.kind == ParamKind::Path)
        {
            let Some(value) = resolved.get(&spec.name).and_then(Value::as_str) else {
                continue;
            };
            let Some(path) = self.project_relative(value) else {
                diagnostics.push(
                    Diagnostic::new(
                        "input-outside-project",
                        format!("stage `{}`: `{}` is outside the project: `{value}`", expansion.name, spec.name),
                    )
                    .at(place(&spec.name, false))
                    .with_hint("inputs are hashed inside the project; copy or link the file into it, or download it with a stage"),
                );
                ok = false;
                continue;
            };
            // The key holds the project-relative form, so moving the
            // project does not change it; the worker gets it absolute.
            resolved.insert(spec.name.clone(), Value::String(path.clone()));
            path_params.push(spec.name.clone());
            if !deps.iter().any(|dep| dep.path == path) {
                deps.push(Dep {
                    name: format!("with.{}", spec.name),
                    path,
                    producer: None,
                    location: place(&spec.name, false),
                });
            }
        }

        if let Some(name) = &info.devices_param {
            let devices = resolved.get(name).and_then(Value::as_u64);
            let gpus = u64::from(resources.gpus);
            if gpus > 0 && devices != Some(gpus) {
                let devices = devices.map_or_else(|| "unset".to_string(), |n| n.to_string());
                let at = match (with_entry(name), decl.node.get("resources")) {
                    (None, Some(resources)) => self.location(resources.span),
                    _ => place(name, false),
                };
                diagnostics.push(
                    Diagnostic::new(
                        "devices-mismatch",
                        format!(
                            "stage `{}` asks for {gpus} GPU(s) in `resources.gpus` but runs on `{name}: {devices}`",
                            expansion.name
                        ),
                    )
                    .at(at)
                    .with_hint(format!(
                        "give both the same number: `{name}: {gpus}` (with `strategy: ddp` above 1), or `resources.gpus: {devices}`"
                    )),
                );
                ok = false;
            }
        }
        ok.then(|| WorkerStage {
            uses: uses.clone(),
            version: *version,
            implementation: info.implementation,
            worker: entry.worker.clone(),
            with: resolved,
            path_params,
            output_dir: stage_output_dir(self.pipeline, &expansion.name),
        })
    }

    /// The project-relative, normalised form of a `path` param, or `None`
    /// when it is outside the project. An absolute path inside it is
    /// accepted, as a user pasting one expects.
    fn project_relative(&self, value: &str) -> Option<String> {
        let path = Path::new(value);
        let relative = if path.is_absolute() {
            path.strip_prefix(self.root).ok()?.to_str()?
        } else {
            value
        };
        paths::normalize(relative).ok()
    }

    fn env(
        &mut self,
        decl: &Decl,
        scope: &Scope,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> (BTreeMap<String, String>, BTreeSet<String>) {
        let mut env = BTreeMap::new();
        let mut secret_env = BTreeSet::new();
        let Some(node) = decl.node.get("env") else {
            return (env, secret_env);
        };
        let Some(entries) = node.as_map() else {
            diagnostics.push(type_error(
                self.sources,
                node,
                format!(
                    "`env` of stage `{}` must be a mapping of NAME: value",
                    decl.name
                ),
                "write e.g.\nenv:\n  OMP_NUM_THREADS: 4",
            ));
            return (env, secret_env);
        };
        for entry in entries {
            if !is_valid_identifier(&entry.key) {
                diagnostics.push(
                    Diagnostic::new("bad-env-name", format!("`{}` is not a valid environment variable name (stage `{}`)", entry.key, decl.name))
                        .at(self.location(entry.key_span))
                        .with_hint("use letters, digits and `_`, starting with a letter or `_`, e.g. `CUDA_VISIBLE_DEVICES`"),
                );
                continue;
            }
            let value = &entry.value;
            if value.as_map().is_some() {
                if let Some((text, secret)) = self.env_from_environment(decl, entry, diagnostics) {
                    if secret {
                        secret_env.insert(entry.key.clone());
                    }
                    env.insert(entry.key.clone(), text);
                }
                continue;
            }
            if value.as_scalar().is_none() || value.is_null() {
                diagnostics.push(type_error(
                    self.sources,
                    value,
                    format!(
                        "env `{}` of stage `{}` must be a string, number or boolean",
                        entry.key, decl.name
                    ),
                    format!(
                        "write e.g. `{}: \"value\"`; for an empty value write `\"\"`",
                        entry.key
                    ),
                ));
                continue;
            }
            if let Some(text) = self.resolve_string(scope, value, effects, diagnostics) {
                env.insert(entry.key.clone(), text);
            }
        }
        (env, secret_env)
    }

    /// `NAME: { from_env: VAR, secret: true|false }`: the value of `VAR` in
    /// pipe's own environment, so a credential never sits in the pipeline
    /// file. `secret` must be spelled out: a secret is left out of the key,
    /// a plain value is part of it, and guessing wrong either leaks a
    /// token into the run history or reuses a result made with another value.
    fn env_from_environment(
        &self,
        decl: &Decl,
        entry: &Entry,
        diagnostics: &mut Diagnostics,
    ) -> Option<(String, bool)> {
        let name = &entry.key;
        let example = format!("write e.g. `{name}: {{ from_env: {name}, secret: true }}`");
        let fields = entry.value.as_map().unwrap_or_default();
        let mut problem = false;
        for field in fields {
            if !["from_env", "secret"].contains(&field.key.as_str()) {
                diagnostics.push(
                    Diagnostic::new(
                        "bad-env-field",
                        format!(
                            "env `{name}` of stage `{}` has no field `{}`; its fields are `from_env` and `secret`",
                            decl.name, field.key
                        ),
                    )
                    .at(self.location(field.key_span))
                    .with_hint(example.clone()),
                );
                problem = true;
            }
        }
        let variable = match entry.value.get("from_env") {
            Some(node) => match node.as_str() {
                Some(variable) if is_valid_identifier(variable) => Some((variable, node)),
                _ => {
                    diagnostics.push(type_error(
                        self.sources,
                        node,
                        format!("`from_env` of env `{name}` (stage `{}`) must name an environment variable", decl.name),
                        example.clone(),
                    ));
                    None
                }
            },
            None => {
                diagnostics.push(
                    Diagnostic::new(
                        "bad-env-field",
                        format!("env `{name}` of stage `{}` needs `from_env`, the variable of pipe's environment to pass on", decl.name),
                    )
                    .at(self.location(entry.value.span))
                    .with_hint(example.clone()),
                );
                None
            }
        };
        let secret = match entry.value.get("secret") {
            Some(node) => match node.as_scalar().map(|scalar| scalar.resolve()) {
                Some(Resolved::Bool(secret)) => Some(secret),
                _ => {
                    diagnostics.push(type_error(
                        self.sources,
                        node,
                        format!(
                            "`secret` of env `{name}` (stage `{}`) must be `true` or `false`",
                            decl.name
                        ),
                        example.clone(),
                    ));
                    None
                }
            },
            None => {
                diagnostics.push(
                    Diagnostic::new(
                        "bad-env-field",
                        format!("env `{name}` of stage `{}` must say whether its value is a secret", decl.name),
                    )
                    .at(self.location(entry.value.span))
                    .with_hint(format!(
                        "add `secret: true` for a credential (passed to the stage, shown as `***`, not part of the key) or `secret: false` for a plain value (part of the key); {example}"
                    )),
                );
                None
            }
        };
        let ((variable, variable_node), secret) = (variable?, secret?);
        if problem {
            return None;
        }
        match std::env::var(variable) {
            Ok(text) => Some((text, secret)),
            Err(_) => {
                diagnostics.push(
                    Diagnostic::new(
                        "env-not-set",
                        format!(
                            "env `{name}` of stage `{}` comes from `{variable}`, which is not set in pipe's environment",
                            decl.name
                        ),
                    )
                    .at(self.location(variable_node.span))
                    .with_hint(format!("set it before running pipe, e.g. `export {variable}=...`")),
                );
                None
            }
        }
    }

    fn resources(
        &mut self,
        decl: &Decl,
        scope: &Scope,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Resources {
        let mut resources = Resources::default();
        let Some(node) = decl.node.get("resources") else {
            return resources;
        };
        let Some(entries) = node.as_map() else {
            diagnostics.push(type_error(
                self.sources,
                node,
                format!("`resources` of stage `{}` must be a mapping", decl.name),
                "write e.g. `resources: { cpus: 4, gpus: 1 }`",
            ));
            return resources;
        };
        for entry in entries {
            let slot = match entry.key.as_str() {
                "cpus" => &mut resources.cpus,
                "gpus" => &mut resources.gpus,
                other => {
                    let suggestion = did_you_mean(other, ["cpus", "gpus"]);
                    diagnostics.push(
                        Diagnostic::new(
                            "unknown-key",
                            format!("unknown resource `{other}` in stage `{}`", decl.name),
                        )
                        .at(self.location(entry.key_span))
                        .with_hint(hint_with_suggestion(
                            suggestion,
                            "known resources: cpus, gpus".to_string(),
                        )),
                    );
                    continue;
                }
            };
            let value = if entry.value.as_str().is_some() {
                self.resolve_json(scope, &entry.value, effects, diagnostics)
            } else {
                params::to_json(&entry.value)
            };
            let count = match &value {
                Value::Number(number) => number.as_u64(),
                Value::String(text) => text.trim().parse::<u64>().ok(),
                _ => None,
            };
            match count.and_then(|count| u32::try_from(count).ok()) {
                Some(count) => *slot = count,
                None if value.is_null() && entry.value.as_str().is_some() => {} // reported while resolving
                None => diagnostics.push(
                    Diagnostic::new(
                        "bad-type",
                        format!("`resources.{}` of stage `{}` must be a whole number of 0 or more, found `{}`", entry.key, decl.name, json_text(&value)),
                    )
                    .at(self.location(entry.value.span))
                    .with_hint(format!("write e.g. `{}: 1`, or `{}: ${{params.NAME}}` naming such a param", entry.key, entry.key)),
                ),
            }
        }
        resources
    }

    fn params_list(&mut self, decl: &Decl, effects: &mut Effects, diagnostics: &mut Diagnostics) {
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

    /// `with:` values: strings are interpolated; a string that is exactly
    /// one reference keeps the referenced value's type.
    fn resolve_json(
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
                let pieces = interp::parse(&scalar.text);
                if let Ok([Piece::Ref(reference)]) = pieces.as_deref() {
                    // `${raw:...}` is left to `resolve_string`, which says
                    // where `raw:` belongs.
                    if !reference.expr.starts_with(RAW_PREFIX) {
                        return match self.evaluate(
                            scope,
                            reference,
                            ref_span(node, reference),
                            effects,
                        ) {
                            Ok(Evaluated::Param(found)) => params::to_json(found),
                            Ok(Evaluated::Matrix(value)) => value.json,
                            Ok(Evaluated::Path(path)) => Value::String(path),
                            Err(failure) => {
                                self.report(node, reference, failure, diagnostics);
                                Value::Null
                            }
                        };
                    }
                }
                self.resolve_string(scope, node, effects, diagnostics)
                    .map_or(Value::Null, Value::String)
            }
        }
    }

    /// Interpolates the scalar `node` as plain text; every bad reference is
    /// reported.
    fn resolve_string(
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
    fn argv(
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
            let whole_reference =
                item.as_str()
                    .and_then(|text| match interp::parse(text).ok()?.as_slice() {
                        [Piece::Ref(reference)] if !reference.expr.starts_with(RAW_PREFIX) => {
                            Some(reference.clone())
                        }
                        _ => None,
                    });
            match whole_reference {
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
        }
        ok.then_some(argv)
    }

    /// The words a reference stands for: a list param gives one per item,
    /// anything else one.
    fn reference_words(
        &mut self,
        scope: &Scope,
        reference: &Reference,
        span: Span,
        effects: &mut Effects,
    ) -> Result<Vec<String>, Failure> {
        match self.evaluate(scope, reference, span, effects)? {
            Evaluated::Param(found) => param_words(found, &reference.expr),
            Evaluated::Matrix(value) => Ok(vec![value.text]),
            Evaluated::Path(path) => Ok(vec![path]),
        }
    }

    /// Interpolates the scalar `node`; every bad reference is reported.
    /// For a shell command each value is quoted as one word for where it
    /// lands, unless the reference says `raw:`.
    fn interpolate(
        &mut self,
        scope: &Scope,
        node: &Node,
        mode: Interpolation,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Option<String> {
        let scalar = node.as_scalar()?;
        let pieces = match interp::parse(&scalar.text) {
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
        let mut text = String::with_capacity(scalar.text.len());
        let mut quotes = QuoteTracker::default();
        let mut ok = true;
        for piece in &pieces {
            match piece {
                Piece::Text(literal) => {
                    text.push_str(literal);
                    if mode == Interpolation::Shell {
                        quotes.feed(literal);
                    }
                }
                Piece::Ref(reference) => {
                    let span = ref_span(node, reference);
                    let value = match reference.expr.strip_prefix(RAW_PREFIX) {
                        Some(inner) => {
                            let inner = Reference {
                                expr: inner.trim().to_string(),
                                ..reference.clone()
                            };
                            match mode {
                                Interpolation::Shell => self
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
                        None => {
                            let words = self.reference_words(scope, reference, span, effects);
                            match mode {
                                Interpolation::Plain | Interpolation::Argv => {
                                    words.map(|words| words.join(" "))
                                }
                                Interpolation::Shell => words.and_then(|words| {
                                    shell_words(quotes.context(), &words, reference, scope)
                                }),
                            }
                        }
                    };
                    match value {
                        Ok(value) => {
                            if mode == Interpolation::Shell {
                                quotes.feed(&value);
                            }
                            text.push_str(&value);
                        }
                        Err(failure) => {
                            self.report(node, reference, failure, diagnostics);
                            ok = false;
                        }
                    }
                }
            }
        }
        ok.then_some(text)
    }

    fn report(
        &self,
        node: &Node,
        reference: &Reference,
        failure: Failure,
        diagnostics: &mut Diagnostics,
    ) {
        diagnostics.push(
            Diagnostic::new("bad-reference", failure.message)
                .at(self.location(ref_span(node, reference)))
                .with_hint(failure.hint),
        );
    }

    fn evaluate(
        &mut self,
        scope: &Scope,
        reference: &Reference,
        span: Span,
        effects: &mut Effects,
    ) -> Result<Evaluated<'a>, Failure> {
        let place = format!("`{}` of stage `{}`", scope.field, scope.stage);
        let substituted;
        let expr = if reference.expr.contains("${") {
            if !scope.has_matrix {
                return Err(failure(
                    format!("`${{matrix...}}` inside a reference in {place}, which has no `matrix`"),
                    "only a matrix stage can name another stage's expansion by its own matrix value",
                ));
            }
            substituted = interp::substitute_matrix_keys(&reference.expr, |key| {
                scope.combo.value(key).map(|value| value.text.clone())
            })
            .map_err(|key| {
                let keys: Vec<&str> = scope.combo.keys().collect();
                failure(
                    format!("unknown matrix key `{key}` in {place}"),
                    hint_with_suggestion(
                        did_you_mean(key, keys.iter().copied()),
                        format!("matrix keys: {}", name_list(&keys, 10)),
                    ),
                )
            })?;
            substituted.as_str()
        } else {
            reference.expr.as_str()
        };
        let Some((namespace, rest)) = expr.split_once('.') else {
            let hint = if params::lookup(self.params, expr).is_some() {
                format!("params are referenced with their namespace: write `${{params.{expr}}}`")
            } else {
                format!("references look like `${{params.NAME}}`, `${{deps.NAME}}`, `${{outs.NAME}}`, `${{matrix.KEY}}` or `${{stages.STAGE.outs.NAME}}`; for a shell variable write `$${{{expr}}}`")
            };
            return Err(failure(
                format!("unknown reference `${{{expr}}}` in {place}"),
                hint,
            ));
        };
        match namespace {
            "params" => match self.lookup_param(rest) {
                Some(found) => {
                    effects
                        .params_used
                        .insert(rest.to_string(), params::to_json(found));
                    Ok(Evaluated::Param(found))
                }
                None => Err(failure(
                    format!("unknown param `{rest}` in {place}"),
                    params::unknown_param_hint(self.params, rest),
                )),
            },
            "matrix" => {
                if !scope.has_matrix {
                    return Err(failure(
                        format!("`${{matrix.{rest}}}` in {place}, which has no `matrix`"),
                        format!("add `matrix: {{ {rest}: [...] }}` to the stage, or use a param: `${{params.{rest}}}`"),
                    ));
                }
                match scope.combo.value(rest) {
                    Some(value) => Ok(Evaluated::Matrix(value.clone())),
                    None => {
                        let keys: Vec<&str> = scope.combo.keys().collect();
                        Err(failure(
                            format!("unknown matrix key `{rest}` in {place}"),
                            hint_with_suggestion(
                                did_you_mean(rest, keys.iter().copied()),
                                format!("matrix keys: {}", name_list(&keys, 10)),
                            ),
                        ))
                    }
                }
            }
            "deps" | "outs" => {
                let (entries, names): (Option<Vec<(&str, &str)>>, &str) = if namespace == "deps" {
                    (
                        scope.deps.map(|deps| {
                            deps.iter()
                                .map(|dep| (dep.name.as_str(), dep.path.as_str()))
                                .collect()
                        }),
                        "dependency",
                    )
                } else {
                    (
                        scope.outs.map(|outs| {
                            outs.iter()
                                .map(|out| (out.name.as_str(), out.path.as_str()))
                                .collect()
                        }),
                        "output",
                    )
                };
                let Some(entries) = entries else {
                    return Err(failure(
                        format!("`${{{namespace}.{rest}}}` cannot be used in `{}` (stage `{}`)", scope.field, scope.stage),
                        "`${deps.NAME}` and `${outs.NAME}` are for `run`, `with` and `env`; write the path here, or use `${params.NAME}`",
                    ));
                };
                match entries.iter().find(|(name, _)| *name == rest) {
                    Some((_, path)) => Ok(Evaluated::Path(path.to_string())),
                    None => {
                        let known: Vec<&str> = entries.iter().map(|(name, _)| *name).collect();
                        let hint = if known.is_empty() {
                            format!("stage `{}` declares no {namespace}; add `{namespace}: {{ {rest}: PATH }}`", scope.stage)
                        } else {
                            hint_with_suggestion(
                                did_you_mean(rest, known.iter().copied()),
                                format!("declared {namespace}: {}", name_list(&known, 10)),
                            )
                        };
                        Err(failure(
                            format!("unknown {names} `{rest}` in {place}"),
                            hint,
                        ))
                    }
                }
            }
            "stages" => {
                if !scope.allow_stage_refs {
                    return Err(failure(
                        format!("`${{{expr}}}` in {place}: an output path cannot refer to another stage"),
                        "write this stage's own output path; other stages refer to it with `${stages.STAGE.outs.NAME}`",
                    ));
                }
                let shape_hint =
                    "write `${stages.STAGE.outs.NAME}`, e.g. `${stages.prepare.outs.data}`";
                let Some((stage_name, out_name)) = rest.rsplit_once(".outs.") else {
                    return Err(failure(
                        format!("malformed stage reference `${{{expr}}}` in {place}"),
                        shape_hint,
                    ));
                };
                let Some(&target) = self.index_by_name.get(stage_name) else {
                    return Err(self.unknown_stage(stage_name, &place));
                };
                let out_names: Vec<&str> = self
                    .outputs_by_stage
                    .get(target)
                    .map(|outs| outs.iter().map(|out| out.name.as_str()).collect())
                    .unwrap_or_default();
                let target_expansion = &self.expansions[target];
                let target_decl = &self.decls[target_expansion.decl];
                let path = match self
                    .outputs_by_stage
                    .get(target)
                    .and_then(|outs| outs.iter().find(|out| out.name == out_name))
                {
                    Some(out) => out.path.clone(),
                    // Without its catalog entry (the file has other
                    // errors, reported already) a `uses:` stage's outputs
                    // are unknown: the reference cannot be checked yet.
                    None if matches!(target_decl.kind, DeclKind::Worker { .. })
                        && self.catalog_entries[target_expansion.decl].is_none() =>
                    {
                        format!(
                            "{}/{out_name}",
                            stage_output_dir(self.pipeline, &target_expansion.name)
                        )
                    }
                    None => {
                        let hint = if out_names.is_empty() {
                            format!("stage `{stage_name}` declares no outputs; add `outs: {{ {out_name}: PATH }}` to it")
                        } else {
                            hint_with_suggestion(
                                did_you_mean(out_name, out_names.iter().copied()),
                                format!("outputs of `{stage_name}`: {}", name_list(&out_names, 10)),
                            )
                        };
                        return Err(failure(
                            format!("stage `{stage_name}` has no output `{out_name}` ({place})"),
                            hint,
                        ));
                    }
                };
                let reference = StageOutRef {
                    stage: target_expansion.name.clone(),
                    out: out_name.to_string(),
                };
                effects.stage_refs.push((reference, path.clone(), span));
                Ok(Evaluated::Path(path))
            }
            other => {
                let namespaces = ["params", "deps", "outs", "matrix", "stages"];
                Err(failure(
                    format!("unknown namespace `{other}` in `${{{expr}}}` ({place})"),
                    hint_with_suggestion(did_you_mean(other, namespaces), "namespaces: params, deps, outs, matrix, stages; for a literal `${` write `$${`".to_string()),
                ))
            }
        }
    }

    fn unknown_stage(&self, name: &str, place: &str) -> Failure {
        if let Some(expanded) = self.expansions_by_base.get(name) {
            let names: Vec<&str> = expanded
                .iter()
                .map(|&index| self.expansions[index].name.as_str())
                .collect();
            return failure(
                format!("stage `{name}` has a matrix, so `{name}` alone does not name one stage ({place})"),
                format!("refer to one expansion: {}", name_list(&names, 6)),
            );
        }
        let base = name.split_once('@').map_or(name, |(base, _)| base);
        let mut candidates: Vec<&str> = self.decls.iter().map(|decl| decl.name).collect();
        if let Some(expanded) = self.expansions_by_base.get(base) {
            candidates.extend(
                expanded
                    .iter()
                    .map(|&index| self.expansions[index].name.as_str()),
            );
        }
        let known: Vec<&str> = self.decls.iter().map(|decl| decl.name).collect();
        failure(
            format!("unknown stage `{name}` ({place})"),
            hint_with_suggestion(
                did_you_mean(name, candidates.iter().copied()),
                format!("stages: {}", name_list(&known, 10)),
            ),
        )
    }
}

/// `values` quoted as shell words for `context`, separated by spaces.
fn shell_words(
    context: QuoteContext,
    values: &[String],
    reference: &Reference,
    scope: &Scope,
) -> Result<String, Failure> {
    if context == QuoteContext::AnsiC {
        return Err(failure(
            format!(
                "`${{{}}}` inside `$'...'` in `run` of stage `{}`, where a value cannot be quoted safely",
                reference.expr, scope.stage
            ),
            format!(
                "put the reference outside `$'...'` (pipe quotes it), or inside \"...\"; to splice the text unquoted write `${{raw:{}}}`",
                reference.expr
            ),
        ));
    }
    let quoted: Vec<String> = values
        .iter()
        .map(|value| shell::quote_for(context, value))
        .collect();
    Ok(quoted.join(" "))
}

/// A param as it appears in a command: a scalar as written, a list as one
/// word per item.
fn param_words(node: &Node, expr: &str) -> Result<Vec<String>, Failure> {
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

fn json_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Two stages writing one path, or one writing inside another's output
/// directory, is refused; a dependency on a produced path (or a path
/// inside one) gets that producer, as in DVC.
fn unknown_worker_stage(
    catalog: &Catalog,
    uses: &str,
    version: u32,
    stage: &str,
    location: Option<crate::Location>,
) -> Diagnostic {
    let versions = catalog.versions_of(uses);
    if !versions.is_empty() {
        let available: Vec<String> = versions.iter().map(|v| format!("`{uses}@{v}`")).collect();
        return Diagnostic::new(
            "unknown-stage-version",
            format!("stage `{stage}`: `{uses}` has no version {version}"),
        )
        .at(location)
        .with_hint(format!("available: {}", available.join(", ")));
    }
    let mut names: Vec<&str> = catalog
        .stages
        .values()
        .map(|entry| entry.info.name.as_str())
        .collect();
    names.dedup();
    let known: Vec<String> = catalog.stages.keys().cloned().collect();
    let mut hint = format!(
        "built-in stages: {}; `pipe stages` describes them",
        known.join(", ")
    );
    if let Some(suggestion) = did_you_mean(uses, names.iter().copied()) {
        hint = format!("did you mean `{suggestion}@{version}`? {hint}");
    }
    if crate::worker::TRAINING_STAGE_PREFIXES
        .iter()
        .any(|prefix| uses.starts_with(prefix))
    {
        hint = format!(
            "training stages run in the worker `pipe-stage-train`, which links libtorch: a source checkout builds it on first use; \
             an installation needs it beside `pipe-stage` (docs/libtorch.md); {hint}"
        );
    }
    Diagnostic::new(
        "unknown-stage-kind",
        format!("stage `{stage}` uses `{uses}@{version}`, which no worker provides"),
    )
    .at(location)
    .with_hint(hint)
}

fn check_output_ownership(stages: &mut [Stage], moved: &MovedPaths, diagnostics: &mut Diagnostics) {
    for (stage_index, dep_index, producer) in find_producers(stages, moved, diagnostics) {
        stages[stage_index].deps[dep_index].producer = Some(producer);
    }
}

/// The checks of `check_output_ownership`, and the producer each
/// dependency on a produced path gets. Paths are borrowed from the stages,
/// not copied: this map has an entry per output of the whole pipeline.
fn find_producers(
    stages: &[Stage],
    moved: &MovedPaths,
    diagnostics: &mut Diagnostics,
) -> Vec<(usize, usize, StageOutRef)> {
    let mut owners: HashMap<&str, (usize, &str)> = HashMap::new();
    for (stage_index, stage) in stages.iter().enumerate() {
        for out in stage.outs.iter().chain(&stage.metrics) {
            match owners.get(out.path.as_str()) {
                Some((owner_index, owner_out)) => {
                    let owner = &stages[*owner_index];
                    let hint = if owner.base_name == stage.base_name && !stage.matrix.is_empty() {
                        let keys: Vec<String> = stage
                            .matrix
                            .keys()
                            .map(|key| format!("${{matrix.{key}}}"))
                            .collect();
                        let example = match out.path.rsplit_once('/') {
                            Some((dir, file)) => format!("{dir}/{}/{file}", keys.join("-")),
                            None => format!("{}/{}", keys.join("-"), out.path),
                        };
                        format!(
                            "every expansion of matrix stage `{}` writes `{}`; put the matrix values in the path, e.g. `{example}`",
                            stage.base_name, out.path
                        )
                    } else {
                        "give one of the two outputs another path".to_string()
                    };
                    diagnostics.push(
                        Diagnostic::new(
                            "duplicate-output",
                            format!(
                                "stages `{}` and `{}` both write `{}`",
                                owner.name, stage.name, out.path
                            ),
                        )
                        .at(out.location.clone())
                        .with_hint(hint)
                        .with_note(format!(
                            "`{}` declares it as output `{owner_out}`{}",
                            owner.name,
                            located_suffix(owner_location(owner, owner_out))
                        )),
                    );
                }
                None => {
                    owners.insert(&out.path, (stage_index, &out.name));
                }
            }
        }
    }
    for stage in stages.iter() {
        for out in stage.outs.iter().chain(&stage.metrics) {
            if let Some((owner_index, owner_out)) =
                paths::ancestors(&out.path).find_map(|ancestor| owners.get(ancestor))
            {
                let owner = &stages[*owner_index];
                let owner_path = owner
                    .outs
                    .iter()
                    .chain(&owner.metrics)
                    .find(|o| o.name == *owner_out)
                    .map_or("", |o| o.path.as_str());
                let shown_path = if owner_path == *owner_out {
                    String::new()
                } else {
                    format!(" (`{owner_path}`)")
                };
                let who = if owner.name == stage.name {
                    format!("its own output `{owner_out}`{shown_path}")
                } else {
                    format!("output `{owner_out}`{shown_path} of stage `{}`", owner.name)
                };
                diagnostics.push(
                    Diagnostic::new(
                        "duplicate-output",
                        format!("output `{}` of stage `{}` is inside {who}", out.path, stage.name),
                    )
                    .at(out.location.clone())
                    .with_hint(format!("`{owner_path}` is cached and restored as a whole; write this output outside it, or depend on `{owner_path}` instead"))
                    .with_note(format!("`{}` declares `{owner_path}`{}", owner.name, located_suffix(owner_location(owner, owner_out)))),
                );
            }
        }
    }
    let real_owners = check_moved_outputs(stages, &owners, moved, diagnostics);
    let owner_of = |path: &str| {
        owners
            .get(path)
            .or_else(|| real_owners.get(path))
            .or_else(|| {
                paths::ancestors(path)
                    .find_map(|ancestor| owners.get(ancestor).or_else(|| real_owners.get(ancestor)))
            })
    };
    let mut producers = Vec::new();
    for (stage_index, stage) in stages.iter().enumerate() {
        for (dep_index, dep) in stage
            .deps
            .iter()
            .enumerate()
            .filter(|(_, dep)| dep.producer.is_none())
        {
            let path = moved
                .deps
                .get(&(stage_index, dep_index))
                .unwrap_or(&dep.path);
            let owner = owner_of(path);
            if let Some((owner_index, owner_out)) = owner {
                let producer = StageOutRef {
                    stage: stages[*owner_index].name.clone(),
                    out: owner_out.to_string(),
                };
                producers.push((stage_index, dep_index, producer));
            }
        }
    }
    producers
}

/// Outputs that lead elsewhere through a symlink overlap other outputs by
/// where they really are: two stages writing one file through two names
/// would each find the other's result and restore their own on every run.
/// Returns the real paths of those outputs with their owners, for edges.
fn check_moved_outputs<'s>(
    stages: &'s [Stage],
    owners: &HashMap<&str, (usize, &str)>,
    moved: &'s MovedPaths,
    diagnostics: &mut Diagnostics,
) -> HashMap<&'s str, (usize, &'s str)> {
    let mut real_owners: HashMap<&str, (usize, &str)> = HashMap::new();
    if moved.outs.is_empty() {
        return real_owners;
    }
    let output = move |stage_index: usize, out_index: usize| {
        let stage = &stages[stage_index];
        stage.outs.iter().chain(&stage.metrics).nth(out_index)
    };
    let owner_path = |owner: (usize, &str)| -> String {
        let owner_stage = &stages[owner.0];
        owner_stage
            .outs
            .iter()
            .chain(&owner_stage.metrics)
            .find(|o| o.name == owner.1)
            .map_or(owner.1, |o| o.path.as_str())
            .to_string()
    };
    let mut report = |out: &Out, owner: (usize, &str), message: String| {
        let owner_stage = &stages[owner.0];
        let owner_path = owner_path(owner);
        diagnostics.push(
            Diagnostic::new("duplicate-output", message)
            .at(out.location.clone())
            .with_hint("two names for one file would each be deleted and restored in turn, and never be up to date; give the outputs paths that do not overlap")
            .with_note(format!(
                "`{}` declares `{owner_path}`{}",
                owner_stage.name,
                located_suffix(owner_location(owner_stage, owner.1))
            )),
        );
    };
    for (&(stage_index, out_index), real) in &moved.outs {
        let Some(out) = output(stage_index, out_index) else {
            continue;
        };
        let stage = &stages[stage_index];
        let clash = std::iter::once(real.as_str())
            .chain(paths::ancestors(real))
            .find_map(|path| owners.get(path).or_else(|| real_owners.get(path)));
        match clash {
            Some((owner_index, owner_out)) => {
                let owner = (*owner_index, *owner_out);
                let message = format!(
                    "output `{}` of stage `{}` is really `{real}` (through a symbolic link), which overlaps output `{}` of stage `{}`",
                    out.path, stage.name, owner_path(owner), stages[owner.0].name
                );
                report(out, owner, message);
            }
            None => {
                real_owners.insert(real, (stage_index, &out.name));
            }
        }
    }
    // A declared output inside the real directory of a linked one.
    for (stage_index, stage) in stages.iter().enumerate() {
        for (out_index, out) in stage.outs.iter().chain(&stage.metrics).enumerate() {
            if moved.outs.contains_key(&(stage_index, out_index)) {
                continue;
            }
            let clash = paths::ancestors(&out.path)
                .find_map(|ancestor| real_owners.get(ancestor).map(|owner| (ancestor, owner)));
            if let Some((real, (owner_index, owner_out))) = clash {
                let owner = (*owner_index, *owner_out);
                let message = format!(
                    "output `{}` of stage `{}` is inside output `{}` of stage `{}`, which is really `{real}` (through a symbolic link)",
                    out.path, stage.name, owner_path(owner), stages[owner.0].name
                );
                report(out, owner, message);
            }
        }
    }
    real_owners
}

fn owner_location<'s>(owner: &'s Stage, out_name: &str) -> Option<&'s crate::Location> {
    owner
        .outs
        .iter()
        .chain(&owner.metrics)
        .find(|out| out.name == out_name)
        .and_then(|out| out.location.as_ref())
}

fn located_suffix(location: Option<&crate::Location>) -> String {
    location.map_or_else(String::new, |location| {
        format!(
            " at {}:{}:{}",
            location.file.display(),
            location.line,
            location.col
        )
    })
}
