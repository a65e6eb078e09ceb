//! A YAML tree that remembers where every node came from, built from
//! saphyr-parser's event stream so that diagnostics can point at the exact
//! text. Also where the hostile-input limits live (size, depth, node count
//! after alias expansion, duplicate keys, multiple documents) and where
//! tags are refused.

use std::collections::HashMap;

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, Span as TextSpan, SpannedEventReceiver};

use super::source::{FileId, Sources, Span};
use super::yaml_events::{properties, EventLog, Properties};
use crate::Diagnostic;

pub(crate) const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The bytes of a project's YAML file (a pipeline, params, settings or
/// `dvc.yaml` file), as every reader of one takes them: through a link,
/// but only from a regular file (a clone's FIFO never blocks, a link to
/// `/dev/zero` is refused) and no further than one byte past
/// [`MAX_FILE_BYTES`], which the caller refuses in its own words.
pub(crate) fn read_bounded(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let (file, metadata) = pipe_cache::untrusted::open_regular_through_links(path)?;
    let mut bytes = Vec::with_capacity(metadata.len().min(MAX_FILE_BYTES) as usize + 1);
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Whether a project's YAML file is at `path` for its reader to take or
/// refuse: anything but a directory, so that a FIFO or a link to a device
/// there is refused by name ([`read_bounded`]), never read as "no such
/// file".
pub(crate) fn present(path: &std::path::Path) -> bool {
    std::fs::metadata(path).is_ok_and(|found| !found.is_dir())
}

/// [`read_bounded`] as text; not UTF-8 is an `InvalidData` error. A
/// file past the limit comes back longer than it (its last character may
/// be cut: the caller refuses it by its length, not its text).
pub(crate) fn read_bounded_text(path: &std::path::Path) -> std::io::Result<String> {
    let bytes = read_bounded(path)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "is not UTF-8 text"))
}
pub(crate) const MAX_DEPTH: usize = 64;
pub(crate) const MAX_NODES: usize = 100_000;

#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub value: NodeValue,
    pub span: Span,
}

#[derive(Debug, Clone)]
pub(crate) enum NodeValue {
    Scalar(Scalar),
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

#[derive(Debug, Clone)]
pub(crate) struct Scalar {
    pub text: String,
    /// Quoted and block scalars are always strings; plain ones resolve
    /// like YAML 1.2's core schema.
    pub plain: bool,
    /// The column where `text` starts on `span.line` when it appears there
    /// character for character (a one-line scalar without escapes), so
    /// that a diagnostic can point inside it.
    pub verbatim_col: Option<usize>,
    /// Written once and read at several places: under an anchor (`&x`),
    /// so that an alias (`*x`) may read it too. Replacing its text in
    /// place would change every place that reads it.
    pub shared: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub key: String,
    pub key_span: Span,
    pub value: Node,
}

/// What a scalar means under the YAML 1.2 core schema.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Resolved {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str,
}

impl Scalar {
    pub fn resolve(&self) -> Resolved {
        if self.plain {
            resolve_plain(&self.text)
        } else {
            Resolved::Str
        }
    }
}

