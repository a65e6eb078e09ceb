//! The vocabulary of the run record, shared by everything that writes or
//! reads it: the engine (runs.db, `pipe compare`, `pipe diff`), the CLI's
//! renderers and the `report/html` stage. Each notion is defined once
//! here, so two readers cannot disagree about what a row, a status or a
//! stage's role is.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a run ended (or that it has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Succeeded,
    /// At least one stage failed.
    Failed,
    /// Stopped by a signal, or its process is gone while it was running.
    Interrupted,
}

impl RunStatus {
    pub const ALL: [RunStatus; 4] = [
        RunStatus::Running,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// How a stage ended in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StageStatus {
    /// Its outputs were already in the workspace.
    Fresh,
    /// Restored from the cache (run-cache hit).
    Restored,
    /// Executed.
    Ran,
    Failed,
    /// Not run because a stage it depends on failed.
    Skipped,
    /// Stopped by the user (Ctrl-C, SIGTERM) before it finished: no
    /// failure of its own, and no result.
    Interrupted,
}

impl StageStatus {
    pub const ALL: [StageStatus; 6] = [
        StageStatus::Fresh,
        StageStatus::Restored,
        StageStatus::Ran,
        StageStatus::Failed,
        StageStatus::Skipped,
        StageStatus::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Fresh => "fresh",
            StageStatus::Restored => "restored",
            StageStatus::Ran => "ran",
            StageStatus::Failed => "failed",
            StageStatus::Skipped => "skipped",
            StageStatus::Interrupted => "interrupted",
        }
    }

    /// Whether the stage has valid outputs after the run.
    pub fn succeeded(self) -> bool {
        matches!(
            self,
            StageStatus::Fresh | StageStatus::Restored | StageStatus::Ran
        )
    }
}

/// A status text that names no status: data written by something else, or
/// damaged. Never read as some default status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStatus {
    pub text: String,
    /// The texts that do name one.
    pub expected: Vec<&'static str>,
}

impl fmt::Display for UnknownStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a status (expected one of: {})",
            crate::excerpt::excerpt(&self.text),
            self.expected.join(", ")
        )
    }
}

impl std::error::Error for UnknownStatus {}

macro_rules! status_text {
    ($status:ident) => {
        impl FromStr for $status {
            type Err = UnknownStatus;

            fn from_str(text: &str) -> Result<Self, UnknownStatus> {
                $status::ALL
                    .into_iter()
                    .find(|status| status.as_str() == text)
                    .ok_or_else(|| UnknownStatus {
                        text: text.to_string(),
                        expected: $status::ALL.iter().map(|status| status.as_str()).collect(),
                    })
            }
        }

        impl fmt::Display for $status {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

status_text!(RunStatus);
status_text!(StageStatus);

/// One matrix combination of a stage: keys in declared order, each value
/// as written in the pipeline (`precision=bf16-mixed`). Empty for a stage
/// without a matrix. Recorded as pairs, never parsed back out of a stage
/// name, where a value holding `,` or `=` would split wrongly.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Combination(pub Vec<(String, String)>);

/// No combination: what a stage that shows nothing in a row splits rows by.
static NO_COMBINATION: Combination = Combination(Vec::new());

impl Combination {
    /// What a stage's combination splits a run's rows by: its own when
    /// the stage shows something in a row (metrics, or data rows are
    /// compared on), none otherwise. The README's `features@n=1`, `@n=2`
    /// report nothing; splitting rows by `n` would only repeat the one
    /// `evaluate`'s figures on two rows.
    pub fn splitting_rows(&self, shows_something: bool) -> &Combination {
        if shows_something {
            self
        } else {
            &NO_COMBINATION
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(key, _)| key.as_str())
    }

    /// Its pairs sorted by key: two combinations are the same whatever
    /// the order their stages declare the keys in.
    pub fn sorted(&self) -> Combination {
        let mut pairs = self.0.clone();
        pairs.sort();
        Combination(pairs)
    }

    /// The pairs whose key is in `keys`, sorted.
    fn project(&self, keys: &[&str]) -> Combination {
        Combination(
            self.0
                .iter()
                .filter(|(key, _)| keys.contains(&key.as_str()))
                .cloned()
                .collect(),
        )
        .sorted()
    }

    fn key_set(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.keys().collect();
        keys.sort_unstable();
        keys
    }
}

impl fmt::Display for Combination {
    /// `precision=bf16-mixed,seed=1`, as in stage names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, (key, value)) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{key}={value}")?;
        }
        Ok(())
    }
}

/// One row of a run's results: a matrix combination and the stages (by
/// index) whose results it shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CombinationRow {
    pub combination: Combination,
    pub stages: Vec<usize>,
}

