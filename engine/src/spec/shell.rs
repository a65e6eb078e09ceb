//! Putting interpolated values into a `run:` command string so that each
//! stays what it was: text, never shell syntax.
//!
//! [`QuoteTracker`] reads the command's literal text as bash 5 will (pipe
//! runs `run:` strings with `bash -c`), keeping a stack of the places it is
//! in: a command (top level, `$(...)`, `<(...)` or a backquote's), `"..."`,
//! `'...'`, `$'...'`, a comment, a `${...}` parameter expansion, arithmetic
//! (`$((...))`, `((...))`, `$[...]`), a here-document body (quoted or not,
//! `<<-` too; inside `$(...)` bash also ends one at a line that starts with
//! the delimiter and holds a `)`) and a pending backslash. A backquote's
//! text is read the way bash reads it: up to the next unescaped backquote,
//! its `\\`, `` \` `` and `\$` undone, then parsed as a command of its own,
//! so a backquote is a layer of its own in the tracker. Where bash's reading
//! is too irregular to follow (a `case` inside `$(...)`), the tracker stops
//! and every later value is refused.
//!
//! [`QuoteTracker::quote`] then gives the text under which a value arrives
//! byte for byte as one word where it lands, or a [`Refusal`] saying why no
//! such text exists there: inside arithmetic only a plain number is safe,
//! a here-document ends at a line equal to its delimiter, a backslash the
//! user wrote escapes the first character of whatever follows it, and so
//! on. A value in a backquote is quoted for where it lands inside, then
//! escaped for the backquote; a value inside a here-document must leave
//! every line of it unequal to the delimiter. Plain values (letters,
//! digits, `_-./:@%+,`) stay as they are where they can, so commands and
//! their cache keys read as before.

/// Why a value cannot be put where it lands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// Where the value lands: "inside an arithmetic expression ...".
    pub(crate) place: String,
    /// What about the value (or the place) makes it unsafe there.
    pub(crate) why: String,
}

fn refuse(place: impl Into<String>, why: impl Into<String>) -> Refusal {
    Refusal {
        place: place.into(),
        why: why.into(),
    }
}

/// Follows a command string as its literal pieces and inserted values are
/// appended, so that the next value is quoted for the context it lands in.
#[derive(Debug, Clone)]
pub(crate) struct QuoteTracker {
    layer: Layer,
    /// Set once the text holds shell syntax the tracker does not follow
    /// (a `case` inside `$(...)`, a here-document opened inside a nested
    /// command before its body): every later value is refused.
    lost: Option<&'static str>,
}

impl Default for QuoteTracker {
    fn default() -> Self {
        QuoteTracker {
            layer: Layer::new(false),
            lost: None,
        }
    }
}

impl QuoteTracker {
    /// Advances over `text` as the shell will read it.
    pub(crate) fn feed(&mut self, text: &str) {
        for ch in text.chars() {
            if self.lost.is_some() {
                return;
            }
            if let Err(reason) = self.layer.step(ch) {
                self.lost = Some(reason);
            }
        }
    }

    /// `words` (one value, or a list param's items) as text that makes each
    /// arrive as one word, byte for byte, where the tracker stands; the
    /// words are separated by spaces.
    pub(crate) fn quote(&self, words: &[String]) -> Result<String, Refusal> {
        if words.iter().any(|word| word.contains('\0')) {
            return Err(refuse(
                "in a `run` command",
                "the value holds a NUL character, which no command line can carry",
            ));
        }
        if let Some(reason) = self.lost {
            return Err(refuse(
                format!("after {reason}, which pipe does not follow far enough to know where a value lands"),
                "pipe cannot tell how the shell would read it there",
            ));
        }
        self.layer.quote(words, Inherited::default())
    }

    /// The innermost place the next value lands in (for tests and
    /// messages).
    #[cfg(test)]
    fn place(&self) -> &'static str {
        self.layer.place()
    }
}

/// What the places below the innermost one add: a value anywhere inside
/// arithmetic is evaluated as arithmetic in the end, one inside `[[ ... ]]`
/// may be.
#[derive(Debug, Clone, Copy, Default)]
struct Inherited {
    arithmetic: bool,
    double_bracket: bool,
    /// Inside the replacement of `${x/pattern/replacement}`.
    replacement: bool,
}

/// One text the shell parses as a command: the whole string, or a
/// backquote's content.
#[derive(Debug, Clone)]
struct Layer {
    frames: Vec<Frame>,
    /// The previous character was a backslash that escapes this one.
    escaped: bool,
    pending: Pending,
}

/// A character that means something only with the one after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
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

