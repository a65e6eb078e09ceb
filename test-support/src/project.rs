//! A temporary project driven through the real `pipe` binary, with its own
//! cache, no colour and no inherited pipe settings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;

pub struct TestProject {
    pub dir: tempfile::TempDir,
}

impl Default for TestProject {
    fn default() -> TestProject {
        TestProject::new()
    }
}

impl TestProject {
    pub fn new() -> TestProject {
        TestProject {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub fn write(&self, relative: &str, content: &str) {
        let path = self.path(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        // A restored output may be a read-only link into the cache.
        if path.exists() {
            std::fs::remove_file(&path).expect("remove old file");
        }
        std::fs::write(&path, content).expect("write file");
    }

    pub fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.path(relative))
            .unwrap_or_else(|e| panic!("read {relative}: {e}"))
    }

    pub fn exists(&self, relative: &str) -> bool {
        self.path(relative).exists()
    }

    pub fn command(&self) -> Command {
        Command::from_std(self.std_command())
    }

    /// The real `pipe` in this project, without colour and without the
    /// caller's pipe settings.
    pub fn std_command(&self) -> std::process::Command {
        self.std_command_of(&assert_cmd::cargo::cargo_bin("pipe"))
    }

    /// `std_command` for another `pipe` binary (one without workers beside it).
    pub fn std_command_of(&self, pipe: &Path) -> std::process::Command {
        let mut command = std::process::Command::new(pipe);
        command
            .current_dir(self.root())
            .env("NO_COLOR", "1")
            .env_remove("PIPE_CACHE_DIR")
            .env_remove("PIPE_LOG")
            .env_remove("PIPE_LINK")
            .env_remove("PIPE_GPUS")
            .env_remove("PIPE_EXECUTOR")
            .env_remove("PIPE_REMOTE")
            .env_remove("PIPE_REMOTE_ENDPOINT")
            .env_remove("PIPE_REMOTE_REGION")
            .env_remove("PIPE_REMOTE_READ_ONLY")
            .env_remove("PIPE_REMOTE_CONCURRENCY")
            .env_remove("PIPE_REMOTE_DEADLINE_S")
            // `pipe show --open` opens a browser only where one is set.
            .env_remove("BROWSER")
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            // A developer's own cloud settings must not reach the tests'
            // S3 server; tests that want credentials pass their own.
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_ENDPOINT_URL")
            .env_remove("AWS_ENDPOINT_URL_S3");
        // A CI's own variables naming the branch it builds would file the
        // tests' runs under it (the engine's `runs/ci_ref.rs`).
        for variable in [
            "PIPE_BRANCH",
            "GITHUB_HEAD_REF",
            "GITHUB_REF_TYPE",
            "GITHUB_REF_NAME",
            "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME",
            "CI_COMMIT_BRANCH",
            "BUILDKITE_BRANCH",
            "CIRCLE_BRANCH",
            "BRANCH_NAME",
            "BUILD_SOURCEBRANCHNAME",
            "BITBUCKET_BRANCH",
            "GITHUB_EVENT_NAME",
            "CI_MERGE_REQUEST_SOURCE_BRANCH_SHA",
        ] {
            command.env_remove(variable);
        }
        command
    }

    pub fn pipe(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("run pipe")
    }

    /// `pipe run --json ARGS`; returns the exit code and each stage's status.
    pub fn run(&self, args: &[&str]) -> RunResult {
        self.run_with_env(&[], args)
    }

    /// Like `run`, with these variables set for `pipe` (a remote cache's).
    pub fn run_with_env(&self, env: &[(String, String)], args: &[&str]) -> RunResult {
        let output = self
            .command()
            .envs(env.iter().map(|(key, value)| (key, value)))
            .args(["run", "--json"])
            .args(args)
            .output()
            .expect("run pipe");
        RunResult::from_output(output)
    }

    /// Like `run`, but panics unless the run succeeded.
    pub fn run_ok(&self, args: &[&str]) -> RunResult {
        let result = self.run(args);
        assert_eq!(result.code, 0, "pipe run failed:\n{}", result.stderr);
        result
    }

    /// `pipe show RUN --json` once the run's git dirty flag is settled.
    pub fn show_settled(&self, run: &str) -> serde_json::Value {
        settled(|| {
            self.command()
                .args(["show", run, "--json"])
                .output()
                .expect("run pipe")
        })
    }

    /// Cache object files, for corruption tests.
    pub fn object_files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        let objects = self.path(".pipe/cache/objects");
        for shard in std::fs::read_dir(objects).expect("objects dir").flatten() {
            for entry in std::fs::read_dir(shard.path()).expect("shard").flatten() {
                files.push(entry.path());
            }
        }
        files.sort();
        files
    }
}

#[derive(Debug)]
pub struct RunResult {
    pub code: i32,
    pub stages: BTreeMap<String, String>,
    pub events: Vec<Value>,
    pub stderr: String,
}

impl RunResult {
    pub fn from_output(output: Output) -> RunResult {
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        let events: Vec<Value> = stdout
            .lines()
            .map(|line| {
                serde_json::from_str(line).unwrap_or_else(|e| panic!("bad event {line:?}: {e}"))
            })
            .collect();
        let stages = events
            .iter()
            .filter(|event| event["event"] == "stage_finished")
            .map(|event| {
                (
                    event["stage"].as_str().unwrap_or_default().to_string(),
                    event["status"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        RunResult {
            code: output.status.code().unwrap_or(-1),
            stages,
            events,
            stderr: String::from_utf8_lossy(&output.stderr).to_string(),
        }
    }

    pub fn status(&self, stage: &str) -> &str {
        self.stages
            .get(stage)
            .map(String::as_str)
            .unwrap_or("(not reported)")
    }

    /// Stages that executed their command.
    pub fn ran(&self) -> Vec<&str> {
        self.stages
            .iter()
            .filter(|(_, status)| *status == "ran")
            .map(|(stage, _)| stage.as_str())
            .collect()
    }

    pub fn run_id(&self) -> i64 {
        self.events
            .iter()
            .find(|event| event["event"] == "run_finished")
            .and_then(|event| event["run"].as_i64())
            .expect("a run_finished event naming a recorded run")
    }
}

/// The record `show` prints (`pipe show RUN --json`), asked again until
/// its git dirty flag is settled: a run in a git repository may end before
/// the settler it started has written the flag (docs/decisions.md, "The
/// run record's git state"). Panics after a minute.
pub fn settled(mut show: impl FnMut() -> Output) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let output = show();
        assert!(
            output.status.success(),
            "pipe show failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let record: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
        let pending = !record["git_commit"].is_null() && record["git_dirty"].is_null();
        if !pending {
            return record;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run's dirty flag was not settled within a minute: {record}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
