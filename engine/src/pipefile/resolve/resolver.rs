//! The resolver of one expansion: its scope, what it found, and the
//! failures it reports; the phases live in the sibling files.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::Value;

use crate::catalog::CatalogEntry;
use crate::pipefile::context::Context;
use crate::pipefile::declare::{type_error, Decl, DeclKind};
use crate::pipefile::expand::Expansion;
use crate::pipefile::interp::Piece;
use crate::pipefile::override_sites::UnseenOverride;
use crate::pipefile::params;
use crate::pipeline::matrix::{MatrixValue, StageMatrix};
use crate::pipeline::{Dep, Out, Stage, StageKind, StageOutRef};
use crate::project_files::collect::Diagnostics;
use crate::project_files::collect::{nul_byte, NUL_HINT};
use crate::project_files::paths::{PathProblem, ProjectPath};
use crate::project_files::source::{Sources, Span};
use crate::project_files::yaml::{Node, Resolved};
use crate::Diagnostic;

/// A string node's address and where it is written (file, line,
/// column).
pub(crate) type TemplateKey = (
    *const Node,
    crate::project_files::source::FileId,
    usize,
    usize,
);

/// `${raw:params.flags}` splices a value into a `run` command as shell
/// text, plain or not.
pub(crate) const RAW_PREFIX: &str = "raw:";

/// How values are put into the text of a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interpolation<'v> {
    /// As they are (paths, `env`, `with`).
    Plain,
    /// Into a `run:` shell command: only plain values, as they are.
    /// `variables` are the names of the stage's `env:` entries, which no
    /// value may name.
    Shell { variables: &'v [String] },
    /// Into one item of `run: [...]`, which no shell reads.
    Argv,
}

pub(crate) struct Scope<'s> {
    pub(crate) stage: &'s str,
    pub(crate) field: &'static str,
    pub(crate) combo: &'s StageMatrix,
    pub(crate) has_matrix: bool,
    pub(crate) deps: Option<&'s [Dep]>,
    pub(crate) outs: Option<&'s [Out]>,
    pub(crate) allow_stage_refs: bool,
}

#[derive(Default)]
pub(crate) struct Effects {
    pub(crate) params_used: BTreeMap<String, Value>,
    /// The paths under the stage's `params:`.
    pub(crate) params_listed: Vec<String>,
    pub(crate) stage_refs: Vec<(StageOutRef, ProjectPath, Span)>,
}

pub(crate) enum Evaluated<'n> {
    Param(&'n Node),
    Matrix(MatrixValue),
    Path(String),
    /// `${stages.S@*.outs.O}`, or `${deps.NAME}` of a dependency that
    /// is one: a path per expansion.
    Paths(Vec<String>),
}

impl Evaluated<'_> {
    /// Whether the value is a list (of paths, or a param's items), each
    /// item its own word, path or dependency.
    pub(crate) fn is_list(&self) -> bool {
        match self {
            Evaluated::Paths(_) => true,
            Evaluated::Param(node) => {
                matches!(node.value, crate::project_files::yaml::NodeValue::Seq(_))
            }
            Evaluated::Matrix(_) | Evaluated::Path(_) => false,
        }
    }
}

/// The name of the dependency on `path` that a dependency `name` holding
/// a list stands for: `feats[results/S001.json]`. `${deps.feats}` gives
/// every such path.
pub(crate) fn list_item_name(name: &str, path: &str) -> String {
    format!("{name}[{path}]")
}

/// The list `name` is an item of (`feats` of `feats[results/S001.json]`),
/// if it is one.
pub(crate) fn list_of_item(name: &str) -> Option<&str> {
    name.strip_suffix(']')?
        .split_once('[')
        .map(|(list, _)| list)
}

/// A dependency's or output's name as written in the stage: an item's
/// list, else the name itself.
pub(crate) fn declared_name(name: &str) -> &str {
    list_of_item(name).unwrap_or(name)
}

/// The reference `text` is made of, whole (`"${deps.feats}"`), which keeps
/// its value's shape (a list, a number); `${raw:...}` is no such value.
pub(crate) fn whole_reference(text: &str) -> Option<crate::pipefile::interp::Reference> {
    match crate::pipefile::interp::parse(text).ok()?.as_slice() {
        [Piece::Ref(reference)] if !reference.expr.starts_with(RAW_PREFIX) => {
            Some(reference.clone())
        }
        _ => None,
    }
}

pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) hint: String,
    /// The reference fails only because of an error already reported
    /// (a dependency whose own path did not resolve): not reported again.
    pub(crate) already_reported: bool,
}