#[derive(Debug, Clone)]
enum Frame {
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
struct Command {
    /// Closed by an unmatched `)`: the inside of `$(...)`.
    in_parens: bool,
    /// Unmatched `(` seen inside: true for a process substitution
    /// `<(...)`, false for a subshell.
    parens: Vec<bool>,
    word: Word,
    redirect: Redirect,
    /// Here-documents whose bodies start after the end of this line.
    heredocs: Vec<HereDocSpec>,
    /// Between `[[` and `]]`.
    double_bracket: bool,
    /// How many of the next words may be reserved words (`if`, `done`,
    /// the `in` of `for x in`): 1 at the start of a command.
    keyword_words: u8,
    /// A `<(...)` in a `${...}` inside "...": parsed as a command, but
    /// printed as it is written.
    inert: bool,
}

/// Bash's reserved words made only of plain characters: as a whole
/// unquoted word where a command starts, each is syntax.
const RESERVED: &[&str] = &[
    "case", "coproc", "do", "done", "elif", "else", "esac", "fi", "for", "function", "if", "in",
    "select", "then", "time", "until", "while",
];

/// What the tracker knows of the word being read in a command.
#[derive(Debug, Clone, Default)]
struct Word {
    /// Its unquoted literal characters so far.
    text: String,
    /// Anything of it read yet, quoted or not.
    started: bool,
    /// Some of it quoted, escaped or expanded.
    quoted: bool,
    /// Unquoted `{` not yet closed (brace expansion).
    braces: u32,
    /// Unquoted `[` not yet closed (an array subscript, which bash
    /// evaluates as arithmetic, or a glob's bracket expression).
    brackets: u32,
}

#[derive(Debug, Clone, Default)]
enum Redirect {
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

#[derive(Debug, Clone, Default)]
struct Delimiter {
    text: String,
    quoted: bool,
    strip_tabs: bool,
    quote: Option<char>,
    escaped: bool,
}

#[derive(Debug, Clone)]
struct HereDocSpec {
    delimiter: String,
    /// The delimiter was quoted: the body is literal text.
    quoted: bool,
    /// `<<-`: leading tabs are stripped from each line.
    strip_tabs: bool,
}

#[derive(Debug, Clone)]
struct HereDoc {
    spec: HereDocSpec,
    /// The body's current line so far (continuation lines joined).
    line: String,
    /// The line so far ends in an unescaped backslash.
    line_escape: bool,
    /// Here-documents of the same line that follow this one.
    rest: Vec<HereDocSpec>,
    /// Inside `$(...)` or `<(...)`, where bash 5.2 also ends the body at a
    /// line that starts with the delimiter and holds a `)`, and reads the
    /// rest of that line as commands.
    in_comsub: bool,
}

/// What a character did to a here-document's body.
enum LineEnd {
    /// Nothing: the body goes on.
    No,
    /// It ended the delimiter line.
    Ended,
    /// It ended a line that starts with the delimiter inside `$(...)`:
    /// the rest of that line is read again, as command text.
    EndedBefore(String),
}

#[derive(Debug, Clone)]
struct Param {
    part: ParamPart,
    /// Inside `"..."` or an unquoted here-document body, where a `'` in
    /// it is paired but does not quote.
    in_double: bool,
    /// Unquoted `{` inside the word.
    braces: u32,
    name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ParamPart {
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
struct Arith {
    /// `)` for `$((...))` and `((...))`, `]` for `$[...]`.
    closer: char,
    parens: u32,
    brackets: u32,
    /// One `)` of the closing `))` seen.
    closing: bool,
}

#[derive(Debug, Clone)]
struct Backquote {
    inner: Layer,
    /// A backslash before the next character.
    escaped: bool,
    /// Inside `"..."`, where `\"` loses its backslash too.
    in_double: bool,
}

const ARITHMETIC: &str = "inside shell arithmetic (`$((...))`, `((...))`, `$[...]`, an array subscript or a `${x:offset}`), where bash evaluates the text and runs the `$(...)` of any subscript in it";

fn is_blank(ch: char) -> bool {
    ch == ' ' || ch == '\t'
}

/// Characters that end an unquoted word (with blanks and newlines).
fn is_operator(ch: char) -> bool {
    matches!(ch, ';' | '&' | '|' | '<' | '>' | '(' | ')')
}

impl Layer {
    fn new(in_parens: bool) -> Layer {
        Layer {
            frames: vec![Frame::Command(Command::new(in_parens))],
            escaped: false,
            pending: Pending::None,
        }
    }

    fn push(&mut self, frame: Frame) {
        self.frames.push(frame);
        self.escaped = false;
        self.pending = Pending::None;
    }

    fn pop(&mut self) {
        // The bottom command of a layer is closed by the layer's end.
        if self.frames.len() > 1 {
            self.frames.pop();
        }
        self.escaped = false;
        self.pending = Pending::None;
    }

    fn top(&self) -> &Frame {
        self.frames.last().expect("a layer always has its command")
    }

    fn top_mut(&mut self) -> &mut Frame {
        self.frames
            .last_mut()
            .expect("a layer always has its command")
    }

    fn step(&mut self, ch: char) -> Result<(), &'static str> {
        // A here-document ends at its delimiter line whatever is open
        // inside it: bash reads the body line by line before expanding it.
        let mut ended = None;
        for (index, frame) in self.frames.iter_mut().enumerate() {
            if let Frame::HereDoc(heredoc) = frame {
                match heredoc.line_step(ch) {
                    LineEnd::No => {}
                    end => {
                        ended = Some((index, end));
                        break;
                    }
                }
            }
        }
        if let Some((index, end)) = ended {
            let Frame::HereDoc(heredoc) = self.frames.remove(index) else {
                unreachable!("the frame was a here-document");
            };
            self.frames.truncate(index);
            self.escaped = false;
            self.pending = Pending::None;
            if let LineEnd::EndedBefore(rest_of_line) = end {
                if !heredoc.rest.is_empty() {
                    return Err("a here-document ended early inside `$(...)` before the next one");
                }
                for ch in rest_of_line.chars() {
                    self.read(ch)?;
                }
                return self.read('\n');
            }
            if let Some((next, rest)) = heredoc.rest.split_first() {
                self.push(Frame::HereDoc(HereDoc::new(
                    next.clone(),
                    rest.to_vec(),
                    heredoc.in_comsub,
                )));
            }
            return Ok(());
        }
        self.read(ch)
    }

    /// `ch` read by the innermost frame of this layer, or by its backquote.
    fn read(&mut self, ch: char) -> Result<(), &'static str> {
        if let Frame::Backquote(backquote) = self.top_mut() {
            if backquote.escaped {
                backquote.escaped = false;
                let in_double = backquote.in_double;
                if matches!(ch, '$' | '`' | '\\') || (in_double && ch == '"') {
                    return backquote.inner.step(ch);
                }
                backquote.inner.step('\\')?;
                return backquote.inner.step(ch);
            }
            match ch {
                '\\' => backquote.escaped = true,
                '`' => self.pop(),
                _ => backquote.inner.step(ch)?,
            }
            return Ok(());
        }
        self.dispatch(ch)
    }