/// The rows of one run, the one definition that `pipe compare`, its HTML
/// page and the `report/html` stage share.
///
/// A row is a combination that no other combination of the run contains
/// (`train@p=32` is part of `eval@p=32,seed=1`, so only the latter is a
/// row). Each row holds the stages whose combination it contains, so a
/// stage without a matrix belongs to every row; a run without a matrix is
/// one row of every stage. Rows are in the order their combinations first
/// appear among `combinations`: given in the pipeline's order, the order
/// the matrix declares its values in.
///
/// Linear in the stages: combinations are compared through hash sets, per
/// pair of distinct key sets, and a run has few of those.
pub fn rows_by_combination<'a>(
    combinations: impl IntoIterator<Item = &'a Combination>,
) -> Vec<CombinationRow> {
    let mut distinct: Vec<&Combination> = Vec::new();
    let mut stages_of: HashMap<Combination, Vec<usize>> = HashMap::new();
    for (index, combination) in combinations.into_iter().enumerate() {
        let entry = stages_of.entry(combination.sorted()).or_default();
        if entry.is_empty() {
            distinct.push(combination);
        }
        entry.push(index);
    }
    let mut key_sets: Vec<Vec<&str>> = distinct.iter().map(|combo| combo.key_set()).collect();
    key_sets.sort();
    key_sets.dedup();
    // For each pair (larger, smaller) of key sets: the larger set's
    // combinations projected onto the smaller's keys.
    let mut projections: HashMap<(usize, usize), HashSet<Combination>> = HashMap::new();
    for (large, large_keys) in key_sets.iter().enumerate() {
        for (small, small_keys) in key_sets.iter().enumerate() {
            if large == small || !small_keys.iter().all(|key| large_keys.contains(key)) {
                continue;
            }
            let projected = distinct
                .iter()
                .filter(|combo| &combo.key_set() == large_keys)
                .map(|combo| combo.project(small_keys))
                .collect();
            projections.insert((large, small), projected);
        }
    }
    let index_of = |keys: &Vec<&str>| key_sets.iter().position(|set| set == keys);
    let mut rows: Vec<Combination> = distinct
        .iter()
        .filter(|combo| {
            let Some(own) = index_of(&combo.key_set()) else {
                return true;
            };
            let canonical = combo.sorted();
            !(0..key_sets.len()).any(|other| {
                projections
                    .get(&(other, own))
                    .is_some_and(|set| set.contains(&canonical))
            })
        })
        .map(|combo| (*combo).clone())
        .collect();
    if rows.is_empty() {
        rows.push(Combination::default());
    }
    rows.into_iter()
        .map(|combination| {
            let row_keys = combination.key_set();
            let mut stages: Vec<usize> = key_sets
                .iter()
                .filter(|keys| keys.iter().all(|key| row_keys.contains(key)))
                .filter_map(|keys| stages_of.get(&combination.project(keys)))
                .flatten()
                .copied()
                .collect();
            stages.sort_unstable();
            CombinationRow {
                combination,
                stages,
            }
        })
        .collect()
}

