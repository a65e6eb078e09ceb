//! `pipe cache push|pull|status`: a run's results and record between the
//! local cache and the remote, as use cases. Each takes the project, the
//! remote's settings as given and the runs named, does the transfers, and
//! returns a report the CLI renders; what it has to say on the way (a
//! record skipped, pulled) goes to `notify` as it happens.

use std::path::Path;

use pipe_cache::remote::{
    Presence, ProgressSink, Pulled, Remote, RemoteConfig, TmpSwept, TransferReport,
};
use pipe_cache::{ActionKey, Cache, RemoteError};

use crate::exec::{push_run_record, RecordNotPushed};
use crate::history::{configured_remote, pull_records, remote_uids, History, Notice, Pull};
use crate::project::Project;
use crate::remote::open_remote;
use crate::runs::RunId;
use crate::runs::{RunDb, RunRecord, RunSelection};
use crate::{EngineError, Result, UsageError};

/// Which remote a command uses, as its flags give it.
#[derive(Default)]
pub struct RemoteChoice<'a> {
    /// The pipeline file whose `cache.remote` counts (default `pipe.yaml`).
    pub file: Option<&'a Path>,
    /// `--remote`.
    pub flag: Option<&'a str>,
    /// `--remote-read-only`.
    pub read_only: bool,
    /// Where transfers are reported, when they are shown.
    pub transfers: Option<ProgressSink>,
}

/// Which runs a push or pull moves.
#[derive(Debug, Clone, Copy)]
pub enum Runs<'a> {
    /// One run reference (`last`, `12`, a git ref).
    One(&'a str),
    All,
}

/// The remote `choice` names, its settings resolved; a usage error when
/// none is configured.
fn required_remote(project: &Project, choice: &RemoteChoice<'_>) -> Result<RemoteConfig> {
    let config = configured_remote(&project.root, choice.file, choice.flag, choice.read_only)?;
    let config = config.ok_or(UsageError::NoRemote {
        flag: "--remote s3://BUCKET/PREFIX",
    })?;
    Ok(match &choice.transfers {
        Some(sink) => config.with_progress(sink.clone()),
        None => config,
    })
}

fn history_of(project: &Project) -> Result<History> {
    Ok(History {
        db: RunDb::open(&project.runs_db())?,
        root: project.root.clone(),
    })
}

/// What `pipe cache push` did.
pub struct PushReport {
    pub url: String,
    /// The results of the runs, found in the local cache.
    pub results: usize,
    pub transfers: TransferReport,
    pub records_pushed: usize,
    /// Runs whose record did not reach the remote, and why.
    pub records_not_pushed: Vec<(RunId, RecordNotPushed)>,
    /// Results of these runs that `pipe cache gc` removed here.
    pub missing_locally: usize,
}

/// Sends the results and records of `runs` to the remote.
pub fn push(
    project: &Project,
    choice: &RemoteChoice<'_>,
    runs: Runs<'_>,
    notify: &mut dyn FnMut(Notice),
) -> Result<PushReport> {
    let config = required_remote(project, choice)?;
    if config.read_only {
        return Err(UsageError::RemoteReadOnly { url: config.url }.into());
    }
    let mut history = History::require(&project.root)?;
    let runs: Vec<RunRecord> = match runs {
        Runs::All => history
            .db
            .runs(&RunSelection::default())?
            .into_iter()
            .filter(|run| run.origin.is_none())
            .collect(),
        Runs::One(query) => {
            let id = history.resolve_noting(query, Pull::IfConfigured, notify)?;
            vec![history.db.resolved_run(id)?]
        }
    };
    let ids: Vec<RunId> = runs.iter().map(|run| run.id).collect();
    let remote = open_remote(&config, &project.cache_dir)?;
    let cache = Cache::open(&project.cache_dir)?;
    let (results, missing_locally) = History::results_of_runs(&cache, &runs);
    let count = results.len();
    remote.push_results(results);
    let (mut records_pushed, mut records_not_pushed) = (0, Vec::new());
    for &id in &ids {
        if remote.unavailable().is_some() {
            break;
        }
        match push_run_record(&remote, &history.db, id) {
            Ok(()) => records_pushed += 1,
            Err(reason) => records_not_pushed.push((id, reason)),
        }
    }
    Ok(PushReport {
        transfers: remote.finish(),
        url: remote.url().to_string(),
        results: count,
        records_pushed,
        records_not_pushed,
        missing_locally,
    })
}

/// What `pipe cache pull` did.
pub enum PullReport {
    /// No run named: the remote's run records taken in.
    Records {
        url: String,
        listed: usize,
        new: usize,
        transfers: TransferReport,
    },
    /// The results of the runs named.
    Results {
        url: String,
        /// The runs whose results were asked for.
        runs: Vec<RunId>,
        pulled: usize,
        already_here: usize,
        not_in_remote: usize,
        /// Results the remote holds damaged, and what is wrong.
        corrupt: Vec<(ActionKey, String)>,
        transfers: TransferReport,
    },
}

