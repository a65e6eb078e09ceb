//! Values in a `run:` command's text: only plain ones, as they are.
//!
//! A `${...}` in a `run:` string is put into the command only when its
//! value is plain (letters, digits and `_ - . / : @ % + ,`; a list, when
//! each item is), and then as it is, with nothing added: no shell reads
//! such text as anything but itself, wherever it lands, so what a value
//! holds can never become code, however many programs read the text again
//! (`bash <<< "echo ${x}"`, `source <(...)`, `eval`). Any other value is
//! refused at the reference: it reaches the command through `env:`
//! (`"$NAME"`), the list form of `run:` (no shell), or the params file the
//! command reads. [`CommandText`] builds a command this way; `landing`
//! holds the few places where bash still gives plain characters a meaning
//! (a here-document's delimiter, brace expansion, a tilde prefix, an
//! `IFS` the command sets, a name arithmetic reads), where a value is
//! refused too.

mod chars;
mod command;
mod landing;
mod refusal;

pub(crate) use chars::is_plain_value;
pub(crate) use command::CommandText;
pub(crate) use refusal::Refusal;

#[cfg(test)]
mod differential_tests;
#[cfg(test)]
mod tests;
