//! A project's run history as the commands that read it see it: the run
//! database, and the remote cache whose run records it can pull on
//! demand. Every command that names a run resolves it here, one way.

mod bear_out;
mod choose;
mod listing;
mod remote_records;
mod resolve;
mod vet;

pub use listing::{ListedRun, MetricCell, RunListing};
pub use remote_records::{configured_remote, pull_records, remote_uids};
pub use resolve::{History, Notice, Pull};