/// Takes in the remote's run records, then, when `runs` names any, their
/// results.
pub fn pull(
    project: &Project,
    choice: &RemoteChoice<'_>,
    runs: Option<Runs<'_>>,
    notify: &mut dyn FnMut(Notice),
) -> Result<PullReport> {
    let config = required_remote(project, choice)?;
    let remote = open_remote(&config, &project.cache_dir)?;
    let cache = Cache::open(&project.cache_dir)?;
    let mut history = history_of(project)?;
    let mut take_records = |history: &mut History| -> Result<_> {
        let root = history.root.clone();
        let pulled = pull_records(&remote, &cache, &mut history.db, &root, None)?;
        pulled
            .skipped
            .iter()
            .cloned()
            .map(Notice::Skipped)
            .for_each(&mut *notify);
        Ok(pulled)
    };
    let runs: Vec<RunRecord> = match runs {
        None => {
            let pulled = take_records(&mut history)?;
            return Ok(PullReport::Records {
                transfers: remote.finish(),
                url: remote.url().to_string(),
                listed: pulled.listed,
                new: pulled.new.len(),
            });
        }
        Some(Runs::All) => {
            take_records(&mut history)?;
            let uids = remote_uids(&remote)?;
            history
                .db
                .runs(&RunSelection::default())?
                .into_iter()
                .filter(|run| run.uid.as_ref().is_some_and(|uid| uids.contains(uid)))
                .collect()
        }
        Some(Runs::One(query)) => {
            let id = history.resolve_noting(query, Pull::From(&remote), notify)?;
            vec![history.db.resolved_run(id)?]
        }
    };
    let ids: Vec<RunId> = runs.iter().map(|run| run.id).collect();
    let (mut pulled, mut already_here, mut not_in_remote) = (0, 0, 0);
    let mut corrupt = Vec::new();
    for key in History::keys_of_runs(&runs) {
        if cache.get_action(&key).is_some() {
            already_here += 1;
            continue;
        }
        match remote.pull_result(&key) {
            Pulled::Hit { .. } => pulled += 1,
            Pulled::Miss => not_in_remote += 1,
            Pulled::Corrupt(reason) => corrupt.push((key, reason)),
            Pulled::Unavailable => break,
        }
    }
    Ok(PullReport::Results {
        transfers: remote.finish(),
        url: remote.url().to_string(),
        runs: ids,
        pulled,
        already_here,
        not_in_remote,
        corrupt,
    })
}

/// One stage of a run, here and in the remote.
pub struct StageInRemote {
    pub stage: String,
    pub key: ActionKey,
    pub local: bool,
    pub remote: Presence,
}

/// What `pipe cache status` found of a run.
pub struct RunInRemote {
    pub id: RunId,
    pub url: String,
    pub stages: Vec<StageInRemote>,
    pub record_pushed: bool,
}

/// Where the results and record of the run `query` names are: here, in
/// the remote, both. A remote that cannot answer is the error
/// [`EngineError::RemoteUnavailable`].
pub fn run_in_remote(
    project: &Project,
    choice: &RemoteChoice<'_>,
    query: &str,
    notify: &mut dyn FnMut(Notice),
) -> Result<RunInRemote> {
    let config = required_remote(project, choice)?;
    let remote: Remote = open_remote(&config, &project.cache_dir)?;
    let mut history = history_of(project)?;
    let id = history.resolve_noting(query, Pull::From(&remote), notify)?;
    let record = history.db.resolved_run(id)?;
    let cache = Cache::open(&project.cache_dir)?;
    let keyed: Vec<(String, ActionKey)> = record
        .stages
        .iter()
        .filter_map(|stage| Some((stage.stage.clone(), stage.key?)))
        .collect();
    let keys: Vec<ActionKey> = keyed.iter().map(|(_, key)| *key).collect();
    // One lookup per stage, `concurrency` at a time.
    let presences = remote
        .presence_of_all(&keys)
        .map_err(EngineError::RemoteUnavailable)?;
    let stages = keyed
        .into_iter()
        .zip(presences)
        .map(|((stage, key), remote)| StageInRemote {
            local: cache.get_action(&key).is_some(),
            stage,
            key,
            remote,
        })
        .collect();
    let record_pushed = match record.uid.as_deref() {
        Some(uid) => remote
            .has_run_record(record.git_commit.as_deref(), uid)
            .map_err(EngineError::RemoteUnavailable)?,
        None => false,
    };
    Ok(RunInRemote {
        id,
        url: remote.url().to_string(),
        stages,
        record_pushed,
    })
}

/// `pipe cache gc`'s part for the configured remote, when there is one
/// (`cache_admin::gc`): what killed pushes left in a `file://` remote's
/// `tmp/` (S3 has its lifecycle rule for aborted uploads;
/// docs/remote-cache.md), removed.
pub(crate) fn sweep_remote(
    project: &Project,
    choice: &RemoteChoice<'_>,
) -> Result<Option<(String, TmpSwept)>> {
    let Some(config) =
        configured_remote(&project.root, choice.file, choice.flag, choice.read_only)?
    else {
        return Ok(None);
    };
    let remote = open_remote(&config, &project.cache_dir)?;
    let swept = remote.remove_stale_temporaries()?;
    Ok(swept.map(|swept| (remote.url().to_string(), swept)))
}

/// Why a transfer report ends a command with exit 3: the remote went away,
/// or refused a push.
pub fn transfer_failure(report: &TransferReport) -> Option<&RemoteError> {
    report.unavailable.as_ref().or(report.push_refused.as_ref())
}
