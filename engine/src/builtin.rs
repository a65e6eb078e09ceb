//! Built-in (and third-party) stages in a pipeline: checks each `uses:`
//! stage against the workers' catalog and fills in what the catalog knows:
//! param defaults, the outputs under `.pipe/out/STAGE/`, the dependencies
//! named by `path` params, the implementation version for the key, and
//! which worker runs it.

use std::collections::HashMap;
use std::path::Path;

use pipe_protocol::{ParamKind, StageInfo};
use serde_json::Value;

use crate::spec::suggest::did_you_mean;
use crate::spec::{Dep, Out, Pipeline, StageKind};
use crate::worker::Catalog;
use crate::{Diagnostic, EngineError, Location, Result};

/// Where a built-in stage's outputs live, relative to the project root.
pub fn output_dir(stage: &str) -> String {
    format!(".pipe/out/{stage}")
}

pub fn has_builtin_stages(pipeline: &Pipeline) -> bool {
    pipeline
        .stages
        .iter()
        .any(|stage| matches!(stage.kind, StageKind::Builtin { .. }))
}

/// Whether a stage of the pipeline runs in the libtorch worker.
pub fn uses_training_stages(pipeline: &Pipeline) -> bool {
    pipeline.stages.iter().any(|stage| match &stage.kind {
        StageKind::Builtin { uses, .. } => crate::worker::TRAINING_STAGE_PREFIXES
            .iter()
            .any(|prefix| uses.starts_with(prefix)),
        _ => false,
    })
}

pub fn resolve(pipeline: &mut Pipeline, catalog: &Catalog) -> Result<()> {
    let source = std::fs::read_to_string(&pipeline.file).unwrap_or_default();
    let lines: Vec<&str> = source.lines().collect();
    let mut diagnostics = Vec::new();
    let mut outputs_of: HashMap<String, Vec<String>> = HashMap::new();

    for stage in &mut pipeline.stages {
        let StageKind::Builtin {
            uses,
            version,
            with,
            implementation,
            worker,
        } = &mut stage.kind
        else {
            continue;
        };
        let stage_line = stage
            .location
            .as_ref()
            .map(|location| location.line)
            .unwrap_or(0);
        let locate = |key: &str| {
            locate_key(&pipeline.file, &lines, stage_line, key).or_else(|| stage.location.clone())
        };
        let Some(entry) = catalog.get(uses, *version) else {
            diagnostics.push(unknown_stage(
                catalog,
                uses,
                *version,
                &stage.name,
                locate("uses"),
            ));
            continue;
        };
        let info = &entry.info;
        let mut given = match with {
            Value::Object(map) => map.clone(),
            _ => serde_json::Map::new(),
        };
        fill_from_pipeline_params(info, &pipeline.params, &mut given);
        let mut resolved = match pipe_protocol::check_params(info, &given) {
            Ok(resolved) => resolved,
            Err(problems) => {
                let names: Vec<&str> = info.params.iter().map(|spec| spec.name.as_str()).collect();
                for mut problem in problems {
                    if !names.contains(&problem.param.as_str()) {
                        if let Some(suggestion) =
                            did_you_mean(&problem.param, names.iter().copied())
                        {
                            problem.hint = format!("did you mean `{suggestion}`? {}", problem.hint);
                        }
                    }
                    let location = locate(&problem.param).or_else(|| locate("with"));
                    diagnostics.push(
                        Diagnostic::new(
                            "bad-stage-param",
                            format!("stage `{}`: {}", stage.name, problem.message),
                        )
                        .at(location)
                        .with_hint(problem.hint),
                    );
                }
                continue;
            }
        };
        for spec in info
            .params
            .iter()
            .filter(|spec| spec.kind == ParamKind::Path)
        {
            let Some(value) = resolved.get(&spec.name).and_then(Value::as_str) else {
                continue;
            };
            let path = match project_relative(&pipeline.root, value) {
                Some(path) => path,
                None => {
                    diagnostics.push(
                        Diagnostic::new(
                            "input-outside-project",
                            format!("stage `{}`: `{}` is outside the project: `{value}`", stage.name, spec.name),
                        )
                        .at(locate(&spec.name))
                        .with_hint("inputs are hashed inside the project; copy or link the file into it, or download it with a stage"),
                    );
                    continue;
                }
            };
            // The key holds the project-relative form, so moving the
            // project does not change it.
            resolved.insert(spec.name.clone(), Value::String(path.clone()));
            if !stage.deps.iter().any(|dep| dep.path == path) {
                stage.deps.push(Dep {
                    name: format!("with.{}", spec.name),
                    path,
                    producer: None,
                    location: locate(&spec.name),
                });
            }
        }
        if let Some(name) = &info.devices_param {
            let devices = resolved.get(name).and_then(Value::as_u64);
            let gpus = u64::from(stage.resources.gpus);
            if gpus > 0 && devices != Some(gpus) {
                let devices = devices.map_or_else(|| "unset".to_string(), |n| n.to_string());
                diagnostics.push(
                    Diagnostic::new(
                        "devices-mismatch",
                        format!(
                            "stage `{}` asks for {gpus} GPU(s) in `resources.gpus` but runs on `{name}: {devices}`",
                            stage.name
                        ),
                    )
                    .at(locate(name).or_else(|| locate("resources")))
                    .with_hint(format!(
                        "give both the same number: `{name}: {gpus}` (with `strategy: ddp` above 1), or `resources.gpus: {devices}`"
                    )),
                );
                continue;
            }
        }
        let declared_outside = stage.outs.iter().find(|out| {
            !out.path
                .starts_with(&format!("{}/", output_dir(&stage.name)))
        });
        if let Some(out) = declared_outside {
            diagnostics.push(
                Diagnostic::new("builtin-outs", format!("stage `{}` declares output `{}`, but `{}@{}` decides its outputs", stage.name, out.path, info.name, info.version))
                    .at(out.location.clone().or_else(|| locate("outs")))
                    .with_hint(format!(
                        "remove `outs:`; refer to its outputs as `${{stages.{}.outs.NAME}}` with NAME one of: {}",
                        stage.name,
                        output_names(info).join(", ")
                    )),
            );
            continue;
        }
        stage.outs = info
            .outputs
            .iter()
            .map(|output| Out {
                name: output.name.clone(),
                path: format!("{}/{}", output_dir(&stage.name), output.name),
                location: stage.location.clone(),
            })
            .collect();
        outputs_of.insert(stage.name.clone(), output_names(info));
        *with = Value::Object(resolved);
        *implementation = info.implementation;
        *worker = Some(entry.worker.clone());
    }

    // References to a built-in stage's outputs must name one it has.
    for stage in &pipeline.stages {
        for dep in &stage.deps {
            let Some(producer) = &dep.producer else {
                continue;
            };
            let Some(names) = outputs_of.get(&producer.stage) else {
                continue;
            };
            if !names.contains(&producer.out) {
                let suggestion = did_you_mean(&producer.out, names.iter().map(String::as_str));
                let mut hint = format!("its outputs: {}", names.join(", "));
                if let Some(suggestion) = suggestion {
                    hint = format!("did you mean `{suggestion}`? {hint}");
                }
                diagnostics.push(
                    Diagnostic::new(
                        "bad-reference",
                        format!(
                            "stage `{}` refers to output `{}` of `{}`, which has no such output",
                            stage.name, producer.out, producer.stage
                        ),
                    )
                    .at(dep.location.clone().or_else(|| stage.location.clone()))
                    .with_hint(hint),
                );
            }
        }
    }
    if diagnostics.is_empty() {
        Ok(())
    } else {
        Err(EngineError::Spec(diagnostics))
    }
}

