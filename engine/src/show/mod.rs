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

pub use combinations::{combinations, swept_params, CombinationShown};
pub use in_progress::{going_now, in_progress, run_in_progress, InProgress, RunGoing};
pub use open::{open_output, view_dir, Opened};
pub use outputs::{output_holding, outputs_in_workspace, InWorkspace, OutputInWorkspace};
pub use shown::{show_run, RunShown};
