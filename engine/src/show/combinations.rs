//! A run's combinations as `pipe show` lists them: each row of its
//! results (the record's one definition of them, `rows_by_combination`,
//! which `pipe compare RUN` shows too) with its values and the key
//! metrics of its own stages; and which params a sweep run swept.

use std::collections::HashMap;

use pipe_protocol::record::{rows_by_combination, Combination};

use crate::runs::{RunRecord, StageMetric, StageRecord};

/// One combination of a run: its values and its stages' key metrics,
/// each named by its stage's base name (`train`: `acc`).
#[derive(Debug, Clone, PartialEq)]
pub struct CombinationShown {
    pub combination: Combination,
    pub key_metrics: Vec<StageMetric>,
}

/// The combinations of `run`, in the pipeline's order; empty when no
/// stage of it has one (a plain run).
pub fn combinations(run: &RunRecord) -> Vec<CombinationShown> {
    let mut stages: Vec<&StageRecord> = run.stages.iter().collect();
    stages.sort_by_key(|stage| stage.identity.position);
    if stages
        .iter()
        .all(|stage| stage.identity.combination.is_empty())
    {
        return Vec::new();
    }
    let base_of: HashMap<&str, &str> = stages
        .iter()
        .map(|stage| {
            let base = match stage.identity.base_name.as_str() {
                "" => stage.stage.as_str(),
                base => base,
            };
            (stage.stage.as_str(), base)
        })
        .collect();
    let key_metrics = run.summary().key_metrics;
    rows_by_combination(stages.iter().map(|stage| {
        let shows_something = !stage.metrics.is_empty() || stage.identity.roles.makes_data;
        stage.identity.combination.splitting_rows(shows_something)
    }))
    .into_iter()
    .filter(|row| !row.combination.is_empty())
    .map(|row| {
        // A stage outside every combination belongs to each row: its
        // metrics are the run's, not the row's.
        let own: Vec<&str> = row
            .stages
            .iter()
            .map(|&index| stages[index])
            .filter(|stage| !stage.identity.combination.is_empty())
            .map(|stage| stage.stage.as_str())
            .collect();
        CombinationShown {
            combination: row.combination,
            key_metrics: key_metrics
                .iter()
                .filter(|metric| own.contains(&metric.stage.as_str()))
                .map(|metric| StageMetric {
                    stage: base_of[metric.stage.as_str()].to_string(),
                    ..metric.clone()
                })
                .collect(),
        }
    })
    .collect()
}

/// The params a sweep run swept (`train.lr` of `-S train.lr=1e-4,3e-4`),
/// as its record's `-S` values name them; none for another run.
pub fn swept_params(run: &RunRecord) -> Vec<String> {
    if !run.sweep {
        return Vec::new();
    }
    let Ok(combinations) = crate::sweep::combinations(&run.overrides) else {
        return Vec::new();
    };
    combinations
        .first()
        .map(|(_, swept)| swept.iter().map(|setting| setting.path.dotted()).collect())
        .unwrap_or_default()
}