    /// `ch` read by the innermost frame of this layer.
    fn dispatch(&mut self, ch: char) -> Result<(), &'static str> {
        if self.escaped {
            self.escaped = false;
            if let Frame::Command(command) = self.top_mut() {
                if ch != '\n' {
                    command.word.started = true;
                    command.word.quoted = true;
                }
            }
            return Ok(());
        }
        match std::mem::replace(&mut self.pending, Pending::None) {
            Pending::None => {}
            Pending::Dollar => match ch {
                '(' => {
                    self.pending = Pending::DollarParen;
                    return Ok(());
                }
                '{' => {
                    let in_double = self.in_double();
                    self.push(Frame::Param(Param {
                        part: ParamPart::Name,
                        in_double,
                        braces: 0,
                        name: String::new(),
                    }));
                    return Ok(());
                }
                '[' => {
                    self.push(Frame::Arith(Arith::new(']')));
                    return Ok(());
                }
                '\'' if self.reads_ansi_c() => {
                    self.push(Frame::AnsiC);
                    return Ok(());
                }
                // `$$`, `$#`, `$?`, `$1`: a special parameter, whose name
                // means nothing more.
                '$' | '#' | '?' | '!' | '@' | '*' | '-' | '0'..='9' => return Ok(()),
                _ => {}
            },
            Pending::DollarParen => {
                if ch == '(' {
                    self.push(Frame::Arith(Arith::new(')')));
                    return Ok(());
                }
                self.push(Frame::Command(Command::new(true)));
            }
            Pending::Angle => {
                if ch == '(' {
                    let inert = self.in_double();
                    self.push(Frame::Command(Command {
                        inert,
                        ..Command::new(true)
                    }));
                    return Ok(());
                }
            }
            Pending::Paren => {
                if ch == '(' {
                    if let Frame::Command(command) = self.top_mut() {
                        command.parens.pop();
                    }
                    self.push(Frame::Arith(Arith::new(')')));
                    return Ok(());
                }
            }
        }
        match self.top() {
            Frame::Command(_) => self.command_char(ch),
            Frame::Double => {
                match ch {
                    '"' => self.pop(),
                    '\\' => self.escaped = true,
                    '$' => self.pending = Pending::Dollar,
                    '`' => self.push(Frame::Backquote(Box::new(Backquote::new(true)))),
                    _ => {}
                }
                Ok(())
            }
            Frame::Single => {
                if ch == '\'' {
                    self.pop();
                }
                Ok(())
            }
            Frame::AnsiC => {
                match ch {
                    '\\' => self.escaped = true,
                    '\'' => self.pop(),
                    _ => {}
                }
                Ok(())
            }
            Frame::Comment => {
                if ch == '\n' {
                    self.pop();
                    return self.dispatch(ch);
                }
                Ok(())
            }
            Frame::Param(_) => self.param_char(ch),
            Frame::Arith(_) => self.arith_char(ch),
            Frame::HereDoc(heredoc) => {
                if !heredoc.spec.quoted {
                    match ch {
                        '\\' => self.escaped = true,
                        '$' => self.pending = Pending::Dollar,
                        '`' => self.push(Frame::Backquote(Box::new(Backquote::new(false)))),
                        _ => {}
                    }
                }
                Ok(())
            }
            Frame::Backquote(_) => unreachable!("a backquote's text goes to its layer"),
        }
    }

    /// Whether a `${` opened now is inside `"..."` (or an unquoted
    /// here-document body, which reads like it).
    fn in_double(&self) -> bool {
        match self.top() {
            Frame::Double => true,
            Frame::HereDoc(_) => true,
            Frame::Param(param) => param.in_double,
            _ => false,
        }
    }

    /// Whether `$'` opens an ANSI-C string here.
    fn reads_ansi_c(&self) -> bool {
        match self.top() {
            Frame::Command(_) => true,
            Frame::Param(param) => !param.in_double,
            _ => false,
        }
    }

