//! `pipe-stage`: the worker that runs pipe's built-in data stages
//! (downloads, datasets, tokenize). `pipe-stage describe` prints the
//! catalog (JSON); `pipe-stage run --invocation FILE` runs one stage. See
//! docs/stage-protocol.md.

use std::process::ExitCode;

// Tokenizing spends about a quarter of its time in malloc/free; mimalloc
// made the tokenize stage 1.19x faster (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    pipe_stages::worker::main("pipe-stage", &pipe_stages::builtins::data_stages())
}
