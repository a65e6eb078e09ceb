//! What `pipe show` puts first about a run: the metrics that matter (the
//! key metrics `pipe compare` always shows), and where its report is.

use serde_json::Value;

use super::record::RunRecord;
use crate::builtin_workers::{page_at, pages_of};
use crate::metrics::DirectionRules;

/// One metric of one stage.
#[derive(Debug, Clone, PartialEq)]
pub struct StageMetric {
    pub stage: String,
    pub metric: String,
    pub value: Value,
}

/// A run's metrics split for reading, and its report.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// `DirectionRules::is_key_of`; single values only.
    pub key_metrics: Vec<StageMetric>,
    /// Every other metric, in the stages' order.
    pub other_metrics: Vec<StageMetric>,
    /// The pages of the run's report stages: the file of each output
    /// that its stage's description says a person opens
    /// (`OutputSpec::page`: `report/html`'s `index.html`).
    pub reports: Vec<String>,
}

impl RunRecord {
    pub fn summary(&self) -> RunSummary {
        let rules = DirectionRules::default().declared(&self.directions);
        let mut summary = RunSummary::default();
        // In the pipeline's order, not the order the stages finished in:
        // a sweep's `train@lr=1e-4` before `train@lr=3e-4` however they ran.
        let mut stages: Vec<&super::StageRecord> = self.stages.iter().collect();
        stages.sort_by_key(|stage| stage.identity.position);
        for stage in stages {
            let identity = &stage.identity;
            let base = if identity.base_name.is_empty() {
                stage.stage.as_str()
            } else {
                identity.base_name.as_str()
            };
            // A command stage records no roles: the documented metric
            // names say what is detail (`epochs.*`).
            let roles = identity.roles.clone().with_conventional_metrics();
            for (metric, value) in &stage.metrics {
                let shown = StageMetric {
                    stage: stage.stage.clone(),
                    metric: metric.clone(),
                    value: value.clone(),
                };
                let key = rules.is_key_of(base, metric, Some(&roles))
                    && (value.is_number() || value.is_boolean());
                if key {
                    summary.key_metrics.push(shown);
                } else {
                    summary.other_metrics.push(shown);
                }
            }
            if !identity.pages.is_empty() {
                // As its worker declared them when the run loaded; a page
                // outside the outputs the record holds is nothing to open.
                summary.reports.extend(
                    identity
                        .pages
                        .iter()
                        .filter(|page| {
                            stage.outputs.keys().any(|output| {
                                page.strip_prefix(output.as_str())
                                    .is_some_and(|rest| rest.starts_with('/'))
                            })
                        })
                        .map(|page| page.to_string()),
                );
            } else if let Some(uses) = identity.uses.as_deref() {
                // A run recorded before pages were kept: its built-in
                // stages' pages, from the catalog compiled in.
                let pages = pages_of(uses);
                summary.reports.extend(
                    stage
                        .outputs
                        .keys()
                        .filter_map(|path| page_at(&pages, path)),
                );
            }
        }
        summary
    }
}
