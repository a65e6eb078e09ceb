//! The one error type of the report crate.

/// Why a report could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// plotters refused to draw a chart (its own message).
    #[error("cannot draw the plot `{title}`: {message}")]
    Plot { title: String, message: String },
    /// The data handed to a chart or table does not fit it.
    #[error("{0}")]
    Data(String),
    /// A plot's data file cannot be read or drawn as declared: a column
    /// that is not there, a value that is not a number, a file over a
    /// limit. `file` is the file's project path.
    #[error("plot file `{file}`: {message}")]
    PlotData { file: String, message: String },
}

pub type Result<T, E = ReportError> = std::result::Result<T, E>;
