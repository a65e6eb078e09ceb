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
use crate::overrides::ParamOverride;
use crate::pipefile::{self, CatalogSource, Loaded};
use crate::pipeline::Pipeline;
use crate::project::runs_db_of;
use crate::runs::{ResultsHeld, RunDb, RunId, RunStatus};
use crate::{Result, UsageError};

pub use crate::overrides::MAX_COMBINATIONS;

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

/// The `-S` settings of each combination, and each one's swept ones:
/// every setting with one of its values, the last setting varying
/// fastest.
pub fn combinations(
    overrides: &[ParamOverride],
) -> Result<Vec<(Vec<ParamOverride>, Vec<ParamOverride>)>> {
    let total = overrides
        .iter()
        .try_fold(1usize, |product, setting| {
            product.checked_mul(setting.values().len())
        })
        .filter(|&total| total <= MAX_COMBINATIONS);
    let Some(total) = total else {
        return Err(UsageError::BadSweep {
            argument: shown(overrides),
            why: format!("more than {MAX_COMBINATIONS} combinations"),
        }
        .into());
    };
    let mut combinations = Vec::with_capacity(total);
    for mut index in 0..total {
        let mut picked = Vec::with_capacity(overrides.len());
        let mut swept = Vec::new();
        // The last setting varies fastest.
        for setting in overrides.iter().rev() {
            let values = setting.values();
            let one = setting.with_value(values[index % values.len()].clone());
            index /= values.len();
            if values.len() > 1 {
                swept.push(one.clone());
            }
            picked.push(one);
        }
        picked.reverse();
        swept.reverse();
        combinations.push((picked, swept));
    }
    Ok(combinations)
}

/// Settings as a command line writes them, `lr=1,2 -S seed=1`.
fn shown(overrides: &[ParamOverride]) -> String {
    overrides
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" -S ")
}

/// A sweep ready to run: its combinations, and how they run.
pub struct Sweep {
    pub combinations: Vec<Combination>,
    /// Every `-S` setting, lists included: what the record of a one-run
    /// sweep keeps, to load it again.
    pub overrides: Vec<ParamOverride>,
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
pub fn load(
    file: &Path,
    overrides: &[ParamOverride],
    catalogs: &dyn CatalogSource,
) -> Result<Sweep> {
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
    overrides: &[ParamOverride],
    catalogs: &dyn CatalogSource,
) -> Result<Loaded> {
    match load(file, overrides, catalogs)?.plan {
        SweepPlan::OneRun(loaded) => Ok(*loaded),
        SweepPlan::Apart { why } => Err(UsageError::BadSweep {
            argument: shown(overrides),
            why: format!("it no longer runs as one run: {why}"),
        }
        .into()),
    }
}

/// The pipeline at `file` with `overrides`: merged as a sweep when they
/// are a one-run sweep's (a record with `sweep`), else loaded as usual.
pub fn load_settings(
    file: &Path,
    overrides: &[ParamOverride],
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
            swept: &combination.swept_shown(),
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
            swept: combination.swept_shown(),
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

    fn parsed(overrides: &[&str]) -> Vec<ParamOverride> {
        overrides
            .iter()
            .map(|text| ParamOverride::parse_swept(text).unwrap())
            .collect()
    }

    fn swept(overrides: &[&str]) -> Vec<Vec<String>> {
        combinations(&parsed(overrides))
            .unwrap()
            .into_iter()
            .map(|(all, _)| all.iter().map(ToString::to_string).collect())
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
        assert_eq!(all[0], ["layers=[64, 32]", "name=\"a,b\"", "+x=1"]);
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
            let error = ParamOverride::parse_swept(refused).unwrap_err().to_string();
            assert!(error.contains(refused), "{refused}: {error}");
        }
    }

    #[test]
    fn an_empty_value_or_too_many_runs_is_refused() {
        assert!(ParamOverride::parse_swept("lr=1,,2").is_err());
        let wide: Vec<String> = (0..4)
            .map(|axis| format!("a{axis}=1,2,3,4,5,6,7,8,9,10"))
            .collect();
        let wide: Vec<&str> = wide.iter().map(String::as_str).collect();
        assert!(combinations(&parsed(&wide)).is_err());
    }
}
