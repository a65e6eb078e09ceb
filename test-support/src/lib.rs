//! What the integration tests of pipe's crates share, built once instead of
//! once per test file: [`TestProject`], a temporary project driven through
//! the real `pipe` binary, and [`http::Server`], the one loopback HTTP
//! server every download test talks to.

pub mod http;
mod project;

pub use project::{RunResult, TestProject};