    fn command_char(&mut self, ch: char) -> Result<(), &'static str> {
        let Frame::Command(command) = self.top_mut() else {
            unreachable!("called for a command");
        };
        // The redirections of a here-document come first.
        match std::mem::take(&mut command.redirect) {
            Redirect::None => {}
            Redirect::Less => {
                if ch == '<' {
                    command.redirect = Redirect::HereDoc {
                        strip_tabs: false,
                        blank: false,
                    };
                    return Ok(());
                }
                if ch == '(' {
                    command.parens.push(true);
                    command.keyword_words = 1;
                    return Ok(());
                }
            }
            Redirect::Greater => {
                if ch == '(' {
                    command.parens.push(true);
                    command.keyword_words = 1;
                    return Ok(());
                }
            }
            Redirect::HereDoc { strip_tabs, blank } => {
                if ch == '<' && !strip_tabs && !blank {
                    // `<<<`: a here-string, whose word is an ordinary one.
                    return Ok(());
                }
                if ch == '-' && !strip_tabs && !blank {
                    command.redirect = Redirect::HereDoc {
                        strip_tabs: true,
                        blank,
                    };
                    return Ok(());
                }
                if is_blank(ch) {
                    command.redirect = Redirect::HereDoc {
                        strip_tabs,
                        blank: true,
                    };
                    return Ok(());
                }
                if ch == '\n' || is_operator(ch) {
                    return Err("a `<<` without a delimiter word");
                }
                command.redirect = Redirect::Delimiter(Delimiter {
                    strip_tabs,
                    ..Delimiter::default()
                });
                return self.command_char(ch);
            }
            Redirect::Delimiter(mut delimiter) => {
                if !delimiter.step(ch)? {
                    command.redirect = Redirect::Delimiter(delimiter);
                    return Ok(());
                }
                command.heredocs.push(HereDocSpec {
                    delimiter: delimiter.text,
                    quoted: delimiter.quoted,
                    strip_tabs: delimiter.strip_tabs,
                });
            }
        }
        match ch {
            ' ' | '\t' => command.end_word()?,
            '>' => {
                command.end_word()?;
                command.redirect = Redirect::Greater;
            }
            ';' | '&' | '|' => {
                command.end_word()?;
                command.keyword_words = 1;
            }
            '\n' => {
                command.end_word()?;
                command.keyword_words = 1;
                let heredocs = std::mem::take(&mut command.heredocs);
                let in_comsub = command.in_parens || command.parens.contains(&true);
                let below = self.frames.len() - 1;
                if self.frames[..below].iter().any(
                    |frame| matches!(frame, Frame::Command(command) if !command.heredocs.is_empty()),
                ) {
                    return Err("a line break inside a command substitution on the line of a `<<`");
                }
                if let Some((first, rest)) = heredocs.split_first() {
                    self.push(Frame::HereDoc(HereDoc::new(
                        first.clone(),
                        rest.to_vec(),
                        in_comsub,
                    )));
                }
            }
            '<' => {
                command.end_word()?;
                command.redirect = Redirect::Less;
            }
            '(' => {
                command.end_word()?;
                command.keyword_words = 1;
                command.parens.push(false);
                self.pending = Pending::Paren;
            }
            ')' => {
                command.end_word()?;
                command.keyword_words = 1;
                if command.in_parens && command.parens.is_empty() {
                    self.pop();
                } else {
                    command.parens.pop();
                }
            }
            '#' if !command.word.started => self.push(Frame::Comment),
            '\\' => {
                self.escaped = true;
            }
            '\'' | '"' | '`' | '$' => {
                command.word.started = true;
                command.word.quoted = true;
                match ch {
                    '\'' => self.push(Frame::Single),
                    '"' => self.push(Frame::Double),
                    '`' => self.push(Frame::Backquote(Box::new(Backquote::new(false)))),
                    _ => self.pending = Pending::Dollar,
                }
            }
            _ => command.word.push(ch),
        }
        Ok(())
    }

