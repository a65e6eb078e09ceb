//! `pipe cache push|pull|status`, the end-of-run remote summary, and run
//! records pulled on demand for a git ref (`pipe compare main` on a laptop).

use std::collections::BTreeSet;
use std::path::Path;

use pipe_cache::remote::{Presence, Pulled, Remote, RemoteConfig, TransferReport};
use pipe_cache::{ActionKey, ActionResult, Cache};
use pipe_engine::exec::{self, RemoteSummary};
use pipe_engine::project::Project;
use pipe_engine::remote::{self as remote_settings, RemoteSpec};
use pipe_engine::runs::{self, RunDb, RunExport};
use pipe_engine::{EngineError, ExitCode, Result};
use serde_json::json;

use crate::cli::RemoteArgs;
use crate::commands::project_here;
use crate::output::{errln, outln};
use crate::render;

/// The remote from the flags, the environment, the pipeline file (`-f`,
/// else `pipe.yaml` here if there is one) and pipe.config.yaml.
pub fn configured(
    root: &Path,
    file: Option<&Path>,
    args: &RemoteArgs,
) -> Result<Option<RemoteConfig>> {
    let default_file = Path::new("pipe.yaml");
    let pipeline: Option<RemoteSpec> = match file {
        Some(file) => pipe_engine::spec::pipeline_remote(file)?,
        None if default_file.is_file() => pipe_engine::spec::pipeline_remote(default_file)?,
        None => None,
    };
    remote_settings::resolve(
        root,
        pipeline.as_ref(),
        args.remote.as_deref(),
        args.remote_read_only,
    )
}

fn required(root: &Path, file: Option<&Path>, args: &RemoteArgs) -> Result<RemoteConfig> {
    configured(root, file, args)?.ok_or_else(|| {
        EngineError::usage(
            "no remote cache is configured",
            format!(
                "pass --remote s3://BUCKET/PREFIX, set PIPE_REMOTE, or add `cache: {{ remote: s3://BUCKET/PREFIX }}` to the pipeline or {}",
                pipe_engine::spec::PROJECT_CONFIG_FILE
            ),
        )
    })
}

/// The keys the stages of runs `ids` recorded.
fn keys_of_runs(db: &RunDb, ids: &[i64]) -> Result<BTreeSet<ActionKey>> {
    let mut keys = BTreeSet::new();
    for &id in ids {
        if let Some(run) = db.run(id)? {
            keys.extend(
                run.stages
                    .iter()
                    .filter_map(|stage| stage.key.as_deref()?.parse::<ActionKey>().ok()),
            );
        }
    }
    Ok(keys)
}

/// The results the stages of runs `ids` recorded, as the local cache holds
/// them, and how many it no longer holds.
fn results_of_runs(db: &RunDb, cache: &Cache, ids: &[i64]) -> Result<(Vec<ActionResult>, usize)> {
    let mut results = Vec::new();
    let mut missing = 0;
    for key in keys_of_runs(db, ids)? {
        match cache.get_action(&key) {
            Some(result) => results.push(result),
            None => missing += 1,
        }
    }
    Ok((results, missing))
}