/// What a stage's params and metrics mean, as the stage declares it in
/// its [`crate::StageInfo`] (a command stage, in its pipeline entry). The
/// engine reads roles, never built-in stage or param names: a third-party
/// stage that declares them is compared as a built-in one is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageRoles {
    /// The param that seeds the stage's randomness (`seed`): rows that
    /// differ only in it are repeats of one experiment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
    /// The param that picks the numeric precision (`precision`): rows
    /// trained at different precisions are flagged when compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<String>,
    /// The stage makes data other stages train or evaluate on: rows whose
    /// outputs of it differ were trained on different data.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub makes_data: bool,
    /// Metrics that are detail, not results: per-epoch or per-step series,
    /// matrices, machine facts. Each entry is a metric name or a prefix of
    /// dotted names (`epochs` covers `epochs.1.val_acc`). Tables of results
    /// leave them out; reports show them in their own sections.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detail_metrics: Vec<String>,
    /// Metrics that describe the machine the stage ran on (`hardware`,
    /// covering `hardware.cpu`; `devices`), names or dotted prefixes as
    /// above: rows whose values differ ran on different hardware. They
    /// are detail too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hardware_metrics: Vec<String>,
    /// The results a person decides on (`accuracy`, `f1`, `loss`, the
    /// training time), by exact name: comparisons lead with them and show
    /// the others on request. Empty: the stage names none, and a metric's
    /// name decides (`metrics::is_key_metric`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_metrics: Vec<String>,
}

impl StageRoles {
    pub fn is_empty(&self) -> bool {
        *self == StageRoles::default()
    }

    /// The detail and hardware metrics of a stage that declares none (a
    /// command stage; a worker's stage without roles): what the metric
    /// names documented for `metrics.json` mean (docs/pipeline-spec.md,
    /// "Metrics"): `epochs.*`, `confusion`, `per_class.*` are detail;
    /// `hardware.*` and `devices` describe the machine.
    pub fn with_conventional_metrics(mut self) -> StageRoles {
        if self.detail_metrics.is_empty() && self.hardware_metrics.is_empty() {
            self.detail_metrics = ["epochs", "confusion", "per_class"]
                .map(String::from)
                .to_vec();
            self.hardware_metrics = ["hardware", "devices"].map(String::from).to_vec();
        }
        self
    }

    /// Whether `metric` is detail: declared as such, or a machine fact.
    pub fn is_detail_metric(&self, metric: &str) -> bool {
        covers(&self.detail_metrics, metric) || self.is_hardware_metric(metric)
    }

    pub fn is_hardware_metric(&self, metric: &str) -> bool {
        covers(&self.hardware_metrics, metric)
    }

    /// Whether the stage declares `metric` a key metric; `None` when it
    /// declares none.
    pub fn declares_key(&self, metric: &str) -> Option<bool> {
        (!self.key_metrics.is_empty()).then(|| self.key_metrics.iter().any(|key| key == metric))
    }
}

