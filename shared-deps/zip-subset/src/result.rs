//! The error of every fallible call, with the variants of zip 0.6's
//! `ZipError` (tch wraps it in its own error through `#[from]`).

use std::error::Error;
use std::fmt;
use std::io;

/// What a call of this crate returns.
pub type ZipResult<T> = Result<T, ZipError>;

/// Why reading or writing an archive failed.
#[derive(Debug)]
pub enum ZipError {
    /// Reading or writing the underlying stream failed.
    Io(io::Error),
    /// The bytes are not a well-formed archive; the text says where.
    InvalidArchive(&'static str),
    /// A well-formed archive that uses what this crate leaves out.
    UnsupportedArchive(&'static str),
    /// No entry has that index.
    FileNotFound,
}

impl fmt::Display for ZipError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZipError::Io(error) => write!(f, "zip: {error}"),
            ZipError::InvalidArchive(what) => write!(f, "invalid zip archive: {what}"),
            ZipError::UnsupportedArchive(what) => write!(f, "unsupported zip archive: {what}"),
            ZipError::FileNotFound => f.write_str("no such entry in the zip archive"),
        }
    }
}

impl Error for ZipError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ZipError::Io(error) => Some(error),
            _ => None,
        }
    }
}

impl From<io::Error> for ZipError {
    fn from(error: io::Error) -> Self {
        ZipError::Io(error)
    }
}

impl From<ZipError> for io::Error {
    fn from(error: ZipError) -> Self {
        match error {
            ZipError::Io(error) => error,
            other => io::Error::new(io::ErrorKind::InvalidData, other),
        }
    }
}
