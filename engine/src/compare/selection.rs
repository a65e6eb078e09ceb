//! `pipe compare` as one use case: the runs a request names or selects,
//! in the order they are shown, and the table of them. The CLI parses its
//! flags into a [`CompareRequest`], calls [`compare`] and renders the
//! [`Comparison`] (text, Markdown, CSV, JSON or HTML).

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::plots::{plot_files, PlotFile};
use super::steps::{step_curves, StepCurves};
use super::table::{compare_runs, CompareOptions, CompareTable};
use crate::history::{History, Notice, Pull};
use crate::metrics::DirectionRules;
use crate::project::Project;
use crate::runs::{RunId, RunRecord, RunSelection, RunStatus};
use crate::{EngineError, Result, UsageError, WhereProblem};

/// How many runs `pipe compare` shows when neither runs nor `--last` are given.
pub const DEFAULT_COMPARED_RUNS: usize = 10;

/// How many of the newest runs a `--where` param is looked for in.
const RUNS_SEARCHED_FOR_PARAMS: usize = 500;

/// Which run statuses a selection takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StatusFilter {
    /// Named runs as they ended; a selection by filters, the runs that
    /// succeeded.
    #[default]
    Default,
    Any,
    These(Vec<RunStatus>),
}

/// What `pipe compare` was asked, as the user wrote it.
#[derive(Debug, Clone, Default)]
pub struct CompareRequest {
    /// Run references (`12`, `last~2`, a git ref), in the order shown.
    pub runs: Vec<String>,
    pub baseline: Option<String>,
    /// The N newest runs that match the filters.
    pub last: Option<usize>,
    pub statuses: StatusFilter,
    /// A pipeline name or file.
    pub pipeline: Option<String>,
    /// `PARAM=VALUE` conditions, all of which a run's params meet.
    pub where_params: Vec<String>,
    /// The directions the command line gives (`--higher`, `--lower`): they
    /// win over what the runs' pipelines declared.
    pub directions: DirectionRules,
    pub all_columns: bool,
    /// `--metrics GLOB`: these metric columns instead of the key metrics.
    pub metrics: Vec<String>,
    pub per_seed: bool,
    /// `KEY=VALUE,...`: the matrix row the deltas are taken against.
    pub baseline_row: Option<String>,
    pub sort: Option<String>,
    /// The per-step curves of the runs' training stages, for the HTML page.
    pub with_steps: bool,
    /// The files of the plots the runs' stages declare, for the HTML page.
    pub with_plots: bool,
}

/// What [`compare`] found: the table, and the runs in it (baseline first,
/// named runs in the order named).
pub struct Comparison {
    pub table: CompareTable,
    pub runs: Vec<RunRecord>,
    /// Present when the request asked `with_steps`.
    pub steps: Option<StepCurves>,
    /// Present when the request asked `with_plots`.
    pub plots: Option<Vec<PlotFile>>,
}