/// Whether one of `patterns` is `metric` or a dotted prefix of it.
fn covers(patterns: &[String], metric: &str) -> bool {
    patterns.iter().any(|prefix| {
        metric == prefix
            || metric
                .strip_prefix(prefix.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// The values a stage's roles took in one run: what `seed` and `precision`
/// were set to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoleValues {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<Value>,
}

impl RoleValues {
    /// The values of `roles`' params among a stage's `with` params.
    pub fn of(roles: &StageRoles, with: &serde_json::Map<String, Value>) -> RoleValues {
        let value = |name: &Option<String>| {
            name.as_ref()
                .and_then(|name| with.get(name))
                .filter(|value| !value.is_null())
                .cloned()
        };
        RoleValues {
            seed: value(&roles.seed),
            precision: value(&roles.precision),
        }
    }
}

impl RoleValues {
    pub fn is_empty(&self) -> bool {
        self.seed.is_none() && self.precision.is_none()
    }
}

/// What a stage is, as its run record keeps it beside what happened: its
/// name as written, its matrix combination, the stage it uses, and its
/// roles with the values they took. Recorded when the stage finishes;
/// every reader takes it from the record instead of working it out again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageIdentity {
    /// `train` for `train@precision=bf16-mixed`.
    #[serde(default)]
    pub base_name: String,
    #[serde(default, skip_serializing_if = "Combination::is_empty")]
    pub combination: Combination,
    /// `train/classifier@1`; none for a command stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<String>,
    #[serde(default, skip_serializing_if = "StageRoles::is_empty")]
    pub roles: StageRoles,
    #[serde(default, skip_serializing_if = "RoleValues::is_empty")]
    pub role_values: RoleValues,
    /// Its place in the pipeline's order (matrix expansions in the order
    /// their values are declared): rows are shown in this order.
    #[serde(default)]
    pub position: usize,
    /// The plots it declares of its files (`plots:`), kept with the run
    /// so that a pulled or old run is drawn as it was declared. Left out
    /// when empty, so that a stage without plots is written as before
    /// (a report's key holds its upstream stages' identities).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plots: Vec<crate::plot::PlotSpec>,
    /// The project-relative pages among its outputs that a person opens
    /// (a report's `index.html`), as its worker's description declared
    /// them when the pipeline loaded (`OutputSpec::page`): any worker's,
    /// a project's own included. Left out when empty, as `plots`. Read
    /// back (a pulled record, a report's invocation), a page the stored
    /// rule refuses is dropped, the rest of the record kept: it is only
    /// something to open.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::paths::dropping_refused"
    )]
    pub pages: Vec<crate::ProjectPath>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn combo(pairs: &[(&str, &str)]) -> Combination {
        Combination(
            pairs
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
        )
    }

    #[test]
    fn a_combination_inside_a_larger_one_is_no_row_of_its_own() {
        let train_32 = combo(&[("p", "32")]);
        let train_16 = combo(&[("p", "16")]);
        let eval_32 = combo(&[("p", "32"), ("seed", "1")]);
        let eval_16 = combo(&[("p", "16"), ("seed", "1")]);
        let shared = Combination::default();
        let rows = rows_by_combination([&shared, &train_32, &train_16, &eval_32, &eval_16]);
        assert_eq!(
            rows,
            [
                CombinationRow {
                    combination: eval_32,
                    stages: vec![0, 1, 3]
                },
                CombinationRow {
                    combination: eval_16.clone(),
                    stages: vec![0, 2, 4]
                },
            ]
        );
    }

    #[test]
    fn without_a_matrix_every_stage_is_in_one_row_and_rows_keep_the_declared_order() {
        let none = Combination::default();
        let rows = rows_by_combination([&none, &none]);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].stages, [0, 1]);
        let ten = combo(&[("n", "10")]);
        let two = combo(&[("n", "2")]);
        let rows = rows_by_combination([&ten, &two]);
        assert_eq!(rows[0].combination, ten);
        assert_eq!(rows[1].combination, two);
    }

    #[test]
    fn a_status_text_that_names_none_is_an_error_not_a_default() {
        assert_eq!("ran".parse::<StageStatus>(), Ok(StageStatus::Ran));
        assert!("Ran".parse::<StageStatus>().is_err());
        let error = "runnin".parse::<RunStatus>().unwrap_err();
        assert!(
            error.to_string().contains("`runnin` is not a status"),
            "{error}"
        );
    }

    #[test]
    fn detail_metrics_are_names_or_dotted_prefixes() {
        let roles = StageRoles {
            detail_metrics: vec!["epochs".into(), "confusion".into()],
            hardware_metrics: vec!["hardware".into()],
            ..StageRoles::default()
        };
        assert!(roles.is_detail_metric("epochs.1.val_acc"));
        assert!(roles.is_detail_metric("confusion"));
        assert!(!roles.is_detail_metric("epochs_total"));
        assert!(!roles.is_detail_metric("accuracy"));
        assert!(roles.is_hardware_metric("hardware.cpu"));
        assert!(roles.is_detail_metric("hardware.cpu"));
        assert!(!roles.is_hardware_metric("hardwarex"));
    }
}
