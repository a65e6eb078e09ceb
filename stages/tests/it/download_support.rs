//! What the download tests share besides the server: bytes to serve, their
//! digest, and a runner for the worker that keeps the HF and proxy settings
//! of whoever runs the tests out of it.

use std::path::PathBuf;
use std::process::Command;

use pipe_protocol::{Invocation, PROTOCOL_VERSION};
use serde_json::Value;

/// Deterministic bytes that are not all alike, so a shifted resume shows.
pub fn payload(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7919) % 251) as u8 ^ (i / 251) as u8)
        .collect()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

pub struct Run {
    pub code: i32,
    pub events: Vec<Value>,
    pub stderr: String,
    pub output_dir: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Run {
    pub fn last_event(&self) -> &Value {
        self.events.last().expect("the worker printed events")
    }

    /// (message, hint) of the error event.
    pub fn error(&self) -> (String, String) {
        let last = self.last_event();
        assert_eq!(
            last["event"], "error",
            "expected an error, got {last}; stderr: {}",
            self.stderr
        );
        (
            last["message"].as_str().unwrap_or("").to_string(),
            last["hint"].as_str().unwrap_or("").to_string(),
        )
    }

    pub fn assert_done(&self) {
        let last = self.last_event();
        assert_eq!(
            last["event"], "done",
            "expected done, got {last}; events: {:?}",
            self.events
        );
        assert_eq!(self.code, 0);
    }

    pub fn messages(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["event"] == "message")
            .filter_map(|e| e["text"].as_str().map(String::from))
            .collect()
    }

    pub fn metrics(&self) -> Value {
        let text =
            std::fs::read_to_string(self.output_dir.join("metrics.json")).expect("metrics.json");
        serde_json::from_str(&text).expect("metrics.json is JSON")
    }
}

/// Runs `uses@1` with `params` in the worker, hermetic from the HF and
/// proxy settings of whoever runs the tests; `env` is added on top.
pub fn run_stage(uses: &str, params: Value, env: &[(&str, &str)]) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let output_dir = dir.path().join("out");
    let invocation = Invocation {
        protocol: PROTOCOL_VERSION,
        stage: "test".into(),
        uses: uses.into(),
        version: 1,
        params: params.as_object().expect("params are a mapping").clone(),
        output_dir: output_dir.clone(),
        scratch_dir: dir.path().join("scratch"),
        project_root: dir.path().to_path_buf(),
        devices: vec![],
        threads: 1,
        run: None,
        resume_dir: None,
    };
    let file = dir.path().join("invocation.json");
    std::fs::write(&file, serde_json::to_string(&invocation).unwrap()).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_pipe-stage"));
    command.args(["run", "--invocation"]).arg(&file);
    for name in [
        "HF_ENDPOINT",
        "HF_HUB_CACHE",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "http_proxy",
        "https_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "all_proxy",
    ] {
        command.env_remove(name);
    }
    command.env("HF_HOME", dir.path().join("hf-home"));
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("run pipe-stage");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let events = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON event: {line}: {e}"))
        })
        .collect();
    Run {
        code: output.status.code().unwrap_or(-1),
        events,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        output_dir,
        dir,
    }
}