/// Picks the runs `request` names or selects and builds their table.
/// `notify` hears, as they happen, the records pulled or skipped while the
/// runs are resolved and the notes on the selection.
pub fn compare(
    history: &mut History,
    request: &CompareRequest,
    notify: &mut dyn FnMut(Notice),
) -> Result<Comparison> {
    let named = resolve_named(history, &request.runs, notify)?;
    let baseline_run = match request.baseline.as_deref() {
        Some(query) => Some(history.resolve_noting(query, Pull::IfConfigured, notify)?),
        None => None,
    };
    let selection = RunSelection {
        last: match (&named, request.last) {
            (Some(_), _) => None,
            (None, last) => Some(last.unwrap_or(DEFAULT_COMPARED_RUNS)),
        },
        named: named.clone(),
        also: baseline_run.into_iter().collect(),
        pipeline: request
            .pipeline
            .as_deref()
            .map(|text| history.pipeline_named(text))
            .transpose()?,
        params_equal: param_conditions(&request.where_params)
            .map(parse_where)
            .collect::<Result<_>>()?,
        names: label_conditions(&request.where_params, "name"),
        tags: label_conditions(&request.where_params, "tag"),
        statuses: match &request.statuses {
            StatusFilter::Any => None,
            StatusFilter::Default => named.is_none().then(|| vec![RunStatus::Succeeded]),
            StatusFilter::These(statuses) => Some(statuses.clone()),
        },
    };
    let chosen = history.runs_to_compare(&selection)?;
    chosen
        .notes
        .into_iter()
        .map(Notice::Note)
        .for_each(&mut *notify);
    let runs = shown_in_order(chosen.runs, named.as_deref(), baseline_run);
    if runs.is_empty() {
        unknown_where_param(history, &request.where_params)?;
        return Err(UsageError::NoRunSelected.into());
    }
    if let Some(note) = commits_note(&history.root, &runs) {
        notify(Notice::Note(note));
    }
    let options = CompareOptions {
        rules: direction_rules(&runs, request.directions.clone()),
        all_columns: request.all_columns,
        per_seed: request.per_seed,
        baseline_run,
        baseline_row: match &request.baseline_row {
            Some(text) => parse_pairs(text)?,
            None => Vec::new(),
        },
        sort: request.sort.clone(),
        metrics: request.metrics.clone(),
    };
    let table = compare_runs(&runs, &options)?;
    let cache_dir = || Ok::<_, EngineError>(Project::open(&history.root)?.cache_dir);
    let steps = if request.with_steps {
        Some(step_curves(&cache_dir()?, &table, &runs)?)
    } else {
        None
    };
    let plots = if request.with_plots {
        Some(plot_files(&cache_dir()?, &table, &runs)?)
    } else {
        None
    };
    Ok(Comparison {
        table,
        runs,
        steps,
        plots,
    })
}

/// The runs named, each once, in the order named; `None` when none is.
fn resolve_named(
    history: &mut History,
    queries: &[String],
    notify: &mut dyn FnMut(Notice),
) -> Result<Option<Vec<RunId>>> {
    if queries.is_empty() {
        return Ok(None);
    }
    let mut ids = Vec::with_capacity(queries.len());
    let mut seen = HashSet::new();
    for query in queries {
        let id = history.resolve_noting(query, Pull::IfConfigured, notify)?;
        if seen.insert(id) {
            ids.push(id);
        }
    }
    Ok(Some(ids))
}

/// Named runs in the order they were named, the baseline first.
fn shown_in_order(
    mut runs: Vec<RunRecord>,
    named: Option<&[RunId]>,
    baseline: Option<RunId>,
) -> Vec<RunRecord> {
    if let Some(named) = named {
        let position: HashMap<RunId, usize> = named
            .iter()
            .enumerate()
            .map(|(index, &id)| (id, index))
            .collect();
        runs.sort_by_key(|run| position.get(&run.id).copied());
    }
    if let Some(baseline) = baseline {
        if let Some(index) = runs.iter().position(|run| run.id == baseline) {
            let run = runs.remove(index);
            runs.insert(0, run);
        }
    }
    runs
}

/// What the newest run's pipeline declared wins over older ones; the
/// command line over both.
fn direction_rules(runs: &[RunRecord], from_flags: DirectionRules) -> DirectionRules {
    let mut by_age: Vec<&RunRecord> = runs.iter().collect();
    by_age.sort_by_key(|run| std::cmp::Reverse((run.started_ms, run.id)));
    by_age.into_iter().fold(from_flags, |rules, run| {
        rules.declared(&run.trusted_directions())
    })
}

/// A `--where` param that no recorded run has is a typo (`train.lrr`), not
/// a selection that happens to be empty: say so, with the closest one.
fn unknown_where_param(history: &History, conditions: &[String]) -> Result<()> {
    if conditions.is_empty() {
        return Ok(());
    }
    let known = history.recorded_param_paths(RUNS_SEARCHED_FOR_PARAMS)?;
    for condition in param_conditions(conditions) {
        let path = condition
            .split_once('=')
            .map_or(condition, |(path, _)| path)
            .trim();
        if known.is_empty() || known.contains(path) {
            continue;
        }
        let close = crate::suggest::did_you_mean(path, known.iter().map(String::as_str));
        return Err(UsageError::UnknownWhereParam {
            condition: condition.to_string(),
            path: path.to_string(),
            suggestion: close.map(str::to_string),
            known: known.iter().cloned().collect(),
        }
        .into());
    }
    Ok(())
}