pub fn push(
    run: Option<&str>,
    all: bool,
    file: Option<&Path>,
    args: &RemoteArgs,
) -> Result<ExitCode> {
    let project = project_here()?;
    let config = required(&project.root, file, args)?;
    if config.read_only {
        return Err(EngineError::usage(
            format!("the remote cache {} is read-only here", config.url),
            "a read-only remote is never written; drop --remote-read-only, PIPE_REMOTE_READ_ONLY or `read_only: true` to push",
        ));
    }
    let db = crate::commands::require_db()?;
    let ids: Vec<i64> = if all {
        db.list_runs(usize::MAX)?
            .into_iter()
            .filter(|run| run.origin.is_none())
            .map(|run| run.id)
            .collect()
    } else {
        vec![crate::commands::resolve_run(&db, run.unwrap_or("last"))?]
    };
    let remote = exec::open_remote(&config, &project.cache_dir)?;
    let cache = Cache::open(&project.cache_dir)?;
    let (results, missing) = results_of_runs(&db, &cache, &ids)?;
    let count = results.len();
    remote.push_results(results);
    let mut records = 0;
    for &id in &ids {
        if remote.unavailable().is_some() {
            break;
        }
        match exec::push_run_record(&remote, &db, id) {
            Ok(()) => records += 1,
            Err(reason) => errln!("warning: the record of run #{id} was not pushed: {reason}"),
        }
    }
    let report = remote.finish();
    errln!(
        "{}: {count} results ({} pushed, {} already there; {} objects, {} sent), {records} run records",
        remote.url(),
        report.results_pushed,
        report.results_already_present,
        report.objects_pushed,
        render::bytes(report.bytes_pushed),
    );
    if missing > 0 {
        errln!("warning: {missing} results of these runs are no longer in the local cache (removed by `pipe cache gc`) and were not pushed");
    }
    Ok(exit_for(&report))
}

pub fn pull(
    run: Option<&str>,
    all: bool,
    file: Option<&Path>,
    args: &RemoteArgs,
) -> Result<ExitCode> {
    let project = project_here()?;
    let config = required(&project.root, file, args)?;
    let remote = exec::open_remote(&config, &project.cache_dir)?;
    let mut db = RunDb::open(&project.runs_db())?;
    let ids: Vec<i64> = match (run, all) {
        (None, false) => {
            let (listed, new) = pull_records(&remote, &mut db, None)?;
            let report = remote.finish();
            errln!(
                "{}: {listed} run records, {} new here",
                remote.url(),
                new.len()
            );
            return Ok(exit_for(&report));
        }
        (_, true) => {
            pull_records(&remote, &mut db, None)?;
            let uids = remote_uids(&remote)?;
            db.list_runs(usize::MAX)?
                .into_iter()
                .filter(|run| run.uid.as_ref().is_some_and(|uid| uids.contains(uid)))
                .map(|run| run.id)
                .collect()
        }
        (Some(query), false) => vec![resolve_or_pull(&mut db, &remote, &project.root, query)?],
    };
    let cache = Cache::open(&project.cache_dir)?;
    let (mut here, mut pulled, mut absent, mut corrupt) = (0, 0, 0, 0);
    for key in keys_of_runs(&db, &ids)? {
        if cache.get_action(&key).is_some() {
            here += 1;
            continue;
        }
        match remote.pull_result(&key) {
            Pulled::Hit { .. } => pulled += 1,
            Pulled::Miss => absent += 1,
            Pulled::Corrupt(reason) => {
                errln!(
                    "warning: result {} in the remote is corrupt: {reason}",
                    key.short()
                );
                corrupt += 1;
            }
            Pulled::Unavailable => break,
        }
    }
    let report = remote.finish();
    errln!(
        "{}: {pulled} results pulled ({} objects, {}), {here} already here, {absent} not in the remote, {corrupt} corrupt",
        remote.url(),
        report.objects_pulled,
        render::bytes(report.bytes_pulled),
    );
    if let [id] = ids.as_slice() {
        if report.unavailable.is_none() && absent + corrupt == 0 {
            errln!("`pipe checkout {id}` puts run #{id}'s outputs in the workspace");
        }
    }
    Ok(exit_for(&report))
}

