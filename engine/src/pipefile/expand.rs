//! Phase 2: matrix declarations expanded into one stage per combination,
//! bounded before anything is allocated per stage.

use std::sync::Arc;

use super::collect::Diagnostics;
use super::declare::Decl;
use super::source::Sources;
use crate::pipeline::matrix::{MatrixAxis, StageMatrix};
use crate::Diagnostic;

/// A matrix can multiply a small file into any number of stages; this
/// bounds the work and memory one pipeline file can ask for.
pub(crate) const MAX_STAGES: usize = 1_000_000;

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
    let mut total: usize = 0;
    for (decl, axes) in decls.iter().zip(axes_per_decl) {
        let count = match axes.first() {
            Some(first) if first.zipped => Some(first.values.len()),
            _ => axes
                .iter()
                .try_fold(1usize, |count, axis| count.checked_mul(axis.values.len())),
        };
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
    for (decl_index, (decl, axes)) in decls.iter().zip(axes_per_decl).enumerate() {
        if axes.is_empty() {
            expansions.push(Expansion {
                decl: decl_index,
                name: decl.name.to_string(),
                combo: StageMatrix::default(),
            });
            continue;
        }
        if axes[0].zipped {
            for record in 0..axes[0].values.len() {
                let positions = vec![record as u32; axes.len()];
                expansions.push(Expansion {
                    decl: decl_index,
                    name: expansion_name(decl.name, axes, &positions),
                    combo: StageMatrix::new(Arc::clone(axes), positions.into_boxed_slice()),
                });
            }
            continue;
        }
        // Odometer over the axes, last key fastest, so names come out in
        // the order the values are written.
        let mut positions = vec![0u32; axes.len()];
        loop {
            expansions.push(Expansion {
                decl: decl_index,
                name: expansion_name(decl.name, axes, &positions),
                combo: StageMatrix::new(Arc::clone(axes), positions.clone().into_boxed_slice()),
            });
            let mut axis = axes.len();
            loop {
                if axis == 0 {
                    break;
                }
                axis -= 1;
                positions[axis] += 1;
                if (positions[axis] as usize) < axes[axis].values.len() {
                    break;
                }
                positions[axis] = 0;
                if axis == 0 {
                    axis = usize::MAX;
                    break;
                }
            }
            if axis == usize::MAX {
                break;
            }
        }
    }
    expansions
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
