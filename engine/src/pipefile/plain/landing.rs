//! The few places where bash gives plain characters a meaning of their
//! own, found in the finished command by its characters alone (no reading
//! of quotes or nesting, so each check may refuse more than it must, never
//! less): a line of a here-document that begins with its delimiter, `,`
//! and `..` inside a `{...}` (brace expansion), a `~` before the value
//! (a user's home directory), an `IFS` that holds a plain character (word
//! splitting of an expansion's result), and a name that arithmetic would
//! read as one of the stage's `env:` variables. Bash's other expansions
//! (parameters, commands, globs, quotes) are written with characters no
//! plain value holds.

use std::ops::Range;

use super::chars::{ends_word, is_plain_char, names_in};
use super::refusal::Refusal;

/// The command as bash reads it first: each `\` + line break removed
/// (bash keeps them inside `'...'`; removing them there too only brings
/// more text into a word), with the values' places in it.
struct Joined {
    text: String,
    values: Vec<(usize, Range<usize>)>,
}

fn join(text: &str, values: &[(usize, Range<usize>)]) -> Joined {
    let mut joined = String::with_capacity(text.len());
    let mut map = vec![0; text.len() + 1];
    let mut chars = text.char_indices().peekable();
    while let Some((at, ch)) = chars.next() {
        map[at] = joined.len();
        if ch == '\\' && chars.peek().is_some_and(|(_, next)| *next == '\n') {
            let (newline, _) = chars.next().expect("peeked");
            map[newline] = joined.len();
            continue;
        }
        joined.push(ch);
        map[at + 1..at + ch.len_utf8()].fill(joined.len());
    }
    map[text.len()] = joined.len();
    let values = values
        .iter()
        .map(|(id, range)| (*id, map[range.start]..map[range.end]))
        .collect();
    Joined {
        text: joined,
        values,
    }
}

/// For each value whose place gives it a meaning beyond its characters,
/// its id and why; at most one reason a value.
pub(super) fn check(
    text: &str,
    values: &[(usize, Range<usize>)],
    variables: &[String],
) -> Vec<(usize, Refusal)> {
    let joined = join(text, values);
    let text = joined.text.as_str();
    let delimiters = here_document_delimiters(text);
    let separators = ifs_separators(text);
    let mut refused = Vec::new();
    for (id, range) in &joined.values {
        let value = &text[range.clone()];
        let refusal = delimiter_refusal(text, range, &delimiters)
            .or_else(|| {
                has_brace_words(value)
                    .then(|| in_braces(text, range))
                    .flatten()
            })
            .or_else(|| after_tilde(text, range.start).then_some(Refusal::Tilde))
            .or_else(|| completes_operator(text, range.start, value).then_some(Refusal::Operator))
            .or_else(|| split_refusal(value, &separators))
            .or_else(|| {
                names_in(value)
                    .find(|name| variables.iter().any(|variable| variable == name))
                    .map(|name| Refusal::Variable {
                        name: name.to_string(),
                    })
            });
        if let Some(refusal) = refusal {
            refused.push((*id, refusal));
        }
    }
    refused
}

/// Each here-document operator's delimiter word (`<<EOF`, `<<-'EOF'`):
/// where it is in the text, and the delimiter once its quotes are
/// removed. A `<<` that is an arithmetic shift is taken for one too.
fn here_document_delimiters(text: &str) -> Vec<(Range<usize>, String)> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(offset) = text[from..].find("<<") {
        let at = from + offset;
        from = at + 2;
        if bytes.get(at + 2) == Some(&b'<') {
            // `<<<`, a here-string.
            from = at + 3;
            continue;
        }
        let mut start = at + 2;
        if bytes.get(start) == Some(&b'-') {
            start += 1;
        }
        while matches!(bytes.get(start), Some(b' ' | b'\t')) {
            start += 1;
        }
        let end = text[start..]
            .find(ends_word)
            .map_or(text.len(), |length| start + length);
        let delimiter: String = text[start..end]
            .chars()
            .filter(|ch| !matches!(ch, '\'' | '"' | '\\'))
            .collect();
        found.push((start..end, delimiter));
    }
    found
}

fn delimiter_refusal(
    text: &str,
    range: &Range<usize>,
    delimiters: &[(Range<usize>, String)],
) -> Option<Refusal> {
    if delimiters
        .iter()
        .any(|(word, _)| word.start < range.end && range.start < word.end)
    {
        return Some(Refusal::Delimiter);
    }
    let line_start = text[..range.start].rfind('\n').map_or(0, |at| at + 1);
    let line_end = text[range.end..]
        .find('\n')
        .map_or(text.len(), |at| range.end + at);
    // `<<-` strips the line's leading tabs.
    let line = text[line_start..line_end].trim_start_matches('\t');
    delimiters
        .iter()
        .find(|(_, delimiter)| !delimiter.is_empty() && line.starts_with(delimiter.as_str()))
        .map(|(_, delimiter)| Refusal::HereDocument {
            delimiter: delimiter.clone(),
        })
}

fn has_brace_words(value: &str) -> bool {
    value.contains(',') || value.contains("..")
}

