//! The scheduler: runs the selected stages in dependency order, in
//! parallel within `-j` and each stage's resources, reusing cached
//! results, and records the run.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use pipe_cache::remote::{Remote, RemoteConfig, TransferReport};
use pipe_cache::{Cache, LinkMode, RemoteError, StatCache};

use super::context::{nothing_done, Context};
use super::prebuild::Prebuild;
use super::run_row::{RunRow, RunStartFacts};
use super::run_so_far::RunSoFar;
use super::{scheduler, slurm};
use crate::dag::Dag;
use crate::events::{Event, Observer};
use crate::executor::Executor;
use crate::overrides::ParamOverride;
use crate::params_override::{Restored, WrittenParams};
use crate::pipeline::{paths_overlap, ParamsFileEdits, Pipeline, Stage, StageKind};
use crate::project::{Project, RunLock};
use crate::project_files::ProjectPath;
use crate::runs::RunId;
use crate::runs::{DirtySettler, GitProbe, RunDb, RunEnd, RunStatus, StageRecord, StageStatus};
use crate::{EngineError, Result, UsageError};

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Stage names to bring up to date (with what they depend on); a base
    /// name selects all its matrix expansions. Empty: every stage.
    pub targets: Vec<String>,
    /// Stages to run even on a cache hit.
    pub force: Vec<String>,
    pub force_all: bool,
    /// Parallel CPU slots.
    pub jobs: usize,
    pub link: Vec<LinkMode>,
    /// The command line, for the run record.
    pub argv: Vec<String>,
    /// The `-S` settings the pipeline was loaded with: recorded as data
    /// with the run.
    pub overrides: Vec<ParamOverride>,
    /// The remote cache behind the local one (`remote::resolve`).
    pub remote: Option<RemoteConfig>,
    /// Where stages that miss the cache run (`executor::resolve`).
    pub executor: Executor,
    /// The run is a sweep's combinations merged (`sweep::merge`): its
    /// `overrides` hold lists, to be loaded again as a sweep.
    pub sweep: bool,
    /// Works out the run's dirty flag in a process of its own, so that
    /// the run does not wait for it; `None`: waited for in this process.
    pub git_settler: Option<DirtySettler>,
    /// `--name`: the run's name, refused before anything runs when another
    /// run holds it.
    pub name: Option<String>,
    /// `--remove-orphans`: outputs of stages no longer in the pipeline
    /// are removed from the work tree before the stages run
    /// (`crate::orphans`).
    pub remove_orphans: bool,
}

#[derive(Debug)]
pub struct RunOutcome {
    /// `succeeded`, `failed` or `interrupted`.
    pub status: RunStatus,
    /// The run in the history; `None` when every selected stage was fresh:
    /// such a run is not recorded.
    pub recorded: Option<RunId>,
    pub stages: Vec<StageRecord>,
    /// What went to and from the remote cache, when there is one.
    pub remote: Option<RemoteSummary>,
}

#[derive(Debug)]
pub struct RemoteSummary {
    pub url: String,
    pub read_only: bool,
    /// No credentials were found: the remote was read unsigned, and
    /// nothing written (`read_only` is then true too).
    pub anonymous: bool,
    pub transfers: TransferReport,
    /// Whether the run's record reached the remote, or why not.
    pub record: std::result::Result<(), RecordNotPushed>,
}

/// Why a run's record did not reach the remote.
#[derive(Debug, thiserror::Error)]
pub enum RecordNotPushed {
    /// The run neither pulled nor made a result: its record is there.
    #[error("nothing new to record")]
    NothingNew,
    #[error("no run {0}")]
    NoSuchRun(RunId),
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// The run database could not give the record.
    #[error(transparent)]
    History(Box<EngineError>),
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
}

