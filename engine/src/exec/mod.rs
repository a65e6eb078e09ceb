//! The scheduler: runs the selected stages in dependency order, in
//! parallel within `-j` and each stage's resources, reusing cached
//! results, and records the run.

mod context;
mod executors;
mod failure;
mod fresh_probe;
mod gpus;
mod log_follower;
mod prebuild;
mod process;
mod progress_text;
mod readiness;
mod request;
mod run;
mod run_row;
mod run_so_far;
mod scheduler;
mod slots;
mod slurm;
mod stage;
mod worker_client;
mod workspaces;

pub use failure::StageFailure;
pub use progress_text::{progress_interval, ProgressText, Reading};
pub use request::RunRequest;
pub use run::{
    push_run_record, run, select_stages, RecordNotPushed, RemoteSummary, RunOptions, RunOutcome,
};
