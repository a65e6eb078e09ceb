//! Phase 3 for `uses:` stages: the catalog entry decides the outputs, and
//! `with:` is checked against it where it is written. `path` params become
//! dependencies here, before ownership and implicit edges are found.

use std::path::Path;

use pipe_protocol::{ParamKind, StageInfo};
use serde_json::{Map, Value};

use super::declare::{Decl, DeclKind};
use super::expand::Expansion;
use super::params;
use super::resolve::Resolver;
use crate::catalog::Catalog;
use crate::pipeline::{Dep, Out, Resources, WorkerStage};
use crate::project::stage_output_dir;
use crate::project_files::collect::Diagnostics;
use crate::project_files::paths::ProjectPath;
use crate::project_files::source::Span;
use crate::project_files::yaml::{Entry, Node};
use crate::suggest::did_you_mean;
use crate::Diagnostic;

/// `uses:` names a stage no worker offers: say what exists, and for a
/// training stage how to get the worker that runs it.
pub(super) fn unknown_worker_stage(
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
    if crate::catalog::is_training_stage(uses) {
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

impl<'a> Resolver<'a> {
    /// A `uses:` stage's outputs: those its catalog entry names, placed by
    /// pipe in the stage's directory of the pipeline's namespace.
    pub(super) fn worker_outputs(
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
        let mut outs = Vec::with_capacity(names.len());
        for name in names {
            // The worker names its outputs; a name that is not one plain
            // file of the stage's directory would put it elsewhere (the
            // stored rule: normal, no `.git`, no control character).
            let written = format!("{dir}/{name}");
            match ProjectPath::stored(&written) {
                Ok(path) => outs.push(Out {
                    name: name.to_string(),
                    path,
                    location: location.clone(),
                    in_git: false,
                }),
                _ => diagnostics.push(
                    Diagnostic::new(
                        "bad-worker-output",
                        format!("`{uses}@{version}` names an output `{name}`, which is no plain file name"),
                    )
                    .at(location.clone())
                    .with_hint("the worker's description must name each output as a file of its stage's directory: e.g. `model`; fix or update the worker"),
                ),
            }
        }
        outs
    }

    /// Checks a `uses:` stage's `with:` against its catalog entry, at the
    /// place of each value: defaults and params the stage takes from the
    /// pipeline (`seed`) filled in, `path` params made project-relative and
    /// added as dependencies (edges to the stages that write them are
    /// found with every other dependency's), and the devices it asks for
    /// matched with `resources.gpus`. `None` when a diagnostic was recorded.
    pub(super) fn worker_stage(
        &mut self,
        decl: &Decl,
        expansion: &Expansion,
        with: Value,
        deps: &mut Vec<Dep>,
        resources: &mut Resources,
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
        self.fill_pipeline_params(info, &mut given);
        let mut check = WithCheck {
            resolver: self,
            decl,
            stage: &expansion.name,
            info,
            with_node: decl.node.get("with"),
            uses_span: *uses_span,
            diagnostics,
            ok: true,
        };
        let mut resolved = check.params(&given)?;
        let path_params = check.path_params(&mut resolved, deps);
        check.devices(&resolved, resources);
        check.nodes(&resolved, resources, uses);
        let ok = check.ok;
        let output_dir = stage_output_dir(self.pipeline, &expansion.name);
        let pages = self.worker_pages(decl, info, &output_dir, diagnostics);
        ok.then(|| WorkerStage {
            uses: uses.clone(),
            version: *version,
            implementation: info.implementation,
            worker: entry.worker.clone(),
            launch: entry.launch.clone(),
            with: resolved,
            path_params,
            output_dir,
            reads_run: info.reads_run,
            roles: info.roles.clone(),
            pages,
        })
    }

    /// The pages a person opens among the stage's outputs, as its worker's
    /// description declares them (`OutputSpec::page`, any worker's): each
    /// a file inside its output, or a located error naming the worker.
    fn worker_pages(
        &self,
        decl: &Decl,
        info: &StageInfo,
        output_dir: &str,
        diagnostics: &mut Diagnostics,
    ) -> Vec<ProjectPath> {
        let mut pages = Vec::new();
        for output in &info.outputs {
            let Some(page) = &output.page else {
                continue;
            };
            let inside = format!("{output_dir}/{}/", output.name);
            let written = format!("{inside}{page}");
            match ProjectPath::stored(&written) {
                Ok(path) if written.len() > inside.len() => pages.push(path),
                _ => diagnostics.push(
                    Diagnostic::new(
                        "bad-worker-page",
                        format!(
                            "`{}@{}` names a page `{page}` of its output `{}`, which is no file inside that output",
                            info.name, info.version, output.name
                        ),
                    )
                    .at(self.location(decl.name_span))
                    .with_hint("the worker's description must name a page as a relative path inside its output: e.g. `index.html`; fix or update the worker"),
                ),
            }
        }
        pages
    }

    /// The params the stage takes from the pipeline's (`seed`), where
    /// `with:` leaves them unset.
    fn fill_pipeline_params(&mut self, info: &StageInfo, given: &mut Map<String, Value>) {
        for spec in &info.params {
            let Some(source) = &spec.pipeline_param else {
                continue;
            };
            if given.get(&spec.name).is_some_and(|value| !value.is_null()) {
                continue;
            }
            if let Some(value) = self.lookup_param(source).filter(|node| !node.is_null()) {
                given.insert(spec.name.clone(), params::to_json(value));
            }
        }
    }

    /// The project-relative, normalised form of a `path` param, or `None`
    /// when it is outside the project. An absolute path inside it is
    /// accepted, as a user pasting one expects.
    pub(super) fn project_relative(&self, value: &str) -> Option<ProjectPath> {
        let path = Path::new(value);
        let relative = if path.is_absolute() {
            path.strip_prefix(self.root).ok()?.to_str()?
        } else {
            value
        };
        ProjectPath::new(relative).ok()
    }
}

/// What the steps of checking one `uses:` stage's `with:` share: where to
/// point at each param, and whether every step so far passed.
struct WithCheck<'c, 'a> {
    resolver: &'c Resolver<'a>,
    decl: &'c Decl<'c>,
    /// The expanded stage's name, for messages.
    stage: &'c str,
    info: &'c StageInfo,
    with_node: Option<&'c Node>,
    uses_span: Span,
    diagnostics: &'c mut Diagnostics,
    /// `false` once a diagnostic was recorded.
    ok: bool,
}

impl WithCheck<'_, '_> {
    fn with_entry(&self, param: &str) -> Option<&Entry> {
        self.with_node
            .and_then(Node::as_map)
            .and_then(|entries| entries.iter().find(|entry| entry.key == param))
    }

    /// Where to point at a param: its value, or its key when the name is
    /// the problem, or `with:` (then `uses:`) when it is not written.
    fn place(&self, param: &str, at_key: bool) -> Option<crate::Location> {
        let span = match self.with_entry(param) {
            Some(entry) if at_key => entry.key_span,
            Some(entry) => entry.value.span,
            None => self.with_node.map_or(self.uses_span, |node| node.span),
        };
        self.resolver.location(span)
    }

    /// `with:` with the catalog's defaults filled in, or `None` once each
    /// problem with it was reported (an unknown name with a suggestion).
    fn params(&mut self, given: &Map<String, Value>) -> Option<Map<String, Value>> {
        match pipe_protocol::check_params(self.info, given) {
            Ok(resolved) => Some(resolved),
            Err(problems) => {
                let names: Vec<&str> = self
                    .info
                    .params
                    .iter()
                    .map(|spec| spec.name.as_str())
                    .collect();
                for mut problem in problems {
                    let unknown = !names.contains(&problem.param.as_str());
                    if unknown {
                        if let Some(suggestion) =
                            did_you_mean(&problem.param, names.iter().copied())
                        {
                            problem.hint = format!("did you mean `{suggestion}`? {}", problem.hint);
                        }
                    }
                    let diagnostic = Diagnostic::new(
                        "bad-stage-param",
                        format!("stage `{}`: {}", self.stage, problem.message),
                    )
                    .at(self.place(&problem.param, unknown))
                    .with_hint(problem.hint);
                    self.diagnostics.push(diagnostic);
                }
                None
            }
        }
    }

    /// Each `path` param made project-relative in `resolved` and added to
    /// `deps`; the names of those params.
    fn path_params(
        &mut self,
        resolved: &mut Map<String, Value>,
        deps: &mut Vec<Dep>,
    ) -> Vec<String> {
        let mut path_params = Vec::new();
        let info = self.info;
        for spec in info
            .params
            .iter()
            .filter(|spec| spec.kind == ParamKind::Path)
        {
            let Some(value) = resolved.get(&spec.name).and_then(Value::as_str) else {
                continue;
            };
            if value.contains('\0') {
                let diagnostic = Diagnostic::new(
                    "bad-path",
                    format!(
                        "stage `{}`: `{}` holds a NUL byte: `{}`",
                        self.stage,
                        spec.name,
                        value.escape_debug()
                    ),
                )
                .at(self.place(&spec.name, false))
                .with_hint(crate::project_files::collect::NUL_HINT);
                self.diagnostics.push(diagnostic);
                self.ok = false;
                continue;
            }
            let Some(path) = self.resolver.project_relative(value) else {
                let diagnostic = Diagnostic::new(
                    "input-outside-project",
                    format!("stage `{}`: `{}` is outside the project: `{value}`", self.stage, spec.name),
                )
                .at(self.place(&spec.name, false))
                .with_hint("inputs are hashed inside the project; copy or link the file into it, or download it with a stage");
                self.diagnostics.push(diagnostic);
                self.ok = false;
                continue;
            };
            // The key holds the project-relative form, so moving the
            // project does not change it; the worker gets it absolute.
            resolved.insert(spec.name.clone(), Value::String(path.to_string()));
            path_params.push(spec.name.clone());
            if !deps.iter().any(|dep| dep.path == path) {
                deps.push(Dep {
                    name: format!("with.{}", spec.name),
                    path,
                    producer: None,
                    location: self.place(&spec.name, false),
                });
            }
        }
        path_params
    }

    /// Where a count that disagrees with `resources` is pointed at: the
    /// param when written, else `resources:`.
    fn count_place(&self, name: &str) -> Option<crate::Location> {
        match (self.with_entry(name), self.decl.node.get("resources")) {
            (None, Some(resources)) => self.resolver.location(resources.span),
            _ => self.place(name, false),
        }
    }

    /// The devices the stage runs on must be `resources.gpus`; they are
    /// the ranks it starts on each node.
    fn devices(&mut self, resolved: &Map<String, Value>, resources: &mut Resources) {
        if let Some(name) = &self.info.devices_param {
            let devices = resolved.get(name).and_then(Value::as_u64);
            let gpus = u64::from(resources.gpus);
            if gpus > 0 && devices != Some(gpus) {
                let devices = devices.map_or_else(|| "unset".to_string(), |n| n.to_string());
                let diagnostic = Diagnostic::new(
                    "devices-mismatch",
                    format!(
                        "stage `{}` asks for {gpus} GPU(s) in `resources.gpus` but runs on `{name}: {devices}`",
                        self.stage
                    ),
                )
                .at(self.count_place(name))
                .with_hint(format!(
                    "give both the same number: `{name}: {gpus}` (with `strategy: ddp` above 1), or `resources.gpus: {devices}`"
                ));
                self.diagnostics.push(diagnostic);
                self.ok = false;
            }
        }
        if let Some(name) = &self.info.devices_param {
            let devices = resolved.get(name).and_then(Value::as_u64).unwrap_or(1);
            resources.ranks_per_node = u32::try_from(devices).unwrap_or(u32::MAX).max(1);
        }
    }

    /// The nodes the stage runs on must be `resources.nodes`; a stage
    /// without a nodes param runs on one.
    fn nodes(&mut self, resolved: &Map<String, Value>, resources: &Resources, uses: &str) {
        let nodes = u64::from(resources.nodes);
        match &self.info.nodes_param {
            Some(name) => {
                let asked = resolved.get(name).and_then(Value::as_u64);
                if asked != Some(nodes) {
                    let asked = asked.map_or_else(|| "unset".to_string(), |n| n.to_string());
                    let diagnostic = Diagnostic::new(
                        "nodes-mismatch",
                        format!(
                            "stage `{}` asks Slurm for {nodes} node(s) in `resources.nodes` but runs on `{name}: {asked}`",
                            self.stage
                        ),
                    )
                    .at(self.count_place(name))
                    .with_hint(format!(
                        "give both the same number: `{name}: {nodes}`, or `resources.nodes: {asked}`"
                    ));
                    self.diagnostics.push(diagnostic);
                    self.ok = false;
                }
            }
            None if nodes > 1 => {
                let diagnostic = self.resolver.nodes_unsupported(
                    self.decl,
                    self.stage,
                    resources.nodes,
                    &format!("`{uses}`"),
                );
                self.diagnostics.push(diagnostic);
                self.ok = false;
            }
            None => {}
        }
    }
}
