use std::path::PathBuf;

/// Why a stage failed. Every variant says what to do about it in `hint`,
/// which the worker reports to the engine with the message.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// A param has a bad value (the engine checked its type already).
    #[error("param `{param}`: {message}")]
    Param {
        param: String,
        message: String,
        hint: String,
    },
    /// The input data is not what the stage expects.
    #[error("{message}")]
    Input { message: String, hint: String },
    #[error("I/O error on `{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A download failed after retries and mirrors.
    #[error("{message}")]
    Network {
        url: String,
        message: String,
        hint: String,
    },
    /// Downloaded or given bytes do not match the expected checksum.
    #[error("checksum mismatch for `{what}`: expected {algorithm} {expected}, got {actual}")]
    Checksum {
        what: String,
        algorithm: String,
        expected: String,
        actual: String,
        hint: String,
    },
    #[error("{0}")]
    Other(String),
}

impl StageError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StageError::Io {
            path: path.into(),
            source,
        }
    }

    pub fn param(param: &str, message: impl Into<String>, hint: impl Into<String>) -> Self {
        StageError::Param {
            param: param.to_string(),
            message: message.into(),
            hint: hint.into(),
        }
    }

    pub fn input(message: impl Into<String>, hint: impl Into<String>) -> Self {
        StageError::Input {
            message: message.into(),
            hint: hint.into(),
        }
    }

    pub fn hint(&self) -> Option<&str> {
        match self {
            StageError::Param { hint, .. }
            | StageError::Input { hint, .. }
            | StageError::Network { hint, .. }
            | StageError::Checksum { hint, .. } => Some(hint),
            StageError::Io { .. } | StageError::Other(_) => None,
        }
    }
}

pub type Result<T, E = StageError> = std::result::Result<T, E>;
