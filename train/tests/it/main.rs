//! The tests of `pipe-train`, linked into one binary: the models against
//! `transformers` outputs (`model_parity`), the training and eval stages
//! through the real `pipe-stage-train` worker (`train`, at each precision in
//! `precision`, with each distributed strategy in `strategies`, and what
//! a run reports in `metrics`), resuming after a kill (`resume`), the
//! same on a GPU
//! where there is one (`cuda`), and what the libtorch binaries link
//! (`linking`). Modules
//! share one process: a test sets env vars on the child it starts, never
//! on itself.

mod cuda;
mod fsdp;
mod linking;
mod metrics;
mod model_parity;
mod precision;
mod ranks;
mod resume;
mod strategies;
mod train;
