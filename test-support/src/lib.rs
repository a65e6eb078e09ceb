//! What the integration tests of pipe's crates share, built once instead of
//! once per test file: [`TestProject`], a temporary project driven through
//! the real `pipe` binary, and [`http::Server`], the one loopback HTTP
//! server every download test talks to, [`worker::run_worker`], which
//! runs a worker binary on one invocation as the engine would,
//! [`chromium::render`], which renders an HTML page in headless Chromium,
//! [`s3::Server`], a real S3 server for the remote-cache tests, and
//! [`slurm`], the real Slurm cluster of the Slurm tests.

pub mod chromium;
mod git;
pub mod http;
mod project;
pub mod s3;
pub mod slurm;
pub mod worker;

pub use git::git;
pub use project::{settled, RunResult, TestProject};