/// Resolves stage names given on the command line to indices.
pub fn select_stages(pipeline: &Pipeline, names: &[String]) -> Result<Vec<usize>> {
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (index, stage) in pipeline.stages.iter().enumerate() {
        by_name.entry(stage.name.as_str()).or_default().push(index);
        if stage.base_name != stage.name {
            by_name
                .entry(stage.base_name.as_str())
                .or_default()
                .push(index);
        }
    }
    let mut selected = Vec::new();
    for name in names {
        match by_name.get(name.as_str()) {
            Some(indices) => selected.extend(indices),
            None => {
                let mut known: Vec<&str> = pipeline
                    .stages
                    .iter()
                    .map(|s| s.base_name.as_str())
                    .collect();
                known.dedup();
                let suggestion = crate::suggest::did_you_mean(name, known.iter().copied())
                    .or_else(|| crate::suggest::did_you_mean(name, by_name.keys().copied()));
                return Err(UsageError::UnknownStage {
                    name: name.clone(),
                    file: pipeline.file.clone(),
                    suggestion: suggestion.map(str::to_string),
                    known: known.iter().map(|name| name.to_string()).collect(),
                }
                .into());
            }
        }
    }
    selected.sort_unstable();
    selected.dedup();
    Ok(selected)
}

/// Runs the selected stages: takes the project's run lock and opens the
/// run's record, schedules the stages, then finishes the record and sends
/// it to the remote cache.
pub fn run(
    pipeline: &Pipeline,
    dag: &Dag,
    options: &RunOptions,
    observer: Observer<'_>,
) -> Result<RunOutcome> {
    let project = Project::open(&pipeline.root)?;
    let targets = select_stages(pipeline, &options.targets)?;
    let forced: Vec<usize> = select_stages(pipeline, &options.force)?;
    let lock = RunLock::acquire(&project, |holder| {
        observer(Event::WaitingForLock { holder })
    })?;
    lock.remove_restore_leftovers(&pipeline.root, &pipeline.restore_sites());
    check_requests(pipeline, dag, &targets, &options.executor)?;
    ignore_outputs(pipeline, &project, observer);
    if options.remove_orphans {
        let removed = crate::orphans::remove_orphans(pipeline, &project)?;
        if !removed.is_empty() {
            observer(Event::Orphans {
                paths: &removed,
                removed: true,
            });
        }
    } else {
        let left = crate::orphans::note_outputs(pipeline, &project);
        if !left.is_empty() {
            observer(Event::Orphans {
                paths: &left,
                removed: false,
            });
        }
    }
    let OpenedRun {
        cache,
        remote,
        stat,
        git,
        run,
    } = OpenedRun::open(pipeline, &project, options)?;

    let selected = if targets.is_empty() {
        dag.order.clone()
    } else {
        dag.closure(&targets)
    };
    observer(Event::RunStarted {
        stages: selected.len(),
    });
    // The first stage that is not fresh makes this a run to record: its
    // row is written then, and the work tree's comparison with HEAD starts,
    // in the background, beside the stages, and is waited for when the
    // record is finished. A no-op does neither.
    let observe = |event: Event<'_>| {
        if does_something(&event) {
            if let (Ok(run_id), Some(git)) = (run.id(), &git) {
                git.recorded_as(run_id);
                git.check_dirty();
            }
        }
        observer(event)
    };
    let observer: Observer<'_> = &observe;
    let written_params = write_params_file(pipeline, &selected, git.as_ref(), &run, observer)?;
    let run_so_far = RunSoFar::of(pipeline, dag, &selected);
    let cluster = match &options.executor {
        Executor::Local => None,
        Executor::Slurm(_) => Some(run_id_now(&run)?),
    }
    .and_then(|run_id| lazy_cluster(&options.executor, pipeline, &project, run_id));
    let workspaces = match pipeline.workspaces.is_empty() {
        true => None,
        false => Some(super::workspaces::Workspaces::create(
            &project,
            pipeline,
            run_id_now(&run)?,
        )?),
    };
    let mut is_forced = vec![options.force_all; pipeline.stages.len()];
    for index in forced {
        is_forced[index] = true;
    }
    let context = Context {
        pipeline,
        cache,
        stat,
        link: &options.link,
        run: &run,
        project,
        observer,
        jobs: options.jobs.max(1),
        running: Mutex::new(HashMap::new()),
        run_so_far,
        remote,
        cluster,
        workspaces,
        prebuild: Prebuild::new(pipeline, dag, &selected),
    };
    let outcome = scheduler::schedule(&context, dag, &selected, &is_forced, options.jobs.max(1));
    let transfers = wind_down(&context);
    if let Some(written) = written_params {
        restore_params_file(written, observer);
    }
    if let Some(error) = context.run.take_error() {
        return Err(error);
    }
    let (records, status) = outcome?;
    let recorded = finish_record(context.run, status, &records, git.as_ref())?;
    let remote = remote_summary(context.remote.as_ref(), transfers, recorded, context.run);
    observer(Event::RunFinished { status, recorded });
    Ok(RunOutcome {
        status,
        recorded,
        stages: records,
        remote,
    })
}

