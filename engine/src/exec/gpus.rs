//! Which GPUs this machine has, for `resources.gpus`.

use std::process::{Command, Stdio};

/// GPU indices: `PIPE_GPUS` (comma-separated, may be empty), else one per
/// line of `nvidia-smi -L`, else none.
pub fn available_gpus() -> Vec<String> {
    if let Ok(list) = std::env::var("PIPE_GPUS") {
        return list
            .split(',')
            .map(str::trim)
            .filter(|gpu| !gpu.is_empty())
            .map(String::from)
            .collect();
    }
    let Ok(output) = Command::new("nvidia-smi")
        .arg("-L")
        .stderr(Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.starts_with("GPU "))
        .enumerate()
        .map(|(index, _)| index.to_string())
        .collect()
}
