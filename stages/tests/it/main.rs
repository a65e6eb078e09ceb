//! The integration tests of `pipe-stages` that need no libtorch, linked into
//! one binary: one module per stage (or per reader of a stage's output),
//! each running the real `pipe-stage` worker.

// Beside the libtorch tests (train.rs), which run the worker through it too.
#[path = "../common/mod.rs"]
mod common;
mod download_support;

mod batches;
mod download;
mod from_csv;
mod hf_download;
mod imdb;
mod split;
mod tokenize;