pub fn status(
    run: Option<&str>,
    file: Option<&Path>,
    args: &RemoteArgs,
    json_output: bool,
) -> Result<ExitCode> {
    let project = project_here()?;
    let config = required(&project.root, file, args)?;
    let remote = exec::open_remote(&config, &project.cache_dir)?;
    let mut db = RunDb::open(&project.runs_db())?;
    let id = resolve_or_pull(&mut db, &remote, &project.root, run.unwrap_or("last"))?;
    let record = db
        .run(id)?
        .ok_or_else(|| EngineError::Internal(format!("run {id} vanished")))?;
    let cache = Cache::open(&project.cache_dir)?;
    let mut rows = Vec::new();
    for stage in &record.stages {
        let Some(key) = stage
            .key
            .as_deref()
            .and_then(|key| key.parse::<ActionKey>().ok())
        else {
            continue;
        };
        let local = cache.get_action(&key).is_some();
        let in_remote = match remote.presence(&key) {
            Ok(Presence::Complete) => "yes",
            Ok(Presence::Incomplete) => "incomplete",
            Ok(Presence::Absent) => "no",
            Err(reason) => {
                errln!("error: {reason}");
                return Ok(ExitCode::RemoteUnavailable);
            }
        };
        rows.push((stage.stage.clone(), key, local, in_remote));
    }
    let record_pushed = match record.uid.as_deref() {
        Some(uid) => remote
            .list_run_records(record.git_commit.as_deref().or(Some("no-commit")))
            .map_err(EngineError::RemoteUnavailable)?
            .iter()
            .any(|path| path.ends_with(&format!("/{uid}.json"))),
        None => false,
    };
    if json_output {
        let stages: Vec<_> = rows
            .iter()
            .map(|(stage, key, local, in_remote)| {
                json!({"stage": stage, "key": key.to_hex(), "local": local, "remote": in_remote})
            })
            .collect();
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "run": id, "remote": remote.url(), "record_pushed": record_pushed, "stages": stages,
            }))
            .unwrap_or_default()
        );
    } else {
        outln!("run #{id} in {}", remote.url());
        for (stage, key, local, in_remote) in &rows {
            outln!(
                "  {stage:<30} {}  local: {:<3}  remote: {in_remote}",
                key.short(),
                if *local { "yes" } else { "no" }
            );
        }
        outln!(
            "  record: {}",
            if record_pushed {
                "in the remote"
            } else {
                "not pushed"
            }
        );
    }
    Ok(ExitCode::Ok)
}

/// Downloads the run records the remote has (for `commit`, or all) that
/// this database lacks; returns how many the remote lists and the new ids.
fn pull_records(
    remote: &Remote,
    db: &mut RunDb,
    commit: Option<&str>,
) -> Result<(usize, Vec<i64>)> {
    let paths = remote
        .list_run_records(commit)
        .map_err(EngineError::RemoteUnavailable)?;
    let known = db.known_uids()?;
    let mut new = Vec::new();
    for path in &paths {
        let uid = uid_of(path);
        if known.contains(uid) {
            continue;
        }
        let bytes = remote
            .get_run_record(path)
            .map_err(EngineError::RemoteUnavailable)?;
        match serde_json::from_slice::<RunExport>(&bytes) {
            Ok(export)
                if export.format == RunExport::FORMAT && export.run.uid.as_deref() == Some(uid) =>
            {
                // A record names outputs that `pipe checkout` writes: only
                // plain project-relative places are taken in.
                let bad_path = export.run.stages.iter().find_map(|stage| {
                    stage.outputs.keys().find_map(|output| {
                        pipe_cache::check_relative_path(output)
                            .err()
                            .map(|problem| format!("`{output:.80}` {problem}"))
                    })
                });
                if let Some(problem) = bad_path {
                    errln!("warning: run record {path} in the remote names an output that {problem}; skipped");
                    continue;
                }
                if let Some(id) = db.import_run(&export, remote.url())? {
                    new.push(id);
                }
            }
            Ok(_) => errln!(
                "warning: run record {path} in the remote is not a {} record for its name; skipped",
                RunExport::FORMAT
            ),
            Err(error) => {
                errln!("warning: run record {path} in the remote is unreadable ({error}); skipped")
            }
        }
    }
    Ok((paths.len(), new))
}

fn uid_of(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_suffix(".json").unwrap_or(name)
}

fn remote_uids(remote: &Remote) -> Result<BTreeSet<String>> {
    Ok(remote
        .list_run_records(None)
        .map_err(EngineError::RemoteUnavailable)?
        .iter()
        .map(|path| uid_of(path).to_string())
        .collect())
}

