//! `pipe checkout RUN`: a recorded run's outputs back into the workspace,
//! from the cache. Nothing of a record is trusted (it may come from a
//! remote, and `.pipe/runs.db` is a file any local process can write):
//! every output it names must be one the pipeline's stage of that name
//! declares and one the stored result under the stage's key holds with
//! the same digest, every place is checked, and every object is present
//! and hashes to its name, all before the first file is touched. A
//! checkout either completes or changes nothing; files only the
//! workspace holds are never destroyed unasked.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use pipe_cache::{Artifact, Cache, LinkMode, RestoreSites, StatCache};
use pipe_protocol::excerpt as shown;

use crate::history::{History, Notice, Pull};
use crate::link::link_modes_for;
use crate::pipefile::{self, CatalogSource, Loaded};
use crate::pipeline::{Pipeline, Stage};
use crate::project::{Project, RunLock};
use crate::project_files::ProjectPath;
use crate::run_settings::recorded_pipeline_file;
use crate::runs::{RunId, RunRecord};
use crate::{workspace, EngineError, Result};

/// What a checkout did, or why it did nothing.
#[derive(Debug)]
pub enum CheckoutReport {
    /// The record names what the pipeline does not declare, or places
    /// pipe does not write (`stage: problem` each); nothing was changed.
    Refused(Vec<String>),
    /// The cache cannot give these back (`path (stage): why` each), or
    /// cannot write where they go; nothing was changed.
    Missing(Vec<String>),
    /// Restoring would overwrite or delete these files, which the cache
    /// does not hold; nothing was changed.
    WouldLoseFiles(Vec<PathBuf>),
    /// Outputs restored, and those already in place.
    Done { restored: usize, unchanged: usize },
}

/// What `pipe checkout` was asked, as the user wrote it.
#[derive(Debug, Clone, Default)]
pub struct CheckoutRequest {
    /// A run reference (`12`, `last~2`, a git ref).
    pub run: String,
    /// `-f`: the pipeline file to hold the record to, instead of the one
    /// it names.
    pub file: Option<PathBuf>,
    /// The pipeline file a command finds where it was started: what a
    /// record whose file is no plain path in the project (a pulled
    /// record's is only a hint) is held to.
    pub found_here: Option<PathBuf>,
    /// `--link`, as given.
    pub link: Vec<String>,
    /// Overwrite or delete files the cache does not hold.
    pub force: bool,
}

/// What [`checkout_run`] did, and to which run: the reference resolved
/// is what the CLI's hints name.
#[derive(Debug)]
pub struct CheckedOut {
    pub run: RunId,
    pub report: CheckoutReport,
}

/// `pipe checkout RUN`: takes the project's run lock, resolves the run
/// (pulling its record when it is only in the remote), loads the pipeline
/// file it ran with its settings, and restores its outputs. `notify`
/// hears, as it happens, that another run holds the lock and what was
/// pulled or skipped to resolve the reference.
pub fn checkout_run(
    project: &Project,
    request: &CheckoutRequest,
    catalogs: &dyn CatalogSource,
    notify: &mut dyn FnMut(Notice),
) -> Result<CheckedOut> {
    let RequestedRun {
        lock,
        id,
        record,
        file,
    } = requested_run(project, request, notify)?;
    let Loaded { pipeline, .. } =
        crate::sweep::load_settings(&file, &record.overrides, record.sweep, catalogs)?;
    if !pipeline.workspaces.is_empty() {
        return Err(EngineError::usage(
            format!("run #{id} ran its combinations each in a work tree of its own: their outputs share paths, and one workspace holds one of them"),
            format!("bring one combination back, params and outputs: `pipe apply {id} --row KEY=VALUE,...` (`pipe apply {id}` lists them)"),
        ));
    }
    let modes = link_modes_for(&pipeline, &request.link)?.value;
    let report = checkout(project, &lock, &record, &pipeline, &modes, request.force)?;
    Ok(CheckedOut { run: id, report })
}

