//! Located, user-facing errors about a pipeline file.

use std::fmt;
use std::path::PathBuf;

/// A place in a file. `line` and `col` are 1-based; `len` is the width of
/// the offending text in characters (at least 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
    pub col: usize,
    pub len: usize,
    /// The whole source line, for the excerpt.
    pub source_line: String,
}

/// One error: what is wrong, where, and how to fix it. Rendered as
///
/// ```text
/// error[unknown-key]: unknown key `dep` in stage `train`
///   --> pipe.yaml:7:5
///    |
///  7 |     dep: data.csv
///    |     ^^^
///    = hint: did you mean `deps`?
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// A stable kebab-case code, e.g. `unknown-key`, `cycle`, `bad-reference`.
    pub code: &'static str,
    pub message: String,
    pub location: Option<Location>,
    pub hint: Option<String>,
    pub notes: Vec<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let _ = f;
        todo!()
    }
}
