//! `pipe compare`: picks the runs the arguments name or select, and shows
//! the engine's table of them as text, Markdown, CSV, JSON or HTML.

use std::collections::{HashMap, HashSet};

use pipe_engine::history::{History, Pull};
use pipe_engine::runs::{self, RunStatus};
use pipe_engine::{compare, EngineError, ExitCode, Result, UsageError, WhereProblem};

use crate::cli::{CompareArgs, StatusArg};
use crate::here;
use crate::output::{errln, jsonln, out};
use crate::style::Style;

/// How many runs `pipe compare` shows when neither runs nor `--last` are given.
const DEFAULT_COMPARED_RUNS: usize = 10;

pub fn compare_command(args: CompareArgs) -> Result<ExitCode> {
    use compare::table::{self, CompareOptions};
    let mut history = here::history()?;
    let named = if args.runs.is_empty() {
        None
    } else {
        let mut ids = Vec::with_capacity(args.runs.len());
        let mut seen = HashSet::new();
        for query in &args.runs {
            let id = here::resolve(&mut history, query, Pull::IfConfigured)?;
            if seen.insert(id) {
                ids.push(id);
            }
        }
        Some(ids)
    };
    let baseline_run = args
        .baseline
        .as_deref()
        .map(|query| here::resolve(&mut history, query, Pull::IfConfigured))
        .transpose()?;
    let statuses = if args.status.contains(&StatusArg::Any) {
        None
    } else if args.status.is_empty() {
        // Named runs are compared as they ended; a selection by filters
        // takes the runs that succeeded.
        named.is_none().then(|| vec![RunStatus::Succeeded])
    } else {
        Some(
            args.status
                .iter()
                .map(|status| match status {
                    StatusArg::Succeeded | StatusArg::Any => RunStatus::Succeeded,
                    StatusArg::Failed => RunStatus::Failed,
                    StatusArg::Interrupted => RunStatus::Interrupted,
                    StatusArg::Running => RunStatus::Running,
                })
                .collect(),
        )
    };
    let selection = runs::RunSelection {
        last: match (&named, args.last) {
            (Some(_), _) => None,
            (None, last) => Some(last.unwrap_or(DEFAULT_COMPARED_RUNS)),
        },
        named: named.clone(),
        also: baseline_run.into_iter().collect(),
        pipeline: args
            .pipeline
            .as_deref()
            .map(|text| history.pipeline_named(text))
            .transpose()?,
        params_equal: args
            .where_
            .iter()
            .map(|condition| parse_where(condition))
            .collect::<Result<_>>()?,
        statuses,
    };
    let chosen = history.runs_to_compare(&selection)?;
    for note in &chosen.notes {
        errln!("note: {note}");
    }
    let mut loaded = chosen.runs;
    // Named runs in the order they were named, the baseline first.
    if let Some(named) = &named {
        let position: HashMap<i64, usize> = named
            .iter()
            .enumerate()
            .map(|(index, &id)| (id, index))
            .collect();
        loaded.sort_by_key(|run| position.get(&run.run.id).copied());
    }
    if let Some(baseline) = baseline_run {
        if let Some(index) = loaded.iter().position(|run| run.run.id == baseline) {
            let run = loaded.remove(index);
            loaded.insert(0, run);
        }
    }
    if loaded.is_empty() {
        unknown_where_param(&history, &args.where_)?;
        return Err(UsageError::NoRunSelected.into());
    }
    let options = CompareOptions {
        // What the newest run's pipeline declared wins over older ones;
        // the command line over both.
        rules: {
            let mut by_age: Vec<&runs::ComparedRun> = loaded.iter().collect();
            by_age.sort_by_key(|run| std::cmp::Reverse(run.run.id));
            by_age
                .into_iter()
                .fold(args.directions.rules(), |rules, run| {
                    rules.declared(&run.run.directions)
                })
        },
        all_columns: args.all,
        per_seed: args.per_seed,
        baseline_run,
        baseline_row: match &args.baseline_row {
            Some(text) => parse_pairs(text)?,
            None => Vec::new(),
        },
        sort: args.sort.clone(),
    };
    let table = table::compare_runs(&loaded, &options)?;
    for warning in &table.warnings {
        errln!("warning: {}", warning.message);
    }
    if args.json {
        jsonln!(serde_json::to_string_pretty(&table).unwrap_or_default());
    } else if args.md {
        out!("{}", crate::compare_view::markdown(&table));
    } else if args.csv {
        out!("{}", crate::compare_view::csv(&table));
    } else if args.html {
        let project = here::project()?;
        let steps = compare::steps::step_curves(&history.db, &project.cache_dir, &table, &loaded)?;
        out!("{}", crate::compare_view::html(&table, &loaded, &steps)?);
    } else {
        out!("{}", crate::compare_view::text(&table, Style::for_stdout()));
    }
    Ok(ExitCode::Ok)
}

/// How many of the newest runs a `--where` param is looked for in.
const RUNS_SEARCHED_FOR_PARAMS: usize = 500;

/// A `--where` param that no recorded run has is a typo (`train.lrr`), not
/// a selection that happens to be empty: say so, with the closest one.
fn unknown_where_param(history: &History, conditions: &[String]) -> Result<()> {
    if conditions.is_empty() {
        return Ok(());
    }
    let known = history.recorded_param_paths(RUNS_SEARCHED_FOR_PARAMS)?;
    for condition in conditions {
        let path = condition
            .split_once('=')
            .map_or(condition.as_str(), |(path, _)| path)
            .trim();
        if known.is_empty() || known.contains(path) {
            continue;
        }
        let close = pipe_engine::spec::did_you_mean(path, known.iter().map(String::as_str));
        return Err(UsageError::UnknownWhereParam {
            condition: condition.clone(),
            path: path.to_string(),
            suggestion: close.map(str::to_string),
            known: known.iter().cloned().collect(),
        }
        .into());
    }
    Ok(())
}

/// `train.lr=0.001` -> (["train", "lr"], 0.001).
fn parse_where(condition: &str) -> Result<(Vec<String>, serde_json::Value)> {
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
    let value = pipe_engine::spec::override_value(value.trim())
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
