//! Putting interpolated values into a `run:` command string so that each
//! stays what it was: text, never shell syntax.
//!
//! [`QuoteTracker`] reads the command's literal text as bash 5 will (pipe
//! runs `run:` strings with `bash -c`), keeping a stack of the places it is
//! in: a command (top level, `$(...)`, `<(...)` or a backquote's), `"..."`,
//! `'...'`, `$'...'`, a comment, a `${...}` parameter expansion, arithmetic
//! (`$((...))`, `((...))`, `$[...]`), a here-document body (quoted or not,
//! `<<-` too; inside `$(...)` bash also ends one at a line that starts with
//! the delimiter and holds a `)`) and a pending backslash. A backquote's
//! text is read the way bash reads it: up to the next unescaped backquote,
//! its `\\`, `` \` `` and `\$` undone, then parsed as a command of its own,
//! so a backquote is a layer of its own in the tracker. Where bash's reading
//! is too irregular to follow (a `case` inside `$(...)`), the tracker stops
//! and every later value is refused.
//!
//! [`QuoteTracker::quote`] then gives the text under which a value arrives
//! byte for byte as one word where it lands, or a [`Refusal`] saying why no
//! such text exists there: inside arithmetic only a plain number is safe,
//! a here-document ends at a line equal to its delimiter, a backslash the
//! user wrote escapes the first character of whatever follows it, and so
//! on. A value in a backquote is quoted for where it lands inside, then
//! escaped for the backquote; a value inside a here-document must leave
//! every line of it unequal to the delimiter. Plain values (letters,
//! digits, `_-./:@%+,`) stay as they are where they can, so commands and
//! their cache keys read as before.
//!
//! This module holds only what `resolve` uses. The tracker's state is in
//! `frames`, the reading that moves it in `tracker`, here-documents (which
//! end at a line, not a character) in `heredoc`, and the rules for each
//! place in `quote`.

mod frames;
mod heredoc;
mod quote;
mod refusal;
mod simple;
mod tracker;
mod words;

use frames::Layer;
use frames::{Frame, ParamPart};
use quote::Inherited;
use refusal::refuse;
pub(crate) use refusal::Refusal;
use simple::Value;
use words::is_number;

/// Whether the shell reads `text` as one word of itself wherever it lands
/// (letters, digits and `_ - . / : @ % + ,`): a value pipe puts into a
/// command unquoted.
pub(crate) fn is_plain_value(text: &str) -> bool {
    !text.is_empty() && text.chars().all(words::is_plain)
}

/// Follows a command string as its literal pieces and inserted values are
/// appended, so that the next value is quoted for the context it lands in.
#[derive(Debug, Clone)]
pub(crate) struct QuoteTracker {
    layer: Layer,
    /// Set once the text holds shell syntax the tracker does not follow
    /// (a `case` inside `$(...)`, a here-document opened inside a nested
    /// command before its body): every later value is refused.
    lost: Option<&'static str>,
    /// Whether the text mentions `IFS`, which may then split words.
    mentions_ifs: bool,
    /// The last characters fed, to find an `IFS` split across pieces.
    tail: String,
    /// Values whose words bash splits on `$IFS` (in the replacement of an
    /// unquoted `${x/p/r}`), refused if the command mentions `IFS`.
    split: Vec<usize>,
}

impl Default for QuoteTracker {
    fn default() -> Self {
        QuoteTracker {
            layer: Layer::new(false),
            lost: None,
            mentions_ifs: false,
            tail: String::new(),
            split: Vec::new(),
        }
    }
}

impl QuoteTracker {
    /// Advances over `text` as the shell will read it.
    pub(crate) fn feed(&mut self, text: &str) {
        self.tail.push_str(text);
        self.mentions_ifs |= self.tail.contains("IFS");
        let keep = self.tail.len().saturating_sub(2);
        let keep = (keep..=self.tail.len())
            .find(|index| self.tail.is_char_boundary(*index))
            .unwrap_or(0);
        self.tail.drain(..keep);
        for ch in text.chars() {
            if self.lost.is_some() {
                return;
            }
            if let Err(reason) = self.layer.step(ch) {
                self.lost = Some(reason);
            }
        }
    }

    /// `words` (one value, or a list param's items) as text that makes each
    /// arrive as one word, byte for byte, where the tracker stands; the
    /// words are separated by spaces. `id` names the value in what
    /// [`QuoteTracker::finish`] returns.
    pub(crate) fn quote(&mut self, words: &[String], id: usize) -> Result<String, Refusal> {
        if words.iter().any(|word| word.contains('\0')) {
            return Err(refuse(
                "in a `run` command",
                "the value holds a NUL character, which no command line can carry",
            ));
        }
        if let Some(reason) = self.lost {
            return Err(refuse(
                format!("after {reason}, which pipe does not follow far enough to know where a value lands"),
                "pipe cannot tell how the shell would read it there",
            ));
        }
        let text = self.layer.quote(words, Inherited::default())?;
        self.layer.note(Value {
            id,
            number: words.iter().all(|word| is_number(word)),
        });
        let split = self.layer.innermost().frames.iter().any(|frame| {
            matches!(frame, Frame::Param(param) if param.part == ParamPart::Replacement && !param.in_double)
        });
        if split {
            self.split.push(id);
        }
        Ok(text)
    }

    /// The values (by id) that the text after them made unsafe: an
    /// operand of `[[ ... -eq ... ]]` read before the `-eq`, a value that
    /// made a command's name `eval`, a replacement split by an `IFS` the
    /// command sets. Call once the whole command was fed.
    pub(crate) fn finish(&self) -> Vec<(usize, Refusal)> {
        let mut end = self.clone();
        // A line break ends the last word, so that it is judged too.
        end.feed("\n");
        end.layer.harvest();
        let mut late = std::mem::take(&mut end.layer.late);
        if self.mentions_ifs {
            late.extend(self.split.iter().map(|id| {
                (
                    *id,
                    refuse(
                        "in the replacement of an unquoted `${x/pattern/replacement}` in a command that sets `IFS`",
                        "bash splits the result on `$IFS`, whatever the quotes, so the value's words could change",
                    ),
                )
            }));
        }
        late.sort_by_key(|(id, _)| *id);
        late.dedup_by_key(|(id, _)| *id);
        late
    }

    /// The innermost place the next value lands in (for tests and
    /// messages).
    #[cfg(test)]
    fn place(&self) -> &'static str {
        self.layer.place()
    }
}

#[cfg(test)]
mod differential_tests;
#[cfg(test)]
mod families_tests;
#[cfg(test)]
mod tests;
