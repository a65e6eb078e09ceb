//! The text that makes a value arrive as one word, byte for byte, in the
//! place the tracker stands, or the [`Refusal`] saying why no such text
//! exists there. Each rule answers to one way bash would read a value as
//! syntax; they sit together so that every place's rule can be compared
//! with the others and with the refusal messages users see.

use super::frames::{Command, Frame, Layer, Param, ParamPart, Pending, Redirect};
use super::refusal::{describe, refuse, Refusal};
use super::simple::{Force, WordSeen};
use super::words::{is_number, is_plain, looks_like_assignment, RESERVED};

/// What the places below the innermost one add: a value anywhere inside
/// arithmetic is evaluated as arithmetic in the end, one inside `[[ ... ]]`
/// may be.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Inherited {
    arithmetic: bool,
    double_bracket: bool,
    /// Inside the replacement of `${x/pattern/replacement}`.
    replacement: bool,
    /// Inside an argument of a command that parses it again as code
    /// (`eval`, `trap`, `bash -c`, a here-document given to `bash`).
    code: bool,
}

const ARITHMETIC: &str = "inside shell arithmetic (`$((...))`, `((...))`, `$[...]`, an array subscript or a `${x:offset}`), where bash evaluates the text and runs the `$(...)` of any subscript in it";

impl Layer {
    pub(super) fn quote(&self, words: &[String], below: Inherited) -> Result<String, Refusal> {
        if self.held {
            // The held backslash escapes the value's first character unless
            // that is a line break, which no quoting below starts with.
            let mut escaped = self.clone();
            escaped.held = false;
            if escaped.step_char('\\').is_err() {
                return Err(after_backslash());
            }
            return escaped.quote(words, below);
        }
        let mut inherited = below;
        for frame in &self.frames {
            match frame {
                Frame::Arith(_) => inherited.arithmetic = true,
                Frame::Param(param)
                    if matches!(
                        param.part,
                        ParamPart::Subscript(_) | ParamPart::Offset | ParamPart::Colon
                    ) =>
                {
                    inherited.arithmetic = true
                }
                Frame::Param(param) if param.part == ParamPart::Replacement => {
                    inherited.replacement = true
                }
                Frame::Command(command) => {
                    inherited.double_bracket |= command.double_bracket;
                    inherited.code |= command.simple.parses_code();
                }
                Frame::HereDoc(heredoc) => inherited.code |= heredoc.spec.code,
                _ => {}
            }
        }
        let text = match self.top() {
            Frame::Backquote(backquote) => {
                if backquote.escaped {
                    return Err(after_backslash());
                }
                escape_for_backquote(&backquote.inner.quote(words, inherited)?)
            }
            _ => {
                let force = match self.word_command() {
                    Some(index) => match &self.frames[index] {
                        Frame::Command(command) => command.simple.check(
                            &WordSeen {
                                literal: &command.word.literal,
                                empty: !command.word.started,
                                at_start: command.keyword_words > 0,
                                double_bracket: command.double_bracket,
                            },
                            words,
                        )?,
                        _ => Force::No,
                    },
                    None => Force::No,
                };
                self.quote_here(words, inherited, force)?
            }
        };
        for frame in &self.frames {
            if let Frame::HereDoc(heredoc) = frame {
                heredoc.check_insert(&text)?;
            }
        }
        Ok(text)
    }

