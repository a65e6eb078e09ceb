//! The files behind the plots the compared runs' stages declare
//! (`plots:`), for `pipe compare --html` to overlay. Each is read from the
//! cache by the digest its run recorded, so every run shows its own data
//! though the workspace holds only the last run's file; a run whose object
//! is gone (a pulled record, a cache `gc` cleaned) says so instead.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use pipe_cache::{Artifact, ArtifactKind, Cache};
use pipe_protocol::PlotSpec;

use super::table::CompareTable;
use crate::project_files::ProjectPath;
use crate::runs::{RunId, RunRecord};
use crate::Result;

/// A plot file larger than this is not read (`pipe_report::plot`'s limit:
/// the report refuses it too).
const MAX_PLOT_FILE_BYTES: u64 = 64 << 20;

/// What the plot files of one page may hold together: past it, the rest
/// are named as not read rather than held in memory.
const MAX_PLOT_BYTES_IN_ALL: u64 = 512 << 20;

/// One declared plot of one stage of one row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct PlotFile {
    /// Index in `CompareTable::rows`.
    pub row: usize,
    /// The stage's base name (`evaluate`, the same in every combination).
    pub stage: String,
    pub spec: PlotSpec,
    /// The file's bytes as its run stored them, or why they cannot be
    /// read (`object is missing`).
    pub content: std::result::Result<Vec<u8>, String>,
}

/// The declared plots of every row's stages, in row order; a stage shown
/// in several rows of its run (one outside the matrix) is read once.
pub fn plot_files(
    cache_dir: &Path,
    table: &CompareTable,
    runs: &[RunRecord],
) -> Result<Vec<PlotFile>> {
    let by_id: BTreeMap<RunId, &RunRecord> = runs.iter().map(|run| (run.id, run)).collect();
    // No cache, no objects; opening one would create it.
    let cache = if cache_dir.is_dir() {
        Some(Cache::open(cache_dir)?)
    } else {
        None
    };
    let mut seen: HashSet<(RunId, &str)> = HashSet::new();
    let mut files = Vec::new();
    let mut bytes_read = 0u64;
    for (index, row) in table.rows.iter().enumerate() {
        let Some(run) = by_id.get(&row.run) else {
            continue;
        };
        for stage in row.stages.iter().filter_map(|&stage| run.stages.get(stage)) {
            if stage.identity.plots.is_empty() || !seen.insert((row.run, stage.stage.as_str())) {
                continue;
            }
            for spec in &stage.identity.plots {
                let content = match &cache {
                    None => Err("the cache holds no objects here".to_string()),
                    Some(cache) => read_plot(cache, &stage.outputs, &spec.path, &mut bytes_read),
                };
                files.push(PlotFile {
                    row: index,
                    stage: stage.identity.base_name.clone(),
                    spec: spec.clone(),
                    content,
                });
            }
        }
    }
    Ok(files)
}

/// The stored bytes of `path`: an output itself, or a file inside an
/// output directory, found through its trees.
fn read_plot(
    cache: &Cache,
    outputs: &BTreeMap<ProjectPath, Artifact>,
    path: &str,
    bytes_read: &mut u64,
) -> std::result::Result<Vec<u8>, String> {
    let (mut artifact, rest) = match outputs.get(path) {
        Some(artifact) => (artifact.clone(), ""),
        None => outputs
            .iter()
            .find_map(|(output, artifact)| {
                let rest = path.strip_prefix(output.as_str())?.strip_prefix('/')?;
                Some((artifact.clone(), rest))
            })
            .ok_or_else(|| format!("the run recorded no output `{path}`"))?,
    };
    for name in rest.split('/').filter(|name| !name.is_empty()) {
        if artifact.kind != ArtifactKind::Dir {
            return Err(format!("`{path}`: a file is where a directory should be"));
        }
        let entries = cache.read_tree(&artifact).map_err(|e| e.to_string())?;
        artifact = entries
            .into_iter()
            .find(|(entry, _)| entry == name)
            .map(|(_, artifact)| artifact)
            .ok_or_else(|| format!("`{path}` is not in the output its run stored"))?;
    }
    if *bytes_read + artifact.size > MAX_PLOT_BYTES_IN_ALL {
        return Err(format!(
            "not read: the plots compared hold more than {MAX_PLOT_BYTES_IN_ALL} bytes in all"
        ));
    }
    let bytes = cache
        .read_file_object(&artifact, MAX_PLOT_FILE_BYTES)
        .map_err(|e| e.to_string())?;
    *bytes_read += bytes.len() as u64;
    Ok(bytes)
}
