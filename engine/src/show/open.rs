//! `pipe show RUN --open`: a run's report, or one of its outputs, brought
//! out of the cache into a view of that run, `.pipe/view/RUN/`, as
//! read-only copies, whatever the workspace holds. The workspace is never
//! touched: a record shown is that run's, not what another run left.

use std::path::{Path, PathBuf};

use pipe_cache::{Artifact, Cache, LinkMode, StatCache};
use pipe_protocol::excerpt as shown;

use crate::project::Project;
use crate::project_files::paths::check_relative_path;
use crate::runs::{RunId, RunRecord, StageRecord};
use crate::{workspace, EngineError, Result};

/// Under the project's `.pipe/`: one folder per run.
const VIEW_DIR: &str = "view";

/// An output of a run, in its view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    pub run: RunId,
    /// The output brought out, as the record names it.
    pub output: String,
    /// What to open: the report's page, the file asked for, or the output.
    pub path: PathBuf,
}

/// Where the view of run `run` is.
pub fn view_dir(project: &Project, run: RunId) -> PathBuf {
    project.state_dir.join(VIEW_DIR).join(run.to_string())
}

/// Brings `wanted` (an output path of `run`, or a file inside a directory
/// output; `STAGE:PATH` for one stage's where several stages of the run
/// wrote that path, as a sweep's work trees do), or the run's report when
/// `None`, out of the cache into the run's view. Held to the stored
/// result as `pipe checkout` holds a record: the output must be the one
/// its stage's stored result holds, and every object present and whole,
/// before anything is written. An output already in the view with the
/// same digest is left as it is.
pub fn open_output(project: &Project, run: &RunRecord, wanted: Option<&str>) -> Result<Opened> {
    let found = find_output(run, wanted)?;
    let (stage, output) = (found.stage, found.output);
    let cache = Cache::open(&project.cache_dir)?;
    let stored = stage
        .key
        .and_then(|key| cache.get_action(&key))
        .ok_or_else(|| {
            EngineError::usage(
                format!(
                    "run #{}'s `{}` (stage `{}`) is not in the local cache",
                    run.id,
                    shown(output),
                    shown(&stage.stage)
                ),
                "pull it from the remote cache first: `pipe cache pull`",
            )
        })?;
    let artifact = match stored.outputs.get(output) {
        Some(stored)
            if stored.digest == found.artifact.digest && stored.kind == found.artifact.kind =>
        {
            stored.clone()
        }
        _ => {
            return Err(EngineError::usage(
                format!(
                    "run #{}'s record names a `{}` that its stored result does not hold",
                    run.id,
                    shown(output)
                ),
                "the record does not match the cache; `pipe cache verify` checks the cache",
            ))
        }
    };
    cache.verify_restorable(&artifact).map_err(|error| {
        EngineError::usage(
            format!(
                "run #{}'s `{}` cannot be brought back: {error}",
                run.id,
                shown(output)
            ),
            "pull it from the remote cache: `pipe cache pull`",
        )
    })?;
    let view = view_dir(project, run.id);
    let destination = view.join(&found.in_view);
    let stat = StatCache::open(&project.stat_db())?;
    let in_place = cache
        .hash_path(&destination, &stat)
        .is_ok_and(|current| current.digest == artifact.digest && current.kind == artifact.kind);
    if !in_place {
        write_view(&cache, &stat, &artifact, &destination)?;
    }
    let _ = stat.flush();
    Ok(Opened {
        run: run.id,
        output: output.to_string(),
        path: view.join(found.target_in_view),
    })
}

/// The output a `--open` asks for.
struct Found<'r> {
    stage: &'r StageRecord,
    output: &'r str,
    artifact: &'r Artifact,
    /// Where the output goes in the view: its path, below its stage's
    /// name when several stages of the run wrote that path.
    in_view: String,
    /// What to open, in the view.
    target_in_view: String,
}

