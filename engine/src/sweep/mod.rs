//! `pipe run -m -S train.lr=1e-4,3e-4 -S seed=1,2`: a sweep, Hydra's
//! multirun. Each `-S` whose value lists several, comma-separated, is an
//! axis; the sweep is their product, the last axis varying fastest.
//!
//! Every combination is loaded before anything runs, so a typo in any
//! stops the sweep first. Then the combinations' pipelines are merged into
//! one matrix run (`merge`): what they share runs once, what differs runs
//! side by side under `-j` or as one Slurm array, and the record keeps
//! every `-S` as given with `sweep` set, so it loads again as one run.
//! Where they cannot share one work tree, each combination is one run, in
//! turn (as Hydra's basic launcher does), recorded with exactly its values.

use std::path::Path;

mod combination;
mod merge;

pub use combination::Combination;

use crate::events::{Event, Observer};
use crate::exec::{self, RunOptions, RunOutcome};
use crate::pipefile::{self, CatalogSource, Loaded};
use crate::pipeline::Pipeline;
use crate::project::runs_db_of;
use crate::runs::{ResultsHeld, RunDb, RunId, RunStatus};
use crate::{Result, UsageError};

/// More runs than this in one sweep is a mistake, not a plan.
pub const MAX_COMBINATIONS: usize = 1000;

/// What each run of a sweep came to.
#[derive(Debug)]
pub struct SweepOutcome {
    /// One per combination that ran, in order (one for a sweep run as
    /// one run).
    pub runs: Vec<SweepRun>,
    /// How many combinations there were.
    pub planned: usize,
}

/// One run of a sweep.
#[derive(Debug)]
pub struct SweepRun {
    /// The combination's swept values; empty for a sweep run as one run.
    pub swept: Vec<String>,
    pub outcome: RunOutcome,
    /// When it found every result in place and recorded nothing, as a
    /// plain run that does nothing records nothing: the runs whose
    /// records hold those results (`RunDb::runs_holding`), for the user
    /// to come back to.
    pub results_of: ResultsHeld,
}

impl SweepOutcome {
    /// The worst of the runs: interrupted, else failed, else succeeded.
    pub fn status(&self) -> RunStatus {
        let statuses = || self.runs.iter().map(|run| run.outcome.status);
        if self.runs.len() < self.planned || statuses().any(|s| s == RunStatus::Interrupted) {
            RunStatus::Interrupted
        } else if statuses().any(|s| s != RunStatus::Succeeded) {
            RunStatus::Failed
        } else {
            RunStatus::Succeeded
        }
    }

    /// The runs recorded, for `pipe compare`.
    pub fn recorded(&self) -> Vec<RunId> {
        self.runs
            .iter()
            .filter_map(|run| run.outcome.recorded)
            .collect()
    }
}

/// The `-S` arguments of each combination, and each one's swept values.
pub fn combinations(overrides: &[String]) -> Result<Vec<(Vec<String>, Vec<String>)>> {
    let mut axes: Vec<Vec<String>> = Vec::new();
    for argument in overrides {
        let Some((head, value)) = argument.split_once('=') else {
            // `-S` reports it, located, when the pipeline loads.
            axes.push(vec![argument.clone()]);
            continue;
        };
        let values = match hydra_form(value) {
            Some(form) => form.map_err(|why| UsageError::BadSweep {
                argument: argument.clone(),
                why,
            })?,
            None => split_top_level(value),
        };
        if values.iter().any(|value| value.trim().is_empty()) {
            return Err(UsageError::BadSweep {
                argument: argument.clone(),
                why: "an empty value between commas".to_string(),
            }
            .into());
        }
        axes.push(
            values
                .into_iter()
                .map(|value| format!("{head}={}", value.trim()))
                .collect(),
        );
    }
    let total = axes
        .iter()
        .try_fold(1usize, |product, axis| product.checked_mul(axis.len()))
        .filter(|&total| total <= MAX_COMBINATIONS);
    let Some(total) = total else {
        return Err(UsageError::BadSweep {
            argument: overrides.join(" "),
            why: format!("more than {MAX_COMBINATIONS} combinations"),
        }
        .into());
    };
    let mut combinations = Vec::with_capacity(total);
    for mut index in 0..total {
        let mut picked = vec![String::new(); axes.len()];
        // The last axis varies fastest.
        for (position, axis) in axes.iter().enumerate().rev() {
            picked[position] = axis[index % axis.len()].clone();
            index /= axis.len();
        }
        let swept = picked
            .iter()
            .zip(&axes)
            .filter(|(_, axis)| axis.len() > 1)
            .map(|(value, _)| value.clone())
            .collect();
        combinations.push((picked, swept));
    }
    Ok(combinations)
}

