//! DVC's `${...}` in a string, read as DVC reads it and written as pipe
//! reads it. DVC's rules (dvc/parsing/interpolate.py): a `${` not after a
//! `\` opens a reference that ends at the first `}` on the same line; its
//! inside is `name`, `.key` and `[index]` steps; `\${` is a literal `${`;
//! a value goes in as Python's `str()` of it, a mapping in a command as
//! `--key value` arguments, a list nowhere. pipe's: `$${` is a literal
//! `${`, `${params.X}` and `${matrix.K}` are references, and only a plain value
//! goes into a command, unless it is written `${raw:...}`.

use crate::pipefile::is_plain_value;
use crate::project_files::yaml::{Node, NodeValue};

use super::python_text::{dvc_text, same_text, shlex_quote};

/// A piece of a DVC string: text as DVC passes it on (its `\${` already a
/// `${`), or a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(String),
    Ref(DvcRef),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DvcRef {
    /// The steps: `item.x` and `item[x]` are both `["item", "x"]`.
    pub path: Vec<String>,
    /// As written, `${` and `}` included.
    pub written: String,
    /// Characters from the string's start to the `$`.
    pub offset: usize,
}

/// A reference DVC itself would refuse, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadRef {
    pub offset: usize,
    pub len: usize,
    pub message: String,
}

/// Splits a DVC string into text and references.
pub(crate) fn parse(text: &str) -> Result<Vec<Piece>, BadRef> {
    let chars: Vec<char> = text.chars().collect();
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut index = 0;
    while index < chars.len() {
        if chars[index] != '$' || chars.get(index + 1) != Some(&'{') {
            literal.push(chars[index]);
            index += 1;
            continue;
        }
        if index > 0 && chars[index - 1] == '\\' {
            // `\${`: DVC drops the backslash and keeps `${` as text.
            literal.pop();
            literal.push_str("${");
            index += 2;
            continue;
        }
        // The regex's `.*?` stops at a line break: a `${` with no `}`
        // before it is text.
        let close = chars[index + 2..]
            .iter()
            .take_while(|ch| **ch != '\n')
            .position(|ch| *ch == '}');
        let Some(close) = close.map(|at| index + 2 + at) else {
            literal.push_str("${");
            index += 2;
            continue;
        };
        let inner: String = chars[index + 2..close].iter().collect();
        let written: String = chars[index..=close].iter().collect();
        let path = parse_path(&inner).ok_or_else(|| BadRef {
            offset: index,
            len: close + 1 - index,
            message: format!(
                "`{written}` is not a name DVC can look up (`name`, `name.key`, `name[0]`)"
            ),
        })?;
        if !literal.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut literal)));
        }
        pieces.push(Piece::Ref(DvcRef {
            path,
            written,
            offset: index,
        }));
        index = close + 1;
    }
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(pieces)
}

/// `word ('.' word | '[' word ']')*`, a word being characters other than
/// `.`, `[` and `]` (DVC's pyparsing grammar).
fn parse_path(inner: &str) -> Option<Vec<String>> {
    let mut steps = Vec::new();
    let mut rest = inner;
    let word_end = |text: &str| text.find(['.', '[', ']']).unwrap_or(text.len());
    let end = word_end(rest);
    if end == 0 {
        return None;
    }
    steps.push(rest[..end].to_string());
    rest = &rest[end..];
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = word_end(after);
            if end == 0 {
                return None;
            }
            steps.push(after[..end].to_string());
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = word_end(after);
            if end == 0 || !after[end..].starts_with(']') {
                return None;
            }
            steps.push(after[..end].to_string());
            rest = &after[end + 1..];
        } else {
            return None;
        }
    }
    Some(steps)
}

/// What a reference stands for here.
#[derive(Debug, Clone)]
pub(crate) enum Meaning<'n> {
    /// A param pipe holds (params.yaml, or the pipeline's `params:`), at
    /// this dotted path.
    Param { path: String, value: &'n Node },
    /// pipe's text for a matrix value (`${matrix.item}`), a plain word in
    /// every expansion.
    Matrix(String),
    /// A value known now, written in as DVC prints it; `why` is said when
    /// the reference could have been a param.
    Literal { value: Node, why: Option<String> },
}

/// Where a string is used: a shell command, a path pipe interpolates, or
/// text pipe leaves alone (`desc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Command,
    Path,
    Text,
}

/// A string as pipe reads it, and what was written otherwise than DVC
/// wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rewritten {
    pub text: String,
    /// (character offset in the DVC string, what and why).
    pub notes: Vec<(usize, String)>,
}

