//! A sweep as one matrix run: the pipelines its combinations load are
//! merged into one, in which a stage that is the same in every combination
//! (the download, the split when only the learning rate is swept) is one
//! stage, and a stage that differs is one expansion per distinct version,
//! named like a declared matrix's (`train@lr=1e-4`), with the swept
//! params it depends on as its matrix. The scheduler then runs the
//! expansions side by side under `-j`, or as Slurm jobs, and `pipe
//! compare` shows them as the rows of one run.
//!
//! What depends on what is read off the resolved stages, not guessed from
//! the file: a stage differs between two combinations when anything its
//! key covers differs (its command, `with:`, params, deps), after its
//! inputs are renamed to the expansions it reads in that combination.
//!
//! The combinations cannot share one work tree when two versions of a
//! stage would write the same path (a `run:` stage whose output path does
//! not name the swept param), or when commands read their params from
//! `params.yaml`, which has one value at a time: then each combination's
//! command stages run in a work tree of its own (`Pipeline::workspaces`),
//! still one run, what they share still run once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;

use super::combination::Combination;
use crate::dag::Dag;
use crate::overrides::ParamOverride;
use crate::pipefile::Loaded;
use crate::pipeline::matrix::{MatrixAxis, MatrixValue, StageMatrix};
use crate::pipeline::{Pipeline, Stage, StageKind, Workspace};
use crate::project::stage_output_dir;
use crate::project_files::ProjectPath;

/// One swept param: its dotted path, the key it has in stage names, and
/// its values as written.
struct Axis {
    path: String,
    key: String,
    texts: Vec<String>,
}

/// The merged pipeline, or why the combinations must run apart.
pub(super) fn merge(combinations: &[Combination]) -> Result<Loaded, String> {
    let first = &combinations.first().ok_or("no combination")?.loaded;
    let axes = axes_of(combinations);
    if axes.is_empty() {
        return Err("nothing is swept".into());
    }
    if let Some(text) = axes
        .iter()
        .flat_map(|axis| &axis.texts)
        .find(|text| !name_safe(text))
    {
        return Err(format!(
            "the value `{}` cannot be part of a stage name",
            pipe_protocol::excerpt(text)
        ));
    }
    let positions: Vec<Vec<usize>> = combinations
        .iter()
        .map(|combination| {
            axes.iter()
                .map(|axis| {
                    let value = value_of(&combination.swept, &axis.path).unwrap_or_default();
                    axis.texts
                        .iter()
                        .position(|text| *text == value)
                        .unwrap_or(0)
                })
                .collect()
        })
        .collect();
    let names: Vec<&str> = first
        .pipeline
        .stages
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    let mut params_files_differ = false;
    for combination in combinations {
        let pipeline = &combination.loaded.pipeline;
        if pipeline
            .stages
            .iter()
            .map(|s| s.name.as_str())
            .ne(names.iter().copied())
        {
            return Err("the swept values change which stages the pipeline has".into());
        }
        params_files_differ |= pipeline.params_file != first.pipeline.params_file;
    }
    // One work tree where it can hold every combination; else one each:
    // where commands read the swept values from params.yaml by themselves
    // (it holds one value at a time), or two versions write one path.
    let merged = match params_files_differ {
        true => Err(String::new()),
        false => merged_stages(combinations, &axes, &positions, names.len(), false),
    };
    let (stages, workspaces) = match merged {
        Ok(stages) => (stages, Vec::new()),
        Err(_) => {
            let stages = merged_stages(combinations, &axes, &positions, names.len(), true)?;
            let workspaces = combinations
                .iter()
                .map(|combination| Workspace {
                    swept: combination.swept_shown(),
                    params_file: combination.loaded.pipeline.params_file.clone(),
                })
                .collect();
            (stages, workspaces)
        }
    };
    let in_workspaces = !workspaces.is_empty();
    let pipeline = Pipeline {
        stages,
        params: swept_params(combinations, &axes),
        // Each tree's params.yaml is written when it is made; the
        // project's is never touched.
        params_file: if in_workspaces {
            None
        } else {
            first.pipeline.params_file.clone()
        },
        workspaces,
        ..first.pipeline.clone()
    };
    let dag = Dag::build(&pipeline).map_err(|e| e.to_string())?;
    Ok(Loaded {
        pipeline,
        dag,
        warnings: first.warnings.clone(),
    })
}