/// Hydra's sweep forms: `range(START,STOP[,STEP])` (STOP excluded, as
/// Python's and Hydra's), `choice(A,B,...)`; `glob(...)` and
/// `interval(...)` are named and refused, since they choose among config
/// groups or ask a sampler, which pipe does not have. `None`: no such form.
fn hydra_form(value: &str) -> Option<std::result::Result<Vec<String>, String>> {
    let value = value.trim();
    let (name, inner) = value.strip_suffix(')')?.split_once('(')?;
    let arguments: Vec<String> = split_top_level(inner)
        .into_iter()
        .map(|argument| argument.trim().to_string())
        .collect();
    Some(match name.trim() {
        "choice" if arguments.iter().all(|argument| !argument.is_empty()) => Ok(arguments),
        "choice" => Err("`choice(...)` with an empty value".to_string()),
        "range" => range_values(&arguments),
        "glob" => Err("`glob(...)` selects among Hydra's config groups, which pipe has no notion of; list the values, comma-separated".to_string()),
        "interval" | "tag" => Err(format!("`{}(...)` is for Hydra's samplers (Optuna, Nevergrad); pipe sweeps a grid: list the values, comma-separated, or use `range(START,STOP,STEP)`", name.trim())),
        _ => return None,
    })
}

/// `range(START,STOP[,STEP])`: integers when every bound is one, else
/// floats, STOP excluded; at most `MAX_COMBINATIONS` values.
fn range_values(arguments: &[String]) -> std::result::Result<Vec<String>, String> {
    let usage = "`range(START,STOP)` or `range(START,STOP,STEP)` with numbers, STOP excluded";
    if !(2..=3).contains(&arguments.len()) {
        return Err(usage.to_string());
    }
    if arguments
        .iter()
        .all(|argument| argument.parse::<i64>().is_ok())
    {
        let numbers: Vec<i64> = arguments.iter().filter_map(|a| a.parse().ok()).collect();
        let (start, stop, step) = (numbers[0], numbers[1], *numbers.get(2).unwrap_or(&1));
        if step == 0 || (stop - start).signum() * step.signum() < 0 {
            return Err(format!(
                "{usage}: a step of {step} never gets from {start} to {stop}"
            ));
        }
        let count = (stop - start).unsigned_abs().div_ceil(step.unsigned_abs());
        if count > MAX_COMBINATIONS as u64 {
            return Err(format!("more than {MAX_COMBINATIONS} values"));
        }
        return Ok((0..count as i64)
            .map(|i| (start + i * step).to_string())
            .collect());
    }
    let numbers: Vec<f64> = arguments
        .iter()
        .map(|argument| {
            argument
                .parse::<f64>()
                .map_err(|_| format!("{usage}: `{argument}` is not a number"))
        })
        .collect::<std::result::Result<_, _>>()?;
    let (start, stop, step) = (numbers[0], numbers[1], *numbers.get(2).unwrap_or(&1.0));
    if !(start.is_finite() && stop.is_finite() && step.is_finite())
        || step == 0.0
        || (stop - start) * step < 0.0
    {
        return Err(format!(
            "{usage}: a step of {step} never gets from {start} to {stop}"
        ));
    }
    let count = ((stop - start) / step - 1e-9).ceil().max(0.0);
    if count > MAX_COMBINATIONS as f64 {
        return Err(format!("more than {MAX_COMBINATIONS} values"));
    }
    // Each value from the start, not by adding steps: no drift (0.30000000000000004).
    Ok((0..count as usize)
        .map(|i| {
            let value = start + i as f64 * step;
            let rounded = (value * 1e12).round() / 1e12;
            crate::pipeline::yaml_float(rounded)
        })
        .collect())
}

