//! The places the tracker can be in, one [`Frame`] per open construct,
//! each holding only what later characters and values need to know of the
//! text read so far. Kept apart from the reader so that the state it
//! carries can be seen whole, without the rules that move it.

use super::heredoc::{Delimiter, HereDoc, HereDocSpec};
use super::refusal::Refusal;
use super::simple::{Simple, Value};

#[derive(Debug, Clone)]
pub(super) enum Frame {
    /// A command list: top level, `$(...)`, or a backquote's content.
    Command(Command),
    /// `"..."`.
    Double,
    /// `'...'`.
    Single,
    /// `$'...'`.
    AnsiC,
    /// `# ...` up to the end of the line.
    Comment,
    /// `${...}`.
    Param(Param),
    /// `$((...))`, `((...))` or `$[...]`.
    Arith(Arith),
    /// A here-document's body.
    HereDoc(HereDoc),
    /// `` `...` ``.
    Backquote(Box<Backquote>),
}

#[derive(Debug, Clone, Default)]
pub(super) struct Command {
    /// Closed by an unmatched `)`: the inside of `$(...)`.
    pub(super) in_parens: bool,
    /// Unmatched `(` seen inside: true for a process substitution
    /// `<(...)`, false for a subshell.
    pub(super) parens: Vec<bool>,
    pub(super) word: Word,
    pub(super) redirect: Redirect,
    /// Here-documents whose bodies start after the end of this line.
    pub(super) heredocs: Vec<HereDocSpec>,
    /// Between `[[` and `]]`.
    pub(super) double_bracket: bool,
    /// How many of the next words may be reserved words (`if`, `done`,
    /// the `in` of `for x in`): 1 at the start of a command.
    pub(super) keyword_words: u8,
    /// A `<(...)` in a `${...}` inside "...": parsed as a command, but
    /// printed as it is written.
    pub(super) inert: bool,
    /// The simple command being read, and those around each unclosed `(`.
    pub(super) simple: Box<Simple>,
    pub(super) saved: Vec<Simple>,
    /// Values found unsafe once the words after them were read, by the
    /// id `resolve` gave each.
    pub(super) late: Vec<(usize, Refusal)>,
}

/// What the tracker knows of the word being read in a command.
#[derive(Debug, Clone, Default)]
pub(super) struct Word {
    /// Its unquoted literal characters so far.
    pub(super) text: String,
    /// Anything of it read yet, quoted or not.
    pub(super) started: bool,
    /// Some of it quoted, escaped or expanded.
    pub(super) quoted: bool,
    /// Unquoted `{` not yet closed (brace expansion).
    pub(super) braces: u32,
    /// Unquoted `[` not yet closed (an array subscript, which bash
    /// evaluates as arithmetic, or a glob's bracket expression).
    pub(super) brackets: u32,
    /// Its text after quote removal, as far as it is literal.
    pub(super) literal: String,
    /// It holds a `$` or backquote expansion.
    pub(super) expanded: bool,
    /// The values put into it.
    pub(super) values: Vec<Value>,
}

#[derive(Debug, Clone, Default)]
pub(super) enum Redirect {
    #[default]
    None,
    /// `<`.
    Less,
    /// `>`: `>(` is a process substitution.
    Greater,
    /// `<<` or `<<-`, before the delimiter word.
    HereDoc { strip_tabs: bool, blank: bool },
    /// Reading the delimiter word.
    Delimiter(Delimiter),
}

#[derive(Debug, Clone)]
pub(super) struct Param {
    pub(super) part: ParamPart,
    /// Inside `"..."` or an unquoted here-document body, where a `'` in
    /// it is paired but does not quote.
    pub(super) in_double: bool,
    pub(super) name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ParamPart {
    /// The parameter's name (`x`, `#x`, `!x`, `@`).
    Name,
    /// `[...]` after the name, with its nested `[` count.
    Subscript(u32),
    /// Right after `:`: an operator (`:-`) or an offset.
    Colon,
    /// `${x:offset:length}`: arithmetic.
    Offset,
    /// The word of `-`, `=`, `+`, `?` (with or without `:`).
    Word,
    /// The pattern of the operator `op` (`#`, `%`, `/`, `^`, `,`), and
    /// whether it has begun: before it, a `#` after `#` doubles the
    /// operator, and after it a `/` ends the pattern of `/`.
    Pattern { op: char, begun: bool },
    /// The replacement of `${x/pattern/replacement}`, whose result is
    /// split into words even where its own quotes say otherwise.
    Replacement,
    /// `${x@Q}`.
    Transform,
}

#[derive(Debug, Clone)]
pub(super) struct Arith {
    /// `)` for `$((...))` and `((...))`, `]` for `$[...]`.
    pub(super) closer: char,
    pub(super) parens: u32,
    pub(super) brackets: u32,
    /// One `)` of the closing `))` seen.
    pub(super) closing: bool,
}

#[derive(Debug, Clone)]
pub(super) struct Backquote {
    pub(super) inner: Layer,
    /// A backslash before the next character.
    pub(super) escaped: bool,
    /// Inside `"..."`, where `\"` loses its backslash too.
    pub(super) in_double: bool,
}

impl Command {
    pub(super) fn new(in_parens: bool) -> Command {
        Command {
            in_parens,
            keyword_words: 1,
            ..Command::default()
        }
    }
}

impl Arith {
    pub(super) fn new(closer: char) -> Arith {
        Arith {
            closer,
            parens: 0,
            brackets: 0,
            closing: false,
        }
    }
}

impl Backquote {
    pub(super) fn new(in_double: bool) -> Backquote {
        Backquote {
            inner: Layer::new(false),
            escaped: false,
            in_double,
        }
    }
}

/// One text the shell parses as a command: the whole string, or a
/// backquote's content.
#[derive(Debug, Clone)]
pub(super) struct Layer {
    pub(super) frames: Vec<Frame>,
    /// The previous character was a backslash that escapes this one.
    pub(super) escaped: bool,
    pub(super) pending: Pending,
    /// A backslash not yet read: bash drops it with a line break after
    /// it before it reads any token, so what it means waits on the next
    /// character.
    pub(super) held: bool,
    /// Values found unsafe by what followed them, with their ids.
    pub(super) late: Vec<(usize, Refusal)>,
}

/// A character that means something only with the one after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pending {
    None,
    /// `$`: `$(`, `${`, `$[`, `$'` or a plain `$`.
    Dollar,
    /// `$(`: `$((` is arithmetic, anything else a command substitution.
    DollarParen,
    /// `(` in a command: `((` is arithmetic, anything else a subshell.
    Paren,
    /// `<` or `>` in the word of a `${...}`: `<(` there is a process
    /// substitution, which bash parses (and, outside "...", runs).
    Angle,
}
