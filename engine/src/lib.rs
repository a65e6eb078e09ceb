//! The pipe engine: pipeline spec -> validated, matrix-expanded pipeline ->
//! DAG -> stage keys -> scheduled execution with the content-addressed
//! cache -> run records that can be listed, shown and diffed.

pub mod dag;
pub mod diagnostic;
mod error;
pub mod events;
pub mod pipefile;

pub use diagnostic::{Diagnostic, Location};
pub use error::{EngineError, ExitCode, NoSuchRun, NotYaml, UsageError, WhereProblem};

pub type Result<T, E = EngineError> = std::result::Result<T, E>;
pub mod apply;
pub mod builtin_workers;
pub mod cache_admin;
pub mod cache_sync;
pub mod catalog;
pub mod checkout;
pub mod compare;
pub mod dvc_import;
pub mod exec;
pub mod executor;
pub mod gitignore;
pub mod groups;
pub mod history;
pub mod interrupt;
pub mod key;
pub mod libtorch;
pub mod link;
pub mod metrics;
pub mod orphans;
pub mod overrides;
pub mod params_override;
pub mod pipeline;
pub mod plan;
pub mod project;
pub mod project_config;
pub mod project_files;
pub mod remote;
pub mod remote_status;
pub mod run_id;
pub mod run_input;
pub mod run_settings;
pub mod running;
pub mod runs;
pub mod settings;
pub mod show;
pub mod suggest;
pub mod sweep;
pub mod workers;

pub mod workspace;
