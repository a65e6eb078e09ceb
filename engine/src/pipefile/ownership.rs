//! Phase 4: symlinks followed, each output owned by one stage, and every
//! dependency on a produced path given its producer (the DAG's edges).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::pipeline::{Out, Stage, StageOutRef};
use crate::project_files::collect::Diagnostics;
use crate::project_files::paths::{self, RealPath};
use crate::Diagnostic;

/// Declared paths that lead elsewhere in the project through a symlink,
/// with where they really are. Keyed by (stage, index in outs then
/// metrics) and (stage, index in deps), ordered so that messages are too.
#[derive(Default)]
pub(super) struct MovedPaths {
    pub(super) outs: BTreeMap<(usize, usize), String>,
    pub(super) deps: HashMap<(usize, usize), String>,
}

/// Outputs are refused when a symlink on the way leads out of the project
/// or into `.git/` or `.pipe/`: pipe deletes an output before its stage
/// runs and restores it from the cache, and must only do that to files it
/// owns. Outputs and dependencies that lead elsewhere in the project are
/// returned, so that overlaps and edges are found by where files really
/// are. A dependency may lead outside the project: it is only read.
pub(super) fn follow_symlinks(
    root: &Path,
    stages: &[Stage],
    diagnostics: &mut Diagnostics,
) -> MovedPaths {
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

/// Two stages writing one path, or one writing inside another's output
/// directory, is refused; a dependency on a produced path (or a path
/// inside one) gets that producer, as in DVC.
pub(super) fn check_output_ownership(
    stages: &mut [Stage],
    moved: &MovedPaths,
    diagnostics: &mut Diagnostics,
) {
    for (stage_index, dep_index, producer) in find_producers(stages, moved, diagnostics) {
        stages[stage_index].deps[dep_index].producer = Some(producer);
    }
}

/// The checks of `check_output_ownership`, and the producer each
/// dependency on a produced path gets. Paths are borrowed from the stages,
/// not copied: this map has an entry per output of the whole pipeline.
pub(super) fn find_producers(
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
    // The outputs of a matrix stage's expansions mostly share their
    // directory: its ancestors are looked up once per run of them.
    let mut last_dir: Option<(&str, Option<&(usize, &str)>)> = None;
    for stage in stages.iter() {
        for out in stage.outs.iter().chain(&stage.metrics) {
            let dir = out.path.rsplit_once('/').map_or("", |(dir, _)| dir);
            let owner = match last_dir {
                Some((last, owner)) if last == dir => owner,
                _ => {
                    let owner =
                        paths::ancestors(&out.path).find_map(|ancestor| owners.get(ancestor));
                    last_dir = Some((dir, owner));
                    owner
                }
            };
            if let Some((owner_index, owner_out)) = owner {
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
    // Every output by path, sorted: the outputs inside a directory are a
    // range of it.
    let mut inside: Vec<(&str, usize, &str)> = stages
        .iter()
        .enumerate()
        .flat_map(|(index, stage)| {
            stage
                .outs
                .iter()
                .chain(&stage.metrics)
                .map(move |out| (out.path.as_str(), index, out.name.as_str()))
        })
        .collect();
    inside.sort_unstable();
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
                .map_or(dep.path.as_str(), String::as_str);
            let owner = owner_of(path);
            if let Some((owner_index, owner_out)) = owner {
                let producer = StageOutRef {
                    stage: stages[*owner_index].name.clone(),
                    out: owner_out.to_string(),
                };
                producers.push((stage_index, dep_index, producer));
            } else {
                refuse_folder_of_outputs(stages, stage_index, dep_index, &inside, diagnostics);
            }
        }
    }
    producers
}

/// A directory dependency that holds other stages' outputs would be read
/// before they are written, or with what stages no longer in the pipeline
/// left there: refused, pointing at the reference that names each output.
fn refuse_folder_of_outputs(
    stages: &[Stage],
    stage_index: usize,
    dep_index: usize,
    outputs: &[(&str, usize, &str)],
    diagnostics: &mut Diagnostics,
) {
    let dep = &stages[stage_index].deps[dep_index];
    let prefix = format!("{}/", dep.path);
    let start = outputs.partition_point(|(path, _, _)| *path < prefix.as_str());
    let held: Vec<(usize, &str)> = outputs[start..]
        .iter()
        .take_while(|(path, _, _)| path.starts_with(&prefix))
        .filter(|(_, owner, _)| *owner != stage_index)
        .map(|(_, owner, out)| (*owner, *out))
        .collect();
    let Some(&(first_owner, first_out)) = held.first() else {
        return;
    };
    let first = &stages[first_owner];
    let one_matrix = held
        .iter()
        .all(|(owner, out)| stages[*owner].base_name == first.base_name && *out == first_out);
    let reference = if one_matrix && !first.matrix.is_empty() {
        format!("${{stages.{}@*.outs.{first_out}}}", first.base_name)
    } else if held.len() == 1 {
        format!("${{stages.{}.outs.{first_out}}}", first.name)
    } else {
        "`${stages.S.outs.O}` of each".to_string()
    };
    let names: Vec<&str> = held
        .iter()
        .map(|(owner, _)| stages[*owner].name.as_str())
        .collect();
    diagnostics.push(
        Diagnostic::new(
            "folder-of-outputs",
            format!(
                "dependency `{}` of stage `{}` is a directory holding the outputs of {} ({}): pipe would not wait for them, and files that stages no longer in the pipeline left there would be read too",
                dep.path,
                stages[stage_index].name,
                if names.len() == 1 { "stage".to_string() } else { format!("{} stages", names.len()) },
                crate::suggest::name_list(&names, 3)
            ),
        )
        .at(dep.location.clone())
        .with_hint(format!(
            "depend on the outputs themselves: `{reference}` (a list: `${{deps.NAME}}` gives the command each path)"
        )),
    );
}

/// Outputs that lead elsewhere through a symlink overlap other outputs by
/// where they really are: two stages writing one file through two names
/// would each find the other's result and restore their own on every run.
/// Returns the real paths of those outputs with their owners, for edges.
pub(super) fn check_moved_outputs<'s>(
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

pub(super) fn owner_location<'s>(owner: &'s Stage, out_name: &str) -> Option<&'s crate::Location> {
    owner
        .outs
        .iter()
        .chain(&owner.metrics)
        .find(|out| out.name == out_name)
        .and_then(|out| out.location.as_ref())
}

pub(super) fn located_suffix(location: Option<&crate::Location>) -> String {
    location.map_or_else(String::new, |location| {
        format!(
            " at {}:{}:{}",
            location.file.display(),
            location.line,
            location.col
        )
    })
}