/// The run a `checkout` or `apply` request names, under the run lock, and
/// the pipeline file its record is held to.
pub(crate) struct RequestedRun {
    pub lock: RunLock,
    pub id: RunId,
    pub record: RunRecord,
    pub file: PathBuf,
}

/// Takes the run lock, resolves the run (pulling its record when it is
/// only in the remote) and finds the pipeline file it ran: the record's
/// outputs are held to the stages of that file, read here.
pub(crate) fn requested_run(
    project: &Project,
    request: &CheckoutRequest,
    notify: &mut dyn FnMut(Notice),
) -> Result<RequestedRun> {
    let lock = RunLock::acquire(project, |holder| notify(Notice::WaitingForLock { holder }))?;
    let mut history = History::require(&project.root)?;
    let id = history.resolve_noting(&request.run, Pull::IfConfigured, notify)?;
    let record = history.db.resolved_run(id)?;
    let file = match &request.file {
        Some(file) => file.clone(),
        None => recorded_pipeline_file(project, &record, request.found_here.as_deref())?,
    };
    if let Some(problem) =
        pipefile::pipeline_file_problem(&file, "pass the pipeline file the run ran with -f FILE")
    {
        return Err(problem);
    }
    Ok(RequestedRun {
        lock,
        id,
        record,
        file,
    })
}

/// One output to bring back: the stage, the path (the pipeline's, which
/// the record's text names), and the stored result's artifact (which the
/// record's must equal).
struct Wanted<'a> {
    stage: &'a str,
    path: ProjectPath,
    artifact: Artifact,
}

/// Restores the outputs of `record`, held to `pipeline` (the file the run
/// ran, loaded with the run's settings). The caller holds the project's
/// run lock: a checkout writes outputs as a run does, and the two take
/// turns.
pub fn checkout(
    project: &Project,
    lock: &RunLock,
    record: &RunRecord,
    pipeline: &Pipeline,
    modes: &[LinkMode],
    force: bool,
) -> Result<CheckoutReport> {
    if pipeline.name != record.pipeline {
        return Ok(CheckoutReport::Refused(vec![format!(
            "run #{} is a run of pipeline `{}`, but `{}` is pipeline `{}`",
            record.id,
            shown(&record.pipeline),
            pipeline.file.display(),
            pipeline.name
        )]));
    }
    let cache = Cache::open(&project.cache_dir)?;
    let (wanted, refused, mut missing) = held_to_the_pipeline(project, record, pipeline, &cache);
    if !refused.is_empty() {
        return Ok(CheckoutReport::Refused(refused));
    }

    let stat = StatCache::open(&project.stat_db())?;
    // What is already in place needs nothing from the cache.
    let to_restore: Vec<&Wanted<'_>> = wanted
        .iter()
        .filter(|output| {
            !cache
                .hash_path(&project.root.join(&output.path), &stat)
                .is_ok_and(|current| {
                    current.digest == output.artifact.digest && current.kind == output.artifact.kind
                })
        })
        .collect();
    // Every object present and whole, every place writable, before the
    // first file changes: a restore that fails half-way would leave a
    // workspace that is neither the run's nor what was there.
    for output in &to_restore {
        if let Err(error) = cache.verify_restorable(&output.artifact) {
            missing.push(format!(
                "{} (stage `{}`): {error}",
                output.path, output.stage
            ));
        } else if let Some(problem) = unwritable(&project.root.join(&output.path)) {
            missing.push(format!(
                "{} (stage `{}`): {problem}",
                output.path, output.stage
            ));
        }
    }
    if !missing.is_empty() {
        let _ = stat.flush();
        return Ok(CheckoutReport::Missing(missing));
    }

    let mut sites = RestoreSites::default();
    for output in &wanted {
        sites.output(&output.path);
    }
    lock.remove_restore_leftovers(&project.root, &sites);

    // As git does: refuse to destroy what only the workspace holds.
    if !force {
        let mut lost = Vec::new();
        for output in &to_restore {
            lost.extend(cache.files_lost_by_restore(
                &output.artifact,
                &project.root.join(&output.path),
                &stat,
            )?);
        }
        if !lost.is_empty() {
            let _ = stat.flush();
            return Ok(CheckoutReport::WouldLoseFiles(lost));
        }
    }

    for output in &to_restore {
        // Checked again right before writing: a link may have appeared.
        workspace::check_restore_target(&project.root, &output.path).map_err(|problem| {
            EngineError::Internal(format!("stage `{}`: {problem}", output.stage))
        })?;
        let destination = project.root.join(&output.path);
        if let Some(parent) = destination.parent() {
            std::fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
        }
        cache
            .restore(&output.artifact, &destination, modes, &stat)
            .map_err(|error| {
                EngineError::Internal(format!(
                    "restoring `{}` of stage `{}` failed after its objects were checked: {error}",
                    output.path, output.stage
                ))
            })?;
    }
    let _ = stat.flush();
    Ok(CheckoutReport::Done {
        restored: to_restore.len(),
        unchanged: wanted.len() - to_restore.len(),
    })
}

