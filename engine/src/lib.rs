//! The pipe engine: pipeline spec -> validated, matrix-expanded pipeline ->
//! DAG -> stage keys -> scheduled execution with the content-addressed
//! cache -> run records that can be listed, shown and diffed.
//!
//! This file is the engine's one front door: every module is private, and
//! what the CLI, the tests and the other crates use is re-exported here,
//! by role, one name each (`pipe_engine::Name`). A module can then change
//! its insides, or move, without a caller outside noticing, and what the
//! engine offers is read in one place. `scripts/check-import-circles.py`
//! fails on a `pub mod` here and on a `pipe_engine::module::...` path
//! outside the engine. Inside, a use case is named for its module
//! (`compare::compare`, `sweep::run`); out here, with no module in front of
//! it, it gets the name that says what it does (`compare_runs`,
//! `run_sweep`): that renaming happens here, once.

mod apply;
mod builtin_workers;
mod cache_admin;
mod cache_sync;
mod catalog;
mod checkout;
mod compare;
mod dag;
mod diagnostic;
mod dvc_import;
mod error;
mod events;
mod exec;
mod executor;
mod gitignore;
mod groups;
mod history;
mod init_project;
mod interrupt;
mod key;
mod libtorch;
mod link;
mod metrics;
mod orphans;
mod overrides;
mod params_override;
mod pipefile;
mod pipeline;
mod plan;
mod project;
mod project_config;
mod project_files;
mod remote;
mod remote_status;
mod run_id;
mod run_input;
mod run_settings;
mod running;
mod runs;
mod settings;
mod show;
mod suggest;
mod sweep;
mod workers;
mod workspace;

// Use cases: what each command of `pipe` calls, in the order a project
// meets them (load, run, look at the runs, move results around).
pub use apply::{apply_run, Applied, AppliedRun, ApplyReport};
pub use cache_admin::{
    gc as collect_garbage, verify as verify_cache, GcOutcome, GcRequest, ResumeSwept, VerifyOutcome,
};
pub use cache_sync::{
    pull as pull_results, push as push_results, run_in_remote, transfer_failure, PullReport,
    PushReport, RemoteChoice, RunInRemote, Runs,
};
pub use catalog::{check_builtin_workers, find_stages, WorkerCheck};
pub use checkout::{checkout_run, CheckedOut, CheckoutReport, CheckoutRequest};
pub use compare::plots::PlotFile;
pub use compare::steps::StepCurves;
pub use compare::table::{row_label, Cell, Column, ColumnKind, CompareTable, Group, Pairs, Row};
pub use compare::{
    compare as compare_runs, diff as diff_runs, run_place, CompareRequest, DiffRequest,
    MetricChange, OutputChange, RunDiff, StageChange, StatusFilter,
};
pub use dvc_import::{
    convert as convert_dvc_project, init_from_dvc, FindingKind, FromDvc, Written,
};
pub use exec::{run as run_pipeline, RemoteSummary, RunOutcome, RunRequest};
pub use history::{History, ListedRun, MetricCell, Pull, RunListing};
pub use init_project::{init as init_project, InitOutcome, ProjectTemplate};
pub use orphans::orphans as orphaned_outputs;
pub use pipefile::{
    check_inputs, load as load_pipeline, pipeline_file_problem, read_yaml, with_extension, Loaded,
    ProjectWorkers, YamlReading,
};
pub use plan::{dry_run, why_stages, DryRun, Forced, Freshness, StageState, Why};
pub use remote_status::{status as status_report, RemoteStatus, RemoteVerdict};
pub use run_settings::{last_run_pipeline_file, settings_of_run};
pub use show::{
    going_now as run_going_now, open_output, output_holding, show_run, CombinationShown,
    InProgress, InWorkspace, OutputInWorkspace, RunGoing, RunShown,
};
pub use sweep::{
    load as load_sweep, load_settings as load_recorded_pipeline, run as run_sweep, SweepOutcome,
    SweepPlan, SweepRun,
};

// Model types: the pipeline as loaded, its DAG, the catalog of stages,
// the project, the runs as recorded, and the metrics compared across them.
pub use catalog::{Catalog, CatalogEntry};
pub use dag::{Dag, DagFormat};
pub use gitignore::Ignored;
pub use key::{flatten as flatten_params, FieldChange};
pub use metrics::{
    digits_to_tell_apart, format_percent, format_significant, Direction, DirectionRules, Verdict,
    SIGNIFICANT_DIGITS,
};
pub use overrides::{OverrideMode, OverrideValue, ParamOverride, ParamPath, ParamValue};
pub use pipeline::{Dep, ExecutorKind, Pipeline, Stage, StageKind, StageOutRef};
pub use project::Project;
pub use runs::{
    check_label, now_ms, settle_git_dirty, DirtySettler, ResultsHeld, RunId, RunRecord,
    RunSelection, RunStatus, StageMetric, StageRecord, StageStatus,
};

// Events: what a run tells its observer while it goes, and how often the
// CLI redraws a stage's progress.
pub use events::{BuildStep, Event};
pub use exec::{progress_interval, ProgressText, Reading};

// Errors and located diagnostics.
pub use diagnostic::{Diagnostic, Location};
pub use error::{EngineError, ExitCode, NoSuchRun, NotYaml, Result, UsageError, WhereProblem};

// Settings of the process and its environment: Ctrl-C, the libtorch the
// training worker needs, a worker's command line.
pub use interrupt::{install_handlers as install_interrupt_handlers, request as request_interrupt};
pub use libtorch::TORCH_VERSION;
pub use workers::without_cargo_run_env;