/// Every stage of the combinations merged, in the first one's order;
/// `workspaces`: each command stage runs in the work tree of the first
/// combination that has its version (`Stage::workspace`), so versions
/// never share a path.
fn merged_stages(
    combinations: &[Combination],
    axes: &[Axis],
    positions: &[Vec<usize>],
    stages: usize,
    workspaces: bool,
) -> Result<Vec<Stage>, String> {
    let mut merger = Merger {
        combinations,
        axes,
        positions,
        renames: vec![Vec::new(); combinations.len()],
        expanded: vec![Vec::new(); stages],
        workspaces,
    };
    for &index in &combinations[0].loaded.dag.order {
        merger.stage(index)?;
    }
    Ok(merger.expanded.into_iter().flatten().collect())
}

/// The swept params, each with a key for stage names: the shortest
/// dotted suffix of its path that no other swept param shares (`lr` for
/// `train.lr`).
fn axes_of(combinations: &[Combination]) -> Vec<Axis> {
    let mut axes: Vec<Axis> = Vec::new();
    for combination in combinations {
        for swept in &combination.swept {
            let path = swept.path.dotted();
            let text = swept.values_shown();
            match axes.iter_mut().find(|axis| axis.path == path) {
                Some(axis) if !axis.texts.contains(&text) => axis.texts.push(text),
                Some(_) => {}
                None => axes.push(Axis {
                    path,
                    key: String::new(),
                    texts: vec![text],
                }),
            }
        }
    }
    let paths: Vec<String> = axes.iter().map(|axis| axis.path.clone()).collect();
    for axis in &mut axes {
        let segments: Vec<&str> = axis.path.split('.').collect();
        axis.key = (1..=segments.len())
            .map(|take| segments[segments.len() - take..].join("."))
            .find(|suffix| {
                paths
                    .iter()
                    .filter(|path| *path == suffix || path.ends_with(&format!(".{suffix}")))
                    .count()
                    == 1
            })
            .unwrap_or_else(|| axis.path.clone());
    }
    axes
}

fn value_of(swept: &[ParamOverride], path: &str) -> Option<String> {
    swept
        .iter()
        .find(|setting| setting.path.dotted() == path)
        .map(ParamOverride::values_shown)
}

/// As a declared matrix's values: they name stages and output directories.
fn name_safe(text: &str) -> bool {
    !text.is_empty()
        && !text
            .chars()
            .any(|ch| ch.is_whitespace() || ch.is_control() || ",=@${}/\\\"'`".contains(ch))
}

/// The pipeline's params, each swept one the list of its values: the
/// record of a sweep run says every value the run used.
fn swept_params(combinations: &[Combination], axes: &[Axis]) -> Value {
    let mut params = combinations[0].loaded.pipeline.params.clone();
    for axis in axes {
        let mut values: Vec<Value> = Vec::new();
        for combination in combinations {
            let value = lookup(&combination.loaded.pipeline.params, &axis.path)
                .cloned()
                .unwrap_or(Value::Null);
            if !values.contains(&value) {
                values.push(value);
            }
        }
        if let Some(slot) = lookup_mut(&mut params, &axis.path) {
            *slot = Value::Array(values);
        }
    }
    params
}

fn lookup<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(value, |value, segment| value.get(segment))
}

fn lookup_mut<'a>(value: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    path.split('.')
        .try_fold(value, |value, segment| value.get_mut(segment))
}

/// A path prefix (an expansion's output directory) and what it becomes.
#[derive(Clone)]
struct Rename {
    stage: String,
    new_stage: String,
    dir: Option<(String, String)>,
}