/// Keeps the outputs of command stages out of git, as DVC's `repro`
/// does: pipe's cache holds them. Only in a git work tree, and never an
/// output declared `cache: false` (the user commits it). A `.gitignore`
/// that cannot be written costs a warning, not the run.
/// Checked once per set of outputs and `.gitignore` (a fingerprint in
/// `.pipe/`), so that a rerun costs a stat and a small read, not a git
/// process.
fn ignore_outputs(pipeline: &Pipeline, project: &Project, observer: Observer<'_>) {
    // A sweep in work trees writes no output into the project.
    if !pipeline.root.join(".git").exists() || !pipeline.workspaces.is_empty() {
        return;
    }
    let mut paths: Vec<&str> = pipeline
        .cached_command_outputs()
        .map(|out| out.path.as_str())
        .collect();
    paths.sort_unstable();
    paths.dedup();
    let gitignore = pipeline.root.join(".gitignore");
    let fingerprint = |paths: &[&str]| {
        let mut hasher = blake3::Hasher::new();
        for path in paths {
            hasher.update(path.as_bytes());
            hasher.update(b"\0");
        }
        if let Ok(found) = std::fs::metadata(&gitignore) {
            use std::os::unix::fs::MetadataExt;
            hasher.update(&found.len().to_le_bytes());
            hasher.update(&found.mtime_nsec().to_le_bytes());
            hasher.update(&found.mtime().to_le_bytes());
            hasher.update(&found.ino().to_le_bytes());
        }
        hasher.finalize().to_hex().to_string()
    };
    let checked = project.gitignore_checked();
    // A file under `.pipe/`: read as every state file there is.
    let known = pipe_cache::untrusted::read(&checked, pipe_cache::untrusted::STATE_FILE);
    if known.is_ok_and(|known| known == fingerprint(&paths).as_bytes()) {
        return;
    }
    let ignored = crate::gitignore::ignore_paths(&pipeline.root, &paths);
    if ignored.is_ok() {
        let _ = std::fs::write(&checked, fingerprint(&paths));
    }
    match ignored {
        Ok(crate::gitignore::Ignored::Already) => {}
        Ok(crate::gitignore::Ignored::Created(lines) | crate::gitignore::Ignored::Added(lines)) => {
            observer(Event::OutputsIgnored {
                file: &pipeline.root.join(".gitignore"),
                lines: &lines,
            })
        }
        Err(error) => tracing::warn!("cannot keep the stages' outputs out of git: {error}"),
    }
}

/// Writes the run's `-S` values into `params.yaml` when a selected
/// command reads that file by itself, so that it sees what the run
/// records. The work tree's dirty flag is settled first: it is the state
/// the user left, not pipe's own write.
fn write_params_file(
    pipeline: &Pipeline,
    selected: &[usize],
    git: Option<&GitProbe>,
    run: &RunRow<'_>,
    observer: Observer<'_>,
) -> Result<Option<WrittenParams>> {
    let Some(edits) = &pipeline.params_file else {
        return Ok(None);
    };
    let read = selected
        .iter()
        .any(|&index| reads_params_file(edits, &pipeline.stages[index], &pipeline.root));
    if !read {
        return Ok(None);
    }
    if let Some(git) = git {
        // A settler writes into the run's row, which must be there first.
        git.recorded_as(run_id_now(run)?);
        git.finish();
    }
    let written = WrittenParams::write(&pipeline.root, edits)?;
    let params: Vec<&str> = edits.edits.iter().map(|edit| edit.path.as_str()).collect();
    observer(Event::ParamsFileWritten {
        file: &edits.file,
        params: &params,
    });
    Ok(Some(written))
}

