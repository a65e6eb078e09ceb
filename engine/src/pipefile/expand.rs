//! Phase 2: matrix declarations expanded into one stage per combination,
//! bounded before anything is allocated per stage.

use std::sync::Arc;

use super::declare::Decl;
use crate::pipeline::matrix::{MatrixAxis, StageMatrix};
use crate::project_files::collect::Diagnostics;
use crate::project_files::source::Sources;
use crate::Diagnostic;

pub(crate) use crate::pipeline::matrix::MAX_STAGES;

pub(super) struct Expansion {
    pub(super) decl: usize,
    pub(super) name: String,
    pub(super) combo: StageMatrix,
}

pub(super) fn expand(
    decls: &[Decl],
    axes_per_decl: &[Arc<[MatrixAxis]>],
    sources: &Sources,
    diagnostics: &mut Diagnostics,
) -> Vec<Expansion> {
    let groups_per_decl: Vec<Vec<Group>> = axes_per_decl.iter().map(|axes| groups(axes)).collect();
    let mut total: usize = 0;
    for (decl, groups) in decls.iter().zip(&groups_per_decl) {
        let count = groups
            .iter()
            .try_fold(1usize, |count, group| count.checked_mul(group.len));
        match count
            .and_then(|count| total.checked_add(count))
            .filter(|total| *total <= MAX_STAGES)
        {
            Some(new_total) => total = new_total,
            None => {
                let matrix_span = decl
                    .node
                    .as_map()
                    .and_then(|fields| fields.iter().find(|f| f.key == "matrix"))
                    .map(|f| f.key_span);
                let expands_to = match count {
                    Some(1) => "1 stage".to_string(),
                    Some(count) => format!("{} stages", with_thousands(count)),
                    None => "more stages than can be counted".to_string(),
                };
                let before = if total > 0 {
                    format!(" (after {} before it)", with_thousands(total))
                } else {
                    String::new()
                };
                diagnostics.push(
                    Diagnostic::new(
                        "matrix-too-large",
                        format!(
                            "the matrix of stage `{}` expands to {expands_to}{before}; a pipeline may have at most {} stages",
                            decl.name,
                            with_thousands(MAX_STAGES)
                        ),
                    )
                    .at(sources.location(matrix_span.unwrap_or(decl.name_span)))
                    .with_hint(
                        "split the sweep into several runs with `-S`, or sample fewer combinations",
                    ),
                );
                return Vec::new();
            }
        }
    }

    let mut expansions = Vec::with_capacity(total);
    for (decl_index, ((decl, axes), groups)) in decls
        .iter()
        .zip(axes_per_decl)
        .zip(&groups_per_decl)
        .enumerate()
    {
        if axes.is_empty() {
            expansions.push(Expansion {
                decl: decl_index,
                name: decl.name.to_string(),
                combo: StageMatrix::default(),
            });
            continue;
        }
        // Odometer over the groups, last fastest, so names come out in
        // the order the values are written; the axes of a group move
        // together.
        let mut group_positions = vec![0u32; groups.len()];
        loop {
            let mut positions = vec![0u32; axes.len()];
            for (group, &position) in groups.iter().zip(&group_positions) {
                for &axis in &group.axes {
                    positions[axis] = position;
                }
            }
            expansions.push(Expansion {
                decl: decl_index,
                name: expansion_name(decl.name, axes, &positions),
                combo: StageMatrix::new(Arc::clone(axes), positions.into_boxed_slice()),
            });
            let mut turned = false;
            for (group, position) in groups.iter().zip(group_positions.iter_mut()).rev() {
                *position += 1;
                if (*position as usize) < group.len {
                    turned = true;
                    break;
                }
                *position = 0;
            }
            if !turned {
                break;
            }
        }
    }
    expansions
}

/// Axes that take their values together, and how many values each has.
struct Group {
    axes: Vec<usize>,
    len: usize,
}

/// The groups of `axes`, in the order their first axes are declared.
fn groups(axes: &[MatrixAxis]) -> Vec<Group> {
    let mut groups: Vec<(u16, Group)> = Vec::new();
    for (index, axis) in axes.iter().enumerate() {
        match groups.iter_mut().find(|(id, _)| *id == axis.group) {
            Some((_, group)) => group.axes.push(index),
            None => groups.push((
                axis.group,
                Group {
                    axes: vec![index],
                    len: axis.values.len(),
                },
            )),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

/// `train@lr=1e-4,seed=1`.
fn expansion_name(base: &str, axes: &[MatrixAxis], positions: &[u32]) -> String {
    let mut name = String::from(base);
    for (index, (axis, &position)) in axes.iter().zip(positions).enumerate() {
        name.push(if index == 0 { '@' } else { ',' });
        name.push_str(&axis.key);
        name.push('=');
        name.push_str(&axis.values[position as usize].text);
    }
    name
}

/// `1000000` -> `1,000,000`.
pub(super) fn with_thousands(count: usize) -> String {
    let digits = count.to_string();
    let mut text = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}