    fn param_char(&mut self, ch: char) -> Result<(), &'static str> {
        let Frame::Param(param) = self.top_mut() else {
            unreachable!("called for a parameter expansion");
        };
        match param.part {
            ParamPart::Name => match ch {
                '}' => self.pop(),
                _ if ch.is_ascii_alphanumeric() || ch == '_' => param.name.push(ch),
                '@' | '*' | '?' | '-' | '$' | '!' | '#' if param.name.is_empty() => {
                    param.name.push(ch)
                }
                '[' => param.part = ParamPart::Subscript(0),
                ':' => param.part = ParamPart::Colon,
                '-' | '=' | '+' | '?' => param.part = ParamPart::Word,
                '#' | '%' | '^' | ',' | '/' => {
                    param.part = ParamPart::Pattern {
                        op: ch,
                        begun: false,
                    }
                }
                '@' => param.part = ParamPart::Transform,
                _ => return Err("a `${...}` that is not a parameter expansion"),
            },
            ParamPart::Subscript(depth) => match ch {
                '[' => param.part = ParamPart::Subscript(depth + 1),
                ']' if depth == 0 => param.part = ParamPart::Name,
                ']' => param.part = ParamPart::Subscript(depth - 1),
                _ => self.nested_char(ch),
            },
            ParamPart::Colon => {
                if matches!(ch, '-' | '=' | '+' | '?') {
                    param.part = ParamPart::Word;
                } else {
                    param.part = ParamPart::Offset;
                    return self.param_char(ch);
                }
            }
            ParamPart::Offset => match ch {
                '}' => self.pop(),
                _ => self.nested_char(ch),
            },
            // `##`, `%%`, `^^`, `,,`, `//`, `/#`, `/%`: the operator goes on.
            ParamPart::Pattern { op, begun: false }
                if ch == op || (op == '/' && matches!(ch, '#' | '%')) => {}
            ParamPart::Pattern { op: '/', .. } if ch == '/' => param.part = ParamPart::Replacement,
            ParamPart::Word | ParamPart::Pattern { .. } | ParamPart::Replacement => match ch {
                '{' => param.braces += 1,
                '}' if param.braces == 0 => self.pop(),
                '}' => param.braces -= 1,
                '<' | '>' => {
                    if let ParamPart::Pattern { op, .. } = param.part {
                        param.part = ParamPart::Pattern { op, begun: true };
                    }
                    self.pending = Pending::Angle;
                }
                _ => {
                    if let ParamPart::Pattern { op, .. } = param.part {
                        param.part = ParamPart::Pattern { op, begun: true };
                    }
                    self.nested_char(ch)
                }
            },
            ParamPart::Transform => {
                if ch == '}' {
                    self.pop();
                }
            }
        }
        Ok(())
    }

    /// What quotes, escapes and expansions do inside a `${...}` or
    /// arithmetic.
    fn nested_char(&mut self, ch: char) {
        match ch {
            '\\' => self.escaped = true,
            '$' => self.pending = Pending::Dollar,
            '`' => {
                let in_double = self.in_double();
                self.push(Frame::Backquote(Box::new(Backquote::new(in_double))));
            }
            '"' => self.push(Frame::Double),
            '\'' => self.push(Frame::Single),
            _ => {}
        }
    }

    fn arith_char(&mut self, ch: char) -> Result<(), &'static str> {
        let Frame::Arith(arith) = self.top_mut() else {
            unreachable!("called for arithmetic");
        };
        if arith.closing {
            if ch == ')' {
                self.pop();
                return Ok(());
            }
            // `$((a) b)` is a command substitution after all.
            return Err("a `((` that is not arithmetic");
        }
        match ch {
            '(' => arith.parens += 1,
            ')' if arith.parens > 0 => arith.parens -= 1,
            ')' if arith.closer == ')' => arith.closing = true,
            ')' => return Err("an unmatched `)` inside `$[...]`"),
            '[' => arith.brackets += 1,
            ']' if arith.brackets > 0 => arith.brackets -= 1,
            ']' if arith.closer == ']' => self.pop(),
            _ => self.nested_char(ch),
        }
        Ok(())
    }

    /// The innermost place, for tests.
    #[cfg(test)]
    fn place(&self) -> &'static str {
        match self.top() {
            Frame::Backquote(backquote) => backquote.inner.place(),
            Frame::Command(command) => match command.redirect {
                Redirect::HereDoc { .. } | Redirect::Delimiter(_) => "delimiter",
                _ if self.escaped => "escaped",
                _ if self.pending == Pending::Dollar => "dollar",
                _ => "bare",
            },
            _ if self.escaped => "escaped",
            _ if self.pending == Pending::DollarParen => "bare",
            Frame::Double => "double",
            Frame::Single => "single",
            Frame::AnsiC => "ansi-c",
            Frame::Comment => "comment",
            Frame::Param(param) => match param.part {
                ParamPart::Word if param.in_double => "param-word-double",
                ParamPart::Word => "param-word",
                ParamPart::Pattern { .. } if param.in_double => "param-pattern-double",
                ParamPart::Pattern { .. } => "param-pattern",
                ParamPart::Replacement => "param-replacement",
                ParamPart::Subscript(_) | ParamPart::Offset | ParamPart::Colon => "arithmetic",
                ParamPart::Name | ParamPart::Transform => "param-name",
            },
            Frame::Arith(_) => "arithmetic",
            Frame::HereDoc(heredoc) if heredoc.spec.quoted => "heredoc-quoted",
            Frame::HereDoc(_) => "heredoc",
        }
    }

    fn quote(&self, words: &[String], below: Inherited) -> Result<String, Refusal> {
        let mut inherited = below;
        for frame in &self.frames {
            match frame {
                Frame::Arith(_) => inherited.arithmetic = true,
                Frame::Param(param)
                    if matches!(
                        param.part,
                        ParamPart::Subscript(_) | ParamPart::Offset | ParamPart::Colon
                    ) =>
                {
                    inherited.arithmetic = true
                }
                Frame::Param(param) if param.part == ParamPart::Replacement => {
                    inherited.replacement = true
                }
                Frame::Command(command) if command.double_bracket => {
                    inherited.double_bracket = true
                }
                _ => {}
            }
        }
        let text = match self.top() {
            Frame::Backquote(backquote) => {
                if backquote.escaped {
                    return Err(after_backslash());
                }
                escape_for_backquote(&backquote.inner.quote(words, inherited)?)
            }
            _ => self.quote_here(words, inherited)?,
        };
        for frame in &self.frames {
            if let Frame::HereDoc(heredoc) = frame {
                heredoc.check_insert(&text)?;
            }
        }
        Ok(text)
    }

    /// `words` quoted for the innermost frame of this layer.
    fn quote_here(&self, words: &[String], inherited: Inherited) -> Result<String, Refusal> {
        if matches!(self.top(), Frame::Comment) {
            // The shell never reads it; a line break would end the comment.
            return Ok(words.join(" ").replace(['\n', '\r'], " "));
        }
        if self.pending == Pending::Dollar {
            return Err(refuse(
                "right after a `$`",
                "the `$` and the value would read as a parameter, or its quoting as `$'...'`",
            ));
        }
        if matches!(
            self.top(),
            Frame::Command(Command {
                redirect: Redirect::HereDoc { .. } | Redirect::Delimiter(_),
                ..
            })
        ) {
            return Err(refuse(
                "in a here-document's delimiter (the word after `<<`)",
                "the value would decide where the here-document ends and whether its body is expanded",
            ));
        }
        if matches!(self.top(), Frame::Param(param) if param.part == ParamPart::Colon)
            && words.iter().any(|word| word.starts_with('-'))
        {
            return Err(refuse(
                "right after the `:` of a `${...}`",
                "a leading `-` would make `:-` the default-value operator",
            ));
        }
        if inherited.arithmetic {
            if let Some(word) = words.iter().find(|word| !is_number(word)) {
                return Err(refuse(
                    ARITHMETIC,
                    format!("only a plain number (digits, maybe after a `-`) is safe there, and {} is not one", describe(word)),
                ));
            }
            return Ok(words.join(" "));
        }
        if inherited.double_bracket && words.iter().any(|word| word.contains('[')) {
            return Err(refuse(
                "inside `[[ ... ]]`, whose arithmetic comparisons (`-eq`, `-lt`, ...) evaluate the text and run the `$(...)` of a subscript in it",
                "the value holds a `[`",
            ));
        }
        if inherited.replacement {
            if let Some(bad) = words
                .iter()
                .find(|word| !word.is_empty() && !is_plain_word(word))
            {
                return Err(refuse(
                    "in the replacement of a `${x/pattern/replacement}`",
                    format!("bash splits and globs the result and reads `&` there whatever the quotes, so only letters, digits and `_-./:@%+,` are safe, and {} is more", describe(bad)),
                ));
            }
            return Ok(words.join(" "));
        }
        if self.pending == Pending::Angle && words.first().is_some_and(|word| word.starts_with('('))
        {
            return Err(refuse(
                "right after a `<` or `>` in a `${...}`",
                "a value starting with `(` would make it a process substitution `<(...)`",
            ));
        }
        if let Frame::Command(command) = self.top() {
            if command.inert {
                return Err(refuse(
                    "inside a `<(...)` in a `${...}` inside \"...\", which bash parses as a command but prints as written",
                    "no quoting makes the value arrive there as it is",
                ));
            }
        }
        if self.escaped {
            // `\` + a plain character is that character (or, inside quotes,
            // the backslash and it): nothing for the backslash to disarm.
            if words.iter().all(|word| is_plain_word(word)) {
                return Ok(words.join(" "));
            }
            return Err(after_backslash());
        }
        let quoted: Vec<String> = match self.top() {
            // `$(` with nothing after it yet: the start of a command.
            _ if self.pending == Pending::DollarParen => words
                .iter()
                .enumerate()
                .map(|(index, word)| quote_bare(word, index == 0 && RESERVED.contains(&word.as_str())))
                .collect(),
            Frame::Command(command) => {
                let word = &command.word;
                if word.brackets > 0 {
                    if let Some(bad) = words.iter().find(|value| !is_number(value)) {
                        return Err(refuse(
                            format!("{ARITHMETIC}: here inside the `[...]` of the word `{}`", word.text),
                            format!("only a plain number (digits, maybe after a `-`) is safe there, and {} is not one", describe(bad)),
                        ));
                    }
                }
                // A `~` starting the word takes what follows up to a `/`
                // as a user name; a `{` before it makes `,` and `..` brace
                // expansion.
                let tilde = !word.quoted && word.text.starts_with('~') && !word.text.contains('/');
                // A whole word where a command starts: `if` would be syntax.
                let keyword = !word.started && command.keyword_words > 0;
                words
                    .iter()
                    .enumerate()
                    .map(|(index, value)| {
                        let force = index == 0
                            && ((keyword && RESERVED.contains(&value.as_str()))
                                || tilde
                                || (word.braces > 0
                                    && (value.contains(',') || value.contains(".."))));
                        quote_bare(value, force)
                    })
                    .collect()
            }
            Frame::Double => words.iter().map(|word| quote_double(word)).collect(),
            Frame::Single => {
                // Inside `"${x:-'...'}"` (or a here-document's `${...}`)
                // bash pairs the quotes but reads what is between them as
                // if in "...".
                if matches!(self.frames.iter().rev().nth(1), Some(Frame::Param(param)) if param.in_double)
                {
                    if let Some(bad) = words.iter().find(|word| !is_plain_word(word)) {
                        return Err(refuse(
                            "inside `'...'` in a `${...}` that is inside \"...\" or a here-document",
                            format!("there only letters, digits and `_-./:@%+,` are sure to be read as text, and {} is more", describe(bad)),
                        ));
                    }
                }
                words.iter().map(|word| word.replace('\'', r"'\''")).collect()
            }
            Frame::AnsiC => {
                return Err(refuse(
                    "inside `$'...'`",
                    "bash reads backslash escapes there, so pipe puts no value into one",
                ))
            }
            Frame::Param(param) => match param.part {
                ParamPart::Word
                    if param.in_double && words.iter().any(|word| word.contains('\'')) =>
                {
                    return Err(refuse(
                        "in the word of a `${...}` inside \"...\" or a here-document",
                        "the value holds a `'`, which bash pairs with another there though it prints it",
                    ))
                }
                ParamPart::Word
                    if param.in_double
                        && words.iter().any(|word| {
                            word.contains("<(")
                                || word.contains(">(")
                                || word.ends_with(['<', '>'])
                        }) =>
                {
                    return Err(refuse(
                        "in the word of a `${...}` inside \"...\" or a here-document",
                        "bash would parse a `<(` or `>(` of it as a process substitution",
                    ))
                }
                ParamPart::Word if param.in_double => words
                    .iter()
                    .map(|word| quote_double(word).replace('}', r"\}"))
                    .collect(),
                ParamPart::Word => words.iter().map(|word| quote_bare(word, false)).collect(),
                ParamPart::Replacement => unreachable!("a replacement is handled above"),
                ParamPart::Pattern { op, begun } => {
                    // Right after the operator a value starting with it
                    // would double it (`%` + `%a` is `%%a`).
                    let literal = |word: &String| {
                        is_plain_word(word)
                            && !word.contains('/')
                            && (begun || !word.starts_with(op))
                    };
                    if param.in_double {
                        if let Some(bad) = words.iter().find(|word| !literal(word)) {
                            return Err(refuse(
                                "in the pattern of a `${...}` inside \"...\"",
                                format!("there only letters, digits and `_-.:@%+,` are sure to be read as text, and {} is more", describe(bad)),
                            ));
                        }
                        words.to_vec()
                    } else {
                        words
                            .iter()
                            .map(|word| quote_bare(word, !literal(word)))
                            .collect()
                    }
                }
                ParamPart::Name | ParamPart::Transform => {
                    return Err(refuse(
                        "in the name or operator of a `${...}` parameter expansion",
                        "the value would name a variable or an operation",
                    ))
                }
                ParamPart::Subscript(_) | ParamPart::Offset | ParamPart::Colon => {
                    unreachable!("arithmetic is handled above")
                }
            },
            Frame::Arith(_) => unreachable!("arithmetic is handled above"),
            Frame::HereDoc(heredoc) if heredoc.spec.quoted => words.to_vec(),
            Frame::HereDoc(_) => words
                .iter()
                .map(|word| {
                    let mut escaped = String::with_capacity(word.len());
                    for ch in word.chars() {
                        if matches!(ch, '$' | '`' | '\\') {
                            escaped.push('\\');
                        }
                        escaped.push(ch);
                    }
                    escaped
                })
                .collect(),
            Frame::Comment | Frame::Backquote(_) => unreachable!("handled above"),
        };
        Ok(quoted.join(" "))
    }
}