    /// `words` quoted for the innermost frame of this layer. The checks run
    /// in a fixed order, so that a value that several rules refuse is
    /// refused with the same message every time; the frame's own quoting
    /// comes last.
    fn quote_here(
        &self,
        words: &[String],
        inherited: Inherited,
        force: Force,
    ) -> Result<String, Refusal> {
        if matches!(self.top(), Frame::Comment) {
            // The shell never reads it; a line break would end the comment.
            return Ok(words.join(" ").replace(['\n', '\r'], " "));
        }
        self.refuse_operator_places(words)?;
        if inherited.arithmetic {
            if let Some(text) = self.quote_in_arithmetic(words)? {
                return Ok(text);
            }
        }
        refuse_in_enclosing_places(words, inherited)?;
        if inherited.replacement {
            return quote_in_replacement(words);
        }
        self.refuse_process_substitution_places(words)?;
        if self.escaped {
            return quote_after_escape(words);
        }
        let quoted: Vec<String> = match self.top() {
            // `$(` with nothing after it yet: the start of a command.
            _ if self.pending == Pending::DollarParen => quote_command_start(words),
            Frame::Command(command) => quote_command_word(command, words, force)?,
            Frame::Double => words.iter().map(|word| quote_double(word)).collect(),
            Frame::Single => self.quote_single(words)?,
            Frame::AnsiC => {
                return Err(refuse(
                    "inside `$'...'`",
                    "bash reads backslash escapes there, so pipe puts no value into one",
                ))
            }
            Frame::Param(param) => quote_param_part(param, words)?,
            Frame::Arith(_) => unreachable!("arithmetic is handled above"),
            Frame::HereDoc(heredoc) if heredoc.spec.quoted => words.to_vec(),
            Frame::HereDoc(_) => quote_heredoc_body(words),
            Frame::Comment | Frame::Backquote(_) => unreachable!("handled above"),
        };
        Ok(quoted.join(" "))
    }

    /// Places where a value would be read as part of an operator: after a
    /// `$`, as a here-document's delimiter, after the `:` of a `${...}`.
    fn refuse_operator_places(&self, words: &[String]) -> Result<(), Refusal> {
        if self.pending == Pending::Dollar {
            return Err(refuse(
                "right after a `$`",
                "the `$` and the value would read as a parameter, or its quoting as `$'...'`",
            ));
        }
        if matches!(
            self.top(),
            Frame::Command(Command {
                redirect: Redirect::HereDoc { .. } | Redirect::Delimiter(_),
                ..
            })
        ) {
            return Err(refuse(
                "in a here-document's delimiter (the word after `<<`)",
                "the value would decide where the here-document ends and whether its body is expanded",
            ));
        }
        if matches!(self.top(), Frame::Param(param) if param.part == ParamPart::Colon)
            && words.iter().any(|word| word.starts_with('-'))
        {
            return Err(refuse(
                "right after the `:` of a `${...}`",
                "a leading `-` would make `:-` the default-value operator",
            ));
        }
        Ok(())
    }

    /// Inside arithmetic only a number passes; the text when that is all
    /// there is to it, `None` when the value stands in a command inside the
    /// arithmetic and is quoted as a word there.
    fn quote_in_arithmetic(&self, words: &[String]) -> Result<Option<String>, Refusal> {
        if let Some(word) = words.iter().find(|word| !is_number(word)) {
            return Err(refuse(
                ARITHMETIC,
                format!("only a plain number (digits, maybe after a `-`) is safe there, and {} is not one", describe(word)),
            ));
        }
        // In a command inside it (`$(( $(...) ))`, or a `$((` that
        // turns out to be `$( (...) )`) a number is a word like any
        // other: `~0` is a tilde prefix there.
        let in_command =
            matches!(self.top(), Frame::Command(_)) || self.pending == Pending::DollarParen;
        if !in_command {
            return Ok(Some(words.join(" ")));
        }
        Ok(None)
    }

    /// Places where a `<` or `>` before a value, or the command the value is
    /// in, would not read it as text.
    fn refuse_process_substitution_places(&self, words: &[String]) -> Result<(), Refusal> {
        if self.pending == Pending::Angle && words.first().is_some_and(|word| word.starts_with('('))
        {
            return Err(refuse(
                "right after a `<` or `>` in a `${...}`",
                "a value starting with `(` would make it a process substitution `<(...)`",
            ));
        }
        if let Frame::Command(command) = self.top() {
            if command.inert {
                return Err(refuse(
                    "inside a `<(...)` in a `${...}` inside \"...\", which bash parses as a command but prints as written",
                    "no quoting makes the value arrive there as it is",
                ));
            }
        }
        Ok(())
    }

    /// Inside `'...'`: the quote closed, escaped and reopened.
    fn quote_single(&self, words: &[String]) -> Result<Vec<String>, Refusal> {
        // Inside `"${x:-'...'}"` (or a here-document's `${...}`)
        // bash pairs the quotes but reads what is between them as
        // if in "...".
        if matches!(self.frames.iter().rev().nth(1), Some(Frame::Param(param)) if param.in_double) {
            if let Some(bad) = words.iter().find(|word| !is_plain_word(word)) {
                return Err(refuse(
                    "inside `'...'` in a `${...}` that is inside \"...\" or a here-document",
                    format!("there only letters, digits and `_-./:@%+,` are sure to be read as text, and {} is more", describe(bad)),
                ));
            }
        }
        Ok(words
            .iter()
            .map(|word| word.replace('\'', r"'\''"))
            .collect())
    }
}

