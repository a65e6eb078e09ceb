//! `pipe cache push|pull|status`, the end-of-run remote summary, and run
//! records pulled on demand for a git ref (`pipe compare main` on a laptop).

use std::path::Path;

use pipe_cache::remote::{Presence, Pulled, Remote, RemoteConfig, TransferReport};
use pipe_cache::Cache;
use pipe_engine::exec::{self, RemoteSummary};
use pipe_engine::history::{self, History, Pull};
use pipe_engine::runs::RunDb;
use pipe_engine::{EngineError, ExitCode, Result, UsageError};
use pipe_protocol::format::{format_bytes, format_seconds};
use serde_json::json;

use crate::cli::RemoteArgs;
use crate::here;
use crate::output::{errln, jsonln, outln};
use crate::transfers;

/// How a command's transfers are shown: `--json` events on stdout, and
/// bars or lines on stderr unless `--quiet`.
#[derive(Debug, Clone, Copy)]
pub struct Shown {
    pub json: bool,
    pub quiet: bool,
}

/// Opens `config`'s remote with its transfers shown as `shown` says.
fn open_shown(config: RemoteConfig, cache_dir: &Path, shown: Shown) -> Result<Remote> {
    let bars = transfers::terminal_bars(shown.quiet);
    let config = match transfers::sink(shown.json, shown.quiet, bars) {
        Some(sink) => config.with_progress(sink),
        None => config,
    };
    exec::open_remote(&config, cache_dir)
}

fn configured(root: &Path, file: Option<&Path>, args: &RemoteArgs) -> Result<Option<RemoteConfig>> {
    history::configured_remote(root, file, args.remote.as_deref(), args.remote_read_only)
}

fn required(root: &Path, file: Option<&Path>, args: &RemoteArgs) -> Result<RemoteConfig> {
    configured(root, file, args)?.ok_or(
        UsageError::NoRemote {
            flag: "--remote s3://BUCKET/PREFIX",
        }
        .into(),
    )
}

/// The records the remote has (for `commit`, or all) that this history
/// lacks, pulled; says which it skipped.
fn pull_records(
    remote: &Remote,
    cache: &Cache,
    history: &mut History,
    commit: Option<&str>,
) -> Result<history::RecordsPulled> {
    let pulled = history::pull_records(remote, cache, &mut history.db, commit)?;
    for skipped in &pulled.skipped {
        errln!("warning: {skipped}");
    }
    Ok(pulled)
}

/// `pipe cache gc`'s part for the configured remote: what killed pushes
/// left in a `file://` remote's `tmp/` (S3 has its lifecycle rule for
/// aborted uploads; docs/remote-cache.md).
pub fn remove_stale_temporaries(
    project: &pipe_engine::project::Project,
    file: Option<&Path>,
    args: &RemoteArgs,
) -> Result<()> {
    let Some(config) = configured(&project.root, file, args)? else {
        return Ok(());
    };
    let remote = exec::open_remote(&config, &project.cache_dir)?;
    if let Some(swept) = remote.remove_stale_temporaries()? {
        outln!(
            "{}: removed {} temporary files ({}) that killed pushes left in tmp/",
            remote.url(),
            swept.files,
            format_bytes(swept.bytes as f64)
        );
    }
    Ok(())
}

