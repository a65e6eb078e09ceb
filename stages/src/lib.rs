//! Built-in stages of pipe, run by the `pipe-stage` worker through the
//! stage protocol (crate `pipe-protocol`, docs/stage-protocol.md): the
//! engine writes an `Invocation`, the worker runs one stage, reports
//! progress as JSON lines on stdout, and leaves its outputs (and
//! `metrics.json`) in the output directory it was given.

pub mod batches;
pub mod builtins;
pub mod classification;
mod context;
#[cfg(feature = "torch")]
pub mod ddp;
mod error;
mod http;
#[cfg(feature = "torch")]
pub mod model;
#[cfg(feature = "torch")]
pub mod optim;
#[cfg(feature = "torch")]
pub mod precision;
pub mod records;
pub mod rng;
pub mod worker;

pub use context::{emit, StageContext};
pub use error::StageError;
pub use pipe_protocol::{OutputKind, OutputSpec, ParamKind, ParamSpec, StageInfo};

pub type Result<T, E = StageError> = std::result::Result<T, E>;

/// One built-in stage: what it is (for the catalog and validation) and how
/// to run it.
pub trait BuiltinStage: Sync {
    fn info(&self) -> StageInfo;
    /// Runs the stage. Params have already been checked against `info()`
    /// and have their defaults filled in.
    fn run(&self, context: &StageContext) -> Result<()>;
}