fn after_backslash() -> Refusal {
    refuse(
        "right after a backslash in the command",
        "the backslash would escape the first character of the value's quoting; only a plain value (letters, digits, `_-./:@%+,`) is safe there",
    )
}

/// The value in a message: short ones whole, long ones by their start.
fn describe(value: &str) -> String {
    const SHOWN: usize = 40;
    let count = value.chars().count();
    if count <= SHOWN {
        format!("`{}`", value.escape_debug())
    } else {
        let start: String = value.chars().take(SHOWN).collect();
        format!("`{}...` ({count} characters)", start.escape_debug())
    }
}

impl Command {
    fn new(in_parens: bool) -> Command {
        Command {
            in_parens,
            keyword_words: 1,
            ..Command::default()
        }
    }

    fn end_word(&mut self) -> Result<(), &'static str> {
        let word = std::mem::take(&mut self.word);
        if !word.started {
            return Ok(());
        }
        let reserved = !word.quoted && RESERVED.contains(&word.text.as_str());
        if !word.quoted {
            match word.text.as_str() {
                // Its `pattern)` would look like the end of the `$(...)`.
                "case" if self.in_parens => return Err("a `case` inside `$(...)`"),
                "[[" => self.double_bracket = true,
                "]]" => self.double_bracket = false,
                _ => {}
            }
        }
        self.keyword_words = if reserved && self.keyword_words > 0 {
            // `for NAME in`, `case WORD in`, `select NAME in`.
            if matches!(word.text.as_str(), "for" | "case" | "select") {
                2
            } else {
                1
            }
        } else if looks_like_assignment(&word.text) && self.keyword_words > 0 {
            1
        } else {
            self.keyword_words.saturating_sub(1)
        };
        Ok(())
    }
}