struct Merger<'a> {
    combinations: &'a [Combination],
    axes: &'a [Axis],
    positions: &'a [Vec<usize>],
    /// Per combination: the expansions of the stages merged so far that
    /// it reads, as renames of their names and output directories.
    renames: Vec<Vec<Rename>>,
    /// Per stage of the pipeline, its stage or expansions in the merged one.
    expanded: Vec<Vec<Stage>>,
    /// Each combination runs in a work tree of its own.
    workspaces: bool,
}

impl Merger<'_> {
    /// Merges stage `index` of every combination into one stage or one
    /// expansion per distinct version of it.
    fn stage(&mut self, index: usize) -> Result<(), String> {
        let versions: Vec<Stage> = self
            .combinations
            .iter()
            .zip(&self.renames)
            .map(|(combination, renames)| {
                renamed(&combination.loaded.pipeline.stages[index], renames)
            })
            .collect();
        let prints: Vec<String> = versions
            .iter()
            .zip(self.combinations)
            .map(|(stage, combination)| {
                let mut print = fingerprint(stage);
                // In its own tree, a stage that hashes params.yaml as a
                // dependency reads that combination's file.
                if let (true, Some(edits)) =
                    (self.workspaces, &combination.loaded.pipeline.params_file)
                {
                    if depends_on_file(stage, &combination.loaded.pipeline.root, &edits.file) {
                        print.push_str(&format!("{:?}", edits.edits));
                    }
                }
                print
            })
            .collect();
        let mut distinct: Vec<usize> = Vec::new();
        let version_of: Vec<usize> = prints
            .iter()
            .enumerate()
            .map(|(combination, print)| {
                match distinct.iter().position(|&first| prints[first] == *print) {
                    Some(version) => version,
                    None => {
                        distinct.push(combination);
                        distinct.len() - 1
                    }
                }
            })
            .collect();
        if distinct.len() == 1 {
            let mut stage = versions[0].clone();
            stage.workspace = self.workspace_of(&stage, 0);
            self.expanded[index] = vec![stage];
            return Ok(());
        }
        let relevant = self.relevant_axes(&version_of);
        let stage_axes = self.stage_axes(&versions[0], &relevant);
        let mut expansions: Vec<Stage> = Vec::with_capacity(distinct.len());
        let mut names_of_version: Vec<String> = Vec::with_capacity(distinct.len());
        for (version, &combination) in distinct.iter().enumerate() {
            let mut stage = versions[combination].clone();
            let original = stage.name.clone();
            let mut matrix_positions: Vec<u32> = stage_positions(&stage.matrix, &stage_axes);
            let mut name = stage.name.clone();
            for (count, &axis) in relevant.iter().enumerate() {
                let position = self.positions[combination][axis];
                name.push(if count == 0 && stage.matrix.is_empty() {
                    '@'
                } else {
                    ','
                });
                name.push_str(&self.key_in(&stage.matrix, axis));
                name.push('=');
                name.push_str(&self.axes[axis].texts[position]);
                matrix_positions.push(position as u32);
            }
            if names_of_version.contains(&name) {
                return Err(format!(
                    "stage `{original}` differs in ways the swept values do not name"
                ));
            }
            stage.matrix = StageMatrix::new(Arc::clone(&stage_axes), matrix_positions.into());
            let dir = match &mut stage.kind {
                StageKind::Worker(worker) => {
                    let new_dir = stage_output_dir(&self.pipeline_name(), &name);
                    let old_dir = std::mem::replace(&mut worker.output_dir, new_dir.clone());
                    for out in stage.outs.iter_mut().chain(stage.metrics.iter_mut()) {
                        out.path = moved_path(&out.path, &old_dir, &new_dir);
                    }
                    Some((old_dir, new_dir))
                }
                StageKind::Command { .. } | StageKind::Argv { .. } => None,
            };
            stage.name = name.clone();
            stage.workspace = self.workspace_of(&stage, combination);
            for (renames, _) in self
                .renames
                .iter_mut()
                .zip(&version_of)
                .filter(|(_, &of)| of == version)
            {
                renames.push(Rename {
                    stage: original.clone(),
                    new_stage: name.clone(),
                    dir: dir.clone(),
                });
            }
            names_of_version.push(name);
            expansions.push(stage);
        }
        if !self.workspaces {
            check_apart(&expansions)?;
        }
        self.expanded[index] = expansions;
        Ok(())
    }

    /// Where a command stage of `combination` runs: that combination's
    /// work tree, when each has one. A built-in stage writes under
    /// `.pipe/out/`, one directory per version, and reads no params.yaml.
    fn workspace_of(&self, stage: &Stage, combination: usize) -> Option<u32> {
        let command = matches!(
            stage.kind,
            StageKind::Command { .. } | StageKind::Argv { .. }
        );
        (self.workspaces && command).then_some(combination as u32)
    }

    fn pipeline_name(&self) -> String {
        self.combinations[0].loaded.pipeline.name.clone()
    }

    /// The axes a stage's version depends on: those where two
    /// combinations that differ in that axis alone have different versions.
    fn relevant_axes(&self, version_of: &[usize]) -> Vec<usize> {
        let mut by_positions: HashMap<&[usize], usize> = HashMap::new();
        for (combination, positions) in self.positions.iter().enumerate() {
            by_positions.insert(positions.as_slice(), combination);
        }
        (0..self.axes.len())
            .filter(|&axis| {
                self.positions
                    .iter()
                    .enumerate()
                    .any(|(combination, positions)| {
                        (0..self.axes[axis].texts.len()).any(|other| {
                            let mut neighbour = positions.clone();
                            neighbour[axis] = other;
                            by_positions
                                .get(neighbour.as_slice())
                                .is_some_and(|&next| version_of[next] != version_of[combination])
                        })
                    })
            })
            .collect()
    }

    /// The matrix axes of a stage's expansions: those it declares, then
    /// the swept ones it depends on.
    fn stage_axes(&self, stage: &Stage, relevant: &[usize]) -> Arc<[MatrixAxis]> {
        let mut axes: Vec<MatrixAxis> = stage
            .matrix
            .entries()
            .enumerate()
            // Only positions are read from these axes (`stage_positions`),
            // never expanded again: each may be its own group.
            .map(|(index, (key, _))| MatrixAxis {
                key: key.to_string(),
                values: stage.matrix.values_of(key).to_vec(),
                group: index as u16,
            })
            .collect();
        for &axis in relevant {
            let swept = &self.axes[axis];
            axes.push(MatrixAxis {
                key: self.key_in(&stage.matrix, axis),
                values: swept
                    .texts
                    .iter()
                    .map(|text| MatrixValue {
                        json: self.value_json(axis, text),
                        text: text.clone(),
                    })
                    .collect(),
                group: axes.len() as u16,
            });
        }
        axes.into()
    }

    /// The key of swept axis `axis` in a stage with `matrix`: its short
    /// key, or its whole path where the stage's own matrix has that key
    /// (a declared `seed` and a swept `train.seed`), `params.` in front
    /// when that is the same.
    fn key_in(&self, matrix: &StageMatrix, axis: usize) -> String {
        let swept = &self.axes[axis];
        if !matrix.keys().any(|key| key == swept.key) {
            swept.key.clone()
        } else if swept.path != swept.key {
            swept.path.clone()
        } else {
            format!("params.{}", swept.path)
        }
    }

    /// The value `text` of swept axis `axis` loaded as: the param's value
    /// in a combination that has it.
    fn value_json(&self, axis: usize, text: &str) -> Value {
        let swept = &self.axes[axis];
        let position = swept.texts.iter().position(|known| known == text);
        self.positions
            .iter()
            .position(|positions| Some(positions[axis]) == position)
            .and_then(|combination| {
                lookup(
                    &self.combinations[combination].loaded.pipeline.params,
                    &swept.path,
                )
                .cloned()
            })
            .unwrap_or_else(|| Value::String(text.to_string()))
    }
}

