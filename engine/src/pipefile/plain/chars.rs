//! Which values are plain: text that no shell reads as anything but
//! itself.

/// Letters, digits and `_ - . / : @ % + ,`: characters that are not shell
/// syntax in any place of a command (quotes, expansions, redirections,
/// globs and separators are all made of others).
pub(crate) fn is_plain_char(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.' | '/' | ':' | '@' | '%' | '+' | ',')
}

/// Whether `text` is a plain value: at least one character, each plain
/// or an `=` that assigns nothing. An empty value is not: put into a
/// command as it is, it would vanish, and the words after it would move
/// into its place (`--name ${x} --lr 1` would give `--lr` as the name).
/// `=` is taken for the paths of a matrix stage's outputs
/// (`.pipe/out/p/train@lr=0.1/model`).
pub(crate) fn is_plain_value(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|ch| is_plain_char(ch) || ch == '=') && !assigns(text)
}

/// Whether an `=` of `text` could assign a variable: one that starts it
/// (it could end a name written before it), or one after a name (`lr=1`,
/// `a+=1`, `x,lr-=1`: a command's first word, or arithmetic, where `,`
/// and `:` start another expression, assigns it). Not one after a `.` or
/// an `@`, which no name holds and arithmetic stops at
/// (`train@lr=0.1,seed=1`).
fn assigns(text: &str) -> bool {
    text.starts_with('=')
        || text.match_indices('=').any(|(at, _)| {
            let before = &text[..at];
            if before.contains(['.', '@']) {
                return false;
            }
            let before = before.strip_suffix(['+', '-', '/', '%']).unwrap_or(before);
            let name = before.rsplit([',', ':']).next().unwrap_or(before);
            is_name(name)
        })
}

/// A shell variable's name: a letter or `_`, then letters, digits, `_`.
fn is_name(text: &str) -> bool {
    text.starts_with(|ch: char| ch.is_ascii_alphabetic() || ch == '_')
        && text
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// A value in a message: a short one whole, a long one by its start;
/// line breaks, tabs and other control characters escaped.
pub(crate) fn describe(value: &str) -> String {
    const SHOWN: usize = 40;
    let shown = |text: &str| -> String {
        text.chars()
            .map(|ch| match ch {
                '\n' => "\\n".to_string(),
                '\t' => "\\t".to_string(),
                ch if ch.is_control() => ch.escape_unicode().to_string(),
                ch => ch.to_string(),
            })
            .collect()
    };
    let count = value.chars().count();
    if count <= SHOWN {
        format!("`{}`", shown(value))
    } else {
        let start: String = value.chars().take(SHOWN).collect();
        format!("`{}...` ({count} characters)", shown(&start))
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
