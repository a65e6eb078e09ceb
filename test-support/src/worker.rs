//! Runs a real worker binary (`pipe-stage`, `pipe-stage-train`) on a
//! hand-written invocation, as the engine would, and checks the protocol on
//! the way: the exit status and the last event must agree.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

pub struct Run {
    pub success: bool,
    pub events: Vec<Value>,
    pub output_dir: PathBuf,
}

impl Run {
    /// `message | hint` of the final error event.
    pub fn error(&self) -> String {
        assert!(!self.success, "the stage succeeded");
        let last = self.events.last().expect("no event");
        assert_eq!(last["event"], "error");
        format!(
            "{} | {}",
            last["message"].as_str().unwrap_or(""),
            last["hint"].as_str().unwrap_or("")
        )
    }

    /// The texts of its `message` events.
    pub fn messages(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|event| event["event"] == "message")
            .map(|event| event["text"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// The stage's `metrics.json`.
    pub fn metrics(&self) -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(self.output_dir.join("metrics.json")).unwrap(),
        )
        .unwrap()
    }
}

/// Runs `uses@1` with `params` in `run_dir` with the worker binary `worker`.
pub fn run_worker(
    worker: &str,
    run_dir: &Path,
    stage: &str,
    uses: &str,
    params: Value,
    seed: Option<u64>,
    threads: usize,
) -> Run {
    let invocation = invocation(run_dir, stage, uses, params, seed, threads);
    run_invocation(worker, run_dir, &invocation)
}

/// Runs `invocation` (from [`invocation`], perhaps with fields added, such
/// as `run`) in `run_dir` with the worker binary `worker`.
pub fn run_invocation(worker: &str, run_dir: &Path, invocation: &Value) -> Run {
    run_invocation_with_env(worker, run_dir, invocation, &[])
}

/// [`run_invocation`] with variables set for the worker alone.
pub fn run_invocation_with_env(
    worker: &str,
    run_dir: &Path,
    invocation: &Value,
    env: &[(&str, &Path)],
) -> Run {
    std::fs::create_dir_all(run_dir).unwrap();
    let output_dir = PathBuf::from(
        invocation["output_dir"]
            .as_str()
            .expect("the invocation names its output_dir"),
    );
    let file = run_dir.join("invocation.json");
    std::fs::write(&file, invocation.to_string()).unwrap();
    let output = Command::new(worker)
        .args(["run", "--invocation"])
        .arg(&file)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let events: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let last = events.last().expect("no event");
    assert_eq!(
        output.status.success(),
        last["event"] == "done",
        "exit status and last event disagree: {stdout}"
    );
    Run {
        success: output.status.success(),
        events,
        output_dir,
    }
}

/// The records of a JSON Lines file (a stage's dataset, its predictions).
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The invocation the engine would write for `uses@1` in `run_dir` (its
/// `out/` the output directory). The pipeline's seed reaches a worker only
/// through `with:`, where the engine puts it for a `seed` param left unset,
/// so that the key covers it.
pub fn invocation(
    run_dir: &Path,
    stage: &str,
    uses: &str,
    params: Value,
    seed: Option<u64>,
    threads: usize,
) -> Value {
    let mut params = params;
    if let (Some(seed), Some(map)) = (seed, params.as_object_mut()) {
        if map.get("seed").is_none_or(Value::is_null) {
            map.insert("seed".into(), json!(seed));
        }
    }
    json!({
        "protocol": 1,
        "stage": stage,
        "uses": uses,
        "version": 1,
        "params": params,
        "output_dir": run_dir.join("out"),
        "scratch_dir": run_dir.join("scratch"),
        "project_root": run_dir,
        "devices": [],
        "threads": threads,
    })
}
