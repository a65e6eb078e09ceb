//! dvc.yaml's top-level sections besides `stages` and `vars`: `metrics`
//! files (a stage's output declared as its metrics here), `plots` (each
//! drawn from one file, put on the stage that writes it), `params` files,
//! `artifacts` and `datasets`, and keys DVC does not have.

use crate::project_files::yaml::{Entry, Node, NodeValue};
use crate::project_files::ProjectPath;

use super::emit::{OutEntry, PipeStage, Yaml};
use super::read::Stop;
use super::report::Findings;

pub(crate) fn top_level(
    entries: &[Entry],
    stages: &mut [PipeStage],
    plots_as_key: bool,
    findings: &mut Findings,
) -> Result<(), Stop> {
    for entry in entries {
        match entry.key.as_str() {
            "stages" | "vars" => {}
            "params" => {
                for item in strings(&entry.value, "params")? {
                    let file = item.as_str().unwrap_or_default();
                    if ProjectPath::new(file).map_or(true, |file| file != "params.yaml") {
                        findings.not_carried(item.span, format!("params file `{file}`"), "pipe's params are params.yaml's and the pipeline's: `pipe diff` and `compare` show those; move what should be compared into params.yaml");
                    }
                }
            }
            "metrics" => {
                for item in strings(&entry.value, "metrics")? {
                    metrics_file(item, stages, findings);
                }
            }
            "plots" => plots(&entry.value, stages, plots_as_key, findings)?,
            "artifacts" => {
                for artifact in entry.value.as_map().unwrap_or_default() {
                    findings.not_carried(artifact.key_span, format!("artifact `{}`", artifact.key), "pipe has no model registry: the file stays an output of the stage that writes it, and `pipe checkout RUN` brings back what a run made");
                }
            }
            "datasets" => findings.not_carried(entry.key_span, "`datasets`", "pipe tracks files of the project: fetch a dataset in a stage of its own and depend on what it writes"),
            other => findings.not_carried(entry.key_span, format!("top-level `{other}`"), "not a section of dvc.yaml that pipe knows"),
        }
    }
    Ok(())
}

fn strings<'n>(node: &'n Node, field: &str) -> Result<Vec<&'n Node>, Stop> {
    let items: Vec<&Node> = match &node.value {
        NodeValue::Seq(items) => items.iter().collect(),
        _ => vec![node],
    };
    match items.iter().find(|item| item.as_str().is_none()) {
        Some(item) => Err(Stop::At(
            item.span,
            format!("top-level `{field}` must list files"),
        )),
        None => Ok(items),
    }
}

/// A top-level metrics file: the stage that writes it declares it as
/// its metrics (pipe's metrics belong to a stage).
fn metrics_file(item: &Node, stages: &mut [PipeStage], findings: &mut Findings) {
    let text = item.as_str().unwrap_or_default();
    let path = ProjectPath::new(text).map_or_else(|_| text.to_string(), String::from);
    let subject = format!("metrics file `{path}`");
    for stage in stages.iter_mut() {
        if stage.metrics.iter().any(|out| out.path == path) {
            return;
        }
        let Some(index) = stage.outs.iter().position(|out| out.path == path) else {
            continue;
        };
        if path.ends_with(".json") {
            let out = stage.outs.remove(index);
            stage.metrics.push(out);
            findings.changed(
                item.span,
                subject,
                format!(
                    "declared as `metrics:` of stage `{}`, where pipe's metrics belong",
                    stage.name
                ),
            );
        } else {
            findings.not_carried(
                item.span,
                subject,
                format!(
                    "pipe reads metrics from JSON files: it stays an output of stage `{}`",
                    stage.name
                ),
            );
        }
        return;
    }
    findings.not_carried(item.span, subject, "no stage of pipe.yaml writes this file: pipe's metrics are files a stage declares under `metrics:`");
}

/// Top-level plots: each one that draws from one file becomes a plot of
/// the stage writing that file.
fn plots(
    node: &Node,
    stages: &mut [PipeStage],
    plots_as_key: bool,
    findings: &mut Findings,
) -> Result<(), Stop> {
    let NodeValue::Seq(items) = &node.value else {
        return Err(Stop::At(
            node.span,
            "top-level `plots` must be a list".to_string(),
        ));
    };
    for item in items {
        let (id, span, definition) = match (&item.value, item.as_map()) {
            (NodeValue::Scalar(_), _) if item.as_str().is_some() => (
                item.as_str().unwrap_or_default().to_string(),
                item.span,
                None,
            ),
            (_, Some([entry])) => (
                entry.key.clone(),
                entry.key_span,
                Some(&entry.value).filter(|value| !value.is_null()),
            ),
            _ => {
                return Err(Stop::At(
                    item.span,
                    "an entry of top-level `plots` must be a path or `ID: {x, y, ...}`".to_string(),
                ))
            }
        };
        let Some((file, options)) = plot_of_one_file(&id, definition) else {
            findings.not_carried(span, format!("plot `{id}`"), "it draws from several files, and pipe draws one file a plot: write one plot per file");
            continue;
        };
        let file = ProjectPath::new(&file).map_or(file, String::from);
        let Some(stage) = stages.iter_mut().find(|stage| {
            stage
                .outs
                .iter()
                .chain(&stage.metrics)
                .any(|out| out.path == file)
        }) else {
            findings.not_carried(
                span,
                format!("plot `{id}`"),
                format!(
                    "no stage of pipe.yaml writes `{file}`: pipe draws a plot of a stage's output"
                ),
            );
            continue;
        };
        match stage.plots.iter_mut().find(|plot| plot.path == file) {
            Some(plot) => {
                for (key, value) in options {
                    plot.options.retain(|(existing, _)| existing != &key);
                    plot.options.push((key, value));
                }
            }
            None => stage.plots.push(OutEntry {
                path: file.clone(),
                options,
            }),
        }
        if plots_as_key {
            findings.changed(
                span,
                format!("plot `{id}`"),
                format!(
                    "a plot of `{file}` under `plots:` of stage `{}`, which writes it",
                    stage.name
                ),
            );
        } else {
            findings.not_carried(span, format!("plot `{id}`"), format!("this pipe has no `plots:` stage key: its settings are a comment at stage `{}`, which writes `{file}`", stage.name));
        }
    }
    Ok(())
}

/// The one file a plot definition draws from (its id when `x` and `y`
/// name no file) and its settings, or `None` when it draws from several.
fn plot_of_one_file(id: &str, definition: Option<&Node>) -> Option<(String, Vec<(String, Yaml)>)> {
    let Some(definition) = definition else {
        return Some((id.to_string(), Vec::new()));
    };
    let mut files: Vec<String> = Vec::new();
    let mut options = Vec::new();
    for entry in definition.as_map().unwrap_or_default() {
        let value = match (entry.key.as_str(), entry.value.as_map()) {
            ("x" | "y", Some(by_file)) => {
                for file in by_file {
                    if !files.contains(&file.key) {
                        files.push(file.key.clone());
                    }
                }
                match by_file {
                    [one] => Yaml::from_node(&one.value),
                    _ => return None,
                }
            }
            _ => Yaml::from_node(&entry.value),
        };
        options.push((entry.key.clone(), value));
    }
    match files.as_slice() {
        [] => Some((id.to_string(), options)),
        [file] => Some((file.clone(), options)),
        _ => None,
    }
}
