//! The messages between the engine and a worker: the invocation it is
//! given, the events it prints, the run context a reporting stage reads.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record;

/// Bumped on incompatible changes; a worker refuses other versions.
pub const PROTOCOL_VERSION: u32 = 1;

/// What the engine asks a worker to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invocation {
    pub protocol: u32,
    /// The stage's name in the pipeline (`train@precision=bf16-mixed`).
    pub stage: String,
    /// The built-in stage to run (`text/tokenize`) and its major version.
    pub uses: String,
    pub version: u32,
    /// The stage's `with:` params, with defaults (and pipeline params named
    /// by `ParamSpec::pipeline_param`) filled in: exactly what the stage's
    /// key hashes, except that params of kind `path` hold absolute paths.
    /// Nothing else here may change a result: the rest says where to write
    /// and what resources to use.
    pub params: serde_json::Map<String, Value>,
    /// Where the outputs go (one entry per declared output, named as in
    /// `StageInfo::outputs`, directly under it). Empty and private to this
    /// invocation: the engine moves it into place only on success.
    pub output_dir: PathBuf,
    /// A scratch directory the worker may use; deleted afterwards.
    pub scratch_dir: PathBuf,
    /// The project root, for messages.
    pub project_root: PathBuf,
    /// GPU indices handed to this stage (also in `CUDA_VISIBLE_DEVICES`).
    pub devices: Vec<String>,
    /// CPU threads the stage may use.
    pub threads: usize,
    /// For a stage that reports on its run (`StageInfo::reads_run`): the
    /// [`RunContext`] file the engine wrote before starting it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<PathBuf>,
    /// A directory of the worker's own that outlives a failed or killed
    /// attempt of this stage with this key (and only that key), for the
    /// state it resumes from: a training's last complete epoch. Deleted
    /// once the stage's result is stored; never cached. Its contents are
    /// untrusted: a worker writes them atomically and validates what it
    /// reads back (docs/stage-protocol.md). Absent from invocations of
    /// engines older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_dir: Option<PathBuf>,
}

/// One line of a worker's stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Work done so far in a phase (`download`, `tokenize`, ...). `total` is
    /// absent when unknown. `unit` is `bytes` or a noun (`rows`, `tokens`).
    Progress {
        phase: String,
        done: u64,
        total: Option<u64>,
        unit: String,
        /// A short live figure shown beside the bar (`loss 0.4521`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A line for the user (shown under the stage's progress line).
    Message { text: String },
    /// The stage finished; its outputs are complete.
    Done,
    /// The stage failed; nothing in `output_dir` may be used.
    Error {
        message: String,
        hint: Option<String>,
    },
}

/// The file name of the [`RunContext`] in a stage's scratch directory.
pub const RUN_FILE: &str = "run.json";

/// What a stage that reads its run is told about it; the engine writes it
/// as JSON and names the file in `Invocation::run`.
///
/// It holds the results of the stages before it and nothing about the run
/// itself (no run id, time, commit, or which stages ran and which were
/// restored): the stage is keyed on exactly this, so a rerun with unchanged
/// results restores its outputs instead of making them again
/// (docs/stage-protocol.md, "Stages that read their run").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunContext {
    pub pipeline: String,
    /// The pipeline's params after `-S` overrides, credentials masked.
    pub params: Value,
    /// The stages it depends on, however indirectly (a report: every stage
    /// not after it), in the pipeline's order. All of them succeeded: a
    /// stage whose upstream failed is skipped.
    pub stages: Vec<RunStage>,
}

/// One finished stage of a [`RunContext`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStage {
    /// `train@precision=bf16-mixed`.
    pub name: String,
    /// `train`.
    pub base_name: String,
    /// The matrix combination, keys in declared order (empty without one).
    #[serde(default)]
    pub combination: record::Combination,
    /// `train/classifier@1` for a built-in stage.
    #[serde(default)]
    pub uses: Option<String>,
    /// What its params and metrics mean (from its `StageInfo`).
    #[serde(default)]
    pub roles: record::StageRoles,
    /// What making its outputs took, in the run that made them (a cache
    /// hit restores them in less).
    #[serde(default)]
    pub compute_ms: Option<u64>,
    /// Output name -> absolute path (a built-in stage's output names; a
    /// command stage's `outs:` names).
    #[serde(default)]
    pub outputs: BTreeMap<String, PathBuf>,
    /// Flattened metrics (`epochs.1.val_acc`).
    #[serde(default)]
    pub metrics: BTreeMap<String, Value>,
    /// The plots it declares (`plots:`), each with its file's absolute
    /// path: the report draws them from the files' content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plots: Vec<crate::plot::RunPlot>,
}

/// Metric names are flattened JSON paths; this is the file a stage writes.
pub const METRICS_FILE: &str = "metrics.json";

/// Flattened metrics as the engine stores them.
pub type Metrics = BTreeMap<String, Value>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker built before `resume_dir` reads a new engine's invocation,
    /// and a new worker an old engine's: the field is optional both ways.
    #[test]
    fn an_invocation_without_a_resume_dir_parses_and_one_with_it_round_trips() {
        let old = serde_json::json!({
            "protocol": 1, "stage": "train", "uses": "train/classifier", "version": 1,
            "params": {}, "output_dir": "/p/out", "scratch_dir": "/p/tmp",
            "project_root": "/p", "devices": [], "threads": 2,
        });
        let parsed: Invocation = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(parsed.resume_dir, None);
        assert_eq!(serde_json::to_value(&parsed).unwrap(), old);

        let with_dir = Invocation {
            resume_dir: Some(PathBuf::from("/p/.pipe/resume/ab12")),
            ..parsed
        };
        let text = serde_json::to_string(&with_dir).unwrap();
        assert!(
            text.contains(r#""resume_dir":"/p/.pipe/resume/ab12""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Invocation>(&text).unwrap(), with_dir);
    }
}
