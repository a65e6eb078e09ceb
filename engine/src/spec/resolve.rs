//! Phase 3: every expansion resolved: `${...}` interpolated (quoted for its
//! context), paths normalised, references to other stages' outputs turned
//! into dependencies, `env`, `resources` and the params a stage uses.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde_json::Value;

use super::collect::Diagnostics;
use super::declare::{is_valid_identifier, type_error, Decl, DeclKind};
use super::expand::Expansion;
use super::interp::{self, Piece, Reference};
use super::params;
use super::paths::{self, PathProblem};
use super::shell::QuoteTracker;
use super::source::{Sources, Span};
use super::stages::Context;
use super::suggest::{did_you_mean, hint_with_suggestion, name_list};
use super::yaml::{Entry, Node, NodeValue, Resolved};
use crate::catalog::CatalogEntry;
use crate::pipeline::matrix::{MatrixValue, StageMatrix};
use crate::pipeline::{Dep, Out, Resources, Stage, StageKind, StageOutRef};
use crate::project::stage_output_dir;
use crate::{Diagnostic, Result};

/// `${raw:params.flags}` splices a value into a `run` command unquoted.
pub(super) const RAW_PREFIX: &str = "raw:";

/// How values are put into the text of a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Interpolation {
    /// As they are (paths, `env`, `with`).
    Plain,
    /// Into a `run:` shell command: each value quoted as one word.
    Shell,
    /// Into one item of `run: [...]`, which no shell reads.
    Argv,
}

pub(super) struct Scope<'s> {
    pub(super) stage: &'s str,
    pub(super) field: &'static str,
    pub(super) combo: &'s StageMatrix,
    pub(super) has_matrix: bool,
    pub(super) deps: Option<&'s [Dep]>,
    pub(super) outs: Option<&'s [Out]>,
    pub(super) allow_stage_refs: bool,
}

#[derive(Default)]
pub(super) struct Effects {
    pub(super) params_used: BTreeMap<String, Value>,
    pub(super) stage_refs: Vec<(StageOutRef, String, Span)>,
}

pub(super) enum Evaluated<'n> {
    Param(&'n Node),
    Matrix(MatrixValue),
    Path(String),
}

pub(super) struct Failure {
    pub(super) message: String,
    pub(super) hint: String,
}

