//! `pipe show RUN`: a run's record, and what only the project can say of
//! it now: whether the workspace holds each of its outputs (a record
//! never points at another run's files), its combinations, whether it is
//! still going; and `--open`, its report or an output brought out of the
//! cache into a view of that run.

mod combinations;
mod in_progress;
mod open;
mod outputs;
mod shown;

pub use combinations::CombinationShown;
pub use in_progress::{going_now, InProgress, RunGoing};
pub use open::open_output;
pub use outputs::{output_holding, InWorkspace, OutputInWorkspace};
pub use shown::{show_run, RunShown};
