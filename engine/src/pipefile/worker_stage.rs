//! Phase 3 for `uses:` stages: the catalog entry decides the outputs, and
//! `with:` is checked against it where it is written. `path` params become
//! dependencies here, before ownership and implicit edges are found.

use std::path::Path;

use pipe_protocol::ParamKind;
use serde_json::Value;

use super::collect::Diagnostics;
use super::declare::{Decl, DeclKind};
use super::expand::Expansion;
use super::params;
use super::paths;
use super::resolve::Resolver;
use super::suggest::did_you_mean;
use super::yaml::Node;
use crate::catalog::Catalog;
use crate::pipeline::{Dep, Out, Resources, WorkerStage};
use crate::project::stage_output_dir;
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
        names
            .into_iter()
            .map(|name| Out {
                name: name.to_string(),
                path: format!("{dir}/{name}"),
                location: location.clone(),
            })
            .collect()
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
            if value.contains('\0') {
                diagnostics.push(
                    Diagnostic::new(
                        "bad-path",
                        format!(
                            "stage `{}`: `{}` holds a NUL byte: `{}`",
                            expansion.name,
                            spec.name,
                            value.escape_debug()
                        ),
                    )
                    .at(place(&spec.name, false))
                    .with_hint(super::collect::NUL_HINT),
                );
                ok = false;
                continue;
            }
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
        if let Some(name) = &info.devices_param {
            let devices = resolved.get(name).and_then(Value::as_u64).unwrap_or(1);
            resources.ranks_per_node = u32::try_from(devices).unwrap_or(u32::MAX).max(1);
        }
        let nodes = u64::from(resources.nodes);
        match &info.nodes_param {
            Some(name) => {
                let asked = resolved.get(name).and_then(Value::as_u64);
                if asked != Some(nodes) {
                    let asked = asked.map_or_else(|| "unset".to_string(), |n| n.to_string());
                    let at = match (with_entry(name), decl.node.get("resources")) {
                        (None, Some(resources)) => self.location(resources.span),
                        _ => place(name, false),
                    };
                    diagnostics.push(
                        Diagnostic::new(
                            "nodes-mismatch",
                            format!(
                                "stage `{}` asks Slurm for {nodes} node(s) in `resources.nodes` but runs on `{name}: {asked}`",
                                expansion.name
                            ),
                        )
                        .at(at)
                        .with_hint(format!(
                            "give both the same number: `{name}: {nodes}`, or `resources.nodes: {asked}`"
                        )),
                    );
                    ok = false;
                }
            }
            None if nodes > 1 => {
                diagnostics.push(self.nodes_unsupported(
                    decl,
                    &expansion.name,
                    resources.nodes,
                    &format!("`{uses}`"),
                ));
                ok = false;
            }
            None => {}
        }
        ok.then(|| WorkerStage {
            uses: uses.clone(),
            version: *version,
            implementation: info.implementation,
            worker: entry.worker.clone(),
            launch: entry.launch.clone(),
            with: resolved,
            path_params,
            output_dir: stage_output_dir(self.pipeline, &expansion.name),
            reads_run: info.reads_run,
            roles: info.roles.clone(),
        })
    }

    /// The project-relative, normalised form of a `path` param, or `None`
    /// when it is outside the project. An absolute path inside it is
    /// accepted, as a user pasting one expects.
    pub(super) fn project_relative(&self, value: &str) -> Option<String> {
        let path = Path::new(value);
        let relative = if path.is_absolute() {
            path.strip_prefix(self.root).ok()?.to_str()?
        } else {
            value
        };
        paths::normalize(relative).ok()
    }
}