/// Resolves a run here; a git ref with no run here brings the remote's
/// records for that commit first.
fn resolve_or_pull(db: &mut RunDb, remote: &Remote, root: &Path, query: &str) -> Result<i64> {
    let resolved = db.resolve(query, |reference| runs::git_commit_of(root, reference));
    match resolved {
        Ok(id) => Ok(id),
        Err(error) => {
            let Some(commit) = runs::git_commit_of(root, query) else {
                return Err(error);
            };
            let (_, new) = pull_records(remote, db, Some(&commit))?;
            if new.is_empty() {
                return Err(error);
            }
            db.resolve(query, |reference| runs::git_commit_of(root, reference))
        }
    }
}

/// For commands that only read runs (`show`, `diff`, `compare`): a git ref
/// with no run here is looked up in the remote cache, when one is
/// configured, and its records are pulled. Quietly nothing otherwise.
pub fn pull_records_for_ref(root: &Path, query: &str) -> Option<usize> {
    let commit = runs::git_commit_of(root, query)?;
    let config = configured(root, None, &RemoteArgs::default()).ok()??;
    let project = Project::open(root).ok()?;
    let remote = exec::open_remote(&config, &project.cache_dir).ok()?;
    let mut db = RunDb::open(&project.runs_db()).ok()?;
    let (_, new) = pull_records(&remote, &mut db, Some(&commit)).ok()?;
    if !new.is_empty() {
        errln!(
            "pulled {} run record{} of `{query}` from {}",
            new.len(),
            if new.len() == 1 { "" } else { "s" },
            remote.url()
        );
    }
    Some(new.len())
}

fn exit_for(report: &TransferReport) -> ExitCode {
    match (&report.unavailable, &report.push_refused) {
        (Some(reason), _) | (None, Some(reason)) => {
            errln!("error: {reason}");
            ExitCode::RemoteUnavailable
        }
        _ => ExitCode::Ok,
    }
}

/// What `pipe run` says about the remote at its end: one line on stderr,
/// or a `remote` event with `--json`.
pub fn print_run_summary(summary: &RemoteSummary, json_events: bool, quiet: bool) {
    let transfers = &summary.transfers;
    if json_events {
        let event = json!({
            "event": "remote",
            "url": summary.url,
            "read_only": summary.read_only,
            "results_pulled": transfers.results_pulled,
            "objects_pulled": transfers.objects_pulled,
            "bytes_pulled": transfers.bytes_pulled,
            "results_pushed": transfers.results_pushed,
            "results_already_present": transfers.results_already_present,
            "objects_pushed": transfers.objects_pushed,
            "objects_present": transfers.objects_present,
            "bytes_pushed": transfers.bytes_pushed,
            "results_not_pushed": transfers.results_not_pushed,
            "corrupt_found": transfers.corrupt_found,
            "unavailable": transfers.unavailable,
            "push_refused": transfers.push_refused,
            "record_pushed": summary.record.is_ok(),
        });
        outln!("{event}");
    }
    if quiet {
        return;
    }
    let mut parts = Vec::new();
    if transfers.results_pulled > 0 {
        parts.push(format!(
            "pulled {} results ({})",
            transfers.results_pulled,
            render::bytes(transfers.bytes_pulled)
        ));
    }
    if transfers.results_pushed > 0 {
        parts.push(format!(
            "pushed {} results ({}) in {:.1} s",
            transfers.results_pushed,
            render::bytes(transfers.bytes_pushed),
            transfers.push_seconds
        ));
    }
    if transfers.results_already_present > 0 {
        parts.push(format!(
            "{} results were already there (another run pushed them first)",
            transfers.results_already_present
        ));
    }
    if summary.read_only {
        parts.push("read-only: nothing pushed".to_string());
    }
    if !parts.is_empty() {
        errln!("remote {}: {}", summary.url, parts.join(", "));
    }
    if let Some(reason) = transfers
        .unavailable
        .as_ref()
        .or(transfers.push_refused.as_ref())
    {
        errln!("warning: {reason}");
        if transfers.results_not_pushed > 0 {
            errln!(
                "warning: {} results were not pushed; `pipe cache push` sends them when the remote is back",
                transfers.results_not_pushed
            );
        }
    }
}
