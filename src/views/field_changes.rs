//! A stage's key fields that changed, one line each, as `pipe why` and
//! `pipe diff` say them: a long value by the words it gained and lost.

use std::fmt::Write;

use pipe_engine::FieldChange;

use crate::views::value_text::{show_value, width};

pub(crate) fn field_lines(out: &mut String, changes: &[FieldChange], indent: &str) {
    let field_width = width(changes.iter().map(|change| change.field.as_str()));
    for change in changes {
        let _ = writeln!(
            out,
            "{indent}{:<field_width$}  {}",
            change.field,
            change_text(&show_value(&change.before), &show_value(&change.after))
        );
    }
}

/// Past this many characters on either side, a change is said by the
/// words it adds and removes: an aggregation's command over 200 paths is
/// kilobytes, and one path added is what changed. A command of a line or
/// two is shown whole.
const WHOLE_CHANGE_CHARS: usize = 400;

/// The words of `text`, a shell's separators (`;`, `|`, `&`, `(`, `)`,
/// `<`, `>`) each a word of its own, so that `a.txt;` is `a.txt` and `;`.
fn words_of(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    for word in text.split_whitespace() {
        let mut start = 0;
        for (at, ch) in word.char_indices() {
            if ";|&()<>".contains(ch) {
                if at > start {
                    words.push(&word[start..at]);
                }
                words.push(&word[at..at + ch.len_utf8()]);
                start = at + ch.len_utf8();
            }
        }
        if start < word.len() {
            words.push(&word[start..]);
        }
    }
    words
}

/// `before -> after`, or, for long texts, the words in which they differ
/// (`words removed: a; added: b, c`), after their common first and last
/// words.
fn change_text(before: &str, after: &str) -> String {
    if before.len().max(after.len()) <= WHOLE_CHANGE_CHARS {
        return format!("{before} -> {after}");
    }
    let old = words_of(before);
    let new = words_of(after);
    let head = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let tail = old[head..]
        .iter()
        .rev()
        .zip(new[head..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let words = |words: &[&str]| match words.len() {
        0 => "none".to_string(),
        _ => crate::terminal::first_few(
            &words
                .iter()
                .map(|word| word.to_string())
                .collect::<Vec<_>>(),
            3,
            " ",
        ),
    };
    format!(
        "{} -> {} characters, words removed: {}, added: {}",
        before.len(),
        after.len(),
        words(&old[head..old.len() - tail]),
        words(&new[head..new.len() - tail])
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_change_is_said_by_the_words_it_adds_and_removes() {
        let paths: Vec<String> = (0..100).map(|i| format!("out/S{i:03}.json")).collect();
        let before = format!("agg {}; cat all.csv", paths[..99].join(" "));
        let after = format!("agg {}; cat all.csv", paths.join(" "));
        assert_eq!(
            super::change_text(&before, &after),
            format!(
                "{} -> {} characters, words removed: none, added: out/S099.json",
                before.len(),
                after.len()
            )
        );
        assert_eq!(super::change_text("lr 1", "lr 2"), "lr 1 -> lr 2");
    }
}
