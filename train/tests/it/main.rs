//! The tests of `pipe-train`, linked into one binary: the models against
//! `transformers` outputs (`model_parity`), and the training and eval
//! stages through the real `pipe-stage-train` worker (`train`). Modules
//! share one process: a test sets env vars on the child it starts, never
//! on itself.

mod model_parity;
mod train;