/// Whether `stage` reads the file of `edits` by itself: a command whose
/// `params:` names an edited param, or that depends on the file.
fn reads_params_file(edits: &ParamsFileEdits, stage: &Stage, root: &Path) -> bool {
    if !matches!(
        stage.kind,
        StageKind::Command { .. } | StageKind::Argv { .. }
    ) {
        return false;
    }
    let listed = stage.params_listed.iter().any(|listed| {
        edits
            .edits
            .iter()
            .any(|edit| paths_overlap(listed, &edit.path))
    });
    listed
        || stage
            .deps
            .iter()
            .any(|dep| root.join(&dep.path) == edits.file)
}

/// Puts `params.yaml` back. Failing to does not fail the run: the journal
/// stays, and the next pipe command that reads the file puts it back.
fn restore_params_file(written: WrittenParams, observer: Observer<'_>) {
    let file = written.file().to_path_buf();
    let kept = match written.restore() {
        Ok(Restored::PutBack) => None,
        Ok(Restored::ChangedMeanwhile { kept }) => Some(kept),
        Err(error) => {
            tracing::warn!(
                "could not put {} back yet: {error}; the next pipe command that reads it will",
                file.display()
            );
            return;
        }
    };
    observer(Event::ParamsFileRestored {
        file: &file,
        kept: kept.as_deref(),
    });
}

/// What the stages ask of where they run, refused before anything runs:
/// Slurm's limits for those that go there, one node for the others.
fn check_requests(
    pipeline: &Pipeline,
    dag: &Dag,
    targets: &[usize],
    executor: &Executor,
) -> Result<()> {
    if let Executor::Slurm(settings) = executor {
        let selected = if targets.is_empty() {
            dag.order.clone()
        } else {
            dag.closure(targets)
        };
        let on_cluster: Vec<&Stage> = selected
            .iter()
            .map(|&index| &pipeline.stages[index])
            .filter(|stage| !stage.local)
            .collect();
        slurm::check_requests(settings, &on_cluster)?;
    }
    check_local_requests(pipeline, dag, targets, executor)
}

/// What a run works with, opened before its first stage: the stores, the
/// work tree's git state, and the run's row, to be written when the run
/// first does something.
struct OpenedRun<'a> {
    cache: Cache,
    remote: Option<Remote>,
    stat: StatCache,
    git: Option<GitProbe>,
    run: RunRow<'a>,
}

impl<'a> OpenedRun<'a> {
    fn open(pipeline: &'a Pipeline, project: &Project, options: &'a RunOptions) -> Result<Self> {
        let started_ms = crate::runs::now_ms();
        let cache = Cache::open(&project.cache_dir)?;
        let remote = match &options.remote {
            Some(config) => Some(crate::remote::open_remote(config, &project.cache_dir)?),
            None => None,
        };
        let stat = StatCache::open(&project.stat_db())?;
        // The commit, read from a few files; the dirty flag is worked out
        // only by a run that will be recorded (`finish_record`).
        let mut git = GitProbe::start(&pipeline.root);
        let run = RunRow::new(
            project.runs_db(),
            RunStartFacts {
                pipeline: &pipeline.name,
                file: pipeline_file_in_project(pipeline),
                argv: &options.argv,
                overrides: &options.overrides,
                sweep: options.sweep,
                params: &pipeline.params,
                directions: &pipeline.directions,
                git_commit: git.as_ref().map(|git| git.commit().to_string()),
                name: options.name.as_deref(),
                branch: git.as_ref().and_then(GitProbe::branch).map(str::to_string),
                head_commit: git.as_ref().and_then(GitProbe::head_commit),
                started_ms,
            },
        )?;
        if let (Some(git), Some(settler)) = (&mut git, &options.git_settler) {
            git.settle_with(settler.clone(), &project.runs_db());
        }
        Ok(OpenedRun {
            cache,
            remote,
            stat,
            git,
            run,
        })
    }
}