/// The positions of a stage's declared matrix values on `axes` (whose
/// first axes are its declared ones).
fn stage_positions(matrix: &StageMatrix, axes: &[MatrixAxis]) -> Vec<u32> {
    matrix
        .entries()
        .map(|(key, value)| {
            axes.iter()
                .find(|axis| axis.key == key)
                .and_then(|axis| {
                    axis.values
                        .iter()
                        .position(|known| known.text == value.text)
                })
                .unwrap_or(0) as u32
        })
        .collect()
}

/// `path` with the directory `old` replaced by `new`.
fn moved(path: &str, old: &str, new: &str) -> String {
    match path.strip_prefix(old) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("{new}{rest}"),
        _ => path.to_string(),
    }
}

/// A dependency's or output's path moved as [`moved`] moves text: `old`
/// and `new` are stage output directories of pipe's layout, and the rest
/// was normal already, so the path stays one.
fn moved_path(path: &ProjectPath, old: &str, new: &str) -> ProjectPath {
    match path.strip_prefix(old) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            ProjectPath::of_pipe_layout(format!("{new}{rest}"))
        }
        _ => path.clone(),
    }
}

/// `text` with every path inside `old` moved under `new`.
fn moved_in_text(text: &str, old: &str, new: &str) -> String {
    let old_slash = format!("{old}/");
    if !text.contains(&old_slash) {
        return text.to_string();
    }
    text.replace(&old_slash, &format!("{new}/"))
}

