use std::path::PathBuf;

use pipe_cache::RemoteError;

use crate::Diagnostic;

/// Documented process exit codes (docs/cli.md). The binary maps every
/// error to one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    Ok = 0,
    /// A stage failed; independent stages still ran.
    StageFailed = 1,
    /// The pipeline file or the command line is wrong: fix the input.
    InvalidInput = 2,
    /// The environment failed: I/O, permissions, database, lock.
    Environment = 3,
    /// `pipe cache verify` found corrupt entries.
    CorruptCache = 4,
    /// `pipe checkout` would overwrite or delete workspace files that the
    /// cache cannot give back, or `pipe init` would overwrite a file;
    /// nothing was changed.
    WouldLoseFiles = 5,
    /// `pipe cache push|pull|status` could not reach the remote cache, or
    /// it refused; a run never fails for this (it goes on locally).
    RemoteUnavailable = 6,
    /// A bug in pipe.
    Internal = 101,
    /// Stopped by Ctrl-C or SIGTERM.
    Interrupted = 130,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// One or more problems in the pipeline file; each renders with its location.
    #[error("{}", render_diagnostics(.0))]
    Spec(Vec<Diagnostic>),
    #[error(transparent)]
    Cache(#[from] pipe_cache::CacheError),
    /// The remote cache could not be reached or refused (`pipe cache
    /// push|pull|status`; a run goes on without it instead).
    #[error("{0}")]
    RemoteUnavailable(RemoteError),
    #[error("I/O error on `{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("run database `{path}`: {source}")]
    Database {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    /// A value read back from runs.db that does not parse: never read as
    /// a default, since a run that seems to have no outputs would make
    /// `pipe checkout` restore nothing and succeed.
    #[error("run database `{path}`: {place}: column `{column}` is damaged: {problem}\nhint: this record cannot be trusted; name another run (`pipe runs` lists them), or move .pipe/runs.db aside to start a new history (the cache is kept)")]
    CorruptRecord {
        path: PathBuf,
        /// `run #12, stage \`train\``.
        place: String,
        column: String,
        problem: String,
    },
    #[error("{message}\nhint: {hint}")]
    Usage { message: String, hint: String },
    #[error("interrupted")]
    Interrupted,
    #[error("internal error: {0}\nthis is a bug in pipe; please report it")]
    Internal(String),
}

impl EngineError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EngineError::Io {
            path: path.into(),
            source,
        }
    }

    pub fn usage(message: impl Into<String>, hint: impl Into<String>) -> Self {
        EngineError::Usage {
            message: message.into(),
            hint: hint.into(),
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            EngineError::Spec(_) | EngineError::Usage { .. } => ExitCode::InvalidInput,
            EngineError::Cache(_)
            | EngineError::Io { .. }
            | EngineError::Database { .. }
            | EngineError::CorruptRecord { .. } => ExitCode::Environment,
            EngineError::RemoteUnavailable(_) => ExitCode::RemoteUnavailable,
            EngineError::Interrupted => ExitCode::Interrupted,
            EngineError::Internal(_) => ExitCode::Internal,
        }
    }
}

/// Text that was to be read as a YAML value (`-S key=TEXT`, `--where
/// key=TEXT`) and is not one; the YAML parser's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct NotYaml {
    pub problem: String,
}

fn render_diagnostics(diagnostics: &[Diagnostic]) -> String {
    let mut text = diagnostics
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    if diagnostics.len() > 1 {
        text.push_str(&format!(
            "\n{} errors in the pipeline file",
            diagnostics.len()
        ));
    }
    text
}
