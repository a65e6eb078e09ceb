//! Gathers diagnostics so that one run reports every problem, without
//! repeating one (a matrix stage repeats its mistakes per expansion) and
//! without flooding the terminal.

use std::collections::HashSet;

use crate::Diagnostic;

pub(crate) const MAX_DIAGNOSTICS: usize = 20;

/// Code, message and place: what makes two diagnostics the same.
type SeenKey = (
    &'static str,
    String,
    Option<(std::sync::Arc<std::path::Path>, usize, usize)>,
);

#[derive(Default)]
pub(crate) struct Diagnostics {
    list: Vec<Diagnostic>,
    /// Warnings, kept apart: they neither stop loading nor count as a
    /// problem a phase reported.
    warnings: Vec<Diagnostic>,
    seen: HashSet<SeenKey>,
    dropped: usize,
    /// Every push, repeats and dropped ones included.
    pushed: usize,
}

impl Diagnostics {
    pub fn push(&mut self, diagnostic: Diagnostic) {
        if diagnostic.warning {
            let place = diagnostic
                .location
                .as_ref()
                .map(|location| (location.file.clone(), location.line, location.col));
            if self.warnings.len() < MAX_DIAGNOSTICS
                && self
                    .seen
                    .insert((diagnostic.code, diagnostic.message.clone(), place))
            {
                self.warnings.push(diagnostic);
            }
            return;
        }
        self.pushed += 1;
        if self.list.len() >= MAX_DIAGNOSTICS {
            self.dropped += 1;
            return;
        }
        let place = diagnostic
            .location
            .as_ref()
            .map(|location| (location.file.clone(), location.line, location.col));
        if self
            .seen
            .insert((diagnostic.code, diagnostic.message.clone(), place))
        {
            self.list.push(diagnostic);
        }
    }

    pub fn extend(&mut self, diagnostics: impl IntoIterator<Item = Diagnostic>) {
        for diagnostic in diagnostics {
            self.push(diagnostic);
        }
    }

    /// How many problems were reported so far, each repeat counted: a
    /// phase compares it before and after to know whether its input was
    /// sound, even when its message repeats one already kept.
    pub fn reported(&self) -> usize {
        self.pushed
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The warnings, taken out; the errors stay.
    pub fn take_warnings(&mut self) -> Vec<Diagnostic> {
        std::mem::take(&mut self.warnings)
    }

    pub fn into_vec(mut self) -> Vec<Diagnostic> {
        if self.dropped > 0 {
            if let Some(last) = self.list.last_mut() {
                last.notes.push(format!(
                    "stopped after {MAX_DIAGNOSTICS} errors ({} more not shown); fix these and run again",
                    self.dropped
                ));
            }
        }
        self.list
    }
}

/// For a value that holds a NUL byte where the system cannot take one.
pub(crate) const NUL_HINT: &str = "no path, command, argument or environment value can hold a NUL byte (`\\0` in a double-quoted YAML string, or in a param's value); remove it";

/// `what` holds a NUL byte, refused at `location` before anything runs:
/// one message wherever the spec finds one (stages, `cache:`, `executor:`).
pub(crate) fn nul_byte(what: &str, location: Option<crate::Location>) -> Diagnostic {
    Diagnostic::new("nul-byte", format!("{what} holds a NUL byte"))
        .at(location)
        .with_hint(NUL_HINT)
}