/// The output wanted; a usage error naming the run's outputs when it has
/// no such.
fn find_output<'r>(run: &'r RunRecord, wanted: Option<&str>) -> Result<Found<'r>> {
    let outputs = || {
        run.stages.iter().flat_map(|stage| {
            stage
                .outputs
                .iter()
                .map(move |(path, artifact)| (stage, path.as_str(), artifact))
        })
    };
    let (stage_named, target, what) = match wanted {
        Some(wanted) => {
            let (stage, path) = match wanted.split_once(':') {
                Some((stage, path)) if run.stages.iter().any(|s| s.stage == stage) => {
                    (Some(stage), path)
                }
                _ => (None, wanted),
            };
            (stage, path.trim_end_matches('/').to_string(), "output")
        }
        None => match run.summary().reports.first() {
            Some(report) => (None, report.clone(), "report"),
            None => {
                return Err(no_such(
                    run,
                    "has no report",
                    &outputs().collect::<Vec<_>>(),
                ));
            }
        },
    };
    let found = outputs().find(|(stage, path, _)| {
        stage_named.is_none_or(|named| stage.stage == named)
            && (target == *path
                || target
                    .strip_prefix(path.trim_end_matches('/'))
                    .is_some_and(|rest| rest.starts_with('/')))
    });
    let Some((stage, output, artifact)) = found else {
        let problem = format!("has no {what} `{}`", shown(&target));
        return Err(no_such(run, &problem, &outputs().collect::<Vec<_>>()));
    };
    let shared = outputs().filter(|(_, path, _)| *path == output).count() > 1;
    let (in_view, target_in_view) = match shared {
        true => (
            format!("{}/{output}", stage.stage),
            format!("{}/{target}", stage.stage),
        ),
        false => (output.to_string(), target.clone()),
    };
    // The record is not trusted to name a place inside the view only: its
    // stage's name and the path typed are joined in as text.
    check_relative_path(&in_view)
        .and_then(|()| check_relative_path(&target_in_view))
        .map_err(|problem| {
            EngineError::usage(
                format!(
                    "run #{}'s record names `{}`: {problem}",
                    run.id,
                    shown(&in_view)
                ),
                "a record from elsewhere is not trusted to name a place",
            )
        })?;
    Ok(Found {
        stage,
        output,
        artifact,
        in_view,
        target_in_view,
    })
}

fn no_such(
    run: &RunRecord,
    problem: &str,
    outputs: &[(&StageRecord, &str, &Artifact)],
) -> EngineError {
    let mut names: Vec<&str> = outputs.iter().map(|(_, path, _)| *path).collect();
    names.sort_unstable();
    names.dedup();
    let shared = names.len() < outputs.len();
    let hint = if names.is_empty() {
        "it recorded no output".to_string()
    } else {
        let listed: Vec<String> = names.iter().take(10).map(|name| shown(name)).collect();
        format!(
            "name one of its outputs: `--open=PATH` ({}{}){}",
            listed.join(", "),
            if names.len() > 10 { ", ..." } else { "" },
            if shared {
                "; `--open=STAGE:PATH` for one stage's, where several wrote that path"
            } else {
                ""
            }
        )
    };
    EngineError::usage(format!("run #{} {problem}", run.id), hint)
}

/// Writes `artifact` at `destination` as read-only copies (copy-on-write
/// clones where the file system has them): a view is read, and a hard
/// link would let a write reach the cache.
fn write_view(
    cache: &Cache,
    stat: &StatCache,
    artifact: &Artifact,
    destination: &Path,
) -> Result<()> {
    if let Some(parent) = destination.parent() {
        std::fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
    }
    workspace::remove_path(destination).map_err(|e| EngineError::io(destination, e))?;
    cache.restore(
        artifact,
        destination,
        &[LinkMode::Reflink, LinkMode::Copy],
        stat,
    )?;
    make_read_only(destination);
    Ok(())
}

/// Every file under `path` read-only; directories stay writable, so that
/// the view can be replaced and removed.
fn make_read_only(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return;
    };
    if metadata.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.flatten() {
                make_read_only(&entry.path());
            }
        }
    } else if metadata.is_file() {
        let mode = metadata.permissions().mode() & !0o222;
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
    }
}