/// "`FIELD` of stage `STAGE`", where a reference is, for messages.
pub(super) struct Place<'s>(pub(super) &'s str, pub(super) &'s str);

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` of stage `{}`", self.0, self.1)
    }
}

pub(crate) fn failure(message: impl Into<String>, hint: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        hint: hint.into(),
        already_reported: false,
    }
}

pub(crate) struct Resolver<'a> {
    pub(crate) sources: &'a Sources,
    pub(crate) params: &'a Node,
    pub(crate) root: &'a Path,
    pub(crate) pipeline: &'a str,
    pub(crate) decls: &'a [Decl<'a>],
    /// Per declaration: the catalog entry of a `uses:` stage, when the
    /// catalog has it (`None` for `run:` stages, and when the file has
    /// errors found before the catalog was needed).
    pub(crate) catalog_entries: &'a [Option<&'a CatalogEntry>],
    pub(crate) expansions: &'a [Expansion],
    pub(crate) index_by_name: HashMap<&'a str, usize>,
    /// Expanded names of each matrix stage, for "refer to one expansion".
    pub(crate) expansions_by_base: HashMap<&'a str, Vec<usize>>,
    pub(crate) outputs_by_stage: Vec<Vec<Out>>,
    /// Every expansion looks up the same few params; mappings are
    /// searched linearly, so each path is looked up once.
    pub(crate) param_cache: HashMap<String, Option<&'a Node>>,
    pub(crate) default_resources: Option<&'a Node>,
    pub(crate) unseen_overrides: &'a [UnseenOverride],
    pub(crate) params_file: Option<crate::project_files::source::FileId>,
    /// `params.yaml` as a path of `deps`, when `-S` overrides a param it
    /// holds that it cannot carry: a command depending on it reads the
    /// old value.
    pub(crate) params_file_dep: Option<ProjectPath>,
    /// Every expansion of a matrix stage interpolates the same strings of
    /// the file: each is parsed once, by the address of its node and
    /// where it is written. The place is part of the key because not every
    /// node outlives the resolver: the path of `- path: {cache: false}`
    /// is a node made from the key while its entry is read, and the next
    /// one made may take the same address (a metrics file read as an
    /// output's path before); one made from the same place holds the same
    /// text.
    pub(crate) templates: HashMap<TemplateKey, std::rc::Rc<[Piece]>>,
    /// The named `deps` of the stage being resolved whose path was
    /// reported as an error: `${deps.NAME}` of one is not a second error.
    pub(crate) unresolved_deps: Vec<String>,
}

/// `params.yaml` relative to the project root, as a dependency names it,
/// when an override of a param it holds cannot be written into it.
fn params_file_dep(cx: &Context<'_>) -> Option<ProjectPath> {
    cx.unseen_overrides
        .iter()
        .any(UnseenOverride::held_by_params_file)
        .then_some(())?;
    let path = cx.sources.file(cx.params_file?).path()?;
    let absolute = crate::params_override::absolute(path);
    let relative = absolute.strip_prefix(cx.root).ok()?.to_str()?;
    ProjectPath::new(relative).ok()
}

impl<'s> Scope<'s> {
    /// The scope a stage's fields are resolved in, at its first, `deps`,
    /// when neither its dependencies nor its outputs are known yet.
    fn of_deps(decl: &'s Decl, expansion: &'s Expansion) -> Self {
        Scope {
            stage: decl.name,
            field: "deps",
            combo: &expansion.combo,
            has_matrix: decl.has_matrix,
            deps: None,
            outs: None,
            allow_stage_refs: true,
        }
    }
}

impl<'a> Resolver<'a> {
    pub(crate) fn new(
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
            unseen_overrides: cx.unseen_overrides,
            params_file: cx.params_file,
            params_file_dep: params_file_dep(cx),
            templates: HashMap::new(),
            unresolved_deps: Vec::new(),
        }
    }

    pub(crate) fn lookup_param(&mut self, path: &str) -> Option<&'a Node> {
        if let Some(found) = self.param_cache.get(path) {
            return *found;
        }
        let found = params::lookup(self.params, path);
        self.param_cache.insert(path.to_string(), found);
        found
    }

    pub(crate) fn location(&self, span: Span) -> Option<crate::Location> {
        self.sources.location(span)
    }

    /// `what` (a command, an argument, an env value) holds a NUL byte,
    /// which `exec` cannot pass on: refused at `node`, before anything runs.
    pub(crate) fn nul_byte(&self, what: String, node: &Node) -> Diagnostic {
        nul_byte(&what, self.location(node.span))
    }

    /// One expansion of a stage entry, each field resolved in its own
    /// step. `deps` come first: `${deps.NAME}` in the other fields reads
    /// them.
    pub(crate) fn stage(
        &mut self,
        decl: &Decl,
        expansion: &Expansion,
        index: usize,
        metrics: Vec<Out>,
        mut effects: Effects,
        diagnostics: &mut Diagnostics,
    ) -> Stage {
        let mut scope = Scope::of_deps(decl, expansion);
        let mut deps = self.declared_deps(decl, &scope, &mut effects, diagnostics);

        // `outs` move into the stage once every stage is built; other
        // stages' references read them until then.
        let all_outs: Vec<Out> = self.outputs_by_stage[index]
            .iter()
            .chain(&metrics)
            .cloned()
            .collect();
        scope.deps = Some(&deps);
        scope.outs = Some(&all_outs);

        let (kind, worker_with) = self.stage_kind(decl, &mut scope, &mut effects, diagnostics);
        scope.field = "env";
        let (env, secret_env) = self.env(decl, &scope, &mut effects, diagnostics);
        scope.field = "resources";
        let mut resources = self.resources(decl, &scope, &mut effects, diagnostics);
        self.params_list(decl, &mut effects, diagnostics);
        let desc = self.desc(decl, diagnostics);
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
        let makes_data = self.flag(
            decl,
            "makes_data",
            "write `makes_data: true` when other stages train or evaluate on what this stage writes",
            diagnostics,
        );
        self.add_referenced_deps(&mut deps, std::mem::take(&mut effects.stage_refs));

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
            // A command, or a `uses:` stage whose `with:` failed: one
            // node (`worker_stage` checks a `uses:` stage's own).
            None => {
                if resources.nodes > 1 {
                    diagnostics.push(self.nodes_unsupported(
                        decl,
                        &expansion.name,
                        resources.nodes,
                        "a command",
                    ));
                }
                kind
            }
        };

        // A stage that reads the run is keyed on the results it reads
        // (crate::run_input), not run every time.
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
            plots: Vec::new(),
            env,
            secret_env,
            params_used: effects.params_used,
            params_listed: effects.params_listed,
            resources,
            always_run,
            makes_data,
            local,
            location: self.location(decl.name_span),
            workspace: None,
        }
    }

    /// The stage's `deps:` entries, each interpolated and normalized. A
    /// named one that fails is remembered in `unresolved_deps`, so that
    /// `${deps.NAME}` of it is not a second error.
    fn declared_deps(
        &mut self,
        decl: &Decl,
        scope: &Scope,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Vec<Dep> {
        let mut deps: Vec<Dep> = Vec::new();
        self.unresolved_deps.clear();
        let Some(node) = decl.node.get("deps") else {
            return deps;
        };
        for (name, path_node) in self.path_entries(decl.name, "deps", node, true, diagnostics) {
            let mut dep_effects = Effects::default();
            let Some((texts, list)) =
                self.entry_texts(scope, path_node, &mut dep_effects, diagnostics)
            else {
                self.unresolved_deps.extend(name.map(str::to_string));
                continue;
            };
            effects.params_used.append(&mut dep_effects.params_used);
            for text in texts {
                let path = match ProjectPath::new(&text) {
                    Ok(path) => path,
                    Err(problem) => {
                        diagnostics.push(self.bad_dependency_path(decl, &text, problem, path_node));
                        self.unresolved_deps.extend(name.map(str::to_string));
                        continue;
                    }
                };
                let producer = dep_effects
                    .stage_refs
                    .iter()
                    .find(|(_, out_path, _)| *out_path == path)
                    .map(|(reference, _, _)| reference.clone());
                if self.params_file_dep.as_ref() == Some(&path) {
                    self.refuse_unseen_in_params_file(decl, path_node, diagnostics);
                }
                let name = match (name, list) {
                    (Some(name), true) => list_item_name(name, &path),
                    (Some(name), false) => name.to_string(),
                    (None, _) => path.to_string(),
                };
                if list && deps.iter().any(|dep| dep.name == name) {
                    continue;
                }
                deps.push(Dep {
                    name,
                    path,
                    producer,
                    location: self.location(path_node.span),
                });
            }
        }
        deps
    }

    /// The path (or, for a reference to a list, the paths) a `deps:`,
    /// `outs:` or `metrics:` entry names, and whether it names a list;
    /// `None` when it failed (reported).
    pub(crate) fn entry_texts(
        &mut self,
        scope: &Scope,
        node: &Node,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Option<(Vec<String>, bool)> {
        let Some(reference) = node.as_str().and_then(whole_reference) else {
            return self
                .resolve_string(scope, node, effects, diagnostics)
                .map(|text| (vec![text], false));
        };
        let span = crate::pipefile::interp::ref_span(node, &reference);
        let evaluated = match self.evaluate(scope, &reference, span, effects) {
            Ok(evaluated) => evaluated,
            Err(failure) => {
                self.report(node, &reference, failure, diagnostics);
                return None;
            }
        };
        let list = evaluated.is_list();
        match self.words_of(evaluated, &reference) {
            Ok(words) => Some((words, list)),
            Err(failure) => {
                self.report(node, &reference, failure, diagnostics);
                None
            }
        }
    }

    fn bad_dependency_path(
        &self,
        decl: &Decl,
        text: &str,
        problem: PathProblem,
        path_node: &Node,
    ) -> Diagnostic {
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
        Diagnostic::new("bad-path", message)
            .at(self.location(path_node.span))
            .with_hint(hint)
    }

    /// What the stage runs, from `run:` or `uses:`. A `uses:` stage is
    /// resolved against its catalog entry only once its dependencies are
    /// all known (by `stage`); until then it is its `with:`, returned
    /// beside a stand-in kind (`None` when `with:` failed and was reported).
    fn stage_kind(
        &mut self,
        decl: &Decl,
        scope: &mut Scope,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> (StageKind, Option<Value>) {
        match &decl.kind {
            DeclKind::Command(node) => {
                scope.field = "run";
                let command = self.shell_command(decl, scope, node, effects, diagnostics);
                (StageKind::Command { command }, None)
            }
            DeclKind::Argv(node) => {
                scope.field = "run";
                let argv = self.argv_command(decl, scope, node, effects, diagnostics);
                (StageKind::Argv { argv }, None)
            }
            DeclKind::Worker { .. } => {
                scope.field = "with";
                let with = self.worker_with(decl, scope, effects, diagnostics);
                // Stands in only until `worker_stage`; when that fails, a
                // diagnostic is recorded and the pipeline is never returned.
                (StageKind::Argv { argv: Vec::new() }, with)
            }
        }
    }

    /// `run: "a shell command"`, each value plain.
    fn shell_command(
        &mut self,
        decl: &Decl,
        scope: &Scope,
        node: &Node,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> String {
        let variables: Vec<String> = decl
            .node
            .get("env")
            .and_then(Node::as_map)
            .map(|entries| entries.iter().map(|entry| entry.key.clone()).collect())
            .unwrap_or_default();
        let mode = Interpolation::Shell {
            variables: &variables,
        };
        let command = self
            .interpolate(scope, node, mode, effects, diagnostics)
            .unwrap_or_default();
        if command.contains('\0') {
            diagnostics.push(self.nul_byte(format!("`run` of stage `{}`", decl.name), node));
        }
        command
    }

    /// `run: [program, arg, ...]`, which must keep a program once
    /// interpolated.
    fn argv_command(
        &mut self,
        decl: &Decl,
        scope: &Scope,
        node: &Node,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Vec<String> {
        let argv = self.argv(scope, node, effects, diagnostics);
        if argv.as_ref().is_some_and(Vec::is_empty) {
            diagnostics.push(
                Diagnostic::new("bad-type", format!("`run` of stage `{}` has no program: its list is empty once interpolated", decl.name))
                    .at(self.location(node.span))
                    .with_hint("the first item names the program to run; a reference to an empty list gives no arguments"),
            );
        }
        argv.unwrap_or_default()
    }

    /// The `with:` of a `uses:` stage as JSON; `None` when part of it
    /// failed to resolve, which was reported: checking what is left of it
    /// would only add a second message.
    fn worker_with(
        &mut self,
        decl: &Decl,
        scope: &Scope,
        effects: &mut Effects,
        diagnostics: &mut Diagnostics,
    ) -> Option<Value> {
        let reported = diagnostics.reported();
        let with = match decl.node.get("with") {
            None => Value::Object(serde_json::Map::new()),
            Some(node) if node.is_null() => Value::Object(serde_json::Map::new()),
            Some(node) if node.as_map().is_some() => {
                self.resolve_json(scope, node, effects, diagnostics)
            }
            Some(node) => {
                diagnostics.push(type_error(
                    self.sources,
                    node,
                    format!(
                        "`with` of stage `{}` must be a mapping of the built-in stage's params",
                        decl.name
                    ),
                    "write e.g.\nwith:\n  url: https://example.org/data.tar.gz",
                ));
                Value::Null
            }
        };
        (diagnostics.reported() == reported).then_some(with)
    }

    /// `desc:`, a one-line text.
    fn desc(&self, decl: &Decl, diagnostics: &mut Diagnostics) -> Option<String> {
        decl.node
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
            })
    }

    /// References to other stages' outputs outside `deps:` are
    /// dependencies too, named by the reference text.
    fn add_referenced_deps(
        &self,
        deps: &mut Vec<Dep>,
        stage_refs: Vec<(StageOutRef, ProjectPath, Span)>,
    ) {
        for (reference, path, span) in stage_refs {
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
    }

    /// A `true`/`false` key of the stage, `false` when absent.
    pub(super) fn flag(
        &self,
        decl: &Decl,
        key: &str,
        hint: &str,
        diagnostics: &mut Diagnostics,
    ) -> bool {
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
}

/// A value as text where a string is wanted: a string as itself, anything
/// else as JSON.
pub(crate) fn json_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}
