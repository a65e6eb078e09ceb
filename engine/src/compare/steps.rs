//! The per-step curves of compared runs, for `pipe compare --html` to
//! overlay: a one-epoch run has one point per epoch, but its step curve
//! (the `steps` output of `train/classifier@1`: `step,epoch,loss,lr,...`)
//! shows how it trained.
//!
//! The curve is read from the cache by the digest the run recorded, so a
//! run whose output has since been overwritten in the workspace still has
//! its own curve; one whose object is not in the local cache (a record
//! pulled from a remote, a cache cleaned by `pipe gc`) is named instead.

use std::collections::BTreeMap;
use std::path::Path;

use pipe_cache::{Artifact, ArtifactKind, Cache};

use super::table::CompareTable;
use crate::runs::{RunId, RunRecord};
use crate::Result;

/// A step curve file bigger than this is not read: a curve of a few
/// thousand points is a few hundred kilobytes.
const MAX_STEPS_BYTES: u64 = 64 << 20;

/// The file names a stage's step curve has in its outputs: the built-in
/// training stage's output `steps` (`.pipe/out/PIPELINE/STAGE/steps`), or a
/// command stage's `steps.csv`.
const STEP_FILES: [&str; 2] = ["steps", "steps.csv"];

/// The step curve of one stage of one row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCurve {
    /// Index in `CompareTable::rows`.
    pub row: usize,
    /// The stage's base name (`train`, the same in every combination).
    pub stage: String,
    /// Numeric columns by header name (`step`, `loss`, `lr`), one value a
    /// line; an empty field is NaN.
    pub columns: BTreeMap<String, Vec<f64>>,
}

/// What was found: the curves, and the stages whose curve is recorded but
/// could not be read (`#3 train: object is missing`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepCurves {
    pub curves: Vec<StepCurve>,
    pub unreadable: Vec<String>,
}

/// The step curves of every row's stages, in row order.
pub fn step_curves(
    cache_dir: &Path,
    table: &CompareTable,
    runs: &[RunRecord],
) -> Result<StepCurves> {
    let mut found = StepCurves::default();
    // No cache, no curves; opening one would create it.
    if !cache_dir.is_dir() {
        return Ok(found);
    }
    let cache = Cache::open(cache_dir)?;
    let by_id: BTreeMap<RunId, &RunRecord> = runs.iter().map(|run| (run.id, run)).collect();
    for (index, row) in table.rows.iter().enumerate() {
        let Some(run) = by_id.get(&row.run) else {
            continue;
        };
        let stages: Vec<_> = row
            .stages
            .iter()
            .filter_map(|&stage| run.stages.get(stage))
            .collect();
        if stages.is_empty() {
            continue;
        }
        for stage in stages {
            let Some(artifact) = stage
                .outputs
                .iter()
                .find_map(|(path, artifact)| is_step_file(path, artifact).then_some(artifact))
            else {
                continue;
            };
            match cache
                .read_file_object(artifact, MAX_STEPS_BYTES)
                .map_err(|e| e.to_string())
                .and_then(|bytes| parse_columns(&bytes))
            {
                Ok(columns) => found.curves.push(StepCurve {
                    row: index,
                    stage: stage.identity.base_name.clone(),
                    columns,
                }),
                Err(problem) => found
                    .unreadable
                    .push(format!("#{} {}: {problem}", row.run, stage.stage)),
            }
        }
    }
    Ok(found)
}

fn is_step_file(path: &str, artifact: &Artifact) -> bool {
    artifact.kind == ArtifactKind::File
        && path
            .rsplit('/')
            .next()
            .is_some_and(|name| STEP_FILES.contains(&name))
}

/// A CSV of numbers with a header line, by column; a line that is not
/// numbers is an error naming it.
fn parse_columns(bytes: &[u8]) -> Result<BTreeMap<String, Vec<f64>>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .ok_or("empty")?
        .split(',')
        .map(|name| name.trim().to_string())
        .collect();
    let mut columns: BTreeMap<String, Vec<f64>> = header
        .iter()
        .map(|name| (name.clone(), Vec::new()))
        .collect();
    for (number, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        for (name, field) in header.iter().zip(line.split(',')) {
            let value = match field.trim() {
                "" => f64::NAN,
                field => field.parse().map_err(|_| {
                    format!(
                        "line {}, column `{name}`: `{field}` is not a number",
                        number + 2
                    )
                })?,
            };
            if let Some(column) = columns.get_mut(name) {
                column.push(value);
            }
        }
    }
    Ok(columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_file_reads_as_columns_with_gaps_as_nan() {
        let columns = parse_columns(b"step,loss,samples_per_s\n1,0.7,\n2,0.6,120\n").unwrap();
        assert_eq!(columns["step"], [1.0, 2.0]);
        assert_eq!(columns["loss"], [0.7, 0.6]);
        assert!(columns["samples_per_s"][0].is_nan());
        let error = parse_columns(b"step,loss\n1,x\n").unwrap_err();
        assert_eq!(error, "line 2, column `loss`: `x` is not a number");
    }
}