pub(crate) fn resolve_plain(text: &str) -> Resolved {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        "true" | "True" | "TRUE" => return Resolved::Bool(true),
        "false" | "False" | "FALSE" => return Resolved::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Resolved::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        _ => {}
    }
    if let Some(octal) = text.strip_prefix("0o") {
        if !octal.is_empty() && octal.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return i64::from_str_radix(octal, 8).map_or(Resolved::Str, Resolved::Int);
        }
    }
    if let Some(hex) = text.strip_prefix("0x") {
        if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return i64::from_str_radix(hex, 16).map_or(Resolved::Str, Resolved::Int);
        }
    }
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return match text.parse::<i64>() {
            Ok(int) => Resolved::Int(int),
            Err(_) => text.parse::<f64>().map_or(Resolved::Str, Resolved::Float),
        };
    }
    if is_core_float(unsigned) {
        return text.parse::<f64>().map_or(Resolved::Str, Resolved::Float);
    }
    Resolved::Str
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`, the core schema's
/// float without its sign.
fn is_core_float(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut index = 0;
    let digits = |index: &mut usize| {
        let start = *index;
        while bytes.get(*index).is_some_and(u8::is_ascii_digit) {
            *index += 1;
        }
        *index - start
    };
    let integer_digits = digits(&mut index);
    let mut fraction_digits = 0;
    if bytes.get(index) == Some(&b'.') {
        index += 1;
        fraction_digits = digits(&mut index);
    } else if integer_digits == 0 {
        return false;
    }
    if integer_digits == 0 && fraction_digits == 0 {
        return false;
    }
    if matches!(bytes.get(index), Some(b'e' | b'E')) {
        index += 1;
        if matches!(bytes.get(index), Some(b'-' | b'+')) {
            index += 1;
        }
        if digits(&mut index) == 0 {
            return false;
        }
    }
    index == bytes.len()
}

impl Node {
    pub fn describe(&self) -> &'static str {
        match &self.value {
            NodeValue::Seq(_) => "a list",
            NodeValue::Map(_) => "a mapping",
            NodeValue::Scalar(scalar) => match scalar.resolve() {
                Resolved::Null => "nothing (null)",
                Resolved::Bool(_) => "a boolean",
                Resolved::Int(_) => "an integer",
                Resolved::Float(_) => "a number",
                Resolved::Str => "a string",
            },
        }
    }

    pub fn as_map(&self) -> Option<&[Entry]> {
        match &self.value {
            NodeValue::Map(entries) => Some(entries),
            _ => None,
        }
    }

    pub fn as_scalar(&self) -> Option<&Scalar> {
        match &self.value {
            NodeValue::Scalar(scalar) => Some(scalar),
            _ => None,
        }
    }

    /// The text of a scalar that resolves to a string.
    pub fn as_str(&self) -> Option<&str> {
        self.as_scalar()
            .filter(|scalar| scalar.resolve() == Resolved::Str)
            .map(|scalar| scalar.text.as_str())
    }

    pub fn is_null(&self) -> bool {
        self.as_scalar()
            .is_some_and(|scalar| scalar.resolve() == Resolved::Null)
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|entry| entry.key == key)
            .map(|entry| &entry.value)
    }

    /// Marks every scalar of the node as [`Scalar::shared`].
    fn mark_shared(&mut self) {
        match &mut self.value {
            NodeValue::Scalar(scalar) => scalar.shared = true,
            NodeValue::Seq(items) => items.iter_mut().for_each(Node::mark_shared),
            NodeValue::Map(entries) => entries
                .iter_mut()
                .for_each(|entry| entry.value.mark_shared()),
        }
    }

    fn count_and_depth(&self) -> (usize, usize) {
        match &self.value {
            NodeValue::Scalar(_) => (1, 0),
            NodeValue::Seq(items) => items.iter().fold((1, 1), |(count, depth), item| {
                let (item_count, item_depth) = item.count_and_depth();
                (count + item_count, depth.max(item_depth + 1))
            }),
            NodeValue::Map(entries) => entries.iter().fold((1, 1), |(count, depth), entry| {
                let (item_count, item_depth) = entry.value.count_and_depth();
                (count + item_count + 1, depth.max(item_depth + 1))
            }),
        }
    }
}

/// The document of `file`, or everything wrong with it. An empty stream
/// gives `Ok(None)`.
pub(crate) fn parse(sources: &Sources, file: FileId) -> Result<Option<Node>, Vec<Diagnostic>> {
    read(sources, file, None).0
}

/// [`parse`], and the events the parser gave on the way, in the YAML test
/// suite's notation (for [`super::yaml_reading::read_yaml`]).
pub(crate) fn parse_logged(sources: &Sources, file: FileId) -> (Document, Vec<String>) {
    let (document, log) = read(sources, file, Some(EventLog::default()));
    (document, log.map(|log| log.lines).unwrap_or_default())
}

type Document = Result<Option<Node>, Vec<Diagnostic>>;

fn read(sources: &Sources, file: FileId, log: Option<EventLog>) -> (Document, Option<EventLog>) {
    let text = &sources.file(file).text;
    let mut builder = TreeBuilder {
        sources,
        file,
        stack: Vec::new(),
        anchors: HashMap::new(),
        root: None,
        documents: 0,
        node_count: 0,
        diagnostics: Vec::new(),
        aborted: false,
        line_chars: (0, Vec::new()),
        log,
    };
    let mut parser = Parser::new_from_str(text);
    if let Err(error) = parser.load(&mut builder, true) {
        builder
            .diagnostics
            .push(scan_error(sources, file, error.marker(), error.info()));
    }
    let document = if builder.diagnostics.is_empty() {
        Ok(builder.root)
    } else {
        Err(builder.diagnostics)
    };
    (document, builder.log)
}

/// The span of `marker` in `file`, kept within the file: the parser puts
/// the end of a text without a final line break on the line after it.
fn span_at(sources: &Sources, file: FileId, marker: &Marker) -> Span {
    let source = sources.file(file);
    let (line, col) = if marker.line() > source.lines() {
        let last = source.lines();
        (last, source.line_text(last).chars().count() + 1)
    } else {
        (marker.line().max(1), marker.col() + 1)
    };
    Span {
        file,
        line,
        col,
        len: 1,
    }
}

fn scan_error(sources: &Sources, file: FileId, marker: &Marker, info: &str) -> Diagnostic {
    let span = span_at(sources, file, marker);
    let line_text = sources.file(file).line_text(span.line);
    let leading = &line_text[..line_text.len() - line_text.trim_start().len()];
    let hint = if let Some((open_line, bracket)) =
        unclosed_flow_bracket(&sources.file(file).text, span.line)
    {
        let close = if bracket == '[' { ']' } else { '}' };
        format!("line {open_line} opens a `{bracket}` that is not closed before this point; close it with `{close}`")
    } else if leading.contains('\t') || info.contains("tab") {
        "indent with spaces: YAML does not allow tabs in indentation".to_string()
    } else if info.contains("mapping values are not allowed") {
        "a value that contains `: ` must be quoted, e.g. `run: \"echo a: b\"`; otherwise check the indentation of this line".to_string()
    } else {
        "check the indentation and quoting here; quote values that start with `{`, `[`, `*`, `&`, `!`, `%`, `@` or contain `: ` or ` #`".to_string()
    };
    Diagnostic::new("yaml-syntax", format!("invalid YAML: {info}"))
        .at(sources.location(span))
        .with_hint(hint)
}