pub fn push(
    run: Option<&str>,
    all: bool,
    file: Option<&Path>,
    args: &RemoteArgs,
    shown: Shown,
) -> Result<ExitCode> {
    let project = here::project()?;
    let config = required(&project.root, file, args)?;
    if config.read_only {
        return Err(UsageError::RemoteReadOnly { url: config.url }.into());
    }
    let mut history = here::history()?;
    let ids: Vec<i64> = if all {
        history
            .db
            .list_runs(usize::MAX)?
            .into_iter()
            .filter(|run| run.origin.is_none())
            .map(|run| run.id)
            .collect()
    } else {
        vec![here::resolve(
            &mut history,
            run.unwrap_or("last"),
            Pull::IfConfigured,
        )?]
    };
    let remote = open_shown(config, &project.cache_dir, shown)?;
    let cache = Cache::open(&project.cache_dir)?;
    let (results, missing) = history.results_of_runs(&cache, &ids)?;
    let count = results.len();
    remote.push_results(results);
    let mut records = 0;
    for &id in &ids {
        if remote.unavailable().is_some() {
            break;
        }
        match exec::push_run_record(&remote, &history.db, id) {
            Ok(()) => records += 1,
            Err(reason) => errln!("warning: the record of run #{id} was not pushed: {reason}"),
        }
    }
    let report = remote.finish();
    if shown.json {
        jsonln!(json!({
            "event": "pushed", "remote": remote.url(), "results": count,
            "results_pushed": report.results_pushed,
            "results_already_present": report.results_already_present,
            "results_not_pushed": report.results_not_pushed,
            "objects_pushed": report.objects_pushed, "objects_present": report.objects_present,
            "bytes_pushed": report.bytes_pushed, "records_pushed": records,
            "missing_locally": missing, "unavailable": report.unavailable,
            "push_refused": report.push_refused,
        }));
    }
    errln!(
        "{}: {count} results ({} pushed, {} already there; {} objects, {} sent), {records} run records",
        remote.url(),
        report.results_pushed,
        report.results_already_present,
        report.objects_pushed,
        format_bytes(report.bytes_pushed as f64),
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
    shown: Shown,
) -> Result<ExitCode> {
    let project = here::project()?;
    let config = required(&project.root, file, args)?;
    let remote = open_shown(config, &project.cache_dir, shown)?;
    let cache = Cache::open(&project.cache_dir)?;
    let mut history = History {
        db: RunDb::open(&project.runs_db())?,
        root: project.root.clone(),
    };
    let ids: Vec<i64> = match (run, all) {
        (None, false) => {
            let pulled = pull_records(&remote, &cache, &mut history, None)?;
            let report = remote.finish();
            if shown.json {
                jsonln!(json!({
                    "event": "pulled", "remote": remote.url(),
                    "records": pulled.listed, "records_new": pulled.new.len(),
                    "unavailable": report.unavailable,
                }));
            }
            errln!(
                "{}: {} run records, {} new here",
                remote.url(),
                pulled.listed,
                pulled.new.len()
            );
            return Ok(exit_for(&report));
        }
        (_, true) => {
            pull_records(&remote, &cache, &mut history, None)?;
            let uids = history::remote_uids(&remote)?;
            history
                .db
                .list_runs(usize::MAX)?
                .into_iter()
                .filter(|run| run.uid.as_ref().is_some_and(|uid| uids.contains(uid)))
                .map(|run| run.id)
                .collect()
        }
        (Some(query), false) => vec![here::resolve(&mut history, query, Pull::From(&remote))?],
    };
    let (mut here, mut pulled, mut absent, mut corrupt) = (0, 0, 0, 0);
    for key in history.keys_of_runs(&ids)? {
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
    if shown.json {
        jsonln!(json!({
            "event": "pulled", "remote": remote.url(), "results_pulled": pulled,
            "objects_pulled": report.objects_pulled, "bytes_pulled": report.bytes_pulled,
            "already_here": here, "not_in_remote": absent, "corrupt": corrupt,
            "unavailable": report.unavailable,
        }));
    }
    errln!(
        "{}: {pulled} results pulled ({} objects, {}), {here} already here, {absent} not in the remote, {corrupt} corrupt",
        remote.url(),
        report.objects_pulled,
        format_bytes(report.bytes_pulled as f64),
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
    let project = here::project()?;
    let config = required(&project.root, file, args)?;
    let remote = exec::open_remote(&config, &project.cache_dir)?;
    let mut history = History {
        db: RunDb::open(&project.runs_db())?,
        root: project.root.clone(),
    };
    let id = here::resolve(&mut history, run.unwrap_or("last"), Pull::From(&remote))?;
    let record = history.db.resolved_run(id)?;
    let cache = Cache::open(&project.cache_dir)?;
    let keyed: Vec<_> = record
        .stages
        .iter()
        .filter_map(|stage| Some((stage.stage.clone(), stage.key?)))
        .collect();
    let keys: Vec<_> = keyed.iter().map(|(_, key)| *key).collect();
    // One lookup per stage, `concurrency` at a time.
    let presences = match remote.presence_of_all(&keys) {
        Ok(presences) => presences,
        Err(reason) => {
            errln!("error: {reason}");
            return Ok(ExitCode::RemoteUnavailable);
        }
    };
    let rows: Vec<_> = keyed
        .into_iter()
        .zip(presences)
        .map(|((stage, key), presence)| {
            let in_remote = match presence {
                Presence::Complete => "yes",
                Presence::Incomplete => "incomplete",
                Presence::Absent => "no",
            };
            (stage, key, cache.get_action(&key).is_some(), in_remote)
        })
        .collect();
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
        jsonln!(serde_json::to_string_pretty(&json!({
            "run": id, "remote": remote.url(), "record_pushed": record_pushed, "stages": stages,
        }))
        .unwrap_or_default());
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
            "push_seconds": transfers.push_seconds,
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
            format_bytes(transfers.bytes_pulled as f64)
        ));
    }
    if transfers.results_pushed > 0 {
        parts.push(format!(
            "pushed {} results ({}) in {}",
            transfers.results_pushed,
            format_bytes(transfers.bytes_pushed as f64),
            format_seconds(transfers.push_seconds)
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
