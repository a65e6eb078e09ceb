//! A stage's `resources` (and the top-level default): CPUs, GPUs,
//! memory, time and nodes.

use super::resolver::*;
use crate::pipefile::declare::{type_error, Decl};
use crate::pipefile::params;
use crate::pipeline::Resources;
use crate::project_files::collect::Diagnostics;
use crate::project_files::yaml::Entry;
use crate::suggest::{did_you_mean, hint_with_suggestion};
use crate::Diagnostic;
use serde_json::Value;

impl<'a> Resolver<'a> {
    pub(crate) fn resources(
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
                crate::pipeline::parse_memory_mb(&text).map(|mb| resources.mem_mb = Some(mb)),
                "a size such as `8G` or `512M` (a bare number is MiB)",
            ),
            "time" => (
                crate::pipeline::parse_time_limit_s(&text).map(|s| resources.time_s = Some(s)),
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
    pub(crate) fn nodes_unsupported(
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
}
