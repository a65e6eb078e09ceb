//! What the executor and the run record see of a job.

use std::io::Read;
use std::time::Duration;

use crate::exec::failure::StageFailure;

/// Where a stage's job ran, for the run record and `pipe show`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub job_id: String,
    pub node: Option<String>,
    /// From submission to the job's start on its node, when the job said
    /// when it started: the queue's time, not the stage's.
    pub queued: Option<Duration>,
}

/// What the job's command does with its output.
pub(crate) enum JobOutput<'a> {
    /// stdout and stderr to the stage's log (a `run:` stage).
    Log,
    /// stdout is the worker's event stream, read as it grows by `read`;
    /// stderr is appended to the log once the job has ended.
    Events(&'a mut dyn FnMut(&mut dyn Read) -> std::result::Result<(), StageFailure>),
}
