//! `pipe diff`: what changed between two recorded runs (params, metrics
//! with their verdicts, stages and outputs), and the two runs it takes
//! when none or one is named.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::commits::{commits_of, side_label, RunCommit};
use crate::history::{History, Notice, Pull};
use crate::key::{self, FieldChange};
use crate::metrics::{relative_change, Direction, DirectionRules, Verdict};
use crate::project_files::ProjectPath;
use crate::runs::{RunDb, RunId, RunRecord, StageStatus};
use crate::Result;

/// What `pipe diff` was asked, as the user wrote it.
#[derive(Debug, Clone, Default)]
pub struct DiffRequest {
    /// Run references (`12`, `last~2`, a git ref); unnamed ones are chosen
    /// as [`History::runs_to_diff`] says.
    pub a: Option<String>,
    pub b: Option<String>,
    /// A pipeline name or file, whose runs are diffed when none is named.
    pub pipeline: Option<String>,
    /// The directions the command line gives (`--higher`, `--lower`): they
    /// win over what the runs' pipelines declared.
    pub directions: DirectionRules,
}

/// `pipe diff [A] [B]`: the runs `request` names, or those the history
/// picks, diffed. `notify` hears, as they happen, the records pulled or
/// skipped while the runs are resolved, and a warning when the two are
/// runs of different pipelines.
pub fn diff(
    history: &mut History,
    request: &DiffRequest,
    notify: &mut dyn FnMut(Notice),
) -> Result<RunDiff> {
    let mut named = |query: &Option<String>| {
        query
            .as_deref()
            .map(|query| history.resolve_noting(query, Pull::IfConfigured, &mut *notify))
            .transpose()
    };
    let (a, b) = (named(&request.a)?, named(&request.b)?);
    let pipeline = request
        .pipeline
        .as_deref()
        .map(|text| history.pipeline_named(text))
        .transpose()?;
    let pair = history.runs_to_diff(a, b, pipeline.as_deref())?;
    if let Some(warning) = pair.warning {
        notify(Notice::Warning(warning));
    }
    let db = &history.db;
    let record_a = db.resolved_run(pair.a)?;
    let record_b = db.resolved_run(pair.b)?;
    // The first declaration of a name wins: the later run's pipeline is
    // the one being worked on.
    let (older, newer) = if (record_a.started_ms, pair.a) < (record_b.started_ms, pair.b) {
        (&record_a, &record_b)
    } else {
        (&record_b, &record_a)
    };
    let rules = request
        .directions
        .clone()
        .declared(&newer.trusted_directions())
        .declared(&older.trusted_directions());
    let mut diff = diff_runs(db, &record_a, &record_b, &rules)?;
    diff.commits = commits_of(&history.root, &record_a, &record_b);
    diff.labels = (
        side_label(&history.root, &record_a),
        side_label(&history.root, &record_b),
    );
    diff.unverified = [&record_a, &record_b]
        .into_iter()
        .filter_map(|run| Some((run.id, run.unverified_summary()?)))
        .collect();
    diff.withheld = [&record_a, &record_b]
        .into_iter()
        .filter_map(|run| Some((run.id, run.withheld_summary()?)))
        .collect();
    Ok(diff)
}