/// The outputs of `record` that the pipeline declares and the stored
/// results hold, what is refused (undeclared, differing from the stored
/// result, or a place pipe does not write), and what the cache lacks.
fn held_to_the_pipeline<'r>(
    project: &Project,
    record: &'r RunRecord,
    pipeline: &Pipeline,
    cache: &Cache,
) -> (Vec<Wanted<'r>>, Vec<String>, Vec<String>) {
    let stages: HashMap<&str, &Stage> = pipeline
        .stages
        .iter()
        .map(|stage| (stage.name.as_str(), stage))
        .collect();
    let (mut wanted, mut refused, mut missing) = (Vec::new(), Vec::new(), Vec::new());
    for stage_record in record
        .stages
        .iter()
        .filter(|stage| !stage.outputs.is_empty())
    {
        let name = stage_record.stage.as_str();
        let Some(stage) = stages.get(name) else {
            refused.push(format!(
                "stage `{}` of the record is not a stage of `{}`",
                shown(name),
                pipeline.file.display()
            ));
            continue;
        };
        let worker_metrics = stage.worker_metrics_path();
        let result = stage_record.key.and_then(|key| cache.get_action(&key));
        for (path, artifact) in &stage_record.outputs {
            let declared = workspace::declared_outputs(stage)
                .map(|out| &out.path)
                .chain(worker_metrics.as_ref())
                .find(|declared| *declared == path);
            let Some(declared) = declared else {
                refused.push(format!(
                    "stage `{name}`: the record names `{}`, which the stage does not declare in `{}`",
                    shown(path),
                    pipeline.file.display()
                ));
                continue;
            };
            if let Err(problem) = workspace::check_restore_target(&project.root, declared) {
                refused.push(format!("stage `{name}`: {problem}"));
                continue;
            }
            let Some(result) = &result else {
                missing.push(format!(
                    "{path} (stage `{name}`): its result is not in the local cache"
                ));
                continue;
            };
            match result.outputs.get(path.as_str()) {
                Some(stored)
                    if stored.digest == artifact.digest && stored.kind == artifact.kind =>
                {
                    wanted.push(Wanted {
                        stage: name,
                        path: declared.clone(),
                        artifact: stored.clone(),
                    })
                }
                _ => refused.push(format!(
                    "stage `{name}`: the record's `{}` is not what its stored result {} holds",
                    shown(path),
                    result.key.short()
                )),
            }
        }
    }
    (wanted, refused, missing)
}

/// Why `destination` cannot be written, if it cannot: the nearest
/// directory that exists on its way must take new entries.
fn unwritable(destination: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let mut directory = destination.parent()?;
    while !directory.exists() {
        directory = directory.parent()?;
    }
    let path = std::ffi::CString::new(directory.as_os_str().as_bytes()).ok()?;
    // SAFETY: a NUL-terminated path and a mode flag; nothing is retained.
    let allowed = unsafe { libc::access(path.as_ptr(), libc::W_OK) } == 0;
    (!allowed).then(|| format!("cannot write into `{}`", directory.display()))
}