fn moved_in_value(value: &mut Value, old: &str, new: &str) {
    match value {
        Value::String(text) => {
            *text = moved(&moved_in_text(text, old, new), old, new);
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| moved_in_value(item, old, new)),
        Value::Object(map) => map
            .values_mut()
            .for_each(|item| moved_in_value(item, old, new)),
        _ => {}
    }
}

/// A combination's version of a stage, reading the expansions that
/// combination's upstream stages became.
fn renamed(stage: &Stage, renames: &[Rename]) -> Stage {
    let mut stage = stage.clone();
    for rename in renames {
        for dep in &mut stage.deps {
            if let Some(producer) = dep.producer.as_mut().filter(|p| p.stage == rename.stage) {
                producer.stage = rename.new_stage.clone();
            }
        }
        let Some((old, new)) = &rename.dir else {
            continue;
        };
        for dep in &mut stage.deps {
            dep.path = moved_path(&dep.path, old, new);
        }
        match &mut stage.kind {
            StageKind::Command { command } => *command = moved_in_text(command, old, new),
            StageKind::Argv { argv } => {
                for arg in argv.iter_mut() {
                    *arg = moved(&moved_in_text(arg, old, new), old, new);
                }
            }
            StageKind::Worker(worker) => {
                for value in worker.with.values_mut() {
                    moved_in_value(value, old, new);
                }
            }
        }
        for value in stage.env.values_mut() {
            *value = moved(&moved_in_text(value, old, new), old, new);
        }
    }
    stage
}

/// What a stage is, apart from its name and where it is written: two
/// combinations with the same print run the same stage.
fn fingerprint(stage: &Stage) -> String {
    let mut stage = stage.clone();
    stage.name.clear();
    stage.location = None;
    for dep in &mut stage.deps {
        dep.location = None;
    }
    for out in stage.outs.iter_mut().chain(stage.metrics.iter_mut()) {
        out.location = None;
    }
    format!("{stage:?}")
}

/// Expansions that would write the same path cannot run in one work tree.
fn check_apart(expansions: &[Stage]) -> Result<(), String> {
    let mut writers: BTreeMap<&str, &str> = BTreeMap::new();
    for stage in expansions {
        for out in stage.outs.iter().chain(&stage.metrics) {
            if writers.insert(&out.path, &stage.base_name).is_some() {
                return Err(format!(
                    "stage `{}` writes `{}` whatever the swept values are; put the swept param in the \
                     path (`{}`) to run the sweep as one run",
                    stage.base_name,
                    pipe_protocol::excerpt(&out.path),
                    "${params.NAME}"
                ));
            }
        }
    }
    Ok(())
}

/// Whether `stage` depends on `file` (absolute) itself.
fn depends_on_file(stage: &Stage, root: &std::path::Path, file: &std::path::Path) -> bool {
    stage.deps.iter().any(|dep| root.join(&dep.path) == file)
}
