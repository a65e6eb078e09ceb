//! The workers that run the built-in stages: which stages each offers, how
//! it is started, and, in a source checkout, how it is built on first use.
//! The catalog (crate::catalog) is made from what they describe.

mod build;
mod build_output;
mod builtin;
mod describe;
mod launch;
mod source_checkout;

pub use build::PendingBuild;
pub use builtin::{built_in_stages, first_difference, page_at, pages_of, BuiltinWorker};
pub(crate) use describe::describe;
pub(crate) use launch::launch_of;
pub use launch::{Launch, Unavailable};
pub use source_checkout::without_cargo_run_env;
pub(crate) use source_checkout::Checkout;
