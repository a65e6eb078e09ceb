//! `visible_gpus` as the engine and the training worker call it: the
//! `nvidia-smi` found on PATH and the inherited CUDA_VISIBLE_DEVICES. A
//! test binary of its own with one test, since it sets PATH and
//! CUDA_VISIBLE_DEVICES for the whole process.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use pipe_protocol::gpus::{visible_gpus, GpuError, NVIDIA_SMI_TIMEOUT};

/// Puts a shell script named nvidia-smi with `body` in `dir`.
fn fake_nvidia_smi(dir: &Path, body: &str) {
    let path = dir.join("nvidia-smi");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_nvidia_smi_on_path_is_asked_narrowed_to_cuda_visible_devices_and_stopped_when_it_hangs() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("nvidia-smi-on-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::set_var("PATH", format!("{}:{path}", dir.display()));

    fake_nvidia_smi(
        &dir,
        "echo '0, GPU-aaa, NVIDIA A100'\necho '1, GPU-bbb, NVIDIA H200'\necho '2, GPU-ccc, NVIDIA H200'",
    );
    std::env::remove_var("CUDA_VISIBLE_DEVICES");
    let all = visible_gpus().unwrap();
    assert_eq!(
        all.iter().map(|gpu| gpu.id.as_str()).collect::<Vec<_>>(),
        ["0", "1", "2"]
    );
    std::env::set_var("CUDA_VISIBLE_DEVICES", "GPU-ccc,0");
    let visible = visible_gpus().unwrap();
    assert_eq!(
        visible
            .iter()
            .map(|gpu| (gpu.id.as_str(), gpu.index.as_str(), gpu.name.as_str()))
            .collect::<Vec<_>>(),
        [("GPU-ccc", "2", "NVIDIA H200"), ("0", "0", "NVIDIA A100")]
    );

    // A wedged driver: nvidia-smi never answers. It is killed after the
    // timeout instead of holding the caller.
    fake_nvidia_smi(&dir, "exec sleep 600");
    let started = Instant::now();
    let answer = visible_gpus();
    let waited = started.elapsed();
    assert!(
        matches!(answer, Err(GpuError::TimedOut(after)) if after == NVIDIA_SMI_TIMEOUT),
        "{answer:?}"
    );
    assert!(
        waited >= NVIDIA_SMI_TIMEOUT && waited < NVIDIA_SMI_TIMEOUT + Duration::from_secs(5),
        "waited {waited:?}"
    );

    std::fs::remove_file(dir.join("nvidia-smi")).unwrap();
    // No nvidia-smi at all (no driver): an error the callers read as none.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::env::set_var("PATH", empty.display().to_string());
    assert!(matches!(visible_gpus(), Err(GpuError::Spawn(_))));
    std::env::set_var("PATH", path);
    std::fs::remove_dir_all(&dir).unwrap();
}