fn output_names(info: &StageInfo) -> Vec<String> {
    info.outputs
        .iter()
        .map(|output| output.name.clone())
        .collect()
}

fn unknown_stage(
    catalog: &Catalog,
    uses: &str,
    version: u32,
    stage: &str,
    location: Option<Location>,
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
    if uses.starts_with("train/") || uses.starts_with("eval/") {
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

/// A project-relative, normalised form of `value`, or `None` outside the project.
fn project_relative(root: &Path, value: &str) -> Option<String> {
    let path = Path::new(value);
    let relative = if path.is_absolute() {
        path.strip_prefix(root).ok()?
    } else {
        path
    };
    let mut parts: Vec<&str> = Vec::new();
    for component in relative.components() {
        match component {
            std::path::Component::Normal(part) => parts.push(part.to_str()?),
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                parts.pop()?;
            }
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// The first line after the stage's own line, indented deeper than it,
/// whose key is `key`: where to point a message about that key.
/// Params that `with:` leaves unset but the stage takes from a pipeline
/// param (`seed`) get that value here, before the params are checked and
/// hashed: the worker then receives it as an ordinary param, so nothing it
/// reads escapes the key (`-S seed=7` makes the stage stale).
fn fill_from_pipeline_params(
    info: &StageInfo,
    pipeline_params: &Value,
    given: &mut serde_json::Map<String, Value>,
) {
    for spec in &info.params {
        let Some(source) = &spec.pipeline_param else {
            continue;
        };
        if given.get(&spec.name).is_some_and(|value| !value.is_null()) {
            continue;
        }
        let value = source
            .split('.')
            .try_fold(pipeline_params, |value, part| value.get(part));
        if let Some(value) = value.filter(|value| !value.is_null()) {
            given.insert(spec.name.clone(), value.clone());
        }
    }
}

fn locate_key(file: &Path, lines: &[&str], stage_line: usize, key: &str) -> Option<Location> {
    if stage_line == 0 {
        return None;
    }
    let stage_indent = lines.get(stage_line - 1).map(|line| indent_of(line))?;
    for (index, line) in lines.iter().enumerate().skip(stage_line) {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if indent_of(line) <= stage_indent && !trimmed.starts_with('-') {
            break;
        }
        // Matches `key:` at the start of a block line or after `{`/`,` in a flow mapping.
        for (byte, _) in line.match_indices(key) {
            let before = line[..byte].trim_end();
            let after = line[byte + key.len()..].trim_start();
            let starts_entry = before.is_empty()
                || before.ends_with('{')
                || before.ends_with(',')
                || before.ends_with("with:");
            if starts_entry && after.starts_with(':') {
                return Some(Location {
                    file: file.into(),
                    line: index + 1,
                    col: line[..byte].chars().count() + 1,
                    len: key.chars().count().max(1),
                    source_line: (*line).into(),
                });
            }
        }
    }
    None
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}
