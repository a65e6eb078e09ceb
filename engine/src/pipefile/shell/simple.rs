//! What the simple command a value lands in does with its words. Quoting
//! makes a value one word of text, but some commands read a word again:
//! `eval` and `trap` parse it as code, `declare`, `read`, `printf -v`,
//! `unset`, `wait -p` and `[ -v ]` take it as a variable name and evaluate
//! the subscript of `a[...]` in it, `let`, `declare -i` and the `-eq` of
//! `[[ ... ]]` evaluate it as arithmetic (where a bare name is a variable
//! whose text is evaluated in turn), and `[[ s =~ ... ]]` reads it as a
//! regular expression. Kept apart from the character reader so that the
//! list of such commands, and the rule for each, can be read whole.

use super::refusal::{describe, refuse, Refusal};
use super::words::{is_number, is_plain, looks_like_assignment};

/// Commands that parse an argument as shell code.
const CODE: &[&str] = &["eval", "trap", "compgen", "complete", "bind"];
/// Shells, which run the argument of `-c` (and read code from stdin).
const SHELLS: &[&str] = &["bash", "sh", "dash", "zsh", "ksh", "mksh", "ash"];
/// Builtins whose arguments are variable names (or `NAME=value`), whose
/// `a[...]` subscripts bash evaluates as arithmetic, running any `$(...)`.
const NAMES: &[&str] = &[
    "declare",
    "typeset",
    "local",
    "read",
    "unset",
    "mapfile",
    "readarray",
    "wait",
];
/// Builtins that take names too, but evaluate a subscript or a quoted
/// `(...)` only with `-a` or `-A`.
const EXPORTS: &[&str] = &["export", "readonly"];
/// Arithmetic operators of `[[ ... ]]`, whose operands bash evaluates.
const ARITHMETIC_TESTS: &[&str] = &["-eq", "-ne", "-lt", "-le", "-gt", "-ge"];
/// Variables whose value bash expands again later (`PS4` under `set -x`).
const EXPANDED_LATER: &[&str] = &["PS0", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND"];

/// One value put into the word being read: the id `resolve` gave it, and
/// whether every word of it is a plain number.
#[derive(Debug, Clone, Copy)]
pub(super) struct Value {
    pub(super) id: usize,
    pub(super) number: bool,
}

/// The simple command being read in a command frame.
#[derive(Debug, Clone, Default)]
pub(super) struct Simple {
    /// Its name once read: `Some("")` when it came from an expansion.
    name: Option<String>,
    /// `command` or `builtin` was read: the next non-option word names
    /// the command.
    prefix: bool,
    /// How many arguments were read.
    args: u32,
    /// The literal text of the previous word (in `[[ ... ]]` too).
    last: String,
    /// The values of the previous word, in `[[ ... ]]`.
    last_values: Vec<Value>,
    /// The letters of its option arguments (`-ia` gives `ia`).
    options: String,
    /// An argument that is not an option was read.
    operands: bool,
    /// A shell name was read, as the command or an argument of it.
    shell: bool,
    /// ... and after it an option with `c`: its arguments are code.
    code: bool,
}

/// What the word being read is to its command.
pub(super) struct WordSeen<'w> {
    /// Its literal text so far, quotes removed.
    pub(super) literal: &'w str,
    /// Nothing of it read yet.
    pub(super) empty: bool,
    /// It is where a command's name would be.
    pub(super) at_start: bool,
    /// Inside `[[ ... ]]`.
    pub(super) double_bracket: bool,
}

/// How a value that is allowed is to be quoted beyond its place's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Force {
    #[default]
    No,
    /// In the regular expression of `=~`, where `.` and `+` are syntax
    /// outside quotes.
    Regex,
}

fn plain_text(word: &str) -> bool {
    word.chars().all(|ch| is_plain(ch) || ch == '=')
}

/// A command name as bash would look it up: `\e\v\a\l` is `eval`.
fn normalized(name: &str) -> String {
    name.chars().filter(|ch| *ch != '\\').collect()
}

