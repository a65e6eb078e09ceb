//! Located, user-facing errors about a pipeline file.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// A place in a file. `line` and `col` are 1-based; `len` is the width of
/// the offending text in characters (at least 1). Every stage, output and
/// dependency keeps one for runtime messages, so the file name and the
/// line are shared, not copied: a million-stage matrix points at a few
/// lines. Build them with `.into()` from a `PathBuf` and a `String`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: Arc<Path>,
    pub line: usize,
    pub col: usize,
    pub len: usize,
    /// The whole source line, for the excerpt.
    pub source_line: Arc<str>,
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
    /// A warning: shown, but the file is loaded.
    pub warning: bool,
}

impl Diagnostic {
    pub fn new(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            message: message.into(),
            location: None,
            hint: None,
            notes: Vec::new(),
            warning: false,
        }
    }

    /// A problem worth saying that does not stop the file from loading.
    pub fn warning(code: &'static str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            warning: true,
            ..Diagnostic::new(code, message)
        }
    }

    pub fn at(mut self, location: Option<Location>) -> Diagnostic {
        self.location = location;
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }
}

/// Tabs are shown as this many spaces so that the caret lines up whatever
/// the terminal's tab stops are.
const TAB_WIDTH: usize = 4;
/// Excerpts of longer lines are cut to a window around the caret, so that a
/// minified line does not flood the terminal.
const MAX_EXCERPT_CHARS: usize = 120;

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = if self.warning { "warning" } else { "error" };
        write!(f, "{severity}[{}]: {}", self.code, self.message)?;
        let gutter_width = self
            .location
            .as_ref()
            .map_or(1, |location| location.line.to_string().len());
        let pad = " ".repeat(gutter_width);
        if let Some(location) = &self.location {
            write!(
                f,
                "\n{pad} --> {}:{}:{}",
                location.file.display(),
                location.line,
                location.col
            )?;
            let (excerpt, caret_start, caret_width) = excerpt(location);
            write!(f, "\n{pad}  |")?;
            write!(f, "\n {} | {}", location.line, excerpt.trim_end())?;
            write!(
                f,
                "\n{pad}  | {}{}",
                " ".repeat(caret_start),
                "^".repeat(caret_width)
            )?;
        }
        // Continuation lines (examples in hints) line up under the text.
        let continuation = format!("\n{pad}          ");
        if let Some(hint) = &self.hint {
            write!(f, "\n{pad}  = hint: {}", hint.replace('\n', &continuation))?;
        }
        for note in &self.notes {
            write!(f, "\n{pad}  = note: {}", note.replace('\n', &continuation))?;
        }
        Ok(())
    }
}

/// The source line as displayed (tabs expanded, long lines windowed), and
/// where the caret goes on it, in display columns.
fn excerpt(location: &Location) -> (String, usize, usize) {
    // A line that holds a URL with credentials is shown masked: the error
    // that refuses them must not print them.
    let shown = pipe_protocol::redact::redact_text(&location.source_line);
    let chars: Vec<char> = shown.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    let caret_char = location.col.saturating_sub(1).min(chars.len());
    let caret_len = location.len.max(1);

    let (window_start, window_end) = if chars.len() <= MAX_EXCERPT_CHARS {
        (0, chars.len())
    } else {
        let start = caret_char.saturating_sub(MAX_EXCERPT_CHARS / 3);
        (start, (start + MAX_EXCERPT_CHARS).min(chars.len()))
    };

    let mut text = String::new();
    let mut display_col = 0;
    let mut caret_start = 0;
    if window_start > 0 {
        text.push_str("...");
        display_col += 3;
    }
    for (index, ch) in chars.iter().enumerate().take(window_end).skip(window_start) {
        if index == caret_char {
            caret_start = display_col;
        }
        if *ch == '\t' {
            text.push_str(&" ".repeat(TAB_WIDTH));
            display_col += TAB_WIDTH;
        } else {
            text.push(*ch);
            display_col += 1;
        }
    }
    if caret_char >= window_end {
        caret_start = display_col;
    }
    if window_end < chars.len() {
        text.push_str("...");
    }
    let visible_after_caret = window_end.saturating_sub(caret_char);
    let caret_width = caret_len.min(visible_after_caret).max(1);
    (text, caret_start, caret_width)
}