/// `1e-4,3e-4` -> [`1e-4`, `3e-4`]; commas inside `[...]`, `{...}` or
/// quotes belong to the value (`[1, 2],[3]` is two lists).
fn split_top_level(value: &str) -> Vec<String> {
    let mut values = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for c in value.chars() {
        match (quote, c) {
            (Some(open), c) if c == open => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth = depth.saturating_sub(1),
            (None, ',') if depth == 0 => {
                values.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    values.push(current);
    values
}

/// A sweep ready to run: its combinations, and how they run.
pub struct Sweep {
    pub combinations: Vec<Combination>,
    /// Every `-S` argument as given, lists included: what the record of
    /// a one-run sweep keeps, to load it again.
    pub overrides: Vec<String>,
    pub plan: SweepPlan,
}

/// How a sweep's combinations run.
pub enum SweepPlan {
    /// As one matrix run of the merged pipeline (`merge`).
    OneRun(Box<Loaded>),
    /// One run per combination, in turn, and why they cannot share one.
    Apart { why: String },
}

/// Loads the pipeline at `file` once per combination of `overrides`, all
/// before any runs (a mistake in one stops the sweep before it starts),
/// and merges them into one run where the work tree allows.
pub fn load(file: &Path, overrides: &[String], catalogs: &dyn CatalogSource) -> Result<Sweep> {
    let combinations = combinations(overrides)?
        .into_iter()
        .map(|(overrides, swept)| {
            let loaded = pipefile::load(file, &overrides, catalogs)?;
            Ok(Combination {
                overrides,
                swept,
                loaded,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let plan = match merge::merge(&combinations) {
        Ok(loaded) => SweepPlan::OneRun(Box::new(loaded)),
        Err(why) => SweepPlan::Apart { why },
    };
    Ok(Sweep {
        combinations,
        overrides: overrides.to_vec(),
        plan,
    })
}

/// The pipeline a recorded sweep run ran: its `-S` arguments, lists
/// included, loaded and merged again, as `pipe checkout` and `--run` need.
pub fn load_recorded(
    file: &Path,
    overrides: &[String],
    catalogs: &dyn CatalogSource,
) -> Result<Loaded> {
    match load(file, overrides, catalogs)?.plan {
        SweepPlan::OneRun(loaded) => Ok(*loaded),
        SweepPlan::Apart { why } => Err(UsageError::BadSweep {
            argument: overrides.join(" "),
            why: format!("it no longer runs as one run: {why}"),
        }
        .into()),
    }
}

/// The pipeline at `file` with `overrides`: merged as a sweep when they
/// are a one-run sweep's (a record with `sweep`), else loaded as usual.
pub fn load_settings(
    file: &Path,
    overrides: &[String],
    sweep: bool,
    catalogs: &dyn CatalogSource,
) -> Result<Loaded> {
    if sweep {
        load_recorded(file, overrides, catalogs)
    } else {
        pipefile::load(file, overrides, catalogs)
    }
}

/// Runs the sweep: as one run, or each combination in turn with
/// `options` (its `-S` values its own), stopping after a run that was
/// interrupted. A run that finds every result in place records nothing,
/// as a plain run does (docs/decisions.md, "A sweep that finds every
/// result records no run").
pub fn run(sweep: &Sweep, options: &RunOptions, observer: Observer<'_>) -> Result<SweepOutcome> {
    let combinations = &sweep.combinations;
    if let SweepPlan::OneRun(merged) = &sweep.plan {
        let Loaded { pipeline, dag, .. } = merged.as_ref();
        let options = RunOptions {
            overrides: sweep.overrides.clone(),
            sweep: true,
            ..options.clone()
        };
        let run = exec::run(pipeline, dag, &options, observer)?;
        return Ok(SweepOutcome {
            runs: vec![SweepRun {
                swept: Vec::new(),
                results_of: results_of(pipeline, &run),
                outcome: run,
            }],
            planned: 1,
        });
    }
    let mut outcome = SweepOutcome {
        runs: Vec::new(),
        planned: combinations.len(),
    };
    for (index, combination) in combinations.iter().enumerate() {
        observer(Event::SweepRunStarting {
            index,
            total: combinations.len(),
            swept: &combination.swept,
        });
        let options = RunOptions {
            overrides: combination.overrides.clone(),
            // One name per run: the combinations that run one after the
            // other are NAME-1, NAME-2, ...
            name: options
                .name
                .as_ref()
                .map(|name| format!("{name}-{}", index + 1)),
            ..options.clone()
        };
        let Loaded { pipeline, dag, .. } = &combination.loaded;
        let run = exec::run(pipeline, dag, &options, observer)?;
        let interrupted = run.status == RunStatus::Interrupted;
        outcome.runs.push(SweepRun {
            swept: combination.swept.clone(),
            results_of: results_of(pipeline, &run),
            outcome: run,
        });
        if interrupted || crate::interrupt::requested() {
            break;
        }
    }
    Ok(outcome)
}

/// The runs whose records hold the results of `run`, when it recorded
/// nothing. Only said to the user: a history that cannot answer costs
/// the name, not the sweep.
fn results_of(pipeline: &Pipeline, run: &RunOutcome) -> ResultsHeld {
    if run.recorded.is_some() {
        return ResultsHeld::default();
    }
    let found = RunDb::open_existing(&runs_db_of(&pipeline.root)).and_then(|db| {
        db.map_or(Ok(ResultsHeld::default()), |db| {
            db.runs_holding(&run.stages)
        })
    });
    found.unwrap_or_else(|error| {
        tracing::warn!("cannot tell which run holds the sweep's results: {error}");
        ResultsHeld::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swept(overrides: &[&str]) -> Vec<Vec<String>> {
        let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        combinations(&overrides)
            .unwrap()
            .into_iter()
            .map(|(all, _)| all)
            .collect()
    }

    #[test]
    fn the_product_varies_the_last_axis_fastest() {
        assert_eq!(
            swept(&["train.lr=1e-4,3e-4", "epochs=1", "seed=1,2"]),
            [
                ["train.lr=1e-4", "epochs=1", "seed=1"],
                ["train.lr=1e-4", "epochs=1", "seed=2"],
                ["train.lr=3e-4", "epochs=1", "seed=1"],
                ["train.lr=3e-4", "epochs=1", "seed=2"],
            ]
        );
    }

    #[test]
    fn commas_inside_a_list_or_quotes_belong_to_the_value() {
        let all = swept(&["layers=[64, 32],[128]", "name='a,b',c", "+x=1"]);
        assert_eq!(all.len(), 4);
        assert_eq!(all[0], ["layers=[64, 32]", "name='a,b'", "+x=1"]);
        assert_eq!(all[1], ["layers=[64, 32]", "name=c", "+x=1"]);
        assert_eq!(all[3], ["layers=[128]", "name=c", "+x=1"]);
    }

    #[test]
    fn hydras_range_and_choice_sweep_and_its_samplers_are_refused() {
        assert_eq!(
            swept(&["n=range(10,50,10)"]),
            [["n=10"], ["n=20"], ["n=30"], ["n=40"]]
        );
        assert_eq!(swept(&["n=range(3,0,-1)"]), [["n=3"], ["n=2"], ["n=1"]]);
        assert_eq!(
            swept(&["lr=range(0.1,0.4,0.1)"]),
            [["lr=0.1"], ["lr=0.2"], ["lr=0.3"]]
        );
        assert_eq!(swept(&["m=choice(rf, svm)"]), [["m=rf"], ["m=svm"]]);
        for refused in [
            "g=glob(*)",
            "lr=interval(0,1)",
            "n=range(1,5,0)",
            "n=range(1)",
            "n=range(5,1)",
        ] {
            let error = combinations(&[refused.to_string()])
                .unwrap_err()
                .to_string();
            assert!(error.contains(refused), "{refused}: {error}");
        }
    }

    #[test]
    fn an_empty_value_or_too_many_runs_is_refused() {
        assert!(combinations(&["lr=1,,2".to_string()]).is_err());
        let wide: Vec<String> = (0..4)
            .map(|axis| format!("a{axis}=1,2,3,4,5,6,7,8,9,10"))
            .collect();
        assert!(combinations(&wide).is_err());
    }
}