/// What the frames below add: code parsed again, and `[[ ... ]]`.
fn refuse_in_enclosing_places(words: &[String], inherited: Inherited) -> Result<(), Refusal> {
    if inherited.code {
        if let Some(bad) = words
            .iter()
            .find(|word| !word.chars().all(|ch| is_plain(ch) || ch == '='))
        {
            return Err(refuse(
                "in an argument of a command that parses it again as shell code (`eval`, `trap`, `bash -c`, a here-document given to `bash` or `source`)",
                format!("only letters, digits and `_-./:@%+,=` are safe there, and {} is more", describe(bad)),
            ));
        }
    }
    if inherited.double_bracket && words.iter().any(|word| word.contains('[')) {
        return Err(refuse(
            "inside `[[ ... ]]`, whose arithmetic comparisons (`-eq`, `-lt`, ...) evaluate the text and run the `$(...)` of a subscript in it",
            "the value holds a `[`",
        ));
    }
    Ok(())
}

/// Inside the replacement of `${x/pattern/replacement}`.
fn quote_in_replacement(words: &[String]) -> Result<String, Refusal> {
    if let Some(bad) = words
        .iter()
        .find(|word| !word.is_empty() && !is_plain_word(word))
    {
        return Err(refuse(
            "in the replacement of a `${x/pattern/replacement}`",
            format!("bash splits and globs the result and reads `&` there whatever the quotes, so only letters, digits and `_-./:@%+,` are safe, and {} is more", describe(bad)),
        ));
    }
    Ok(words.join(" "))
}

/// Right after a backslash of the command.
fn quote_after_escape(words: &[String]) -> Result<String, Refusal> {
    // `\` + a plain character is that character (or, inside quotes,
    // the backslash and it): nothing for the backslash to disarm.
    if words.iter().all(|word| is_plain_word(word)) {
        return Ok(words.join(" "));
    }
    Err(after_backslash())
}

/// Where a command starts, right after `$(`: a reserved word is quoted.
fn quote_command_start(words: &[String]) -> Vec<String> {
    words
        .iter()
        .enumerate()
        .map(|(index, word)| quote_bare(word, index == 0 && RESERVED.contains(&word.as_str())))
        .collect()
}