/// Rewrites `text` for `place`, each reference looked up by `resolve`
/// (which says why DVC could not look it up, when it could not).
pub(crate) fn rewrite<'n>(
    text: &str,
    place: Place,
    resolve: &dyn Fn(&[String]) -> Result<Meaning<'n>, String>,
) -> Result<Rewritten, BadRef> {
    let mut out = Out::new(place);
    for piece in parse(text)? {
        match piece {
            Piece::Text(text) => out.pending.push_str(&text),
            Piece::Ref(reference) => {
                let bad = |message: String| BadRef {
                    offset: reference.offset,
                    len: reference.written.chars().count(),
                    message,
                };
                let meaning = resolve(&reference.path).map_err(bad)?;
                out.reference(&reference, meaning).map_err(bad)?;
            }
        }
    }
    Ok(out.finish())
}

/// The text being written: references as they are, literal text kept
/// pending until a reference or the end, so that every `${` in it, even
/// one made of a `$` and a `{` from two pieces, is escaped as `$${`.
struct Out {
    place: Place,
    done: String,
    pending: String,
    notes: Vec<(usize, String)>,
}

impl Out {
    fn new(place: Place) -> Self {
        Out {
            place,
            done: String::new(),
            pending: String::new(),
            notes: Vec::new(),
        }
    }

    fn flush(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        match self.place {
            Place::Text => self.done.push_str(&pending),
            _ => self.done.push_str(&pending.replace("${", "$${")),
        }
    }

    /// A pipe reference, unless text right before it ends in `$`: pipe
    /// would read `$${` as a literal `${` (false then).
    fn pipe_reference(&mut self, reference: &str) -> bool {
        if self.pending.ends_with('$') {
            return false;
        }
        self.flush();
        self.done.push_str(reference);
        true
    }

    fn finish(mut self) -> Rewritten {
        self.flush();
        Rewritten {
            text: self.done,
            notes: self.notes,
        }
    }

    fn reference(&mut self, reference: &DvcRef, meaning: Meaning) -> Result<(), String> {
        let written = &reference.written;
        match meaning {
            // `desc` is not interpolated: the DVC text says more than
            // pipe's.
            Meaning::Matrix(_) if self.place == Place::Text => self.pending.push_str(written),
            Meaning::Matrix(pipe) => {
                if !self.pipe_reference(&pipe) {
                    return Err(format!("`{written}` right after a `$` cannot be written for pipe, which reads `$${{` as a literal `${{`: put the `$` elsewhere"));
                }
            }
            Meaning::Param { path, value } => match (&value.value, self.place) {
                (NodeValue::Map(_), Place::Command) => {
                    self.unpack(reference, Some(&path), value)?
                }
                (NodeValue::Map(_) | NodeValue::Seq(_), _) => {
                    return Err(not_primitive(written, value))
                }
                _ => self.param(reference, &path, value),
            },
            Meaning::Literal { value, why } => {
                match (&value.value, self.place) {
                    (NodeValue::Map(_), Place::Command) => self.unpack(reference, None, &value)?,
                    (NodeValue::Map(_) | NodeValue::Seq(_), _) => {
                        return Err(not_primitive(written, &value))
                    }
                    _ => self.pending.push_str(&dvc_text(&value).unwrap_or_default()),
                }
                if let Some(why) = why {
                    self.note(reference, &value, &why);
                }
            }
        }
        Ok(())
    }

    /// A scalar param: `${params.X}` where pipe's text for it is DVC's
    /// (`${raw:params.X}` in a command when the shell must read it as
    /// DVC let it), else its value as DVC prints it.
    fn param(&mut self, reference: &DvcRef, path: &str, value: &Node) {
        let dvc = dvc_text(value).unwrap_or_default();
        if self.place == Place::Text {
            self.pending.push_str(&dvc);
            return;
        }
        if !same_text(value) {
            self.pending.push_str(&dvc);
            let why = format!("pipe would write `{}` as it is written in the params file, DVC writes `{dvc}`; written in as DVC's text, so a `-S {path}=...` does not reach it here", value.as_scalar().map_or("", |s| s.text.as_str()));
            self.note(reference, value, &why);
            return;
        }
        let raw = self.place == Place::Command && !is_plain_value(&dvc);
        let text = match raw {
            true => format!("${{raw:params.{path}}}"),
            false => format!("${{params.{path}}}"),
        };
        if !self.pipe_reference(&text) {
            self.pending.push_str(&dvc);
            self.note(reference, value, "it follows a `$`, which pipe would read with it as a literal `${`; written in as its value today");
            return;
        }
        if raw {
            self.notes.push((reference.offset, format!("`{}` is `{text}`: its value `{dvc}` is not one plain word, and DVC lets the shell read it (spaces split it, `*` globs); pipe puts only plain values into a command, unless they are written `raw:`", reference.written)));
        }
    }