impl Word {
    fn push(&mut self, ch: char) {
        self.started = true;
        self.text.push(ch);
        match ch {
            '{' => self.braces += 1,
            '}' => self.braces = self.braces.saturating_sub(1),
            '[' => self.brackets += 1,
            ']' => self.brackets = self.brackets.saturating_sub(1),
            _ => {}
        }
    }
}

impl Delimiter {
    /// Reads `ch` into the delimiter word; true when `ch` ends it (and is
    /// then read as an ordinary character).
    fn step(&mut self, ch: char) -> Result<bool, &'static str> {
        if self.escaped {
            self.escaped = false;
            self.text.push(ch);
            return Ok(false);
        }
        match self.quote {
            Some('\'') => {
                if ch == '\'' {
                    self.quote = None;
                } else {
                    self.text.push(ch);
                }
            }
            Some(_) => match ch {
                '"' => self.quote = None,
                '\\' => self.escaped = true,
                '$' | '`' => return Err("an expansion in a here-document's delimiter"),
                _ => self.text.push(ch),
            },
            None => match ch {
                '\\' => {
                    self.escaped = true;
                    self.quoted = true;
                }
                '\'' | '"' => {
                    self.quote = Some(ch);
                    self.quoted = true;
                }
                '$' | '`' => return Err("an expansion in a here-document's delimiter"),
                _ if is_blank(ch) || ch == '\n' || is_operator(ch) => return Ok(true),
                _ => self.text.push(ch),
            },
        }
        Ok(false)
    }
}

impl HereDoc {
    fn new(spec: HereDocSpec, rest: Vec<HereDocSpec>, in_comsub: bool) -> HereDoc {
        HereDoc {
            spec,
            line: String::new(),
            line_escape: false,
            rest,
            in_comsub,
        }
    }