/// In a word of a command, outside quotes.
fn quote_command_word(
    command: &Command,
    words: &[String],
    force: Force,
) -> Result<Vec<String>, Refusal> {
    let word = &command.word;
    if word.brackets > 0 {
        if let Some(bad) = words.iter().find(|value| !is_number(value)) {
            return Err(refuse(
                format!("{ARITHMETIC}: here inside the `[...]` of the word `{}`", word.text),
                format!("only a plain number (digits, maybe after a `-`) is safe there, and {} is not one", describe(bad)),
            ));
        }
    }
    // A `~` starting the word, or after the `=` or a `:` of an
    // assignment, takes what follows up to a `/` as a user
    // name; a `{` before it makes `,` and `..` brace expansion.
    let tilde = in_tilde_prefix(&word.text, word.quoted);
    // In the regular expression of `=~` quoting makes `.` and
    // `+` match themselves.
    let regex = force == Force::Regex;
    // A whole word where a command starts: `if` would be syntax.
    let keyword = !word.started && command.keyword_words > 0;
    Ok(words
        .iter()
        .enumerate()
        .map(|(index, value)| {
            let force = (regex
                && !value
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_'))
                || (index == 0
                    && ((keyword && RESERVED.contains(&value.as_str()))
                        || tilde
                        || (word.braces > 0 && (value.contains(',') || value.contains("..")))));
            quote_bare(value, force)
        })
        .collect())
}

/// In one part of a `${...}` parameter expansion: its word, its pattern,
/// or its name or operator, where no value may go.
fn quote_param_part(param: &Param, words: &[String]) -> Result<Vec<String>, Refusal> {
    Ok(match param.part {
        ParamPart::Word if param.in_double && words.iter().any(|word| word.contains('\'')) => {
            return Err(refuse(
                "in the word of a `${...}` inside \"...\" or a here-document",
                "the value holds a `'`, which bash pairs with another there though it prints it",
            ))
        }
        ParamPart::Word
            if param.in_double
                && words.iter().any(|word| {
                    word.contains("<(") || word.contains(">(") || word.ends_with(['<', '>'])
                }) =>
        {
            return Err(refuse(
                "in the word of a `${...}` inside \"...\" or a here-document",
                "bash would parse a `<(` or `>(` of it as a process substitution",
            ))
        }
        ParamPart::Word if param.in_double => words
            .iter()
            .map(|word| quote_double(word).replace('}', r"\}"))
            .collect(),
        // Unquoted, bash splits the word's result on `$IFS` (which
        // the command may set) and expands a `~` that starts it,
        // but neither in quoted text.
        ParamPart::Word => words.iter().map(|word| quote_bare(word, true)).collect(),
        ParamPart::Replacement => unreachable!("a replacement is handled above"),
        ParamPart::Pattern { op, begun } => {
            // Right after the operator a value starting with it
            // would double it (`%` + `%a` is `%%a`).
            let literal = |word: &String| {
                is_plain_word(word) && !word.contains('/') && (begun || !word.starts_with(op))
            };
            if param.in_double {
                if let Some(bad) = words.iter().find(|word| !literal(word)) {
                    return Err(refuse(
                        "in the pattern of a `${...}` inside \"...\"",
                        format!("there only letters, digits and `_-.:@%+,` are sure to be read as text, and {} is more", describe(bad)),
                    ));
                }
                words.to_vec()
            } else {
                words
                    .iter()
                    .map(|word| quote_bare(word, !literal(word)))
                    .collect()
            }
        }
        ParamPart::Name | ParamPart::Transform => {
            return Err(refuse(
                "in the name or operator of a `${...}` parameter expansion",
                "the value would name a variable or an operation",
            ))
        }
        ParamPart::Subscript(_) | ParamPart::Offset | ParamPart::Colon => {
            unreachable!("arithmetic is handled above")
        }
    })
}

/// In the body of a here-document whose delimiter is unquoted.
fn quote_heredoc_body(words: &[String]) -> Vec<String> {
    words
        .iter()
        .map(|word| {
            let mut escaped = String::with_capacity(word.len());
            for ch in word.chars() {
                if matches!(ch, '$' | '`' | '\\') {
                    escaped.push('\\');
                }
                escaped.push(ch);
            }
            escaped
        })
        .collect()
}

fn after_backslash() -> Refusal {
    refuse(
        "right after a backslash in the command",
        "the backslash would escape the first character of the value's quoting; only a plain value (letters, digits, `_-./:@%+,`) is safe there",
    )
}

/// Text that a backquote's reading turns back into `text`.
fn escape_for_backquote(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for ch in text.chars() {
        if matches!(ch, '$' | '`' | '\\') {
            escaped.push('\\');
        }
        escaped.push(ch);
    }
    escaped
}

fn is_plain_word(word: &str) -> bool {
    !word.is_empty() && word.chars().all(is_plain)
}

/// Whether a value appended to the unquoted text `text` of a word would
/// be part of a tilde prefix (`~user`): at the word's start, or after the
/// `=` or a `:` of a word that looks like an assignment (bash expands
/// those in any such word, `echo a=~` too).
fn in_tilde_prefix(text: &str, quoted: bool) -> bool {
    let open = |segment: &str| segment.starts_with('~') && !segment.contains('/');
    if !quoted && open(text) {
        return true;
    }
    if !looks_like_assignment(text) {
        return false;
    }
    let value = text.split_once('=').map_or("", |(_, value)| value);
    value.rsplit(':').next().is_some_and(open)
}

/// `value` as one unquoted-context word. A plain value (`5.0e-5`,
/// `data/train.csv`) is left as it is unless `force`, so commands and their
/// keys read as before; anything else goes inside `'...'`.
fn quote_bare(value: &str, force: bool) -> String {
    let plain = !force
        && !value.is_empty()
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

/// `value` for the inside of `"..."`: `$`, `` ` ``, `"` and `\` escaped.
fn quote_double(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    for ch in value.chars() {
        if matches!(ch, '$' | '`' | '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(ch);
    }
    quoted
}
