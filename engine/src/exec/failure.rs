//! Why a stage did not produce a result. Its text is the stage's recorded
//! detail, what the user reads after `✗ failed`; the variant says whose
//! doing it was.

use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use pipe_cache::CacheError;

use crate::project_files::UnsafeOutput;

#[derive(Debug)]
pub enum StageFailure {
    /// A dependency is missing or cannot be read.
    Dependency(String),
    /// It asks for more GPUs than the machine has (`PIPE_GPUS`).
    NotEnoughGpus { needed: usize, available: usize },
    /// Its command, or its worker, exited with an error code or a signal.
    Exited {
        what: &'static str,
        status: ExitStatus,
    },
    /// Its worker reported an error, in the worker's own words.
    Reported {
        message: String,
        hint: Option<String>,
    },
    /// Its worker exited without reporting success or failure.
    NoVerdict,
    /// The stage did not keep its side of the contract (a declared output
    /// missing, metrics that are not JSON, a process that outlives it):
    /// nothing was cached.
    Contract(String),
    /// An output leads somewhere pipe must not write (`paths::check_output_location`).
    OutputRefused(UnsafeOutput),
    /// pipe could not do its own part in the project.
    Io {
        what: String,
        source: std::io::Error,
    },
    /// pipe could not store or record the result in the cache.
    Cache { what: String, source: CacheError },
    /// The run's row could not be written before the stage started
    /// (`RunRow::id`); the run ends with the database's error.
    NotRecorded(String),
    /// Ctrl-C or SIGTERM stopped it.
    Interrupted,
    /// Slurm would not take its job (`sbatch`'s own words).
    Submit(String),
    /// Its Slurm job ended without its command finishing: time limit,
    /// memory, cancellation, a failed node.
    Job { job: String, what: String },
}

impl StageFailure {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        StageFailure::Io {
            what: what.into(),
            source,
        }
    }

    pub fn cache(what: impl Into<String>, source: CacheError) -> Self {
        StageFailure::Cache {
            what: what.into(),
            source,
        }
    }
}

impl fmt::Display for StageFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StageFailure::Dependency(message)
            | StageFailure::Contract(message)
            | StageFailure::NotRecorded(message) => f.write_str(message),
            StageFailure::OutputRefused(unsafe_output) => unsafe_output.fmt(f),
            StageFailure::NotEnoughGpus { needed, available } => write!(
                f,
                "stage needs {needed} GPU(s) but {available} are available; set PIPE_GPUS or lower `resources.gpus`"
            ),
            StageFailure::Exited { what, status } => match (status.code(), status.signal()) {
                (Some(code), _) => write!(f, "{what} exited with code {code}"),
                (None, Some(signal)) => write!(f, "{what} was killed by signal {signal}"),
                (None, None) => write!(f, "{what} failed"),
            },
            StageFailure::Reported { message, hint } => match hint {
                Some(hint) if !hint.is_empty() => write!(f, "{message}\nhint: {hint}"),
                _ => f.write_str(message),
            },
            StageFailure::NoVerdict => f.write_str(
                "the stage worker exited without reporting success; nothing was kept",
            ),
            StageFailure::Io { what, source } => write!(f, "{what}: {source}"),
            StageFailure::Cache { what, source } => write!(f, "{what}: {source}"),
            StageFailure::Interrupted => f.write_str("interrupted"),
            StageFailure::Submit(message) => write!(f, "cannot submit the stage to Slurm: {message}"),
            StageFailure::Job { job, what } => write!(f, "{job} {what}"),
        }
    }
}