#[derive(Debug, Clone, Serialize)]
pub struct RunDiff {
    pub a: RunId,
    pub b: RunId,
    /// Where each ran, when the two ran at different commits (or one with
    /// uncommitted changes): code changed, whatever the params say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commits: Option<(RunCommit, RunCommit)>,
    /// For each of the two that is a pulled run with fields its results
    /// do not bear out, those fields (`RunRecord::unverified_summary`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unverified: Vec<(RunId, String)>,
    /// For each of the two that is a pulled run with stages whose outputs
    /// and metrics it cannot show, those stages and why
    /// (`RunRecord::withheld_summary`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub withheld: Vec<(RunId, String)>,
    /// Each side as a reviewer knows it: `main @ 1a2b3c4 (#2)`.
    pub labels: (String, String),
    pub params: Vec<FieldChange>,
    pub metrics: Vec<MetricChange>,
    pub stages: Vec<StageChange>,
    pub outputs: Vec<OutputChange>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricChange {
    pub stage: String,
    pub metric: String,
    pub a: Option<Value>,
    pub b: Option<Value>,
    /// b - a, when both are numbers.
    pub delta: Option<f64>,
    /// delta / |a|, when both are numbers and a is not 0.
    pub relative: Option<f64>,
    pub direction: Direction,
    /// Whether b is better than a, when both are numbers.
    pub verdict: Option<Verdict>,
    /// A key metric (named by the pipeline, `--higher`/`--lower`, its
    /// stage's `key_metrics`, or by name): listed first, and even when it
    /// did not change (then `verdict` is `same`).
    pub key: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct StageChange {
    pub stage: String,
    pub status_a: Option<StageStatus>,
    pub status_b: Option<StageStatus>,
    /// Key fields that differ (empty when the key is the same).
    pub key_changes: Vec<FieldChange>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OutputChange {
    pub stage: String,
    pub path: String,
    pub a: Option<String>,
    pub b: Option<String>,
}

/// What changed from run `a` to run `b`. Metrics come with key metrics
/// first (those whose direction is known), then the rest, each part by
/// stage and name.
pub fn diff_runs(
    db: &RunDb,
    a: &RunRecord,
    b: &RunRecord,
    rules: &DirectionRules,
) -> Result<RunDiff> {
    let params = key::diff_manifests(&a.params, &b.params);
    let stages_a: BTreeMap<&str, _> = a
        .stages
        .iter()
        .map(|stage| (stage.stage.as_str(), stage))
        .collect();
    let stages_b: BTreeMap<&str, _> = b
        .stages
        .iter()
        .map(|stage| (stage.stage.as_str(), stage))
        .collect();
    let mut names: Vec<&str> = stages_a.keys().chain(stages_b.keys()).copied().collect();
    names.sort_unstable();
    names.dedup();

    let mut metrics = Vec::new();
    let mut stages = Vec::new();
    let mut outputs = Vec::new();
    for name in names {
        let (before, after) = (stages_a.get(name), stages_b.get(name));
        let empty = BTreeMap::new();
        let metrics_a = before.map(|stage| &stage.metrics).unwrap_or(&empty);
        let metrics_b = after.map(|stage| &stage.metrics).unwrap_or(&empty);
        let mut metric_names: Vec<&String> = metrics_a.keys().chain(metrics_b.keys()).collect();
        metric_names.sort_unstable();
        metric_names.dedup();
        let roles = after.or(before).map(|stage| &stage.identity.roles);
        for metric in metric_names {
            let (value_a, value_b) = (metrics_a.get(metric), metrics_b.get(metric));
            let key = rules.is_key_of(base_name(name), metric, roles);
            if value_a == value_b && !key {
                continue;
            }
            let numbers = value_a
                .and_then(Value::as_f64)
                .zip(value_b.and_then(Value::as_f64));
            let direction = rules.direction(base_name(name), metric);
            metrics.push(MetricChange {
                stage: name.to_string(),
                metric: metric.clone(),
                a: value_a.cloned(),
                b: value_b.cloned(),
                delta: numbers.map(|(x, y)| y - x),
                relative: numbers.and_then(|(x, y)| relative_change(x, y)),
                direction,
                verdict: numbers.map(|(x, y)| direction.verdict(x, y)),
                key,
            });
        }

        let key_a = before.and_then(|stage| stage.key);
        let key_b = after.and_then(|stage| stage.key);
        let ran_in_b = after
            .map(|stage| stage.status == StageStatus::Ran)
            .unwrap_or(false);
        if key_a != key_b || ran_in_b {
            let key_changes = match (&key_a, &key_b) {
                (Some(x), Some(y)) if x != y => match (db.manifest(x)?, db.manifest(y)?) {
                    (Some(mx), Some(my)) => key::diff_manifests(&mx, &my),
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            };
            stages.push(StageChange {
                stage: name.to_string(),
                status_a: before.map(|stage| stage.status),
                status_b: after.map(|stage| stage.status),
                key_changes,
            });
        }

        let empty_outputs = BTreeMap::new();
        let outs_a = before.map(|stage| &stage.outputs).unwrap_or(&empty_outputs);
        let outs_b = after.map(|stage| &stage.outputs).unwrap_or(&empty_outputs);
        let mut paths: Vec<&ProjectPath> = outs_a.keys().chain(outs_b.keys()).collect();
        paths.sort_unstable();
        paths.dedup();
        for path in paths {
            let digest_a = outs_a
                .get(path.as_str())
                .map(|artifact| artifact.digest.to_hex());
            let digest_b = outs_b
                .get(path.as_str())
                .map(|artifact| artifact.digest.to_hex());
            if digest_a != digest_b {
                outputs.push(OutputChange {
                    stage: name.to_string(),
                    path: path.to_string(),
                    a: digest_a,
                    b: digest_b,
                });
            }
        }
    }
    metrics.sort_by_key(|change| (!change.key, change.direction == Direction::Unknown));
    Ok(RunDiff {
        a: a.id,
        b: b.id,
        commits: None,
        unverified: Vec::new(),
        withheld: Vec::new(),
        labels: (format!("run #{}", a.id), format!("run #{}", b.id)),
        params,
        metrics,
        stages,
        outputs,
    })
}

/// `train` of `train@precision=bf16-mixed`.
pub fn base_name(stage: &str) -> &str {
    stage.split_once('@').map_or(stage, |(base, _)| base)
}
