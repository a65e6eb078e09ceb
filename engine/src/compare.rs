//! `pipe diff` (`diff`): what changed between two recorded runs; `table`
//! holds `pipe compare`, many runs side by side, and `steps` and `plots`
//! what its page draws from the runs' stored files.

mod commits;
mod diff;
pub mod plots;
mod selection;
pub mod steps;
pub mod table;

pub use commits::run_place;
pub use diff::{diff, DiffRequest, MetricChange, OutputChange, RunDiff, StageChange};
pub use selection::{compare, CompareRequest, StatusFilter};
