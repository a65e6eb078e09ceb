//! The Slurm executor: a stage that misses the cache runs as a batch job
//! on a node instead of as a child of pipe (docs/scale-out.md).
//!
//! Everything else is the local executor's: pipe hashes the inputs, keys
//! and looks up the stage on the head, the job runs the same command or
//! worker in the project directory (which the nodes must share), and pipe
//! stores the outputs once the job has ended. A job is judged by two
//! witnesses that cannot lie about success: the exit file its script
//! writes after the command (seen within a tenth of a second on the
//! shared filesystem), and the job's state in `squeue` (one query for the
//! whole run, by job name), which alone knows about time limits, memory,
//! cancellations and failed nodes. `sbatch --wait` is not used: it
//! returns 0 for a job cancelled before it ran.

mod cluster;
mod job_end;
mod jobs;
mod leftovers;
mod placement;
mod queue;
mod requests;
mod script;
mod srun_tasks;
mod submit;
mod tail;

pub(crate) use cluster::LazyCluster;
pub(crate) use leftovers::settle_leftover_jobs;
pub(crate) use placement::JobOutput;
pub use placement::Placement;
pub(crate) use requests::check_requests;
