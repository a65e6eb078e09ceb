//! Which values are plain: text that no shell reads as anything but
//! itself.

/// Letters, digits and `_ - . / : @ % + ,`: characters that are not shell
/// syntax in any place of a command (quotes, expansions, redirections,
/// globs and separators are all made of others). `=` is not one: as a
/// command's first word `NAME=value` is an assignment.
pub(crate) fn is_plain_char(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.' | '/' | ':' | '@' | '%' | '+' | ',')
}

/// Whether `text` is a plain value: at least one character, each plain.
/// An empty value is not: put into a command as it is, it would vanish,
/// and the words after it would move into its place (`--name ${x} --lr 1`
/// would give `--lr` as the name).
pub(crate) fn is_plain_value(text: &str) -> bool {
    !text.is_empty() && text.chars().all(is_plain_char)
}

/// A value in a message: a short one whole, a long one by its start.
pub(crate) fn describe(value: &str) -> String {
    const SHOWN: usize = 40;
    let count = value.chars().count();
    if count <= SHOWN {
        format!("`{}`", value.escape_debug())
    } else {
        let start: String = value.chars().take(SHOWN).collect();
        format!("`{}...` ({count} characters)", start.escape_debug())
    }
}

/// Characters that end a shell word, unquoted.
pub(super) fn ends_word(ch: char) -> bool {
    matches!(
        ch,
        ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')'
    )
}

/// The words of `value` that bash's arithmetic would read as variable
/// names (`lr` and `b` in `lr:0.5+b`).
pub(super) fn names_in(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
        .filter(|word| word.starts_with(|ch: char| ch.is_ascii_alphabetic() || ch == '_'))
}
