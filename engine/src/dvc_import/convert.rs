//! The conversion as a whole: `dvc.yaml` read, its variables loaded,
//! each stage planned (one stage, a matrix stage, or one per item) and
//! converted, the top-level sections carried onto the stages, and the
//! pipe.yaml text written with what was not carried noted.

use std::path::Path;

use crate::project_files::yaml::Node;
use crate::{EngineError, Result};

use super::emit::{self, entries_yaml, stage_name, PipeStage};
use super::iterate;
use super::read::{Reader, Stop};
use super::report::{Finding, FindingKind, Findings};
use super::stage::{Shared, StageConverter};
use super::top;
use super::vars::{stage_vars, Vars};

/// A converted project.
#[derive(Debug, Clone)]
pub struct Conversion {
    /// The pipe.yaml to write.
    pub text: String,
    /// What was not carried, or carried otherwise, in `dvc.yaml`'s order.
    pub findings: Vec<Finding>,
    /// The stages of pipe.yaml, as written (a matrix stage once).
    pub stages: usize,
}

/// What the header of every converted file says. Free of dates and
/// paths, so that converting the same project gives the same bytes.
const HEADER: [&str; 3] = [
    "Converted from dvc.yaml by `pipe init --from-dvc`: the same commands on the same files.",
    "dvc.lock is not read: the first `pipe run` runs each stage once and caches what it writes.",
    "What could not be carried was listed by the command, and is noted where it belongs below.",
];

/// Converts the `dvc.yaml` in `dir`. Writes nothing.
pub fn convert(dir: &Path) -> Result<Conversion> {
    let mut reader = Reader::new(dir);
    let mut findings = Findings::default();
    match convert_in(dir, &mut reader, &mut findings) {
        Ok((text, stages)) => Ok(Conversion {
            text,
            findings: findings.finish(&reader.sources),
            stages,
        }),
        Err(stop) => Err(stop.into_error(&reader.sources)),
    }
}

fn convert_in(
    dir: &Path,
    reader: &mut Reader,
    findings: &mut Findings,
) -> Result<(String, usize), Stop> {
    let Some(root) = reader.read_yaml(Path::new("dvc.yaml"))? else {
        let file = dir.join("dvc.yaml");
        let shown = match dir.as_os_str().is_empty() {
            true => ".".to_string(),
            false => dir.display().to_string(),
        };
        let message = match file.exists() {
            true => format!(
                "{} is empty: there are no stages to convert",
                file.display()
            ),
            false => format!("there is no dvc.yaml in {shown}"),
        };
        return Err(Stop::Engine(EngineError::usage(message, "run `pipe init --from-dvc` in a DVC project (the directory of its dvc.yaml), or name it: `pipe init --from-dvc DIR`")));
    };
    let start = reader.start_of_last().unwrap_or(root.span);
    let Some(entries) = root.as_map() else {
        return Err(Stop::At(
            root.span,
            format!(
                "dvc.yaml must be a mapping with `stages:`, found {}",
                root.describe()
            ),
        ));
    };
    let Some(stages_node) = root
        .get("stages")
        .filter(|node| node.as_map().is_some_and(|map| !map.is_empty()))
    else {
        return Err(Stop::At(
            start,
            "dvc.yaml has no `stages`: there is nothing for pipe to run".to_string(),
        ));
    };
    let vars = Vars::load(reader, root.get("vars"), findings)?;
    let shared = Shared {
        vars: &vars,
        plots_as_key: crate::pipefile::stage_keys().contains(&"plots"),
    };
    let mut stages: Vec<PipeStage> = Vec::new();
    for entry in stages_node.as_map().unwrap_or_default() {
        let first_finding = findings.len();
        let base = unique(stage_name(&entry.key), &stages);
        if base != entry.key {
            findings.changed(
                entry.key_span,
                format!("stage `{}`", entry.key),
                format!("named `{base}`: pipe's stage names use letters, digits, `_`, `.` and `-`"),
            );
        }
        if entry.value.as_map().is_none() {
            return Err(Stop::At(
                entry.value.span,
                format!("stage `{}` must be a mapping with `cmd:`", entry.key),
            ));
        }
        let plan = iterate::plan(&entry.key, &base, &entry.value, &vars, findings)?;
        for planned in &plan.stages {
            let wdir = plan.body.get("wdir").and_then(Node::as_str);
            let own_vars = stage_vars(reader, plan.body.get("vars"), wdir, findings)?;
            let converter = StageConverter {
                shared: &shared,
                dvc_name: &entry.key,
                planned,
                stage_vars: &own_vars,
            };
            let mut stage = converter.convert(plan.body, findings)?;
            stage.name = unique(stage.name, &stages);
            stages.push(stage);
        }
        // What was not carried is said at the stage too.
        let comments: Vec<String> = findings
            .since(first_finding)
            .into_iter()
            .filter(|(kind, ..)| *kind == FindingKind::NotCarried)
            .map(|(_, what, why)| format!("not carried from dvc.yaml: {what}: {why}"))
            .collect();
        if let Some(first) = stages
            .len()
            .checked_sub(plan.stages.len())
            .and_then(|index| stages.get_mut(index))
        {
            first.comments = comments;
        }
    }
    let first_top = findings.len();
    top::top_level(entries, &mut stages, shared.plots_as_key, findings)?;
    let mut header: Vec<String> = HEADER.iter().map(|line| line.to_string()).collect();
    for (kind, what, why) in findings.since(first_top) {
        if kind == FindingKind::NotCarried {
            header.push(format!("not carried from dvc.yaml: {what}: {why}"));
        }
    }
    let count = stages.len();
    let params = entries_yaml(&vars.pipe_params);
    // DVC draws plots with `dvc plots show`; here a run's report page
    // does, so a project with plots gets one.
    let report = stages
        .iter()
        .any(|stage| stage.plots_as_key && !stage.plots.is_empty())
        .then(|| {
            ["report", "pipe-report", "report-html"]
                .into_iter()
                .find(|name| stages.iter().all(|stage| stage.name != *name))
        })
        .flatten();
    let mut text = emit::pipe_yaml(&header, &params, &stages);
    if let Some(name) = report {
        text.push_str(&emit::report_stage(name));
    }
    Ok((text, count + usize::from(report.is_some())))
}

/// `name`, or `name_` (and so on) when a stage has it already.
fn unique(mut name: String, stages: &[PipeStage]) -> String {
    while stages.iter().any(|stage| stage.name == name) {
        name.push('_');
    }
    name
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