/// The run's id now, its row written: for what names the run before any
/// stage starts (a sweep's work trees, the cluster's job names).
fn run_id_now(run: &RunRow<'_>) -> Result<RunId> {
    run.id()
        .map_err(|message| run.take_error().unwrap_or(EngineError::Internal(message)))
}

/// The Slurm cluster of a run on Slurm, reached only when a stage goes
/// there; jobs an interrupted run left are settled first.
fn lazy_cluster(
    executor: &Executor,
    pipeline: &Pipeline,
    project: &Project,
    run_id: RunId,
) -> Option<slurm::LazyCluster> {
    match executor {
        Executor::Local => None,
        Executor::Slurm(settings) => Some({
            slurm::settle_leftover_jobs(&project.state_dir);
            slurm::LazyCluster::new(settings, &pipeline.root, &project.state_dir, run_id)
        }),
    }
}

/// Once the stages are done: the stat cache saved, the cluster released,
/// and the pushes still in flight finished, before the run is called done.
fn wind_down(context: &Context<'_>) -> Option<TransferReport> {
    tracing::info!(
        "{} files hashed; every other file was answered by the stat cache",
        context.stat.files_hashed()
    );
    // The stat cache only speeds things up: failing to save it loses nothing.
    if let Err(error) = context.stat.flush() {
        tracing::warn!("could not save the stat cache: {error}");
    }
    if let Some(cluster) = &context.cluster {
        cluster.finish();
    }
    context.remote.as_ref().map(Remote::finish)
}

/// The run's record finished, or discarded when the run did nothing;
/// the run, if it is kept.
fn finish_record(
    run: &RunRow<'_>,
    status: RunStatus,
    records: &[StageRecord],
    git: Option<&GitProbe>,
) -> Result<Option<RunId>> {
    // Nothing ran, was restored, failed or was skipped: the run changed
    // nothing and is not history (`pipe runs`, `pipe diff` and `pipe show
    // last` never see it), and it does not wait for the dirty flag. A
    // settler still at work after the grace writes the flag itself. Its
    // row was most likely never written; one written before any stage
    // (a sweep's work trees, a cluster) is taken back.
    if nothing_done(status, records) {
        run.if_written(|db, run_id| db.discard_run(run_id))?;
        return Ok(None);
    }
    run.with_db(|db, run_id| {
        let git_dirty = git.and_then(|git| {
            git.recorded_as(run_id);
            git.finish_within(crate::runs::DIRTY_GRACE).dirty
        });
        db.finish_run(run_id, &RunEnd { status, git_dirty })?;
        Ok(Some(run_id))
    })
}

/// What went to and from the remote cache, the run's record included.
fn remote_summary(
    remote: Option<&Remote>,
    transfers: Option<TransferReport>,
    recorded: Option<RunId>,
    run: &RunRow<'_>,
) -> Option<RemoteSummary> {
    match (remote, transfers) {
        (Some(remote), Some(transfers)) => {
            // A run that neither pulled nor made a result is a rerun of one
            // already recorded: it leaves the remote alone, so a no-op run
            // costs no request at all.
            let touched = transfers.results_pulled
                + transfers.results_pushed
                + transfers.results_already_present
                + transfers.results_not_pushed
                > 0;
            let pushed = match (touched, recorded) {
                (true, Some(_)) => {
                    run.if_written(|db, run_id| Ok(push_run_record(remote, db, run_id)))
                }
                _ => Ok(None),
            };
            let record = match pushed {
                Ok(Some(pushed)) => pushed,
                Ok(None) => Err(RecordNotPushed::NothingNew),
                Err(error) => Err(RecordNotPushed::History(Box::new(error))),
            };
            Some(RemoteSummary {
                url: remote.url().to_string(),
                read_only: remote.read_only(),
                anonymous: remote.anonymous(),
                transfers,
                record,
            })
        }
        _ => None,
    }
}

