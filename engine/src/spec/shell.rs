//! Putting interpolated values into a `run:` command string so that each
//! stays what it was: text, never shell syntax. A value goes in as one
//! shell word quoted for the place it lands (bare, inside `"..."` or inside
//! `'...'`), so `$(...)`, quotes, spaces and `*` in a param cannot change
//! what the command does.

/// Where the command's text stands when a value is inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QuoteContext {
    /// Outside quotes: the value must become one word of its own.
    Bare,
    /// Inside `"..."`: `$`, `` ` ``, `"` and `\` keep their meaning there.
    Double,
    /// Inside `'...'`: everything but `'` is literal.
    Single,
    /// Inside `$'...'`, where backslash escapes are interpreted: no value
    /// can be put there safely.
    AnsiC,
    /// Inside a `#` comment: the shell never sees the value.
    Comment,
}

/// Follows the quoting of a command string as its literal pieces and
/// inserted values are appended, so that the next value is quoted for
/// the context it lands in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuoteTracker {
    context: QuoteContext,
    /// The previous character was a backslash that escapes this one.
    escaped: bool,
    /// The previous character ends a word (or there was none), so a `#`
    /// here starts a comment.
    at_word_start: bool,
    /// The previous character was a `$` (for `$'`).
    after_dollar: bool,
}

impl Default for QuoteTracker {
    fn default() -> Self {
        QuoteTracker {
            context: QuoteContext::Bare,
            escaped: false,
            at_word_start: true,
            after_dollar: false,
        }
    }
}

impl QuoteTracker {
    pub(crate) fn context(&self) -> QuoteContext {
        self.context
    }

    /// Advances over `text` as the shell will read it.
    pub(crate) fn feed(&mut self, text: &str) {
        for ch in text.chars() {
            self.step(ch);
        }
    }

    fn step(&mut self, ch: char) {
        let after_dollar = std::mem::replace(&mut self.after_dollar, false);
        if self.escaped {
            self.escaped = false;
            self.at_word_start = false;
            return;
        }
        match self.context {
            QuoteContext::Bare => {
                match ch {
                    '\\' => self.escaped = true,
                    '\'' if after_dollar => self.context = QuoteContext::AnsiC,
                    '\'' => self.context = QuoteContext::Single,
                    '"' => self.context = QuoteContext::Double,
                    '#' if self.at_word_start => self.context = QuoteContext::Comment,
                    '$' => self.after_dollar = true,
                    _ => {}
                }
                self.at_word_start =
                    ch.is_whitespace() || matches!(ch, ';' | '&' | '|' | '(' | ')' | '<' | '>');
            }
            QuoteContext::Double => match ch {
                '\\' => self.escaped = true,
                '"' => self.context = QuoteContext::Bare,
                _ => {}
            },
            QuoteContext::Single => {
                if ch == '\'' {
                    self.context = QuoteContext::Bare;
                }
            }
            QuoteContext::AnsiC => match ch {
                '\\' => self.escaped = true,
                '\'' => self.context = QuoteContext::Bare,
                _ => {}
            },
            QuoteContext::Comment => {
                if ch == '\n' {
                    self.context = QuoteContext::Bare;
                    self.at_word_start = true;
                }
            }
        }
    }
}

/// Characters that mean nothing to the shell in an unquoted word. `=` is
/// handled apart: `NAME=value` as the first word is an assignment.
fn is_plain(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.' | '/' | ':' | '@' | '%' | '+' | ',')
}

fn looks_like_assignment(value: &str) -> bool {
    value.split_once('=').is_some_and(|(name, _)| {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
    })
}

/// `value` as one word for `context`. A plain value (`5.0e-5`,
/// `data/train.csv`) is left as it is, so commands and their keys read as
/// before; anything else is quoted.
pub(crate) fn quote_for(context: QuoteContext, value: &str) -> String {
    match context {
        QuoteContext::Bare => {
            let plain = !value.is_empty()
                && value.chars().all(|ch| is_plain(ch) || ch == '=')
                && !looks_like_assignment(value);
            if plain {
                value.to_string()
            } else {
                // Inside '...' nothing is special but `'` itself, which is
                // closed, escaped and reopened.
                format!("'{}'", value.replace('\'', r"'\''"))
            }
        }
        QuoteContext::Double => {
            let mut quoted = String::with_capacity(value.len() + 2);
            for ch in value.chars() {
                if matches!(ch, '$' | '`' | '"' | '\\') {
                    quoted.push('\\');
                }
                quoted.push(ch);
            }
            quoted
        }
        QuoteContext::Single => value.replace('\'', r"'\''"),
        // A line break would end the comment and run the rest.
        QuoteContext::Comment => value.replace(['\n', '\r'], " "),
        QuoteContext::AnsiC => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context_after(text: &str) -> QuoteContext {
        let mut tracker = QuoteTracker::default();
        tracker.feed(text);
        tracker.context()
    }

    #[test]
    fn follows_quotes_escapes_and_comments() {
        assert_eq!(context_after("echo "), QuoteContext::Bare);
        assert_eq!(context_after("echo \"a "), QuoteContext::Double);
        assert_eq!(context_after("echo \"a \\\" "), QuoteContext::Double);
        assert_eq!(context_after("echo 'a \" "), QuoteContext::Single);
        assert_eq!(context_after("echo \\' "), QuoteContext::Bare);
        assert_eq!(context_after("echo $'a "), QuoteContext::AnsiC);
        assert_eq!(context_after("echo a # it's "), QuoteContext::Comment);
        assert_eq!(context_after("echo a # it's\necho "), QuoteContext::Bare);
        assert_eq!(context_after("echo a#b "), QuoteContext::Bare);
    }

    #[test]
    fn plain_values_stay_as_written() {
        for plain in [
            "5.0e-5",
            "data/train.csv",
            ".pipe/out/train@p=32-true/model",
            "--lr",
        ] {
            assert_eq!(quote_for(QuoteContext::Bare, plain), plain);
        }
    }

    #[test]
    fn other_values_become_one_word() {
        assert_eq!(quote_for(QuoteContext::Bare, "$(touch x)"), "'$(touch x)'");
        assert_eq!(quote_for(QuoteContext::Bare, "it's"), r"'it'\''s'");
        assert_eq!(quote_for(QuoteContext::Bare, ""), "''");
        assert_eq!(quote_for(QuoteContext::Bare, "A=1"), "'A=1'");
        assert_eq!(quote_for(QuoteContext::Bare, "~/x"), "'~/x'");
        assert_eq!(
            quote_for(QuoteContext::Double, "a\"$b`\\"),
            "a\\\"\\$b\\`\\\\"
        );
        assert_eq!(quote_for(QuoteContext::Single, "it's"), r"it'\''s");
    }
}
