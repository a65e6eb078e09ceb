//! The stage protocol, shared by the engine (which writes invocations and
//! reads events) and every worker (which does the opposite). A worker is
//! any executable with two subcommands:
//!
//! - `WORKER describe`: prints a JSON array of [`StageInfo`] on stdout.
//! - `WORKER run --invocation FILE`: runs the stage described by the
//!   [`Invocation`] in FILE, prints [`Event`]s as JSON lines on stdout, logs
//!   on stderr, writes its outputs under `output_dir`, and exits 0 on
//!   success. On failure it prints an `error` event and exits non-zero.
//!
//! The full description, with examples, is docs/stage-protocol.md.
//!
//! Beside the messages (`messages`, `stage_info`) and the run record's
//! vocabulary (`record`, with the plots a stage declares: `plot`), the
//! project-relative paths the cache and the engine hold and the rule a
//! stored one must pass (`paths`), the conventions every pipe process keeps alike,
//! engine and workers: what is a secret and how it is masked (`redact`),
//! how numbers, sizes and times are written (`format`), how a user's value
//! is quoted (`excerpt`), how a child process is run within a limit
//! (`child`) and its output read in bounded lines (`lines`), and which GPUs
//! a machine has (`gpus`). Each is here because more than one crate must
//! agree on it; what only the CLI needs (terminal escapes) lives there.

pub mod child;
mod excerpt;
pub mod format;
pub mod gpus;
pub mod lines;
mod messages;
mod param_rules;
pub mod paths;
pub mod plot;
pub mod record;
pub mod redact;
mod stage_info;

pub use excerpt::excerpt;
pub use messages::{
    Event, Invocation, Metrics, RunContext, RunStage, METRICS_FILE, PROTOCOL_VERSION, RUN_FILE,
};
pub use param_rules::{check_rules, ParamProblem, ParamRule};
pub use paths::ProjectPath;
pub use plot::{PlotKind, PlotSpec, RunPlot};
pub use stage_info::{check_params, OutputKind, OutputSpec, ParamKind, ParamSpec, StageInfo};
