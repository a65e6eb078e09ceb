//! Here-documents: the delimiter word after `<<`, where a body ends, and
//! what may be put into a body without ending it early. A body ends at a
//! line, not at a character, so unlike every other place a value's
//! quoting alone cannot keep it text there: the lines it makes have to be
//! checked against the delimiter, which is why this sits apart from the
//! per-character reader and the per-place quoting.

use super::refusal::{refuse, Refusal};
use super::words::{is_blank, is_operator};

/// The delimiter word being read after `<<` or `<<-`.
#[derive(Debug, Clone, Default)]
pub(super) struct Delimiter {
    text: String,
    quoted: bool,
    strip_tabs: bool,
    quote: Option<char>,
    escaped: bool,
}

#[derive(Debug, Clone)]
pub(super) struct HereDocSpec {
    delimiter: String,
    /// The delimiter was quoted: the body is literal text.
    pub(super) quoted: bool,
    /// `<<-`: leading tabs are stripped from each line.
    strip_tabs: bool,
    /// Given to a command that runs it as code (`bash <<EOF`).
    pub(super) code: bool,
}

#[derive(Debug, Clone)]
pub(super) struct HereDoc {
    pub(super) spec: HereDocSpec,
    /// The body's current line so far (continuation lines joined).
    line: String,
    /// The line so far ends in an unescaped backslash.
    line_escape: bool,
    /// Here-documents of the same line that follow this one.
    pub(super) rest: Vec<HereDocSpec>,
    /// Inside `$(...)` or `<(...)`, where bash 5.2 also ends the body at a
    /// line that starts with the delimiter and holds a `)`, and reads the
    /// rest of that line as commands.
    pub(super) in_comsub: bool,
}

/// What a character did to a here-document's body.
pub(super) enum LineEnd {
    /// Nothing: the body goes on.
    No,
    /// It ended the delimiter line.
    Ended,
    /// It ended a line that starts with the delimiter inside `$(...)`:
    /// the rest of that line is read again, as command text.
    EndedBefore(String),
}

impl Delimiter {
    /// For `<<` (or `<<-` when `strip_tabs`), before the word's first
    /// character.
    pub(super) fn new(strip_tabs: bool) -> Delimiter {
        Delimiter {
            strip_tabs,
            ..Delimiter::default()
        }
    }

    /// Whether `\` + line break read now would vanish (not inside `'...'`
    /// nor after a backslash).
    pub(super) fn joins_lines(&self) -> bool {
        !self.escaped && self.quote != Some('\'')
    }

    /// The here-document the finished word opens.
    pub(super) fn into_spec(self) -> HereDocSpec {
        HereDocSpec {
            delimiter: self.text,
            quoted: self.quoted,
            strip_tabs: self.strip_tabs,
            code: false,
        }
    }

    /// Reads `ch` into the delimiter word; true when `ch` ends it (and is
    /// then read as an ordinary character).
    pub(super) fn step(&mut self, ch: char) -> Result<bool, &'static str> {
        if self.escaped {
            self.escaped = false;
            self.text.push(ch);
            return Ok(false);
        }
        match self.quote {
            Some('\'') => {
                if ch == '\'' {
                    self.quote = None;
                } else {
                    self.text.push(ch);
                }
            }
            Some(_) => match ch {
                '"' => self.quote = None,
                '\\' => self.escaped = true,
                '$' | '`' => return Err("an expansion in a here-document's delimiter"),
                _ => self.text.push(ch),
            },
            None => match ch {
                '\\' => {
                    self.escaped = true;
                    self.quoted = true;
                }
                '\'' | '"' => {
                    self.quote = Some(ch);
                    self.quoted = true;
                }
                '$' | '`' => return Err("an expansion in a here-document's delimiter"),
                _ if is_blank(ch) || ch == '\n' || is_operator(ch) => return Ok(true),
                _ => self.text.push(ch),
            },
        }
        Ok(false)
    }
}

