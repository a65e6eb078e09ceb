//! What saphyr-parser's events leave to the text: a node's anchor name,
//! its tag and where its own text starts (an event's span starts at the
//! node's first property, `&name` or `!tag`). And the events themselves in
//! the YAML test suite's notation (`+MAP {}`, `=VAL &a :text`), which
//! `engine/tests/it/yaml_suite.rs` compares with the suite's, through
//! [`super::yaml_reading::read_yaml`].

use saphyr_parser::{Event, ScalarStyle, Span as TextSpan};

use super::source::SourceFile;

/// A node's properties, read from the text its event's span starts at.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Properties {
    /// `name` of `&name`.
    pub anchor: Option<String>,
    /// The tag as written (`!!str`, `!local`, `!<tag:x>`), with its line
    /// and 1-based column.
    pub tag: Option<(String, usize, usize)>,
    /// Line and 1-based column where the node's own text starts, after its
    /// properties and the space, line breaks and comments after them; the
    /// span's end where nothing of its own follows before it (a block
    /// collection's first entry, or an empty node's end).
    pub content: (usize, usize),
}

/// Ends an anchor's name or a tag: white space or a flow indicator.
fn ends_property(ch: char) -> bool {
    ch.is_whitespace() || matches!(ch, ',' | '[' | ']' | '{' | '}')
}

/// The properties of the node whose event has `span`: at most one anchor
/// and one tag, in either order, then the node's text.
pub(crate) fn properties(file: &SourceFile, span: &TextSpan) -> Properties {
    let end = (span.end.line(), span.end.col() + 1);
    let mut line = span.start.line();
    let mut chars: Vec<char> = file.line_text(line).chars().collect();
    let mut col = span.start.col();
    let mut found = Properties {
        anchor: None,
        tag: None,
        content: end,
    };
    while (line, col + 1) < end {
        let start = col;
        match chars.get(col) {
            Some('&') if found.anchor.is_none() => {
                col += 1;
                while chars.get(col).is_some_and(|&ch| !ends_property(ch)) {
                    col += 1;
                }
                found.anchor = Some(chars[start + 1..col].iter().collect());
            }
            Some('!') if found.tag.is_none() => {
                col += 1;
                if chars.get(col) == Some(&'<') {
                    while chars.get(col).is_some_and(|&ch| ch != '>') {
                        col += 1;
                    }
                    col = (col + 1).min(chars.len());
                } else {
                    while chars.get(col).is_some_and(|&ch| !ends_property(ch)) {
                        col += 1;
                    }
                }
                found.tag = Some((chars[start..col].iter().collect(), line, start + 1));
            }
            _ => {
                found.content = (line, col + 1);
                break;
            }
        }
        // The separation between properties and content: spaces, tabs,
        // comments and line breaks.
        while (line, col + 1) < end {
            match chars.get(col) {
                Some(' ' | '\t') => col += 1,
                Some('#') | None => {
                    line += 1;
                    chars = file.line_text(line).chars().collect();
                    col = 0;
                }
                Some(_) => break,
            }
        }
    }
    found.content = found.content.min(end);
    found
}

/// The events of a stream in the YAML test suite's `test.event` notation,
/// one line each.
#[derive(Default)]
pub(crate) struct EventLog {
    pub lines: Vec<String>,
    /// For each open collection, whether it is in flow style.
    flow: Vec<bool>,
}

impl EventLog {
    pub fn record(
        &mut self,
        event: &Event,
        span: &TextSpan,
        props: Option<&Properties>,
        file: &SourceFile,
    ) {
        let text_at = |line: usize, col: usize| file.line_text(line).chars().skip(col);
        let properties = || {
            let anchor = props.and_then(|props| props.anchor.as_ref());
            let tag = match event {
                Event::Scalar(_, _, _, tag)
                | Event::SequenceStart(_, tag)
                | Event::MappingStart(_, tag) => tag.as_ref(),
                _ => None,
            };
            let mut written = String::new();
            if let Some(anchor) = anchor {
                written.push_str(&format!(" &{anchor}"));
            }
            if let Some(tag) = tag {
                written.push_str(&format!(" <{}{}>", tag.handle, tag.suffix));
            }
            written
        };
        let line = match event {
            Event::Nothing => return,
            Event::StreamStart => "+STR".to_string(),
            Event::StreamEnd => "-STR".to_string(),
            Event::DocumentStart(true) => "+DOC ---".to_string(),
            Event::DocumentStart(false) => "+DOC".to_string(),
            Event::DocumentEnd => {
                let marker: String = text_at(span.start.line(), span.start.col())
                    .take(3)
                    .collect();
                if marker == "..." { "-DOC ..." } else { "-DOC" }.to_string()
            }
            Event::Alias(_) => {
                let width = span.end.col().saturating_sub(span.start.col());
                let alias: String = text_at(span.start.line(), span.start.col())
                    .take(width)
                    .collect();
                format!("=ALI {alias}")
            }
            Event::Scalar(text, style, _, _) => {
                let indicator = match style {
                    ScalarStyle::Plain => ':',
                    ScalarStyle::SingleQuoted => '\'',
                    ScalarStyle::DoubleQuoted => '"',
                    ScalarStyle::Literal => '|',
                    ScalarStyle::Folded => '>',
                };
                format!("=VAL{} {indicator}{}", properties(), escaped(text))
            }
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                let (line, col) = props
                    .map_or((span.start.line(), span.start.col() + 1), |props| {
                        props.content
                    });
                let opens = text_at(line, col - 1).next();
                // A flow collection's first token is its bracket; a block
                // collection's is empty, at its first entry (which may be
                // a flow key: `[a]: b`).
                let own_token = (line, col) < (span.end.line(), span.end.col() + 1);
                let flow = self.flow.last().copied().unwrap_or(false)
                    || (own_token && matches!(opens, Some('[' | '{')));
                self.flow.push(flow);
                let (kind, brackets) = match event {
                    Event::SequenceStart(..) => ("+SEQ", " []"),
                    _ => ("+MAP", " {}"),
                };
                format!("{kind}{}{}", if flow { brackets } else { "" }, properties())
            }
            Event::SequenceEnd | Event::MappingEnd => {
                self.flow.pop();
                if matches!(event, Event::SequenceEnd) {
                    "-SEQ"
                } else {
                    "-MAP"
                }
                .to_string()
            }
        };
        self.lines.push(line);
    }
}

/// A scalar's text as `test.event` writes it.
fn escaped(text: &str) -> String {
    let mut written = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '\\' => written.push_str("\\\\"),
            '\0' => written.push_str("\\0"),
            '\u{8}' => written.push_str("\\b"),
            '\n' => written.push_str("\\n"),
            '\r' => written.push_str("\\r"),
            '\t' => written.push_str("\\t"),
            other => written.push(other),
        }
    }
    written
}
