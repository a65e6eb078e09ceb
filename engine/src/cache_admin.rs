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
use crate::runs::{RunDb, RunSelection};
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
    for record in db.newest_runs(RunSelection::default(), RUNS_SEARCHED_FOR_LINKS)? {
        for stage in record.stages {
            outputs.extend(stage.outputs.into_keys());
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

/// The keys gc plans with, from one look at the pipeline.
struct PlannedKeys {
    /// The results `pipe cache gc` keeps: those the pipeline's current
    /// stages have (fresh or restorable), and those the newest
    /// `keep_runs` runs recorded. A key in the history that does not
    /// parse is an error naming its run, never dropped: gc would delete
    /// what it points to.
    roots: HashSet<ActionKey>,
    /// The key of every stage of the pipeline as it stands, stale ones
    /// too: what the next `pipe run` runs each under.
    current: HashSet<ActionKey>,
}

fn planned_keys(
    project: &Project,
    pipeline: Option<(&Pipeline, &Dag)>,
    keep_runs: usize,
) -> Result<PlannedKeys> {
    let mut keys = PlannedKeys {
        roots: HashSet::new(),
        current: HashSet::new(),
    };
    if let Some((pipeline, dag)) = pipeline {
        let planner = Planner::new(pipeline)?;
        for state in planner.states(dag, &dag.order)? {
            if let Some(key) = state.key {
                if state.freshness != Freshness::Stale {
                    keys.roots.insert(key);
                }
                keys.current.insert(key);
            }
        }
    }
    if let Some(db) = RunDb::open_existing(&project.runs_db())? {
        keys.roots.extend(db.keys_of_recent_runs(keep_runs)?);
    }
    Ok(keys)
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
    /// The resume states of interrupted stages it removed.
    pub resume: ResumeSwept,
    /// The remote swept (its URL) and what left its `tmp/`, `None`
    /// without one. A failure of its own: the local collection is done,
    /// and to be said, whatever the remote does.
    pub remote: Result<Option<(String, TmpSwept)>>,
}

/// Resume directories removed (`.pipe/resume/KEY/`) and their bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ResumeSwept {
    pub dirs: u64,
    pub bytes: u64,
}

/// `pipe cache gc`: removes the local cache's results that neither the
/// pipeline's current stages nor the newest runs need, the resume states
/// no stage of the pipeline would resume from, then what killed pushes
/// left in the remote.
pub fn gc(project: &Project, request: &GcRequest<'_>) -> Result<GcOutcome> {
    let keys = planned_keys(project, request.pipeline, request.keep_runs)?;
    let cache = Cache::open(&project.cache_dir)?;
    let local = cache.gc(&keys.roots, request.grace)?;
    Ok(GcOutcome {
        local,
        resume: {
            // A current key whose result is stored resumes nothing: its
            // stage restores the result.
            let unfinished: HashSet<ActionKey> = keys
                .current
                .iter()
                .filter(|key| cache.get_action(key).is_none())
                .copied()
                .collect();
            sweep_resume_dirs(project, &unfinished, request.grace)
        },
        remote: sweep_remote(project, &request.remote),
    })
}

/// Removes every resume directory but those of `current` keys (the next
/// run resumes from them: the pipeline's keys whose result is not stored)
/// and those written within `grace` (a run with other `-S` values may be
/// writing one now). A stored or restored result removes its own, so what
/// is left here is what interrupted stages left.
fn sweep_resume_dirs(
    project: &Project,
    current: &HashSet<ActionKey>,
    grace: Duration,
) -> ResumeSwept {
    let mut swept = ResumeSwept::default();
    let Ok(entries) = std::fs::read_dir(project.resume_root()) else {
        return swept;
    };
    let kept: HashSet<String> = current.iter().map(ActionKey::to_hex).collect();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(found) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        let age = found
            .modified()
            .ok()
            .and_then(|at| at.elapsed().ok())
            .unwrap_or_default();
        if kept.contains(&name) || age < grace {
            continue;
        }
        let bytes = tree_bytes(&entry.path(), 0);
        let removed = if found.is_dir() {
            std::fs::remove_dir_all(entry.path())
        } else {
            std::fs::remove_file(entry.path())
        };
        match removed {
            Ok(()) => {
                swept.dirs += 1;
                swept.bytes += bytes;
            }
            Err(error) => tracing::warn!(
                "cannot remove the resume state `{}`: {error}",
                entry.path().display()
            ),
        }
    }
    swept
}

/// Bytes of the regular files under `path`, links not followed, no deeper
/// than a worker's own layout could need (a planted tree is not walked
/// without end).
fn tree_bytes(path: &Path, depth: usize) -> u64 {
    let Ok(found) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if found.is_file() {
        return found.len();
    }
    if !found.is_dir() || depth >= 8 {
        return 0;
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| tree_bytes(&entry.path(), depth + 1))
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> (tempfile::TempDir, Project) {
        let dir = tempfile::tempdir().unwrap();
        let project = Project::open(dir.path()).unwrap();
        (dir, project)
    }

    /// A link planted where a resume directory goes would lead a worker's
    /// writes out of the project: it is replaced by a directory of its own,
    /// and what it pointed at is left alone.
    #[test]
    fn a_link_planted_as_a_resume_directory_is_replaced_and_its_target_untouched() {
        let (_dir, project) = project();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep.txt"), "mine").unwrap();
        let key = ActionKey::of(b"train");
        std::fs::create_dir_all(project.resume_root()).unwrap();
        std::os::unix::fs::symlink(outside.path(), project.resume_dir(&key)).unwrap();

        let dir = project.prepare_resume_dir(&key).unwrap();
        let found = std::fs::symlink_metadata(&dir).unwrap();
        assert!(found.is_dir() && !found.file_type().is_symlink());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert_eq!(
            std::fs::read_to_string(outside.path().join("keep.txt")).unwrap(),
            "mine"
        );

        project.remove_resume_dir(&key);
        assert!(!dir.exists());
    }

    /// gc keeps the states the pipeline's stages would resume from and
    /// those written within the grace period, and removes the rest.
    #[test]
    fn gc_removes_only_resume_states_of_keys_the_pipeline_no_longer_has() {
        let (_dir, project) = project();
        let (current, gone) = (ActionKey::of(b"current"), ActionKey::of(b"gone"));
        for key in [current, gone] {
            let dir = project.prepare_resume_dir(&key).unwrap();
            std::fs::create_dir(dir.join("epoch-1")).unwrap();
            std::fs::write(dir.join("epoch-1/weights"), [0u8; 100]).unwrap();
        }
        let keep = HashSet::from([current]);

        let young = sweep_resume_dirs(&project, &keep, Duration::from_secs(3600));
        assert_eq!(young, ResumeSwept::default());
        assert!(project.resume_dir(&gone).exists());

        let swept = sweep_resume_dirs(&project, &keep, Duration::ZERO);
        assert_eq!(
            swept,
            ResumeSwept {
                dirs: 1,
                bytes: 100
            }
        );
        assert!(!project.resume_dir(&gone).exists());
        assert!(project
            .resume_dir(&current)
            .join("epoch-1/weights")
            .exists());
    }
}