/// When the runs compared ran at more than one commit: which ran where,
/// since equal params then do not mean equal code.
fn commits_note(root: &std::path::Path, runs: &[RunRecord]) -> Option<String> {
    // Grouped first: git is asked for the refs of each commit once.
    let mut at: Vec<(&crate::runs::RunRecord, Vec<RunId>)> = Vec::new();
    for compared in runs {
        let run = compared;
        let same = |seen: &crate::runs::RunRecord| {
            seen.git_commit == run.git_commit
                && (seen.git_dirty == Some(true)) == (run.git_dirty == Some(true))
        };
        match at.iter_mut().find(|(seen, _)| same(seen)) {
            Some((_, ids)) => ids.push(run.id),
            None => at.push((run, vec![run.id])),
        }
    }
    (at.len() > 1).then(|| {
        let parts: Vec<String> = at
            .iter()
            .map(|(run, ids)| {
                let ids: Vec<String> = ids.iter().map(|id| format!("#{id}")).collect();
                let commit = super::commits::RunCommit::of(root, run).describe();
                format!("{} at {commit}", ids.join(","))
            })
            .collect();
        format!(
            "the runs ran at {} commits, so their code differs as well as their params: {}",
            at.len(),
            parts.join("; ")
        )
    })
}

/// The label a `--where` condition asks for, when it is `name=X` or
/// `tag=X`: labels, not params (a param of either name is
/// `params.name=X`).
fn label_of(condition: &str) -> Option<(&str, &str)> {
    let (key, value) = condition.split_once('=')?;
    let key = key.trim();
    matches!(key, "name" | "tag").then(|| (key, value.trim()))
}

/// The values of the `--where` conditions on label `label`.
fn label_conditions(conditions: &[String], label: &str) -> Vec<String> {
    conditions
        .iter()
        .filter_map(|condition| label_of(condition))
        .filter(|(key, _)| *key == label)
        .map(|(_, value)| value.to_string())
        .collect()
}

/// The `--where` conditions on params, `params.` taken off their paths.
fn param_conditions(conditions: &[String]) -> impl Iterator<Item = &str> {
    conditions
        .iter()
        .filter(|condition| label_of(condition).is_none())
        .map(|condition| {
            let condition = condition.trim_start();
            condition.strip_prefix("params.").unwrap_or(condition)
        })
}

/// `train.lr=0.001` -> (["train", "lr"], 0.001).
fn parse_where(condition: &str) -> Result<(Vec<String>, Value)> {
    let bad = |why: WhereProblem| {
        EngineError::from(UsageError::BadWhere {
            condition: condition.to_string(),
            why,
        })
    };
    let (path, value) = condition
        .split_once('=')
        .ok_or_else(|| bad(WhereProblem::NoEquals))?;
    let names: Vec<String> = path.trim().split('.').map(String::from).collect();
    if names.iter().any(|name| name.is_empty()) {
        return Err(bad(WhereProblem::EmptyName));
    }
    if names.iter().any(|name| name.contains('"')) {
        return Err(bad(WhereProblem::Quote));
    }
    // The value means what it meant in the `-S` that made the run.
    let value = crate::overrides::override_value(value.trim())
        .map_err(|not_yaml| bad(WhereProblem::Value(not_yaml)))?;
    Ok((names, value))
}

/// `precision=32-true,strategy=single` -> pairs.
fn parse_pairs(text: &str) -> Result<Vec<(String, String)>> {
    text.split(',')
        .map(|pair| {
            pair.split_once('=')
                .map(|(key, value)| (key.trim().to_string(), value.trim().to_string()))
                .filter(|(key, value)| !key.is_empty() && !value.is_empty())
                .ok_or_else(|| {
                    EngineError::from(UsageError::BadBaselineRow {
                        text: text.to_string(),
                        pair: pair.to_string(),
                    })
                })
        })
        .collect()
}
