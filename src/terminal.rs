//! Text from elsewhere made safe to print on a terminal.
//!
//! A run record pulled from a remote, a stage's name, an argv, a metric's
//! text or a worker's stderr may carry bytes a terminal obeys: OSC
//! sequences that set the window title or write the clipboard (OSC 52),
//! CSI sequences that move the cursor or clear the screen, C1 controls
//! that some terminals take as the same introducers, and the Unicode
//! direction overrides that make text read in another order than it is
//! stored. Every human-readable line pipe writes goes through
//! [`terminal_safe`] (the `pipe` binary does it where it writes, once, so
//! no renderer can forget it); JSON output is left exact.

use std::borrow::Cow;
use std::fmt::Write;

/// The first `shown` of `items` joined by `separator`, and how many more
/// (`a, b and 3 more`): a list that fits one line of a log.
pub fn first_few(items: &[String], shown: usize, separator: &str) -> String {
    let mut text = items
        .iter()
        .take(shown)
        .cloned()
        .collect::<Vec<_>>()
        .join(separator);
    if items.len() > shown {
        text.push_str(&format!(" and {} more", items.len() - shown));
    }
    text
}

/// The terminal's width as `COLUMNS` says, else `default` (a log, a pipe).
pub fn columns(default: usize) -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|columns| columns.parse().ok())
        .filter(|&columns: &usize| columns > 0)
        .unwrap_or(default)
}

/// `text` with every character a terminal would obey written as an
/// escape (`\x1b`, `\u{202e}`): C0 controls but newline and tab, DEL,
/// C1 controls, and the bidirectional formatting characters. Borrowed
/// when there is none.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// [`terminal_safe`], but keeping the colour sequences pipe writes itself
/// (SGR: `ESC [` digits and `;` `m`, without 8, which hides text). Text
/// from elsewhere can at most change a colour, never move the cursor,
/// clear the screen, set a title or reach the clipboard.
pub fn terminal_safe_keeping_colour(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

fn escape(text: &str, keep_colour: bool) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if keep_colour && c == '\x1b' {
            if let Some(length) = colour_sequence_length(rest) {
                out.push_str(&rest[..length]);
                rest = &rest[length..];
                continue;
            }
        }
        if needs_escape(c) {
            let code = u32::from(c);
            if code < 0x80 {
                let _ = write!(out, "\\x{code:02x}");
            } else {
                let _ = write!(out, "\\u{{{code:x}}}");
            }
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Arabic letter mark, left-to-right and right-to-left marks,
        // embeddings, overrides and isolates.
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            true
        }
        _ => false,
    }
}

/// The length of the SGR sequence `text` starts with, if it is one that
/// only sets colours or weight.
fn colour_sequence_length(text: &str) -> Option<usize> {
    let body = text.strip_prefix("\x1b[")?;
    let end = body.find(|c: char| !(c.is_ascii_digit() || c == ';'))?;
    if !body[end..].starts_with('m') || end > 32 {
        return None;
    }
    let hides = body[..end].split(';').any(|param| param == "8");
    (!hides).then_some(2 + end + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_terminal_obeys_is_written_as_escapes() {
        let hostile =
            "a\x1b]0;title\x07b\x1b]52;c;cGF5bG9hZA==\x07c\x1b[2J\x1b[Hd\u{9b}31m\u{202e}e\rf";
        let shown = terminal_safe(hostile);
        assert_eq!(
            shown,
            "a\\x1b]0;title\\x07b\\x1b]52;c;cGF5bG9hZA==\\x07c\\x1b[2J\\x1b[Hd\\u{9b}31m\\u{202e}e\\x0df"
        );
        assert!(!shown.chars().any(needs_escape));
    }

    #[test]
    fn plain_text_newlines_and_tabs_are_borrowed() {
        for text in ["plain", "two\nlines\tand a tab", "ünïcödé ✓ 数据", ""] {
            assert!(matches!(terminal_safe(text), Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn only_colour_sequences_survive_when_colour_is_kept() {
        assert_eq!(
            terminal_safe_keeping_colour("\x1b[31merror:\x1b[0m x\x1b[2J\x1b[8mhidden\x1b]0;t\x07"),
            "\x1b[31merror:\x1b[0m x\\x1b[2J\\x1b[8mhidden\\x1b]0;t\\x07"
        );
        assert_eq!(terminal_safe("\x1b[31m"), "\\x1b[31m");
    }
}
