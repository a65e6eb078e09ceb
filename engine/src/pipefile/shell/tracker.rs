//! Reading the command's literal text character by character as bash
//! does, so that at any point the stack of [`Frame`]s says where the next
//! value would land. Only the reading lives here; what may be put in each
//! place is decided in `quote`, so that the grammar bash reads and the
//! rules for making a value text there can each be checked on their own.

use super::frames::{
    Arith, Backquote, Command, Frame, Layer, Param, ParamPart, Pending, Redirect, Word,
};
use super::heredoc::{Delimiter, HereDoc, LineEnd};
use super::simple::Value;
use super::words::{is_blank, is_operator, looks_like_assignment, RESERVED};

impl Layer {
    pub(super) fn new(in_parens: bool) -> Layer {
        Layer {
            frames: vec![Frame::Command(Command::new(in_parens))],
            escaped: false,
            pending: Pending::None,
            held: false,
            late: Vec::new(),
        }
    }

    fn push(&mut self, frame: Frame) {
        self.frames.push(frame);
        self.escaped = false;
        self.pending = Pending::None;
    }

    /// Moves the refusals the frames found into the layer's, before a
    /// frame that holds some is dropped.
    pub(super) fn harvest(&mut self) {
        for frame in &mut self.frames {
            match frame {
                Frame::Command(command) => self.late.append(&mut command.late),
                Frame::Backquote(backquote) => {
                    backquote.inner.harvest();
                    self.late.append(&mut backquote.inner.late);
                }
                _ => {}
            }
        }
    }

    fn pop(&mut self) {
        self.harvest();
        // The bottom command of a layer is closed by the layer's end.
        if self.frames.len() > 1 {
            self.frames.pop();
        }
        self.escaped = false;
        self.pending = Pending::None;
    }

    pub(super) fn top(&self) -> &Frame {
        self.frames.last().expect("a layer always has its command")
    }

    fn top_mut(&mut self) -> &mut Frame {
        self.frames
            .last_mut()
            .expect("a layer always has its command")
    }