/// "`FIELD` of stage `STAGE`", where a reference is, for messages.
struct Place<'s>(&'s str, &'s str);

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` of stage `{}`", self.0, self.1)
    }
}

/// For a value that holds a NUL byte where the system cannot take one.
pub(super) const NUL_HINT: &str = "no path, command, argument or environment value can hold a NUL byte (`\\0` in a double-quoted YAML string, or in a param's value); remove it";

/// `what` holds a NUL byte, refused at `location` before anything runs:
/// one message wherever the spec finds one (stages, `cache:`, `executor:`).
pub(super) fn nul_byte(what: &str, location: Option<crate::Location>) -> Diagnostic {
    Diagnostic::new("nul-byte", format!("{what} holds a NUL byte"))
        .at(location)
        .with_hint(NUL_HINT)
}

pub(super) fn failure(message: impl Into<String>, hint: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        hint: hint.into(),
    }
}

/// The span of `reference` inside the scalar `node`, when the scalar's
/// text can be found character for character in the source.
pub(super) fn ref_span(node: &Node, reference: &Reference) -> Span {
    match node.as_scalar().and_then(|scalar| scalar.verbatim_col) {
        Some(col) => Span {
            col: col + reference.offset,
            len: reference.len,
            ..node.span
        },
        None => node.span,
    }
}

pub(super) struct Resolver<'a> {
    pub(super) sources: &'a Sources,
    pub(super) params: &'a Node,
    pub(super) root: &'a Path,
    pub(super) pipeline: &'a str,
    pub(super) decls: &'a [Decl<'a>],
    /// Per declaration: the catalog entry of a `uses:` stage, when the
    /// catalog has it (`None` for `run:` stages, and when the file has
    /// errors found before the catalog was needed).
    pub(super) catalog_entries: &'a [Option<&'a CatalogEntry>],
    pub(super) expansions: &'a [Expansion],
    pub(super) index_by_name: HashMap<&'a str, usize>,
    /// Expanded names of each matrix stage, for "refer to one expansion".
    pub(super) expansions_by_base: HashMap<&'a str, Vec<usize>>,
    pub(super) outputs_by_stage: Vec<Vec<Out>>,
    /// Every expansion looks up the same few params; mappings are
    /// searched linearly, so each path is looked up once.
    pub(super) param_cache: HashMap<String, Option<&'a Node>>,
    pub(super) default_resources: Option<&'a Node>,
    /// Every expansion of a matrix stage interpolates the same strings of
    /// the file: each is parsed once, by the address of its node (every
    /// node interpolated belongs to the file's tree or the params, which
    /// outlive the resolver, so an address names one node).
    pub(super) templates: HashMap<*const Node, std::rc::Rc<[Piece]>>,
}

impl<'a> Resolver<'a> {
    pub(super) fn new(
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
            default_resources: cx.default_resources,
            templates: HashMap::new(),
        }
    }

    pub(super) fn lookup_param(&mut self, path: &str) -> Option<&'a Node> {
        if let Some(found) = self.param_cache.get(path) {
            return *found;
        }
        let found = params::lookup(self.params, path);
        self.param_cache.insert(path.to_string(), found);
        found
    }

    pub(super) fn location(&self, span: Span) -> Option<crate::Location> {
        self.sources.location(span)
    }

    /// `what` (a command, an argument, an env value) holds a NUL byte,
    /// which `exec` cannot pass on: refused at `node`, before anything runs.
    pub(super) fn nul_byte(&self, what: String, node: &Node) -> Diagnostic {
        nul_byte(&what, self.location(node.span))
    }

    /// `outs` (mapping name -> path, list of paths, or one path) or
    /// `metrics` (list of paths or one path).
    pub(super) fn outputs(
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
        // Kept for the whole command: no spare capacity per stage.
        outs.shrink_to_fit();
        outs
    }

    /// The (name, path node) pairs of a `deps`/`outs`/`metrics` value.
    pub(super) fn path_entries<'n>(
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

    pub(super) fn output_path(
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

    pub(super) fn stage(
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
                            PathProblem::Nul => (
                                format!("dependency `{}` of stage `{}` holds a NUL byte", text.escape_debug(), decl.name),
                                NUL_HINT,
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
                if command.contains('\0') {
                    diagnostics
                        .push(self.nul_byte(format!("`run` of stage `{}`", decl.name), node));
                }
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
        let mut resources = self.resources(decl, &scope, &mut effects, diagnostics);
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
        let always_run = self.flag(
            decl,
            "always_run",
            "write `always_run: true` (without quotes; `yes` and `on` are strings in YAML 1.2)",
            diagnostics,
        );
        let local = self.flag(
            decl,
            "local",
            "write `local: true` to run the stage on this machine whatever the executor",
            diagnostics,
        );

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

        if worker_with.is_none() && resources.nodes > 1 {
            diagnostics.push(self.nodes_unsupported(
                decl,
                &expansion.name,
                resources.nodes,
                "a command",
            ));
        }
        let kind = match worker_with {
            Some(with) => self
                .worker_stage(
                    decl,
                    expansion,
                    with,
                    &mut deps,
                    &mut resources,
                    diagnostics,
                )
                .map_or(kind, |worker| StageKind::Worker(Box::new(worker))),
            None => kind,
        };

        // A run is an input no key can name before it happens.
        let always_run =
            always_run || matches!(&kind, StageKind::Worker(worker) if worker.reads_run);
        // Held for the whole command: no spare capacity per stage.
        deps.shrink_to_fit();
        let mut metrics = metrics;
        metrics.shrink_to_fit();
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
            local,
            location: self.location(decl.name_span),
        }
    }

    /// A `true`/`false` key of the stage, `false` when absent.
    fn flag(&self, decl: &Decl, key: &str, hint: &str, diagnostics: &mut Diagnostics) -> bool {
        let Some(node) = decl.node.get(key) else {
            return false;
        };
        match node.as_scalar().map(|scalar| scalar.resolve()) {
            Some(Resolved::Bool(value)) => value,
            _ => {
                diagnostics.push(type_error(
                    self.sources,
                    node,
                    format!("`{key}` of stage `{}` must be `true` or `false`", decl.name),
                    hint,
                ));
                false
            }
        }
    }

    pub(super) fn env(
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
                if text.contains('\0') {
                    diagnostics.push(self.nul_byte(
                        format!("env `{}` of stage `{}`", entry.key, decl.name),
                        value,
                    ));
                    continue;
                }
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
    pub(super) fn env_from_environment(
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

    pub(super) fn resources(
        &mut self,
        decl: &Decl,
        scope: &Scope,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Resources {
        let mut resources = Resources::default();
        let nodes = [
            (self.default_resources, "the pipeline's"),
            (decl.node.get("resources"), "stage"),
        ];
        for (node, whose) in nodes {
            let Some(node) = node else { continue };
            let owner = if whose == "stage" {
                format!("stage `{}`", decl.name)
            } else {
                whose.to_string()
            };
            let Some(entries) = node.as_map() else {
                // The top-level section is reported once, with the first stage.
                if whose == "stage" || self.reports_default_resources(decl) {
                    diagnostics.push(type_error(
                        self.sources,
                        node,
                        format!("`resources` of {owner} must be a mapping"),
                        "write e.g. `resources: { cpus: 4, gpus: 1, mem: 8G, time: 2h }`",
                    ));
                }
                continue;
            };
            for entry in entries {
                self.resource(&mut resources, entry, &owner, scope, effects, diagnostics);
            }
        }
        resources
    }

    /// The first stage reports what is wrong in the top-level `resources:`
    /// that every stage reads, so that it is said once.
    fn reports_default_resources(&self, decl: &Decl) -> bool {
        self.decls
            .first()
            .is_some_and(|first| first.name == decl.name)
    }

    fn resource(
        &mut self,
        resources: &mut Resources,
        entry: &Entry,
        owner: &str,
        scope: &Scope,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) {
        const KNOWN: [&str; 5] = ["cpus", "gpus", "mem", "time", "nodes"];
        if !KNOWN.contains(&entry.key.as_str()) {
            let suggestion = did_you_mean(&entry.key, KNOWN);
            diagnostics.push(
                Diagnostic::new(
                    "unknown-key",
                    format!("unknown resource `{}` in {owner}", entry.key),
                )
                .at(self.location(entry.key_span))
                .with_hint(hint_with_suggestion(
                    suggestion,
                    "known resources: cpus, gpus, mem (`8G`), time (`2h`, `30m`, `1-00:00:00`), nodes"
                        .to_string(),
                )),
            );
            return;
        }
        let value = if entry.value.as_str().is_some() {
            self.resolve_json(scope, &entry.value, effects, diagnostics)
        } else {
            params::to_json(&entry.value)
        };
        if value.is_null() && entry.value.as_str().is_some() {
            return; // reported while resolving
        }
        let text = match &value {
            Value::Number(number) => number.to_string(),
            Value::String(text) => text.trim().to_string(),
            _ => String::new(),
        };
        let (parsed, example) = match entry.key.as_str() {
            "mem" => (
                crate::executor::parse_memory_mb(&text).map(|mb| resources.mem_mb = Some(mb)),
                "a size such as `8G` or `512M` (a bare number is MiB)",
            ),
            "time" => (
                crate::executor::parse_time_limit_s(&text).map(|s| resources.time_s = Some(s)),
                "a time limit such as `30m`, `2h`, `1h30m` or `1-00:00:00` (a bare number is minutes)",
            ),
            "nodes" => (
                text.parse::<u32>()
                    .ok()
                    .filter(|count| *count >= 1)
                    .map(|count| resources.nodes = count),
                "a whole number of 1 or more",
            ),
            key => {
                let slot = if key == "cpus" { &mut resources.cpus } else { &mut resources.gpus };
                (
                    text.parse::<u32>().ok().map(|count| *slot = count),
                    "a whole number of 0 or more",
                )
            }
        };
        if parsed.is_none() {
            diagnostics.push(
                Diagnostic::new(
                    "bad-type",
                    format!(
                        "`resources.{}` of {owner} must be {example}, found `{}`",
                        entry.key,
                        json_text(&value)
                    ),
                )
                .at(self.location(entry.value.span))
                .with_hint(format!(
                    "write e.g. `{}: {}`, or `{}: ${{params.NAME}}` naming such a param",
                    entry.key,
                    match entry.key.as_str() {
                        "mem" => "8G",
                        "time" => "2h",
                        _ => "1",
                    },
                    entry.key
                )),
            );
        }
    }

    /// `resources.nodes` above 1 on a stage that runs as one process
    /// (`what`: a command, or a worker stage without a `nodes_param`),
    /// located at the stage's `resources`.
    pub(super) fn nodes_unsupported(
        &self,
        decl: &Decl,
        stage: &str,
        nodes: u32,
        what: &str,
    ) -> Diagnostic {
        let at = decl.node.get("resources").map_or_else(
            || self.location(decl.node.span),
            |node| self.location(node.span),
        );
        Diagnostic::new(
            "nodes-unsupported",
            format!("stage `{stage}` asks for {nodes} nodes, but {what} runs on one"),
        )
        .at(at)
        .with_hint("only stages whose replicas span nodes (`train/classifier` with `num_nodes`) take `resources.nodes`; drop it, or run one stage per node")
    }

    pub(super) fn params_list(
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
    pub(super) fn resolve_json(
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
    pub(super) fn resolve_string(
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
    pub(super) fn argv(
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
            if argv[before..].iter().any(|arg| arg.contains('\0')) {
                diagnostics.push(self.nul_byte(format!("`run` of stage `{}`", scope.stage), item));
                ok = false;
            }
        }
        ok.then_some(argv)
    }

    /// The words a reference stands for: a list param gives one per item,
    /// anything else one.
    pub(super) fn reference_words(
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
    pub(super) fn interpolate(
        &mut self,
        scope: &Scope,
        node: &Node,
        mode: Interpolation,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Option<String> {
        let scalar = node.as_scalar()?;
        let parsed = match self.templates.get(&std::ptr::from_ref(node)) {
            Some(pieces) => Ok(std::rc::Rc::clone(pieces)),
            None => interp::parse(&scalar.text).map(|pieces| {
                let pieces: std::rc::Rc<[Piece]> = pieces.into();
                self.templates
                    .insert(std::ptr::from_ref(node), std::rc::Rc::clone(&pieces));
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
        let mut text = String::with_capacity(scalar.text.len());
        let mut quotes = QuoteTracker::default();
        let mut ok = true;
        for piece in pieces.iter() {
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
                                    shell_words(&quotes, &words, reference, scope)
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

    pub(super) fn report(
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

    pub(super) fn evaluate(
        &mut self,
        scope: &Scope,
        reference: &Reference,
        span: Span,
        effects: &mut Effects,
    ) -> Result<Evaluated<'a>, Failure> {
        // Written out only into a message: evaluating is per stage.
        let place = Place(scope.field, scope.stage);
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
                    return Err(self.unknown_stage(stage_name, &place.to_string()));
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

    pub(super) fn unknown_stage(&self, name: &str, place: &str) -> Failure {
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

/// `values` quoted as shell words for where `quotes` stands, separated by
/// spaces; a value that no quoting keeps text there is refused at the
/// reference.
pub(super) fn shell_words(
    quotes: &QuoteTracker,
    values: &[String],
    reference: &Reference,
    scope: &Scope,
) -> Result<String, Failure> {
    if values.iter().any(|value| value.contains('\0')) {
        // The command then holds the NUL, and is refused as a whole
        // (`nul-byte`) like any other command that holds one.
        return Ok(values.join(" "));
    }
    quotes.quote(values).map_err(|refusal| {
        failure(
            format!(
                "`${{{}}}` in `run` of stage `{}` lands {}, where its value cannot be put as text: {}",
                reference.expr, scope.stage, refusal.place, refusal.why
            ),
            format!(
                "move the reference to a plain place (bare, or inside \"...\"), or pass the value through `env:` and write \"$NAME\" there; to splice the text as shell syntax on purpose write `${{raw:{}}}`",
                reference.expr
            ),
        )
    })
}

/// A param as it appears in a command: a scalar as written, a list as one
/// word per item.
pub(super) fn param_words(node: &Node, expr: &str) -> Result<Vec<String>, Failure> {
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

pub(super) fn json_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
