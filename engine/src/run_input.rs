//! What a stage that reads its run (`StageInfo::reads_run`: the report) is
//! told, and what its key covers: the results of the stages it depends on.
//! Both are made here from the same values, so the key covers everything
//! such a stage can read, and nothing that changes from run to run without
//! changing a result: with the results unchanged, its own result is
//! restored instead of made again (docs/decisions.md, "A report is keyed on the results it reads").

use std::collections::BTreeMap;
use std::path::Path;

use pipe_cache::Artifact;
use pipe_protocol::redact::redacted_json;
use pipe_protocol::{RunContext, RunPlot, RunStage};
use serde_json::{json, Map, Value};

use crate::pipeline::{Pipeline, Stage};

/// The manifest field that holds [`keyed_run`].
pub const MANIFEST_FIELD: &str = "run";

/// A stage that finished with a result, as a reader of the run sees it.
pub struct Made<'a, OutputPath: AsRef<str>> {
    pub stage: &'a Stage,
    /// Output path -> content, as its action result holds them (metrics
    /// files included, so the metrics need no entry of their own), or as
    /// the stage's record keeps them (by text).
    pub outputs: &'a BTreeMap<OutputPath, Artifact>,
    /// What making the outputs took in the run that made them: the same
    /// for a restore as for the run that computed them.
    pub compute_ms: Option<u64>,
}

/// One stage's part of a reader's key: its identity, compute time and the
/// digests of its outputs. Not when it ran, how long this run took for it
/// or whether it was restored: none of those is a result.
pub fn keyed_stage<OutputPath: AsRef<str>>(made: &Made<'_, OutputPath>) -> Value {
    let outputs: Map<String, Value> = made
        .outputs
        .iter()
        .map(|(path, artifact)| {
            let digest = artifact.digest.to_hex();
            (path.as_ref().to_string(), json!(digest.as_str()))
        })
        .collect();
    json!({
        "identity": made.stage.identity(),
        "compute_ms": made.compute_ms,
        "outputs": outputs,
    })
}

/// The manifest's `run` field for a reader upstream of which `stages`
/// (name -> [`keyed_stage`]) finished: with the pipeline's name and params,
/// which the report shows.
pub fn keyed_run(pipeline: &Pipeline, stages: Map<String, Value>) -> Value {
    json!({
        "pipeline": pipeline.name,
        "params": redacted_json(&pipeline.params),
        "stages": stages,
    })
}

/// A finished stage as the reader is told it: its outputs by name,
/// absolute, and its metrics.
pub fn run_stage(
    stage: &Stage,
    compute_ms: Option<u64>,
    metrics: BTreeMap<String, Value>,
    root: &Path,
) -> RunStage {
    let identity = stage.identity();
    RunStage {
        name: stage.name.clone(),
        base_name: identity.base_name,
        combination: identity.combination,
        uses: identity.uses,
        roles: identity.roles,
        compute_ms,
        outputs: stage
            .outs
            .iter()
            .map(|out| (out.name.clone(), root.join(&out.path)))
            .collect(),
        metrics,
        plots: stage
            .plots
            .iter()
            .map(|spec| RunPlot {
                spec: spec.clone(),
                file: root.join(&spec.path),
            })
            .collect(),
    }
}

/// What the reader is told: `stages` in the pipeline's order.
pub fn context(pipeline: &Pipeline, stages: Vec<RunStage>) -> RunContext {
    RunContext {
        pipeline: pipeline.name.clone(),
        params: redacted_json(&pipeline.params),
        stages,
    }
}
