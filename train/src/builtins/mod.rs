//! The libtorch stages, run by `pipe-stage-train`.

mod classifier;
mod eval;
mod registry;
mod train;

pub use registry::training_stages;
