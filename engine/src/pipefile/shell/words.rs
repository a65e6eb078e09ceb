//! What single characters and words mean to bash, before any context.

/// Bash's reserved words made only of plain characters: as a whole
/// unquoted word where a command starts, each is syntax.
pub(super) const RESERVED: &[&str] = &[
    "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for", "function", "if", "in",
    "select", "then", "time", "until", "while",
];

pub(super) fn is_blank(ch: char) -> bool {
    ch == ' ' || ch == '\t'
}

/// Characters that end an unquoted word (with blanks and newlines).
pub(super) fn is_operator(ch: char) -> bool {
    matches!(ch, ';' | '&' | '|' | '<' | '>' | '(' | ')')
}

/// Characters that mean nothing to the shell in an unquoted word. `=` is
/// handled apart: `NAME=value` as the first word is an assignment.
pub(super) fn is_plain(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.' | '/' | ':' | '@' | '%' | '+' | ',')
}

/// A number bash's arithmetic reads as it is written.
pub(super) fn is_number(word: &str) -> bool {
    let digits = word.strip_prefix('-').unwrap_or(word);
    !digits.is_empty() && digits.chars().all(|ch| ch.is_ascii_digit())
}

/// `NAME=...`, `NAME+=...` or `NAME[...]=...`: an assignment where a
/// command starts.
pub(super) fn looks_like_assignment(value: &str) -> bool {
    let Some((left, _)) = value.split_once('=') else {
        return false;
    };
    let left = left.strip_suffix('+').unwrap_or(left);
    let name = match left.split_once('[') {
        Some((name, subscript)) if subscript.ends_with(']') => name,
        Some(_) => return false,
        None => left,
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}