/// Whether the value sits between a `{` and a `}` of its line that could
/// open and close a brace expansion: not a `${...}`, not a group's `{ `
/// or ` }`.
fn in_braces(text: &str, range: &Range<usize>) -> Option<Refusal> {
    let line_start = text[..range.start].rfind('\n').map_or(0, |at| at + 1);
    let before: Vec<char> = text[line_start..range.start].chars().collect();
    let mut depth = 0usize;
    let mut open = false;
    for (index, ch) in before.iter().enumerate().rev() {
        let dollar = index > 0 && before[index - 1] == '$';
        match ch {
            '}' => depth += 1,
            '{' if depth > 0 => depth -= 1,
            '{' if dollar => return None,
            '{' if before
                .get(index + 1)
                .is_some_and(|next| next.is_whitespace()) => {}
            '{' => {
                open = true;
                break;
            }
            _ => {}
        }
    }
    if !open {
        return None;
    }
    let after: Vec<char> = text[range.end..]
        .chars()
        .take_while(|ch| *ch != '\n')
        .collect();
    let mut depth = 0usize;
    let mut previous = text[..range.end].chars().next_back();
    for ch in after {
        match ch {
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            '}' if !previous.is_some_and(|before| before.is_whitespace() || before == ';') => {
                return Some(Refusal::Brace);
            }
            _ => {}
        }
        previous = Some(ch);
    }
    None
}

/// Whether a `~` comes before the value with only characters of a tilde
/// prefix between (`~${x}`, `~a${x}`, `v=~${x}`; not `~/${x}`).
fn after_tilde(text: &str, start: usize) -> bool {
    text[..start]
        .chars()
        .rev()
        .find(|ch| !(is_plain_char(*ch) && *ch != '/' && *ch != ':'))
        == Some('~')
}

/// Whether the value follows a `${NAME` (maybe `${NAME[...]`) and the
/// start of its operator, where it would lengthen the name, or begin
/// with a character that makes another operator (`%` after `%`, `-`
/// after `:`, `/` after `/`).
fn completes_operator(text: &str, start: usize, value: &str) -> bool {
    const OPERATOR: &str = "%#,^/:-+=?@~!";
    let before = &text[..start];
    let after_operator = before.trim_end_matches(|ch| OPERATOR.contains(ch));
    let operator = before.len() - after_operator.len();
    let mut name = after_operator;
    if let Some(subscript) = name.strip_suffix(']') {
        match subscript.rfind('[') {
            Some(open) => name = &subscript[..open],
            None => return false,
        }
    }
    let rest = name.trim_end_matches(|ch: char| ch.is_ascii_alphanumeric() || ch == '_');
    if rest.len() == name.len() || !(rest.ends_with("${") || rest.ends_with("${!")) {
        return false;
    }
    operator == 0 || value.starts_with(|ch| OPERATOR.contains(ch))
}

/// The characters the command may set `IFS` to: `Some` of those it
/// assigns in `IFS=...` words (blanks left out: no plain value holds
/// one), `None` when it sets `IFS` in a way pipe does not read (from an
/// expansion, with `read`), empty when it never does.
fn ifs_separators(text: &str) -> Option<String> {
    let mut separators = String::new();
    let mut from = 0;
    while let Some(offset) = text[from..].find("IFS") {
        let at = from + offset;
        from = at + 3;
        let name_char = |ch: char| ch.is_ascii_alphanumeric() || ch == '_';
        if text[..at].chars().next_back().is_some_and(name_char)
            || text[at + 3..].chars().next().is_some_and(name_char)
        {
            continue;
        }
        let rest = &text[at + 3..];
        let word = rest.strip_prefix('=').or_else(|| rest.strip_prefix("+="));
        match word {
            Some(word) => separators.push_str(&assigned_characters(word)?),
            None if text[..at].ends_with('$') || text[..at].ends_with("${") => {}
            None if ["unset ", "local ", "export ", "declare ", "typeset "]
                .iter()
                .any(|command| text[..at].ends_with(command)) => {}
            None => return None,
        }
    }
    separators.retain(|ch| !matches!(ch, ' ' | '\t' | '\n'));
    Some(separators)
}

/// The characters of the word assigned at the start of `word` (quotes
/// removed, `$'\n'` and `$'\t'` read), or `None` when it holds an
/// expansion or an escape pipe does not read.
fn assigned_characters(word: &str) -> Option<String> {
    let mut characters = String::new();
    let mut chars = word.chars().peekable();
    let mut quote: Option<&str> = None;
    while let Some(ch) = chars.next() {
        match (quote, ch) {
            (None, ch) if ends_word(ch) => break,
            (None, '\'') => quote = Some("'"),
            (None, '"') => quote = Some("\""),
            (None, '$') if chars.peek() == Some(&'\'') => {
                chars.next();
                quote = Some("$'");
            }
            (Some("'"), '\'') | (Some("\""), '"') | (Some("$'"), '\'') => quote = None,
            (Some("$'"), '\\') => match chars.next()? {
                'n' => characters.push('\n'),
                't' => characters.push('\t'),
                escaped @ ('\\' | '\'' | '"') => characters.push(escaped),
                _ => return None,
            },
            (Some("'"), ch) => characters.push(ch),
            (_, '$' | '`' | '\\') => return None,
            (_, ch) => characters.push(ch),
        }
    }
    Some(characters)
}

fn split_refusal(value: &str, separators: &Option<String>) -> Option<Refusal> {
    match separators {
        None if value
            .chars()
            .any(|ch| !ch.is_ascii_alphanumeric() && ch != '_') =>
        {
            Some(Refusal::Split { separators: None })
        }
        Some(separators) if value.chars().any(|ch| separators.contains(ch)) => {
            Some(Refusal::Split {
                separators: Some(separators.clone()),
            })
        }
        _ => None,
    }
}