    /// Follows the body's lines: whether `ch` ends the body.
    fn line_step(&mut self, ch: char) -> LineEnd {
        if ch == '\n' {
            if self.line_escape {
                // In an unquoted body `\` + line break joins the lines,
                // before the delimiter is looked for.
                self.line.pop();
                self.line_escape = false;
                return LineEnd::No;
            }
            let line = std::mem::take(&mut self.line);
            if self.is_delimiter(&line) {
                return LineEnd::Ended;
            }
            if let Some(rest) = self.comsub_rest(&line) {
                return LineEnd::EndedBefore(rest.to_string());
            }
            return LineEnd::No;
        }
        self.line_escape = !self.spec.quoted && ch == '\\' && !self.line_escape;
        self.line.push(ch);
        LineEnd::No
    }

    /// `line` without the tabs `<<-` strips.
    fn stripped<'l>(&self, line: &'l str) -> &'l str {
        if self.spec.strip_tabs {
            line.trim_start_matches('\t')
        } else {
            line
        }
    }

    fn is_delimiter(&self, line: &str) -> bool {
        self.stripped(line) == self.spec.delimiter
    }

    /// Inside `$(...)`, what follows the delimiter on a line that starts
    /// with it and holds a `)`: bash 5.2 ends the body there.
    fn comsub_rest<'l>(&self, line: &'l str) -> Option<&'l str> {
        if !self.in_comsub {
            return None;
        }
        self.stripped(line)
            .strip_prefix(self.spec.delimiter.as_str())
            .filter(|rest| rest.contains(')'))
    }

    /// Refuses `text` if, put into the body here, it would end the
    /// here-document, be joined to another line, or lose leading tabs.
    fn check_insert(&self, text: &str) -> Result<(), Refusal> {
        let place = || {
            format!(
                "in a here-document ending at `{}`",
                self.spec.delimiter.escape_debug()
            )
        };
        let mut line = self.line.clone();
        let mut line_escape = self.line_escape;
        let mut added_to_line = false;
        for ch in text.chars() {
            if ch == '\n' {
                if line_escape {
                    return Err(refuse(
                        place(),
                        "a backslash before a line break in it would join two lines of the body",
                    ));
                }
                if self.is_delimiter(&line) || self.comsub_rest(&line).is_some() {
                    return Err(refuse(
                        place(),
                        "a line of it would end the here-document, and the lines after it would run as commands",
                    ));
                }
                line.clear();
                added_to_line = false;
                continue;
            }
            if self.spec.strip_tabs && ch == '\t' && line.chars().all(|c| c == '\t') {
                return Err(refuse(
                    place(),
                    "`<<-` strips the tabs that start a line of it",
                ));
            }
            line_escape = !self.spec.quoted && ch == '\\' && !line_escape;
            line.push(ch);
            added_to_line = true;
        }
        if line_escape {
            return Err(refuse(
                place(),
                "it ends in a backslash, which would join the line it lands on to the next",
            ));
        }
        let stripped = if self.spec.strip_tabs {
            line.trim_start_matches('\t')
        } else {
            line.as_str()
        };
        // Inside `$(...)` a line that starts with the delimiter ends the body
        // once a `)` follows on it.
        let comsub_start = self.in_comsub && stripped.starts_with(self.spec.delimiter.as_str());
        if (added_to_line && self.spec.delimiter.starts_with(stripped)) || comsub_start {
            return Err(refuse(
                place(),
                "the line it lands on would read as the start of the delimiter, so the text after it could end the here-document",
            ));
        }
        Ok(())
    }
}

impl Arith {
    fn new(closer: char) -> Arith {
        Arith {
            closer,
            parens: 0,
            brackets: 0,
            closing: false,
        }
    }
}

impl Backquote {
    fn new(in_double: bool) -> Backquote {
        Backquote {
            inner: Layer::new(false),
            escaped: false,
            in_double,
        }
    }
}

/// Text that a backquote's reading turns back into `text`.
fn escape_for_backquote(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for ch in text.chars() {
        if matches!(ch, '$' | '`' | '\\') {
            escaped.push('\\');
        }
        escaped.push(ch);
    }
    escaped
}

/// Characters that mean nothing to the shell in an unquoted word. `=` is
/// handled apart: `NAME=value` as the first word is an assignment.
fn is_plain(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.' | '/' | ':' | '@' | '%' | '+' | ',')
}

fn is_plain_word(word: &str) -> bool {
    !word.is_empty() && word.chars().all(is_plain)
}

/// A number bash's arithmetic reads as it is written.
fn is_number(word: &str) -> bool {
    let digits = word.strip_prefix('-').unwrap_or(word);
    !digits.is_empty() && digits.chars().all(|ch| ch.is_ascii_digit())
}

fn looks_like_assignment(value: &str) -> bool {
    value.split_once('=').is_some_and(|(name, _)| {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && chars.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
    })
}

/// `value` as one unquoted-context word. A plain value (`5.0e-5`,
/// `data/train.csv`) is left as it is unless `force`, so commands and their
/// keys read as before; anything else goes inside `'...'`.
fn quote_bare(value: &str, force: bool) -> String {
    let plain = !force
        && !value.is_empty()
        && value.chars().all(|ch| is_plain(ch) || ch == '=')
        && !looks_like_assignment(value);
    if plain {
        value.to_string()
    } else {
        // Inside '...' nothing is special but `'` itself, which is
        // closed, escaped and reopened.
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

/// `value` for the inside of `"..."`: `$`, `` ` ``, `"` and `\` escaped.
fn quote_double(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    for ch in value.chars() {
        if matches!(ch, '$' | '`' | '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(ch);
    }
    quoted
}

#[cfg(test)]
mod tests;