    /// Reads `ch`, first removing `\` + line break wherever bash does:
    /// `"$\<newline>(...)"` is `$(...)` and `<\<newline><EOF` is `<<EOF`.
    pub(super) fn step(&mut self, ch: char) -> Result<(), &'static str> {
        let read = self.join_and_step(ch);
        self.harvest();
        read
    }

    fn join_and_step(&mut self, ch: char) -> Result<(), &'static str> {
        if std::mem::take(&mut self.held) {
            if ch == '\n' {
                return Ok(());
            }
            // The held backslash escapes `ch`, so `ch` cannot start a
            // line continuation of its own.
            self.step_char('\\')?;
            return self.step_char(ch);
        }
        if ch == '\\' && self.joins_lines() {
            self.held = true;
            return Ok(());
        }
        self.step_char(ch)
    }

    /// Whether a backslash read now would, with a line break after it,
    /// vanish: everywhere but in `'...'`, `$'...'`, a comment, a quoted
    /// here-document body and after another backslash.
    fn joins_lines(&self) -> bool {
        // A here-document body is read line by line before anything in it
        // is parsed, so its own reading decides.
        if let Some(heredoc) = self.frames.iter().find_map(|frame| match frame {
            Frame::HereDoc(heredoc) => Some(heredoc),
            _ => None,
        }) {
            return heredoc.joins_lines();
        }
        if self.escaped {
            return false;
        }
        match self.top() {
            Frame::Single | Frame::AnsiC | Frame::Comment => false,
            Frame::Backquote(backquote) => !backquote.escaped,
            Frame::Command(command) => match &command.redirect {
                Redirect::Delimiter(delimiter) => delimiter.joins_lines(),
                _ => true,
            },
            _ => true,
        }
    }

    pub(super) fn step_char(&mut self, ch: char) -> Result<(), &'static str> {
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
            self.harvest();
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
                    command.word.literal.push(ch);
                }
            } else if matches!(self.top(), Frame::Double) {
                self.word_literal(ch);
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
                        command.close_paren();
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
                    '$' => {
                        self.word_expanded();
                        self.pending = Pending::Dollar
                    }
                    '`' => {
                        self.word_expanded();
                        self.push(Frame::Backquote(Box::new(Backquote::new(true))))
                    }
                    _ => self.word_literal(ch),
                }
                Ok(())
            }
            Frame::Single => {
                if ch == '\'' {
                    self.pop();
                } else {
                    self.word_literal(ch);
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

    /// The word a `"..."` or `'...'` right in a command is part of.
    fn quoted_word(&mut self) -> Option<&mut Word> {
        let below = self.frames.len().checked_sub(2)?;
        match &mut self.frames[below] {
            Frame::Command(command) => Some(&mut command.word),
            _ => None,
        }
    }

    /// `ch` is part of the word's text after quote removal.
    fn word_literal(&mut self, ch: char) {
        if let Some(word) = self.quoted_word() {
            word.literal.push(ch);
        }
    }

    /// The word holds an expansion, so its text is not known.
    fn word_expanded(&mut self) {
        if let Some(word) = self.quoted_word() {
            word.expanded = true;
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
                if ch == '&' {
                    // `<&3`: a redirection, not the end of the command.
                    return Ok(());
                }
                if ch == '<' {
                    command.redirect = Redirect::HereDoc {
                        strip_tabs: false,
                        blank: false,
                    };
                    return Ok(());
                }
                if ch == '(' {
                    command.open_paren(true);
                    return Ok(());
                }
            }
            Redirect::Greater => {
                if ch == '&' {
                    // `2>&1`: a redirection, not the end of the command.
                    return Ok(());
                }
                if ch == '(' {
                    command.open_paren(true);
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
                command.redirect = Redirect::Delimiter(Delimiter::new(strip_tabs));
                return self.command_char(ch);
            }
            Redirect::Delimiter(mut delimiter) => {
                if !delimiter.step(ch)? {
                    command.redirect = Redirect::Delimiter(delimiter);
                    return Ok(());
                }
                let mut spec = delimiter.into_spec();
                spec.code = command.simple.reads_code_from_stdin();
                command.heredocs.push(spec);
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
                command.new_simple();
            }
            '\n' => {
                command.end_word()?;
                command.new_simple();
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
                command.open_paren(false);
                self.pending = Pending::Paren;
            }
            ')' => {
                command.end_word()?;
                if command.in_parens && command.parens.is_empty() {
                    self.pop();
                } else {
                    command.close_paren();
                }
            }
            '#' if !command.word.started => self.push(Frame::Comment),
            '\\' => {
                self.escaped = true;
            }
            '\'' | '"' | '`' | '$' => {
                command.word.started = true;
                command.word.quoted = true;
                command.word.expanded |= matches!(ch, '`' | '$');
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
                // Bash 5 ends the expansion at the first unquoted `}`: a
                // `{` in the word does not pair with it.
                '}' => self.pop(),
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

    /// The innermost layer: a backquote's, if one is open.
    pub(super) fn innermost(&self) -> &Layer {
        match self.top() {
            Frame::Backquote(backquote) => backquote.inner.innermost(),
            _ => self,
        }
    }

    /// The index of the command whose word the next value is part of:
    /// the innermost one, with only quotes and `${...}` opened in it since.
    pub(super) fn word_command(&self) -> Option<usize> {
        let index = self
            .frames
            .iter()
            .rposition(|frame| matches!(frame, Frame::Command(_)))?;
        self.frames[index + 1..]
            .iter()
            .all(|frame| matches!(frame, Frame::Double | Frame::Single | Frame::Param(_)))
            .then_some(index)
    }

    /// Records a value put into the word being read, so that the words
    /// after it can still refuse it.
    pub(super) fn note(&mut self, value: Value) {
        if let Frame::Backquote(backquote) = self.top_mut() {
            return backquote.inner.note(value);
        }
        if let Some(index) = self.word_command() {
            if let Frame::Command(command) = &mut self.frames[index] {
                command.word.values.push(value);
            }
        }
    }

    /// The innermost place, for tests.
    #[cfg(test)]
    pub(super) fn place(&self) -> &'static str {
        if self.held {
            return "escaped";
        }
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
}

impl Command {
    /// The start of a new simple command.
    fn new_simple(&mut self) {
        self.keyword_words = 1;
        self.simple.reset();
    }

    /// `(`: a subshell, or a process substitution when `substitution`,
    /// after which the command around it goes on.
    fn open_paren(&mut self, substitution: bool) {
        self.parens.push(substitution);
        self.saved.push(std::mem::take(&mut *self.simple));
        self.keyword_words = 1;
    }

    fn close_paren(&mut self) {
        self.parens.pop();
        *self.simple = self.saved.pop().unwrap_or_default();
        self.keyword_words = 1;
    }

    fn end_word(&mut self) -> Result<(), &'static str> {
        let word = std::mem::take(&mut self.word);
        if !word.started {
            return Ok(());
        }
        // `{`, `}` and `!` are reserved words too, made of characters no
        // plain value holds.
        let reserved = !word.quoted
            && (RESERVED.contains(&word.text.as_str())
                || matches!(word.text.as_str(), "{" | "}" | "!"));
        let late = self.simple.end_word(
            &word.literal,
            word.expanded,
            self.keyword_words > 0,
            reserved,
            self.double_bracket,
            word.values,
        );
        self.late.extend(late);
        if !word.quoted {
            match word.text.as_str() {
                // Its `pattern)` would look like the end of the `$(...)`.
                "case" if self.in_parens || !self.parens.is_empty() => {
                    return Err("a `case` inside `$(...)`, `<(...)` or `(...)`")
                }
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
        self.literal.push(ch);
        match ch {
            '{' => self.braces += 1,
            '}' => self.braces = self.braces.saturating_sub(1),
            '[' => self.brackets += 1,
            ']' => self.brackets = self.brackets.saturating_sub(1),
            _ => {}
        }
    }
}