    /// A mapping in a command, as DVC unpacks it: `--key value` for each
    /// leaf (keys joined with `.`), `--flag` for a true boolean, nothing
    /// for a false one, `--key a b` for a list. `path` is the mapping's
    /// param path when pipe holds it.
    fn unpack(
        &mut self,
        reference: &DvcRef,
        path: Option<&str>,
        value: &Node,
    ) -> Result<(), String> {
        let mut leaves = Vec::new();
        flatten(value, &mut Vec::new(), &mut leaves);
        let mut words_written = false;
        for (steps, leaf) in leaves {
            let key = steps.join(".");
            // A key holding a `.` cannot be a step of a pipe param path.
            let leaf_path = path
                .filter(|_| !steps.iter().any(|step| step.contains('.')))
                .map(|path| format!("{path}.{key}"));
            let flag = match leaf.as_scalar().map(|s| s.resolve()) {
                Some(crate::project_files::yaml::Resolved::Bool(flag)) => Some(flag),
                _ => None,
            };
            let empty = match &leaf.value {
                NodeValue::Seq(items) => items.is_empty(),
                NodeValue::Map(entries) => entries.is_empty(),
                NodeValue::Scalar(_) => false,
            };
            if flag == Some(false) || empty {
                if flag == Some(false) {
                    self.notes.push((reference.offset, format!("`{}`: `{key}` is false, so DVC passes no `--{key}`; pipe.yaml says so for good: a `-S` of it does not add the flag", reference.written)));
                }
                continue;
            }
            if words_written {
                self.pending.push(' ');
            }
            words_written = true;
            self.pending.push_str(&format!("--{key}"));
            if flag == Some(true) {
                self.notes.push((reference.offset, format!("`{}`: `{key}` is true, so DVC passes `--{key}`; pipe.yaml says so for good: a `-S` of it does not remove the flag", reference.written)));
                continue;
            }
            self.pending.push(' ');
            self.unpacked_value(reference, leaf_path.as_deref(), leaf)?;
        }
        Ok(())
    }

    /// The value after `--key`: the param where pipe's text for it is
    /// DVC's, else DVC's text.
    fn unpacked_value(
        &mut self,
        reference: &DvcRef,
        path: Option<&str>,
        leaf: &Node,
    ) -> Result<(), String> {
        let as_param = |node: &Node| path.is_some() && same_text(node);
        let items: Vec<&Node> = match &leaf.value {
            NodeValue::Seq(items) => items.iter().collect(),
            _ => vec![leaf],
        };
        if items
            .iter()
            .any(|item| super::python_text::is_collection(item))
        {
            return Err(format!(
                "`{}` holds a list of lists or mappings, which DVC cannot put into a command",
                reference.written
            ));
        }
        if let (Some(path), true) = (path, items.iter().all(|item| as_param(item))) {
            if self.pipe_reference(&format!("${{params.{path}}}")) {
                return Ok(());
            }
        }
        let words: Vec<String> = items.iter().map(|item| shlex_word(item)).collect();
        self.pending.push_str(&words.join(" "));
        if path.is_some() {
            self.notes.push((reference.offset, format!("`{}` unpacks values that pipe would write otherwise than DVC (`{}`): written in as DVC's text, so a `-S` of them does not reach the command", reference.written, words.join(" "))));
        }
        Ok(())
    }

    fn note(&mut self, reference: &DvcRef, value: &Node, why: &str) {
        let text = dvc_text(value).unwrap_or_default();
        self.notes.push((
            reference.offset,
            format!("`{}` is written in as `{text}`: {why}", reference.written),
        ));
    }
}

/// DVC quotes a string it unpacks from a mapping, and writes a number as
/// Python prints it.
fn shlex_word(node: &Node) -> String {
    let text = dvc_text(node).unwrap_or_default();
    match node.as_str() {
        Some(_) => shlex_quote(&text),
        None => text,
    }
}

/// The leaves of a mapping with the keys that lead to each
/// (`flatten_dict`'s `dot` reducer joins them with `.`); an empty mapping
/// is a leaf.
fn flatten<'n>(node: &'n Node, steps: &mut Vec<String>, leaves: &mut Vec<(Vec<String>, &'n Node)>) {
    match node.as_map() {
        Some(entries) if !entries.is_empty() => {
            for entry in entries {
                steps.push(entry.key.clone());
                flatten(&entry.value, steps, leaves);
                steps.pop();
            }
        }
        _ => leaves.push((steps.clone(), node)),
    }
}

fn not_primitive(written: &str, value: &Node) -> String {
    format!(
        "`{written}` is {}, which DVC puts only into a command (a mapping) or a `foreach`",
        value.describe()
    )
}

#[cfg(test)]
#[path = "template_tests.rs"]
mod tests;