/// Whether a run did nothing at all: it succeeded and every stage in it
/// was fresh. Such a run is not recorded, as DVC records none: a rerun
/// with nothing changed must not push the run it repeats out of `pipe diff`.
/// The pipeline file relative to the project root, as the run record
/// keeps it; `None` when it lies outside the project (`-f /elsewhere`) or
/// is no path a record may name (a later reader would not take it).
fn pipeline_file_in_project(pipeline: &Pipeline) -> Option<ProjectPath> {
    let file = std::path::absolute(&pipeline.file).ok()?;
    let relative = match file.strip_prefix(&pipeline.root) {
        Ok(relative) => relative.to_path_buf(),
        // One of the two reached through a symbolic link.
        Err(_) => {
            let file = file.canonicalize().ok()?;
            let root = pipeline.root.canonicalize().ok()?;
            file.strip_prefix(root).ok()?.to_path_buf()
        }
    };
    ProjectPath::stored(relative.to_str()?).ok()
}

/// Whether `event` shows the run doing something: a stage that runs, or
/// ends other than fresh.
fn does_something(event: &Event<'_>) -> bool {
    match event {
        Event::StageRunning { .. } => true,
        Event::StageFinished { status, .. } => *status != StageStatus::Fresh,
        _ => false,
    }
}

/// Sends run `run_id`'s record to the remote, so that `pipe compare` on
/// another machine shows it.
pub fn push_run_record(
    remote: &Remote,
    db: &RunDb,
    run_id: RunId,
) -> std::result::Result<(), RecordNotPushed> {
    // A remote read anonymously refuses the write itself, saying why.
    if remote.read_only() && !remote.anonymous() {
        return Err(RemoteError::ReadOnly.into());
    }
    let export = db
        .export_run(run_id)
        .map_err(|error| RecordNotPushed::History(Box::new(error)))?
        .ok_or(RecordNotPushed::NoSuchRun(run_id))?;
    let json = serde_json::to_vec_pretty(&export)?;
    let uid = export.run.uid.as_deref().unwrap_or_default();
    remote.put_run_record(export.run.git_commit.as_deref(), uid, json)?;
    // The labels again on their own, so that a clone that has the record
    // already learns of a name or tag given since.
    if let Some(labels) = db
        .labels_of(run_id)
        .map_err(|error| RecordNotPushed::History(Box::new(error)))?
    {
        let json = serde_json::to_vec(&labels)?;
        remote.put_run_labels(&labels.uid, labels.labels_ms, json)?;
    }
    Ok(())
}

/// A stage that runs on this machine cannot span nodes: refused, at its
/// place in the pipeline, before anything runs.
fn check_local_requests(
    pipeline: &Pipeline,
    dag: &Dag,
    targets: &[usize],
    executor: &Executor,
) -> Result<()> {
    let selected = if targets.is_empty() {
        dag.order.clone()
    } else {
        dag.closure(targets)
    };
    let on_slurm = matches!(executor, Executor::Slurm(_));
    let diagnostics: Vec<crate::diagnostic::Diagnostic> = selected
        .iter()
        .map(|&index| &pipeline.stages[index])
        .filter(|stage| stage.resources.nodes > 1 && (!on_slurm || stage.local))
        .map(|stage| {
            crate::diagnostic::Diagnostic::new(
                "nodes-need-slurm",
                format!(
                    "stage `{}` asks for {} nodes, but it runs on this machine",
                    stage.name, stage.resources.nodes
                ),
            )
            .at(stage.location.clone())
            .with_hint(if stage.local {
                "a `local: true` stage never goes to Slurm; drop `local`, or ask for `resources.nodes: 1`"
            } else {
                "run it on Slurm (`pipe run --executor slurm`, or `executor: slurm` in the pipeline), or ask for `resources.nodes: 1`"
            })
        })
        .collect();
    if diagnostics.is_empty() {
        Ok(())
    } else {
        Err(EngineError::Spec(diagnostics))
    }
}
