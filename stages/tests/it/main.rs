//! The integration tests of `pipe-stages` that need no libtorch, linked into
//! one binary: one module per stage (or per reader of a stage's output),
//! each running the real `pipe-stage` worker.
//!
//! The modules share one process and run on parallel threads, so a test
//! gives an environment variable or a working directory to the child's
//! `Command`, never to the test process, where it would leak into others.

// Beside the libtorch tests (train.rs), which run the worker through it too.
mod common;
mod download_support;

mod batches;
mod download;
mod from_csv;
mod hf_download;
mod imdb;
mod report;
mod split;
mod tokenize;