fn base(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

impl Simple {
    /// A new simple command starts (after `;`, `|`, a line break, ...).
    pub(super) fn reset(&mut self) {
        *self = Simple::default();
    }

    /// A word ended. `keyword` is true when it was a reserved word where a
    /// command starts; `values` are the values put into it. Returns the
    /// ids of values that turn out to be unsafe now that the word is
    /// known.
    pub(super) fn end_word(
        &mut self,
        literal: &str,
        expanded: bool,
        at_start: bool,
        keyword: bool,
        double_bracket: bool,
        values: Vec<Value>,
    ) -> Vec<(usize, Refusal)> {
        let mut late = Vec::new();
        if double_bracket {
            if ARITHMETIC_TESTS.contains(&literal) {
                late.extend(
                    self.last_values
                        .iter()
                        .filter(|value| !value.number)
                        .map(|value| (value.id, arithmetic_test())),
                );
            }
            self.last = literal.to_string();
            self.last_values = values;
            return late;
        }
        self.last_values.clear();
        if at_start && keyword {
            self.reset();
            return late;
        }
        if self.name.is_none() || self.prefix {
            if at_start && looks_like_assignment(literal) {
                self.last = literal.to_string();
                return late;
            }
            if self.prefix && literal.starts_with('-') {
                return late;
            }
            let name = if expanded {
                String::new()
            } else {
                normalized(literal)
            };
            if !values.is_empty() && special(&name) {
                late.extend(values.iter().map(|value| {
                    (
                        value.id,
                        refuse(
                            "as the name of a command",
                            format!("it would name `{name}`, which reads its arguments as code, variable names or arithmetic"),
                        ),
                    )
                }));
            }
            self.prefix = name == "command" || name == "builtin";
            self.shell = SHELLS.contains(&base(&name));
            self.name = Some(name);
            self.last = literal.to_string();
            return late;
        }
        self.args += 1;
        if !self.operands && literal.starts_with('-') && literal.len() > 1 && literal != "--" {
            self.options.push_str(&literal[1..]);
            if self.shell && literal[1..].contains('c') {
                self.code = true;
            }
        } else if !(self.name.as_deref() == Some("printf") && self.last == "-v") {
            // `--` ends the options too; the name after `printf -v` is
            // still one of them.
            self.operands = true;
        }
        if SHELLS.contains(&base(literal)) {
            // `srun bash -c ...`, `timeout 5 sh -c ...`.
            self.shell = true;
            self.options.clear();
            self.operands = false;
        }
        self.last = literal.to_string();
        late
    }

    /// Whether `words` may go into `word` of this command, and how to
    /// quote them there.
    pub(super) fn check(&self, word: &WordSeen, words: &[String]) -> Result<Force, Refusal> {
        if EXPANDED_LATER.iter().any(|name| {
            word.literal
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('=') || rest.starts_with("+="))
        }) {
            return plain_only(words, "in a prompt variable (`PS4=...`), which bash expands again when it prints the prompt");
        }
        if word.double_bracket {
            if ARITHMETIC_TESTS.contains(&self.last.as_str()) {
                if words.iter().all(|value| is_number(value)) {
                    return Ok(Force::No);
                }
                return Err(arithmetic_test());
            }
            if self.last == "=~" {
                return Ok(Force::Regex);
            }
            return Ok(Force::No);
        }
        if word.at_start && self.name.is_none() {
            return Ok(Force::No);
        }
        let Some(name) = self.name.as_deref() else {
            return Ok(Force::No);
        };
        if self.prefix {
            // The word names the command: checked once it is read.
            return Ok(Force::No);
        }
        let name = base(name);
        if CODE.contains(&name) || self.code {
            return plain_only(
                words,
                format!("in an argument of `{name}`, which parses it again as shell code"),
            );
        }
        if NAMES.contains(&name) || (EXPORTS.contains(&name) && self.options.contains(['a', 'A'])) {
            if self.options.contains('i') {
                return numbers_only(
                    words,
                    format!(
                        "in an argument of `{name} -i`, which evaluates the value as arithmetic"
                    ),
                );
            }
            return plain_only(
                words,
                format!("in an argument of `{name}`, which takes it as a variable name or assignment and evaluates an array subscript (or a quoted `(...)`) in it"),
            );
        }
        match name {
            "let" => numbers_only(
                words,
                "in an argument of `let`, which evaluates it as arithmetic",
            ),
            "[" | "test" => {
                if words.iter().any(|value| value.contains('[')) {
                    return Err(refuse(
                        format!("in an argument of `{name}`, whose `-v` evaluates the subscript of `a[...]`"),
                        "the value holds a `[`",
                    ));
                }
                Ok(Force::No)
            }
            "printf" if !self.operands => {
                if self.last == "-v" || word.literal.starts_with("-v") {
                    return plain_only(
                        words,
                        "in the variable name of `printf -v`, whose subscript bash evaluates",
                    );
                }
                if word.empty && words.first().is_some_and(|value| value.starts_with('-')) {
                    return Err(refuse(
                        "as the first argument of `printf`",
                        "a value starting with `-` would be read as an option (`-v` names a variable whose subscript bash evaluates)",
                    ));
                }
                Ok(Force::No)
            }
            _ => Ok(Force::No),
        }
    }

    /// Whether the command's arguments are parsed again as code.
    pub(super) fn parses_code(&self) -> bool {
        match self.name.as_deref() {
            Some(name) if !self.prefix => CODE.contains(&base(name)) || self.code,
            _ => false,
        }
    }

    /// Whether a here-document given to this command is read as code
    /// (`bash <<EOF`, `source /dev/stdin <<EOF`).
    pub(super) fn reads_code_from_stdin(&self) -> bool {
        match self.name.as_deref().map(base) {
            Some("source" | ".") => true,
            Some(name) if SHELLS.contains(&name) => !self.operands && !self.code,
            Some(name) => CODE.contains(&name),
            None => false,
        }
    }
}

fn special(name: &str) -> bool {
    let name = base(name);
    CODE.contains(&name)
        || NAMES.contains(&name)
        || EXPORTS.contains(&name)
        || matches!(
            name,
            "let" | "printf" | "[" | "test" | "command" | "builtin" | "source" | "."
        )
}

fn arithmetic_test() -> Refusal {
    refuse(
        "as an operand of an arithmetic test in `[[ ... ]]` (`-eq`, `-lt`, ...), which bash evaluates as arithmetic",
        "only a plain number (digits, maybe after a `-`) is safe there: a name is a variable whose text is evaluated in turn",
    )
}

fn plain_only(words: &[String], place: impl Into<String>) -> Result<Force, Refusal> {
    match words.iter().find(|value| !plain_text(value)) {
        None => Ok(Force::No),
        Some(bad) => Err(refuse(
            place,
            format!(
                "only letters, digits and `_-./:@%+,=` are safe there, and {} is more",
                describe(bad)
            ),
        )),
    }
}

fn numbers_only(words: &[String], place: impl Into<String>) -> Result<Force, Refusal> {
    match words.iter().find(|value| !is_number(value)) {
        None => Ok(Force::No),
        Some(bad) => Err(refuse(
            place,
            format!(
                "only a plain number (digits, maybe after a `-`) is safe there, and {} is not one",
                describe(bad)
            ),
        )),
    }
}