/// The line and bracket of the innermost `[` or `{` still open when line
/// `error_line` starts: the usual cause of a confusing error further down.
fn unclosed_flow_bracket(text: &str, error_line: usize) -> Option<(usize, char)> {
    let mut open: Vec<(usize, char)> = Vec::new();
    for (index, line) in text.lines().enumerate().take(error_line.saturating_sub(1)) {
        let mut quote: Option<char> = None;
        let mut previous = ' ';
        for ch in line.chars() {
            match quote {
                Some(q) if ch == q => quote = None,
                Some(_) => {}
                None => match ch {
                    '#' if previous.is_whitespace() => break,
                    '"' | '\'' if previous.is_whitespace() || "[{,:".contains(previous) => {
                        quote = Some(ch)
                    }
                    '[' | '{' => open.push((index + 1, ch)),
                    ']' | '}' => {
                        open.pop();
                    }
                    _ => {}
                },
            }
            previous = ch;
        }
    }
    open.pop()
}

enum Frame {
    Seq {
        span: Span,
        anchor: usize,
        items: Vec<Node>,
    },
    Map {
        span: Span,
        anchor: usize,
        entries: Vec<Entry>,
        key: PendingKey,
        seen: HashMap<String, Span>,
    },
}

enum PendingKey {
    None,
    Key(String, Span),
    /// The key was refused; its value is dropped.
    Invalid,
}

struct TreeBuilder<'a> {
    sources: &'a Sources,
    file: FileId,
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Node, usize, usize)>,
    root: Option<Node>,
    documents: usize,
    node_count: usize,
    diagnostics: Vec<Diagnostic>,
    /// Set after an error that makes the rest of the tree meaningless or
    /// dangerous to build (too deep, too big, a second document).
    aborted: bool,
    /// The characters of the line the last scalar was on, by line number:
    /// a flow list of 100,000 items on one line is split into characters
    /// once, not once per item (which made loading it quadratic).
    line_chars: (usize, Vec<char>),
    /// The events, written down for the YAML test suite.
    log: Option<EventLog>,
}

