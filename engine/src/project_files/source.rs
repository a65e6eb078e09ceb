//! The texts diagnostics point into: the pipeline file, `params.yaml`, and
//! `-S` values (which have no file, so no location).

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::Location;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId(usize);

/// A place in one of the [`Sources`]: 1-based line and character column,
/// width in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub file: FileId,
    pub line: usize,
    pub col: usize,
    pub len: usize,
}

impl Span {
    pub fn with_len(self, len: usize) -> Span {
        Span {
            len: len.max(1),
            ..self
        }
    }
}

pub(crate) struct SourceFile {
    /// `None` for text that did not come from a file (a `-S` value).
    /// Shared by every location in the file.
    path: Option<Arc<Path>>,
    pub text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    /// The file the text came from, as it was named.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// How many lines the text has: one more than its line breaks.
    pub fn lines(&self) -> usize {
        self.line_starts.len()
    }

    /// Line `line` (1-based) without its line break; empty past the end.
    pub fn line_text(&self, line: usize) -> &str {
        let Some(&start) = line
            .checked_sub(1)
            .and_then(|index| self.line_starts.get(index))
        else {
            return "";
        };
        let end = self
            .line_starts
            .get(line)
            .copied()
            .unwrap_or(self.text.len());
        self.text
            .get(start..end)
            .unwrap_or("")
            .trim_end_matches(['\n', '\r'])
    }
}

#[derive(Default)]
pub(crate) struct Sources {
    files: Vec<SourceFile>,
    /// Each line a location points at, made once: every expansion of a
    /// matrix stage points at the same few lines.
    shared_lines: RefCell<HashMap<(usize, usize), Arc<str>>>,
}

impl Sources {
    pub fn add(&mut self, path: Option<PathBuf>, text: String) -> FileId {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(index, _)| index + 1));
        self.files.push(SourceFile {
            path: path.as_deref().map(Arc::from),
            text,
            line_starts,
        });
        FileId(self.files.len() - 1)
    }

    pub fn file(&self, id: FileId) -> &SourceFile {
        &self.files[id.0]
    }

    pub fn location(&self, span: Span) -> Option<Location> {
        let file = self.files.get(span.file.0)?;
        let path = Arc::clone(file.path.as_ref()?);
        let source_line = Arc::clone(
            self.shared_lines
                .borrow_mut()
                .entry((span.file.0, span.line))
                .or_insert_with(|| Arc::from(file.line_text(span.line))),
        );
        Some(Location {
            file: path,
            line: span.line,
            col: span.col,
            len: span.len.max(1),
            source_line,
        })
    }
}
