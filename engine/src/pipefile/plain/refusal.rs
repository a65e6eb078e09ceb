//! Why a value is not put into a command's text.

use super::chars::{describe, is_plain_char};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The value holds a character that is not plain.
    NotPlain { value: String },
    /// The value is empty (a list with no items too).
    Empty,
    /// A line of a here-document that holds the value would end it.
    HereDocument { delimiter: String },
    /// The value is a here-document's delimiter, or part of it.
    Delimiter,
    /// Inside an unquoted `{...}`, its `,` or `..` would make words.
    Brace,
    /// Right after the name or operator of a `${...}`, it would change
    /// which variable or which operator.
    Operator,
    /// After a `~`, it would name a user's home directory.
    Tilde,
    /// The command sets `IFS` to characters the value holds (`None`: in a
    /// way pipe does not read, and the value holds punctuation).
    Split { separators: Option<String> },
    /// The value names a variable of the stage's `env:`.
    Variable { name: String },
}

impl Refusal {
    /// Why, for a message that already names the reference.
    pub(crate) fn why(&self) -> String {
        match self {
            Refusal::NotPlain { value } => {
                let mut odd: Vec<char> = value.chars().filter(|ch| !is_plain_char(*ch)).collect();
                odd.sort_unstable();
                odd.dedup();
                let shown: Vec<String> = odd.iter().take(8).map(|ch| format!("{ch:?}")).collect();
                format!(
                    "its value {} is not plain (it holds {}): only letters, digits and `_ - . / : @ % + , =` go into a command's text",
                    describe(value),
                    shown.join(", ")
                )
            }
            Refusal::Empty => "its value is empty, and would vanish from the command, moving the words after it into its place".to_string(),
            Refusal::HereDocument { delimiter } => format!(
                "it lands on a line of a here-document that would then begin with its delimiter `{}`, ending it there",
                delimiter.escape_debug()
            ),
            Refusal::Delimiter => {
                "it lands in a here-document's delimiter, where it would choose the line that ends the document".to_string()
            }
            Refusal::Brace => {
                "it holds `,` or `..` inside a `{...}` of its word, which bash would expand into several words".to_string()
            }
            Refusal::Operator => {
                "it follows the name or operator of a `${...}`, where it could choose another variable or operator (`${x%${v}}` with `%s` is `${x%%s}`)".to_string()
            }
            Refusal::Tilde => {
                "it follows a `~`, where bash would read it as the name of a user's home directory".to_string()
            }
            Refusal::Split {
                separators: Some(separators),
            } => format!(
                "the command sets `IFS` to {}, on which bash would split the value where it lands in an expansion's result",
                describe(separators)
            ),
            Refusal::Split { separators: None } => "the command sets `IFS` in a way pipe does not read, and bash could split the value's punctuation where it lands in an expansion's result".to_string(),
            Refusal::Variable { name } => format!(
                "it names `{name}`, a variable of the stage's `env:`, which bash's arithmetic would read as an expression"
            ),
        }
    }
}
