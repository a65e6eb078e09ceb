//! `pipe-stage-train`: the worker that runs pipe's training and evaluation
//! stages on libtorch. A binary of its own so that the data stages in
//! `pipe-stage` never pay libtorch's start-up (docs/libtorch.md).

use std::process::ExitCode;

fn main() -> ExitCode {
    pipe_stages::worker::main("pipe-stage-train", &pipe_train::builtins::training_stages())
}
