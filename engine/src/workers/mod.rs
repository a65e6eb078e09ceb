//! The workers that run the built-in stages: how each is started, and, in
//! a source checkout, how it is built on first use. Which stages each
//! offers, as built into pipe, is `crate::builtin_workers`; the catalog
//! (crate::catalog) is made from what they describe.

mod build;
mod build_output;
mod describe;
mod launch;
mod source_checkout;

pub use build::PendingBuild;
pub(crate) use describe::describe;
pub(crate) use launch::launch_of;
pub use launch::{Launch, Unavailable};
pub use source_checkout::without_cargo_run_env;
pub(crate) use source_checkout::Checkout;
