//! Asking a worker binary which stages it offers (`WORKER describe`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use pipe_protocol::StageInfo;

use crate::{EngineError, Result};

/// `dir`, then the library path pipe was started with.
pub(super) fn library_path_with(dir: &Path) -> Option<std::ffi::OsString> {
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(existing) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&existing));
    }
    std::env::join_paths(dirs).ok()
}

/// How long a worker may take to describe its stages: a Python worker that
/// imports torch on a cold disk takes seconds; one that waits on something
/// must not hang `pipe status`. `PIPE_DESCRIBE_TIMEOUT` (seconds) changes it.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(120);

fn describe_timeout() -> Duration {
    std::env::var("PIPE_DESCRIBE_TIMEOUT")
        .ok()
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
        .map_or(DESCRIBE_TIMEOUT, Duration::from_secs_f64)
}

/// The lines of a worker's stderr shown in an error: a traceback's end.
const STDERR_LINES_SHOWN: usize = 20;

/// Asks `worker` to describe its stages.
pub(crate) fn describe(worker: &Path, library_dir: Option<&Path>) -> Result<Vec<StageInfo>> {
    let mut command = Command::new(worker);
    if let Some(path) = library_dir.and_then(library_path_with) {
        command.env("LD_LIBRARY_PATH", path);
    }
    command.arg("describe");
    let limit = describe_timeout();
    let output = match pipe_protocol::child::output_within(&mut command, limit) {
        Ok(output) => output,
        Err(pipe_protocol::child::ChildError::Spawn(error)) => {
            return Err(EngineError::io(worker, error))
        }
        Err(error) => {
            return Err(EngineError::usage(
                format!(
                    "worker `{}` did not describe its stages: {error}",
                    worker.display()
                ),
                format!(
                    "`{} describe` must print its stages and exit; run it by hand to see where it waits \
                     (PIPE_DESCRIBE_TIMEOUT={} sets the limit in seconds)",
                    worker.display(),
                    limit.as_secs()
                ),
            ))
        }
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.trim().lines().collect();
        let shown = lines[lines.len().saturating_sub(STDERR_LINES_SHOWN)..].join("\n");
        return Err(EngineError::usage(
            format!(
                "worker `{}` failed to describe its stages: {}",
                worker.display(),
                if shown.is_empty() {
                    format!("it exited with {}", output.status)
                } else {
                    shown
                }
            ),
            "a worker must print its stages as JSON for `WORKER describe` (docs/stage-protocol.md)",
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|error| {
        EngineError::usage(
            format!("worker `{}` printed an invalid stage description: {error}", worker.display()),
            "`WORKER describe` must print a JSON array of stage descriptions (docs/stage-protocol.md)",
        )
    })
}
