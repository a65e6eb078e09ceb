//! `pipe diff` (`diff`): what changed between two recorded runs; `table`
//! holds `pipe compare`, many runs side by side, and `steps` and `plots`
//! what its page draws from the runs' stored files.

mod commits;
mod diff;
pub mod plots;
mod selection;
pub mod steps;
pub mod table;

pub use commits::{commits_of, run_place, side_label, RunCommit};
pub use diff::{
    base_name, diff, diff_runs, DiffRequest, MetricChange, OutputChange, RunDiff, StageChange,
};
pub use selection::{compare, CompareRequest, Comparison, StatusFilter, DEFAULT_COMPARED_RUNS};
