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
mod builtin_stage;
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

pub use builtin_stage::BuiltinStage;
pub use context::{emit, events_to_stderr, StageContext};
pub use error::{Result, StageError};
pub use pipe_protocol::{OutputKind, OutputSpec, ParamKind, ParamSpec, StageInfo};
pub use stage_info::StageInfoBuilder;
