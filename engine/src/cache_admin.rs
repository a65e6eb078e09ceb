//! `pipe cache verify` and `pipe cache gc` as use cases: what verify
//! found and which project files share a damaged object, and which
//! results gc must keep.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pipe_cache::remote::TmpSwept;
use pipe_cache::{ActionKey, Cache, CorruptObject, GcReport, VerifyReport};
use serde::Serialize;

use crate::cache_sync::{sweep_remote, RemoteChoice};
use crate::dag::Dag;
use crate::pipeline::Pipeline;
use crate::plan::{Freshness, Planner};
use crate::project::Project;
use crate::runs::RunDb;
use crate::Result;

/// How many recent runs' outputs verify searches for links to a corrupt
/// object.
const RUNS_SEARCHED_FOR_LINKS: usize = 20;

/// What `pipe cache verify` found: the report, and the project files that
/// share each corrupt object (hard links or symlinks to it), by object.
#[derive(Debug, Serialize)]
pub struct VerifyOutcome {
    #[serde(flatten)]
    pub report: VerifyReport,
    pub linked_files: BTreeMap<String, Vec<String>>,
}

pub fn verify(project: &Project, repair: bool) -> Result<VerifyOutcome> {
    let cache = Cache::open(&project.cache_dir)?;
    let report = if repair {
        cache.verify_and_repair()?
    } else {
        cache.verify()?
    };
    let linked_files = project_files_linking(project, &report.corrupt_objects)?;
    Ok(VerifyOutcome {
        report,
        linked_files,
    })
}

/// The project files (outputs of recent runs) that are hard links or
/// symlinks to a corrupt object: whatever wrote through them changed the
/// cache. Keyed by the object's name.
fn project_files_linking(
    project: &Project,
    corrupt: &[CorruptObject],
) -> Result<BTreeMap<String, Vec<String>>> {
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if corrupt.is_empty() {
        return Ok(found);
    }
    let by_inode: HashMap<(u64, u64), &CorruptObject> = corrupt
        .iter()
        .filter(|object| object.links > 1)
        .map(|object| ((object.dev, object.ino), object))
        .collect();
    let by_path: HashMap<&Path, &CorruptObject> = corrupt
        .iter()
        .map(|object| (object.path.as_path(), object))
        .collect();
    let Some(db) = RunDb::open_existing(&project.runs_db())? else {
        return Ok(found);
    };
    let mut outputs = BTreeSet::new();
    for run in db.list_runs(RUNS_SEARCHED_FOR_LINKS)? {
        if let Some(record) = db.run(run.id)? {
            for stage in record.stages {
                outputs.extend(stage.outputs.into_keys());
            }
        }
    }
    let mut pending: Vec<PathBuf> = outputs.iter().map(|path| project.root.join(path)).collect();
    while let Some(path) = pending.pop() {
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let object = if metadata.file_type().is_symlink() {
            std::fs::read_link(&path)
                .ok()
                .and_then(|target| by_path.get(target.as_path()).copied())
        } else if metadata.is_dir() {
            if let Ok(listing) = std::fs::read_dir(&path) {
                pending.extend(listing.flatten().map(|entry| entry.path()));
            }
            None
        } else {
            by_inode.get(&(metadata.dev(), metadata.ino())).copied()
        };
        if let Some(object) = object {
            let shown = path.strip_prefix(&project.root).unwrap_or(&path);
            let files = found.entry(object.name.clone()).or_default();
            let shown = shown.display().to_string();
            if !files.contains(&shown) {
                files.push(shown);
            }
        }
    }
    for files in found.values_mut() {
        files.sort();
    }
    Ok(found)
}

/// The results `pipe cache gc` keeps: those the pipeline's current
/// stages have (fresh or restorable), and those the newest `keep_runs`
/// runs recorded. A key in the history that does not parse is an error
/// naming its run, never dropped: gc would delete what it points to.
pub fn gc_roots(
    project: &Project,
    pipeline: Option<(&Pipeline, &Dag)>,
    keep_runs: usize,
) -> Result<HashSet<ActionKey>> {
    let mut keep: HashSet<ActionKey> = HashSet::new();
    if let Some((pipeline, dag)) = pipeline {
        let planner = Planner::new(pipeline)?;
        for state in planner.states(dag, &dag.order)? {
            if state.freshness != Freshness::Stale {
                keep.extend(state.key);
            }
        }
    }
    if let Some(db) = RunDb::open_existing(&project.runs_db())? {
        keep.extend(db.keys_of_recent_runs(keep_runs)?);
    }
    Ok(keep)
}

/// What `pipe cache gc` was asked.
pub struct GcRequest<'a> {
    /// The pipeline whose current stages' results are kept, when one is
    /// found.
    pub pipeline: Option<(&'a Pipeline, &'a Dag)>,
    /// The newest runs whose results are kept.
    pub keep_runs: usize,
    /// Entries younger than this are kept: a run may be storing them.
    pub grace: Duration,
    /// The remote whose `tmp/` is swept, when one is configured.
    pub remote: RemoteChoice<'a>,
}

/// What `pipe cache gc` did here and in the remote.
pub struct GcOutcome {
    pub local: GcReport,
    /// The remote swept (its URL) and what left its `tmp/`, `None`
    /// without one. A failure of its own: the local collection is done,
    /// and to be said, whatever the remote does.
    pub remote: Result<Option<(String, TmpSwept)>>,
}

/// `pipe cache gc`: removes the local cache's results that neither the
/// pipeline's current stages nor the newest runs need, then what killed
/// pushes left in the remote.
pub fn gc(project: &Project, request: &GcRequest<'_>) -> Result<GcOutcome> {
    let keep = gc_roots(project, request.pipeline, request.keep_runs)?;
    let cache = Cache::open(&project.cache_dir)?;
    let local = cache.gc(&keep, request.grace)?;
    Ok(GcOutcome {
        local,
        remote: sweep_remote(project, &request.remote),
    })
}