impl HereDoc {
    pub(super) fn new(spec: HereDocSpec, rest: Vec<HereDocSpec>, in_comsub: bool) -> HereDoc {
        HereDoc {
            spec,
            line: String::new(),
            line_escape: false,
            rest,
            in_comsub,
        }
    }

    /// Whether `\` + line break read now would vanish: in an unquoted
    /// body, unless this backslash is escaped.
    pub(super) fn joins_lines(&self) -> bool {
        !self.spec.quoted && !self.line_escape
    }

    /// Follows the body's lines: whether `ch` ends the body.
    pub(super) fn line_step(&mut self, ch: char) -> LineEnd {
        if ch == '\n' {
            if self.line_escape {
                // In an unquoted body `\` + line break joins the lines,
                // before the delimiter is looked for.
                self.line.pop();
                self.line_escape = false;
                return LineEnd::No;
            }
            let line = std::mem::take(&mut self.line);
            if self.is_delimiter(&line) {
                return LineEnd::Ended;
            }
            if let Some(rest) = self.comsub_rest(&line) {
                return LineEnd::EndedBefore(rest.to_string());
            }
            return LineEnd::No;
        }
        self.line_escape = !self.spec.quoted && ch == '\\' && !self.line_escape;
        self.line.push(ch);
        LineEnd::No
    }

    /// `line` without the tabs `<<-` strips.
    fn stripped<'l>(&self, line: &'l str) -> &'l str {
        if self.spec.strip_tabs {
            line.trim_start_matches('\t')
        } else {
            line
        }
    }

    fn is_delimiter(&self, line: &str) -> bool {
        self.stripped(line) == self.spec.delimiter
    }

    /// Inside `$(...)`, what follows the delimiter on a line that starts
    /// with it and holds a `)`: bash 5.2 ends the body there.
    fn comsub_rest<'l>(&self, line: &'l str) -> Option<&'l str> {
        if !self.in_comsub {
            return None;
        }
        self.stripped(line)
            .strip_prefix(self.spec.delimiter.as_str())
            .filter(|rest| rest.contains(')'))
    }

    /// Refuses `text` if, put into the body here, it would end the
    /// here-document, be joined to another line, or lose leading tabs.
    pub(super) fn check_insert(&self, text: &str) -> Result<(), Refusal> {
        let place = || {
            format!(
                "in a here-document ending at `{}`",
                self.spec.delimiter.escape_debug()
            )
        };
        let mut line = self.line.clone();
        let mut line_escape = self.line_escape;
        let mut added_to_line = false;
        for ch in text.chars() {
            if ch == '\n' {
                if line_escape {
                    return Err(refuse(
                        place(),
                        "a backslash before a line break in it would join two lines of the body",
                    ));
                }
                if self.is_delimiter(&line) || self.comsub_rest(&line).is_some() {
                    return Err(refuse(
                        place(),
                        "a line of it would end the here-document, and the lines after it would run as commands",
                    ));
                }
                line.clear();
                added_to_line = false;
                continue;
            }
            if self.spec.strip_tabs && ch == '\t' && line.chars().all(|c| c == '\t') {
                return Err(refuse(
                    place(),
                    "`<<-` strips the tabs that start a line of it",
                ));
            }
            line_escape = !self.spec.quoted && ch == '\\' && !line_escape;
            line.push(ch);
            added_to_line = true;
        }
        if line_escape {
            return Err(refuse(
                place(),
                "it ends in a backslash, which would join the line it lands on to the next",
            ));
        }
        let stripped = if self.spec.strip_tabs {
            line.trim_start_matches('\t')
        } else {
            line.as_str()
        };
        // Inside `$(...)` a line that starts with the delimiter ends the body
        // once a `)` follows on it.
        let comsub_start = self.in_comsub && stripped.starts_with(self.spec.delimiter.as_str());
        if (added_to_line && self.spec.delimiter.starts_with(stripped)) || comsub_start {
            return Err(refuse(
                place(),
                "the line it lands on would read as the start of the delimiter, so the text after it could end the here-document",
            ));
        }
        Ok(())
    }
}
