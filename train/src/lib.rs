//! pipe's training and evaluation stages on libtorch (tch), run by the
//! `pipe-stage-train` worker: `train/classifier@1` and `eval/classifier@1`,
//! with the models, precisions, data-parallel replicas and optimizer they
//! use (docs/libtorch.md, docs/stages/train.md).
//!
//! The only crate of the workspace that links libtorch, and so not one of
//! its default members: a plain `cargo build` builds everything else. The
//! data side (token files, batches, metrics) and the worker side of the
//! stage protocol come from `pipe-stages`, which does not know this crate.

// The C++ shims the `extern "C"` blocks of this crate call.
extern crate pipe_train_shims;

pub mod builtins;
pub mod c10d;
pub mod collective;
pub mod ddp;
pub mod distributed;
mod ffi;
pub mod fsdp;
pub mod hardware;
pub mod inference;
pub mod launch;
pub mod model;
pub mod optim;
pub mod precision;
pub mod replicated;
pub mod shard;
mod shard_layout;
pub mod strategy;
