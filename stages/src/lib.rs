//! Built-in stages of pipe, run by the `pipe-stage` worker through the
//! stage protocol (crate `pipe-protocol`, docs/stage-protocol.md): the
//! engine writes an `Invocation`, the worker runs one stage, reports
//! progress as JSON lines on stdout, and leaves its outputs (and
//! `metrics.json`) in the output directory it was given.
//!
//! The training stages live in the crate `pipe-train` (worker
//! `pipe-stage-train`), which links libtorch; it builds on the public parts
//! of this crate: [`batches`], [`classification`], [`token_file`],
//! [`worker`], [`StageContext`] (with its typed params),
//! [`StageInfoBuilder`] and [`BuiltinStage`]. Nothing here needs libtorch.

pub mod batches;
pub mod builtins;
pub mod classification;
mod context;
mod error;
mod http;
mod params;
pub mod records;
pub mod rng;
mod stage_info;
pub mod token_file;
pub mod worker;

pub use context::{emit, events_to_stderr, StageContext};
pub use error::StageError;
pub use pipe_protocol::{OutputKind, OutputSpec, ParamKind, ParamSpec, StageInfo};
pub use stage_info::StageInfoBuilder;

pub type Result<T, E = StageError> = std::result::Result<T, E>;

/// One built-in stage: what it is (for the catalog and validation) and how
/// to run it.
pub trait BuiltinStage: Sync {
    fn info(&self) -> StageInfo;
    /// Runs the stage. Params have already been checked against `info()`
    /// and have their defaults filled in.
    fn run(&self, context: &StageContext) -> Result<()>;
}
