//! The data worker `pipe-stage` on one invocation (`pipe_test_support::worker`).

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

pub use pipe_test_support::worker::{read_jsonl, run_worker, Run};

/// Runs `uses@1` with `params` in `run_dir` (its `out/` is the output
/// directory) with the data worker, on one thread.
pub fn run_data_stage(
    run_dir: &Path,
    stage: &str,
    uses: &str,
    params: Value,
    seed: Option<u64>,
) -> Run {
    run_worker(
        env!("CARGO_BIN_EXE_pipe-stage"),
        run_dir,
        stage,
        uses,
        params,
        seed,
        1,
    )
}

/// Runs the worker on `invocation` and waits for it with `wait4`, which
/// gives that child's own peak resident set (the tests of this binary run
/// other workers at the same time). Returns its events and the peak in
/// bytes.
// `wait4` reaps the child, which clippy cannot see.
#[allow(clippy::zombie_processes)]
pub fn run_measuring_peak_rss(run_dir: &Path, invocation: &Value) -> (bool, Vec<Value>, u64) {
    let file = run_dir.join("invocation.json");
    std::fs::write(&file, invocation.to_string()).unwrap();
    let events_path = run_dir.join("events.jsonl");
    let child = Command::new(env!("CARGO_BIN_EXE_pipe-stage"))
        .args(["run", "--invocation"])
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&events_path).unwrap())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: plain libc calls on zeroed, owned values; the child is ours
    // and reaped only here.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4 failed");
    let success = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let events = std::fs::read_to_string(&events_path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    // Linux reports ru_maxrss in KiB.
    (success, events, usage.ru_maxrss as u64 * 1024)
}
