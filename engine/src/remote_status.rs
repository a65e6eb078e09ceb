//! `pipe status --remote`: which of the stages `pipe status` calls stale
//! the remote cache can restore, asked before anything runs.
//!
//! Only a stage whose key is known now can be asked about. The planner
//! computes keys from what the workspace holds, so a stage downstream of
//! one that is not fresh has a key made from outputs that are about to
//! change (or none, when they are missing): whether the remote has its
//! result is known only after that stage runs or is restored, and the
//! answer says so instead of guessing from the old outputs.

use std::collections::HashMap;

use pipe_cache::remote::{Presence, Remote};
use pipe_cache::{ActionKey, RemoteError};
use serde::Serialize;

use crate::dag::Dag;
use crate::pipeline::Pipeline;
use crate::plan::{Freshness, Planner, StageState};
use crate::project::Project;
use crate::remote::open_remote;
use crate::{remote, Result, UsageError};

/// What `pipe run` will do about a stale stage, given the remote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "remote", rename_all = "snake_case")]
pub enum RemoteVerdict {
    /// The remote has its result: `pipe run` restores it from there.
    Restores,
    /// The remote has no result for its key: it runs.
    Runs,
    /// The remote has its action but not every top-level object: the pull
    /// would fail, so it runs, and its push repairs the entry.
    Incomplete,
    /// It runs every time (`always_run`): `pipe run` never looks it up.
    RunsEveryTime,
    /// Its key depends on these upstream stages, which are not fresh:
    /// known after they run (or are restored).
    AfterUpstream { upstream: Vec<String> },
    /// Its key cannot be computed (a dependency is missing); the stage's
    /// reasons say which.
    NoKey,
}

/// The verdict for each state, `None` for those that are not stale.
#[derive(Debug)]
pub struct RemoteStatus {
    /// The remote asked, as shown (credentials never in it).
    pub url: String,
    pub verdicts: Vec<Option<RemoteVerdict>>,
    /// How many stages were looked up in the remote.
    pub asked: usize,
}

impl RemoteStatus {
    /// (restores, runs, after upstream) among the stale stages; `runs`
    /// counts every stage that runs whatever the remote has.
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for verdict in self.verdicts.iter().flatten() {
            match verdict {
                RemoteVerdict::Restores => counts.0 += 1,
                RemoteVerdict::AfterUpstream { .. } => counts.2 += 1,
                _ => counts.1 += 1,
            }
        }
        counts
    }
}

/// What `pipe status` shows: every stage's state and, with `--remote`,
/// the remote's answer for the stale ones, or why it gave none.
pub struct StatusReport {
    pub states: Vec<StageState>,
    pub remote: Option<std::result::Result<RemoteStatus, RemoteError>>,
}

/// `pipe status [--remote[=URL]]`: `remote_flag` is the URL given, empty
/// for the configured remote, `None` without `--remote`.
pub fn status(pipeline: &Pipeline, dag: &Dag, remote_flag: Option<&str>) -> Result<StatusReport> {
    // Before the plan: a missing remote is a usage error, not worth a hash.
    let remote = remote_flag
        .map(|flag| open_for_status(pipeline, flag))
        .transpose()?;
    let states = Planner::new(pipeline)?.states(dag, &dag.order)?;
    let remote = remote.map(|remote| remote_status(&remote, pipeline, dag, &states));
    Ok(StatusReport { states, remote })
}

/// The remote `pipe status --remote[=URL]` asks, read-only: a status never
/// writes. None configured is a usage error.
fn open_for_status(pipeline: &Pipeline, flag: &str) -> Result<Remote> {
    let flag = Some(flag).filter(|url| !url.is_empty());
    let config = remote::resolve(&pipeline.root, pipeline.remote.as_ref(), flag, true)?.ok_or(
        UsageError::NoRemote {
            flag: "--remote=s3://BUCKET/PREFIX",
        },
    )?;
    let project = Project::open(&pipeline.root)?;
    open_remote(&config, &project.cache_dir)
}

/// Asks `remote` about every stale stage of `states` (as `Planner::states`
/// returned them for `pipeline` and `dag`) whose key is known: one lookup
/// per stage, `concurrency` at a time. The first failure of the remote
/// ends it with the remote's description, for the caller to warn about.
pub fn remote_status(
    remote: &Remote,
    pipeline: &Pipeline,
    dag: &Dag,
    states: &[StageState],
) -> std::result::Result<RemoteStatus, RemoteError> {
    let index_of: HashMap<&str, usize> = pipeline
        .stages
        .iter()
        .enumerate()
        .map(|(index, stage)| (stage.name.as_str(), index))
        .collect();
    let freshness: HashMap<&str, Freshness> = states
        .iter()
        .map(|state| (state.stage.as_str(), state.freshness))
        .collect();
    let mut verdicts: Vec<Option<RemoteVerdict>> = Vec::with_capacity(states.len());
    // (place in `verdicts`, key) of the stages to ask about.
    let mut lookups: Vec<(usize, ActionKey)> = Vec::new();
    for state in states {
        if state.freshness != Freshness::Stale {
            verdicts.push(None);
            continue;
        }
        let Some(&index) = index_of.get(state.stage.as_str()) else {
            verdicts.push(Some(RemoteVerdict::NoKey));
            continue;
        };
        let stage = &pipeline.stages[index];
        // Transitive staleness needs no walk: a stage below a stale one is
        // itself stale, and names its own direct upstream.
        let upstream: Vec<String> = dag.upstream[index]
            .iter()
            .map(|&up| pipeline.stages[up].name.as_str())
            .filter(|name| {
                freshness
                    .get(name)
                    .is_some_and(|freshness| *freshness != Freshness::Fresh)
            })
            .map(str::to_string)
            .collect();
        let verdict = if stage.always_run {
            Some(RemoteVerdict::RunsEveryTime)
        } else if !upstream.is_empty() {
            Some(RemoteVerdict::AfterUpstream { upstream })
        } else if let Some(key) = state.key {
            lookups.push((verdicts.len(), key));
            None
        } else {
            Some(RemoteVerdict::NoKey)
        };
        verdicts.push(verdict);
    }
    let keys: Vec<ActionKey> = lookups.iter().map(|(_, key)| *key).collect();
    let found = remote.presence_of_all(&keys)?;
    for ((place, _), presence) in lookups.iter().zip(found) {
        verdicts[*place] = Some(match presence {
            Presence::Complete => RemoteVerdict::Restores,
            Presence::Incomplete => RemoteVerdict::Incomplete,
            Presence::Absent => RemoteVerdict::Runs,
        });
    }
    Ok(RemoteStatus {
        url: remote.url().to_string(),
        verdicts,
        asked: keys.len(),
    })
}