impl TreeBuilder<'_> {
    fn span(&self, marker: &Marker) -> Span {
        span_at(self.sources, self.file, marker)
    }

    /// Where the node of an event that spans `span` starts: at its own
    /// text, after its anchor and tag, or at its first property when it
    /// has nothing of its own (`key: &empty`).
    fn node_span(&self, span: &TextSpan, props: Option<&Properties>, scalar: bool) -> Span {
        let start = self.span(&span.start);
        match props {
            Some(props) if !(scalar && props.content == (span.end.line(), span.end.col() + 1)) => {
                Span {
                    line: props.content.0.max(1),
                    col: props.content.1,
                    ..start
                }
            }
            _ => start,
        }
    }

    /// Tags change what a value is (`!!str 1`); pipe reads no tags, so
    /// one is refused rather than ignored.
    fn refuse_tag(&mut self, tag: &str, line: usize, col: usize) {
        let span = Span {
            file: self.file,
            line,
            col,
            len: tag.chars().count(),
        };
        self.diagnostics.push(
            Diagnostic::new("yaml-tag", format!("pipe does not read YAML tags such as `{tag}`"))
                .at(self.sources.location(span))
                .with_hint("remove the tag: quote a value to make it a string (`\"1.0\"`); plain values are read by YAML 1.2's core schema"),
        );
    }

    fn fail(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
        self.aborted = true;
    }

    fn count_nodes(&mut self, count: usize, span: Span) -> bool {
        self.node_count += count;
        if self.node_count > MAX_NODES {
            self.fail(
                Diagnostic::new(
                    "too-many-nodes",
                    format!("the file expands to more than {MAX_NODES} YAML nodes"),
                )
                .at(self.sources.location(span))
                .with_hint("this usually means aliases (`*name`) that refer to each other many times over; write the values out or use a matrix"),
            );
            return false;
        }
        true
    }

    fn check_depth(&mut self, extra: usize, span: Span) -> bool {
        if self.stack.len() + extra > MAX_DEPTH {
            self.fail(
                Diagnostic::new(
                    "too-deep",
                    format!("the YAML nests more than {MAX_DEPTH} levels deep"),
                )
                .at(self.sources.location(span))
                .with_hint("flatten the structure; a pipeline needs a handful of levels"),
            );
            return false;
        }
        true
    }

    fn scalar(&mut self, text: String, style: ScalarStyle, span: Span) -> Node {
        if self.line_chars.0 != span.line || self.line_chars.1.is_empty() {
            let chars = self
                .sources
                .file(self.file)
                .line_text(span.line)
                .chars()
                .collect();
            self.line_chars = (span.line, chars);
        }
        let line = &self.line_chars.1;
        let start = span.col - 1;
        let value: Vec<char> = text.chars().collect();
        let appears_at = |offset: usize| {
            !value.contains(&'\n')
                && line.get(start + offset..start + offset + value.len()) == Some(&value[..])
        };
        let (plain, len, verbatim_col) = match style {
            ScalarStyle::Plain if appears_at(0) => (true, value.len(), Some(span.col)),
            ScalarStyle::Plain => (true, line.len().saturating_sub(start), None),
            ScalarStyle::SingleQuoted | ScalarStyle::DoubleQuoted => {
                let quote = if style == ScalarStyle::SingleQuoted {
                    '\''
                } else {
                    '"'
                };
                if appears_at(1) && line.get(start + 1 + value.len()) == Some(&quote) {
                    (false, value.len() + 2, Some(span.col + 1))
                } else {
                    (false, quoted_len(line, start, quote), None)
                }
            }
            _ => (false, 1, None),
        };
        Node {
            value: NodeValue::Scalar(Scalar {
                text,
                plain,
                verbatim_col,
                shared: false,
            }),
            span: span.with_len(len),
        }
    }

    fn finish(&mut self, mut node: Node, anchor: usize) {
        if anchor != 0 {
            node.mark_shared();
            let (count, depth) = node.count_and_depth();
            self.anchors.insert(anchor, (node.clone(), count, depth));
        }
        let Some(frame) = self.stack.last_mut() else {
            if self.root.is_none() {
                self.root = Some(node);
            }
            return;
        };
        match frame {
            Frame::Seq { items, .. } => items.push(node),
            Frame::Map {
                entries, key, seen, ..
            } => match std::mem::replace(key, PendingKey::None) {
                PendingKey::None => {
                    let refused = match &node.value {
                        NodeValue::Scalar(scalar) if scalar.resolve() != Resolved::Null => None,
                        NodeValue::Scalar(_) => Some("an empty (null) key"),
                        NodeValue::Seq(_) => Some("a list used as a key"),
                        NodeValue::Map(_) => Some("a mapping used as a key"),
                    };
                    match (refused, node.value) {
                        (None, NodeValue::Scalar(scalar)) => {
                            if let Some(first) = seen.get(&scalar.text).copied() {
                                let first_line = first.line;
                                let message = format!("duplicate key `{}`", scalar.text);
                                *key = PendingKey::Invalid;
                                self.diagnostics.push(
                                    Diagnostic::new("duplicate-key", message)
                                        .at(self.sources.location(node.span))
                                        .with_hint(format!(
                                            "`{}` is already set on line {first_line}; remove one of the two",
                                            scalar.text
                                        )),
                                );
                            } else {
                                seen.insert(scalar.text.clone(), node.span);
                                *key = PendingKey::Key(scalar.text, node.span);
                            }
                        }
                        (what, _) => {
                            *key = PendingKey::Invalid;
                            let what = what.unwrap_or("a non-string key");
                            self.diagnostics.push(
                                Diagnostic::new("non-string-key", format!("mapping keys must be strings, found {what}"))
                                    .at(self.sources.location(node.span))
                                    .with_hint("write a plain name such as `deps:`; quote it if it looks like something else"),
                            );
                        }
                    }
                }
                PendingKey::Key(key_text, key_span) => {
                    let mut value = node;
                    // An empty value has no text of its own; its key is the
                    // best place to point at.
                    if value.is_null()
                        && value
                            .as_scalar()
                            .is_some_and(|scalar| scalar.text.is_empty())
                    {
                        value.span = key_span;
                    }
                    entries.push(Entry {
                        key: key_text,
                        key_span,
                        value,
                    });
                }
                PendingKey::Invalid => {}
            },
        }
    }
}

