//! The data worker `pipe-stage` on one invocation (`pipe_test_support::worker`).

use std::path::Path;

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
