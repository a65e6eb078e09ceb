//! A `run:` command built from literal text and plain values.

use std::ops::Range;

use super::chars::is_plain_value;
use super::landing;
use super::refusal::Refusal;

/// A `run:` command as its literal pieces and values are appended.
#[derive(Debug, Default)]
pub(crate) struct CommandText {
    text: String,
    /// Each value put in (its id, as the caller numbers references) and
    /// where it is in `text`.
    values: Vec<(usize, Range<usize>)>,
}

impl CommandText {
    pub(crate) fn push_text(&mut self, text: &str) {
        self.text.push_str(text);
    }

    /// `words` (one value, or a list param's items), separated by spaces,
    /// if each is plain; a value holding a NUL byte goes in as it is, and
    /// the command holding it is refused as a whole (`nul-byte`).
    pub(crate) fn push_value(&mut self, words: &[String], id: usize) -> Result<(), Refusal> {
        if words.iter().any(|word| word.contains('\0')) {
            self.text.push_str(&words.join(" "));
            return Ok(());
        }
        if let Some(word) = words.iter().find(|word| !is_plain_value(word)) {
            return Err(if word.is_empty() {
                Refusal::Empty
            } else {
                Refusal::NotPlain {
                    value: word.clone(),
                }
            });
        }
        if words.is_empty() {
            return Err(Refusal::Empty);
        }
        let start = self.text.len();
        for (index, word) in words.iter().enumerate() {
            if index > 0 {
                self.text.push(' ');
            }
            self.text.push_str(word);
        }
        self.values.push((id, start..self.text.len()));
        Ok(())
    }

    /// The values (by id) whose place in the finished command gives them
    /// a meaning beyond their characters, and why; `variables` are the
    /// names of the stage's `env:` entries. Call once every piece is in.
    pub(crate) fn landings(&self, variables: &[String]) -> Vec<(usize, Refusal)> {
        if self.values.is_empty() {
            return Vec::new();
        }
        landing::check(&self.text, &self.values, variables)
    }

    pub(crate) fn into_text(self) -> String {
        self.text
    }
}