/// Width of a quoted scalar that starts at `start` on `line`, up to its
/// closing quote, or to the end of the line when it continues further.
fn quoted_len(line: &[char], start: usize, quote: char) -> usize {
    let mut index = start + 1;
    while let Some(&ch) = line.get(index) {
        if quote == '"' && ch == '\\' {
            index += 2;
            continue;
        }
        if ch == quote {
            if quote == '\'' && line.get(index + 1) == Some(&'\'') {
                index += 2;
                continue;
            }
            return index + 1 - start;
        }
        index += 1;
    }
    line.len().saturating_sub(start)
}

impl<'input> SpannedEventReceiver<'input> for TreeBuilder<'_> {
    fn on_event(&mut self, event: Event<'input>, text_span: TextSpan) {
        let props = match &event {
            Event::Scalar(_, _, anchor, tag)
            | Event::SequenceStart(anchor, tag)
            | Event::MappingStart(anchor, tag)
                if *anchor != 0 || tag.is_some() =>
            {
                Some(properties(self.sources.file(self.file), &text_span))
            }
            _ => None,
        };
        if let Some(log) = &mut self.log {
            log.record(
                &event,
                &text_span,
                props.as_ref(),
                self.sources.file(self.file),
            );
        }
        if self.aborted {
            return;
        }
        if let Event::Scalar(_, _, _, Some(tag))
        | Event::SequenceStart(_, Some(tag))
        | Event::MappingStart(_, Some(tag)) = &event
        {
            let (written, line, col) = props
                .as_ref()
                .and_then(|props| props.tag.clone())
                .unwrap_or_else(|| {
                    let at = self.span(&text_span.start);
                    (format!("!<{}{}>", tag.handle, tag.suffix), at.line, at.col)
                });
            self.refuse_tag(&written, line, col);
        }
        let scalar = matches!(event, Event::Scalar(..));
        let span = self.node_span(&text_span, props.as_ref(), scalar);
        match event {
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    self.fail(
                        Diagnostic::new("multiple-documents", "the file holds more than one YAML document")
                            .at(self.sources.location(span))
                            .with_hint("a pipeline file is one document: remove this `---` and merge what follows into the first document"),
                    );
                }
            }
            Event::Scalar(text, style, anchor, _tag) => {
                if self.count_nodes(1, span) {
                    let node = self.scalar(text.into_owned(), style, span);
                    self.finish(node, anchor);
                }
            }
            Event::SequenceStart(anchor, _tag) => {
                if self.check_depth(1, span) && self.count_nodes(1, span) {
                    self.stack.push(Frame::Seq {
                        span,
                        anchor,
                        items: Vec::new(),
                    });
                }
            }
            Event::MappingStart(anchor, _tag) => {
                if self.check_depth(1, span) && self.count_nodes(1, span) {
                    self.stack.push(Frame::Map {
                        span,
                        anchor,
                        entries: Vec::new(),
                        key: PendingKey::None,
                        seen: HashMap::new(),
                    });
                }
            }
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Seq {
                    span,
                    anchor,
                    items,
                }) => self.finish(
                    Node {
                        value: NodeValue::Seq(items),
                        span,
                    },
                    anchor,
                ),
                Some(Frame::Map {
                    span,
                    anchor,
                    entries,
                    ..
                }) => self.finish(
                    Node {
                        value: NodeValue::Map(entries),
                        span,
                    },
                    anchor,
                ),
                None => {}
            },
            Event::Alias(anchor) => {
                let Some((count, depth)) = self
                    .anchors
                    .get(&anchor)
                    .map(|(_, count, depth)| (*count, *depth))
                else {
                    self.fail(
                        Diagnostic::new("yaml-syntax", "alias to an unknown anchor")
                            .at(self.sources.location(span))
                            .with_hint("define the anchor with `&name` before using `*name`"),
                    );
                    return;
                };
                if self.check_depth(depth, span) && self.count_nodes(count, span) {
                    if let Some((node, _, _)) = self.anchors.get(&anchor) {
                        let node = node.clone();
                        self.finish(node, 0);
                    }
                }
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
}
