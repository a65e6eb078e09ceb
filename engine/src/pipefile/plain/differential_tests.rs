//! The values rule against bash itself, on generated commands. Commands
//! come from a small grammar of the places a value can land (leaves: the
//! places the old context reader knew) inside the constructs that can hold
//! them (wrappers: groups, subshells, functions, `$(...)`, backquotes,
//! `<(...)`, pipelines, `coproc`, here-documents, line continuations), each
//! hole given its own random value. Every leaf records the words its value
//! produced with a probe function `p` (`printf '%s\0' "$@" >> "$P"`), or
//! raw bytes from a here-document or here-string. The oracle:
//!
//! - a value that is not plain is refused, whatever the command;
//! - a command whose values are all plain is refused where bash gives
//!   plain characters a meaning (`landing`), or runs under
//!   `bash -e -o pipefail -c` leaving exactly the probe bytes the grammar
//!   says, and the same bytes as the command with a neutral value in each
//!   hole (each neutral value then replaced by the hole's value), and no
//!   `PWNED` file: nothing ran that a value said, though the command's
//!   `env:` holds code that arithmetic would run (`y`, `MSG`).
//!
//! Seeded and deterministic: `PIPE_SHELL_CASES` sets how many commands
//! (1,200 by default), `PIPE_SHELL_SEED` the seed; a failure names both.

use std::path::Path;

use super::tests::{run_bash, VARIABLES};
use super::*;

/// A deterministic generator (splitmix64): no dependence on a crate's
/// algorithm keeps a seed meaning the same cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Pieces of values that are syntax somewhere, or run `touch PWNED`.
const HOSTILE: &[&str] = &[
    "$(touch PWNED)",
    "`touch PWNED`",
    "a[$(touch PWNED)]",
    "'",
    "\"",
    "\\",
    "\n",
    "*",
    "?",
    "~",
    "q+=X",
    " ",
    "\t",
    "$",
    "${x}",
    "(",
    ")",
    "{",
    "}",
    "=1",
    "#",
    ";",
    "&",
    "|",
    "<",
    ">",
    "!",
    "\\\n",
    "[",
    "]",
    "^",
    "; touch PWNED",
    "x=1",
    "é",
    "&&",
    "<(",
];

/// Pieces of plain values a pipeline holds every day.
const EVERYDAY: &[&str] = &[
    "a",
    "train",
    "5.0e-5",
    "data/train.csv",
    "12",
    "0",
    "-3",
    "a.b",
    "z.z",
    "lr:0.1",
    "x@y",
    "50%",
    "a+b",
    "007",
    "A",
    "B",
    "/",
    ":",
    "@",
    "%",
    "-",
    "_",
    "+",
    ".",
    "out/t@lr=0.1",
    "t@a=1,b=2",
];

/// Pieces of plain values that mean something somewhere: a reserved word,
/// a variable of the `env:`, a delimiter, a user, brace and `IFS`
/// characters, an operator of `[[` or of a `${...}`.
const MEANINGFUL: &[&str] = &[
    "a,b", "1..3", "if", "time", "coproc", "eval", "y", "MSG", "EOF1", "root", "IFS", "-v", "-eq",
    "%s", "..", ",", "k.v=1",
];

fn plain_value(rng: &mut Rng) -> String {
    (0..1 + rng.below(3))
        .map(|_| match rng.below(4) {
            0 => rng.pick(MEANINGFUL),
            _ => rng.pick(EVERYDAY),
        })
        .collect()
}

fn other_value(rng: &mut Rng) -> String {
    if rng.below(20) == 0 {
        return String::new();
    }
    let mut value = String::new();
    for _ in 0..1 + rng.below(4) {
        value.push_str(if rng.below(3) == 0 {
            rng.pick(EVERYDAY)
        } else {
            rng.pick(HOSTILE)
        });
    }
    while is_plain_value(&value) {
        value.push_str(rng.pick(HOSTILE));
    }
    value
}

/// A piece of a generated command: literal text, or a value's place.
#[derive(Clone)]
enum Piece {
    Text(String),
    Hole(usize),
}

/// Generated shell text and the probe bytes it should leave (`None`
/// where the place gives the value a meaning of its own: a number, a
/// program, a pattern; only "nothing ran" is checked there).
struct Snippet {
    pieces: Vec<Piece>,
    expected: Option<Vec<u8>>,
}

struct Case {
    values: Vec<String>,
    delimiters: usize,
    /// Whether holes may get values that are not plain.
    mixed: bool,
    /// Whether a value lands in arithmetic, where a neutral value (a
    /// name) reads otherwise than a number.
    numeric: bool,
}

fn text(text: &str) -> Piece {
    Piece::Text(text.to_string())
}

fn words(words: &[&[u8]]) -> Vec<u8> {
    words
        .iter()
        .flat_map(|word| [*word, b"\0"].concat())
        .collect()
}

fn is_number_text(value: &str) -> bool {
    value == "0"
        || (value.len() < 18
            && value.starts_with(|ch: char| ('1'..='9').contains(&ch))
            && value.chars().all(|ch| ch.is_ascii_digit()))
}

impl Case {
    fn hole(&mut self, rng: &mut Rng) -> (Piece, String) {
        let value = if self.mixed && rng.below(2) == 0 {
            other_value(rng)
        } else {
            plain_value(rng)
        };
        self.values.push(value.clone());
        (Piece::Hole(self.values.len() - 1), value)
    }

    /// A snippet whose value lands in arithmetic.
    fn numeric_snippet(&mut self, pieces: Vec<Piece>, expected: Option<Vec<u8>>) -> Snippet {
        self.numeric = true;
        Snippet { pieces, expected }
    }

    fn delimiter(&mut self) -> String {
        self.delimiters += 1;
        format!("EOF{}", self.delimiters)
    }

    /// A place a value lands, and what bash then records.
    fn leaf(&mut self, rng: &mut Rng) -> Snippet {
        let (hole, v) = self.hole(rng);
        let vb = v.as_bytes();
        let cat = |a: &[u8], b: &[u8]| [a, b].concat();
        let snippet = |pieces: Vec<Piece>, expected: Option<Vec<u8>>| Snippet { pieces, expected };
        let h = || hole.clone();
        let mut leaf = rng.below(44);
        if matches!(leaf, 14 | 26..=29) && rng.below(4) != 0 {
            // A value after `~` is always refused: these places are kept
            // rarer, so that most commands reach bash.
            leaf = 0;
        }
        match leaf {
            0 => snippet(
                vec![text("p A"), h(), text("B")],
                Some(words(&[&cat(&cat(b"A", vb), b"B")])),
            ),
            1 => snippet(
                vec![text("p \"A"), h(), text("B\"")],
                Some(words(&[&cat(&cat(b"A", vb), b"B")])),
            ),
            2 => snippet(
                vec![text("p 'A"), h(), text("B'")],
                Some(words(&[&cat(&cat(b"A", vb), b"B")])),
            ),
            3 => snippet(
                vec![text("p $'A"), h(), text("B'")],
                Some(words(&[&cat(&cat(b"A", vb), b"B")])),
            ),
            4 => snippet(
                vec![text("p $\"A"), h(), text("B\"")],
                Some(words(&[&cat(&cat(b"A", vb), b"B")])),
            ),
            5 => snippet(vec![text("p A\\\n"), h()], Some(words(&[&cat(b"A", vb)]))),
            6 => snippet(
                vec![text("p \"$\\\n(printf %s A"), h(), text(".)\"")],
                Some(words(&[&cat(&cat(b"A", vb), b".")])),
            ),
            7..=9 => {
                let delimiter = self.delimiter();
                let (open, prefix) = match rng.below(3) {
                    0 => (format!("<<{delimiter}"), ""),
                    1 => (format!("<<'{delimiter}'"), ""),
                    _ => (format!("<<-{delimiter}"), "\t"),
                };
                let open = if rng.below(4) == 0 {
                    open.replacen("<<", "<\\\n<", 1)
                } else {
                    open
                };
                snippet(
                    vec![
                        text(&format!("cat >>\"$P\" {open}\n{prefix}A")),
                        h(),
                        text(&format!("B\n{prefix}{delimiter}\n")),
                    ],
                    Some(cat(&cat(b"A", vb), b"B\n")),
                )
            }
            10 => snippet(
                vec![text("cat >>\"$P\" <<< A"), h()],
                Some(cat(&cat(b"A", vb), b"\n")),
            ),
            11 => snippet(
                vec![text("cat >>\"$P\" <<< \"A"), h(), text("\"")],
                Some(cat(&cat(b"A", vb), b"\n")),
            ),
            12 => snippet(
                vec![text("p ${u:-A"), h(), text("}")],
                Some(words(&[&cat(b"A", vb)])),
            ),
            13 => snippet(
                vec![text("p \"${u:-A"), h(), text("}\"")],
                Some(words(&[&cat(b"A", vb)])),
            ),
            14 => snippet(
                vec![text("p ${u:-~"), h(), text("}")],
                Some(words(&[&cat(b"~", vb)])),
            ),
            15 => snippet(
                vec![text("x=A"), h(), text("B; p \"${x#A"), h(), text("}\"")],
                Some(words(&[b"B"])),
            ),
            16 => snippet(
                vec![text("x=ab; p \"${x/b/"), h(), text("}\"")],
                Some(words(&[&cat(b"a", vb)])),
            ),
            17 => snippet(
                vec![text("x=ab; p ${x/b/"), h(), text("}")],
                Some(words(&[&cat(b"a", vb)])),
            ),
            18 => self.numeric_snippet(
                vec![text("p $(( "), h(), text(" ))")],
                is_number_text(&v).then(|| words(&[vb])),
            ),
            19 => self.numeric_snippet(
                vec![text("let r="), h(), text(" || true; p \"${r-}\"")],
                is_number_text(&v).then(|| words(&[vb])),
            ),
            20 => {
                let (other, w) = self.hole(rng);
                snippet(
                    vec![
                        text("[[ "),
                        h(),
                        text(" -eq "),
                        other,
                        text(" ]] || true; p ok"),
                    ],
                    (is_number_text(&v) && is_number_text(&w)).then(|| words(&[b"ok"])),
                )
            }
            21 => snippet(
                vec![
                    text("[[ A"),
                    h(),
                    text(" =~ ^A"),
                    h(),
                    text("$ ]] && p same || p other"),
                ],
                // `.` and `+` are the regular expression's.
                (!v.contains(['.', '+'])).then(|| words(&[b"same"])),
            ),
            22 => snippet(
                vec![
                    text("[[ A"),
                    h(),
                    text(" == A"),
                    h(),
                    text(" ]] && p same || p other"),
                ],
                Some(words(&[b"same"])),
            ),
            23 => snippet(
                vec![
                    text("case A"),
                    h(),
                    text(" in A"),
                    h(),
                    text(") p same;; *) p other;; esac"),
                ],
                Some(words(&[b"same"])),
            ),
            24 => snippet(
                vec![text("p {A,B}"), h()],
                Some(words(&[&cat(b"A", vb), &cat(b"B", vb)])),
            ),
            25 => snippet(
                vec![text("p {"), h(), text("}")],
                Some(words(&[&cat(&cat(b"{", vb), b"}")])),
            ),
            26 => snippet(vec![text("p ~"), h()], Some(words(&[&cat(b"~", vb)]))),
            27 => snippet(
                vec![text("v=~"), h(), text("; p \"$v\"")],
                Some(words(&[&cat(b"~", vb)])),
            ),
            28 => snippet(
                vec![text("v=a:~"), h(), text("; p \"$v\"")],
                Some(words(&[&cat(b"a:~", vb)])),
            ),
            29 => snippet(vec![text("p a=~"), h()], Some(words(&[&cat(b"a=~", vb)]))),
            30 => snippet(
                vec![text("p ok # A"), h(), text("\n")],
                Some(words(&[b"ok"])),
            ),
            // A value where a command's name goes names the program.
            31 => snippet(vec![h(), text(" A")], None),
            32 => snippet(
                vec![text("f() { p \"$@\"; }; f A"), h()],
                Some(words(&[&cat(b"A", vb)])),
            ),
            33 => snippet(
                vec![text("eval \"p A"), h(), text("\"")],
                Some(words(&[&cat(b"A", vb)])),
            ),
            34 => snippet(
                vec![text("( trap 'p A"), h(), text("' EXIT\n)")],
                Some(words(&[&cat(b"A", vb)])),
            ),
            35 => snippet(
                vec![
                    text("bash -c \"printf '%s\\\\0' A"),
                    h(),
                    text(" >>\\\"\\$P\\\"\""),
                ],
                Some(words(&[&cat(b"A", vb)])),
            ),
            36 => snippet(
                vec![text("printf -v r %s A"), h(), text("; p \"$r\"")],
                Some(words(&[&cat(b"A", vb)])),
            ),
            37 => snippet(
                vec![text("declare r=A"), h(), text("; p \"$r\"")],
                Some(words(&[&cat(b"A", vb)])),
            ),
            38 => snippet(
                vec![text("export R=A"), h(), text("; p \"$R\"")],
                Some(words(&[&cat(b"A", vb)])),
            ),
            39 => snippet(
                vec![text("[ -v "), h(), text(" ] || true; p ok")],
                Some(words(&[b"ok"])),
            ),
            40 => snippet(
                vec![text("[ -n A"), h(), text(" ] && p ok")],
                Some(words(&[b"ok"])),
            ),
            41 => snippet(
                vec![
                    text("printf -v "),
                    h(),
                    text(" %s x 2>/dev/null || true; p ok"),
                ],
                None,
            ),
            42 => snippet(
                vec![text("p \"$(cat <(printf %s A"), h(), text("B))\"")],
                Some(words(&[&cat(&cat(b"A", vb), b"B")])),
            ),
            _ => snippet(
                vec![text("coproc { p A"), h(), text("; }\nwait")],
                Some(words(&[&cat(b"A", vb)])),
            ),
        }
    }

    /// A construct that runs `inner`, as generated to `depth` more levels.
    fn statement(&mut self, rng: &mut Rng, depth: usize) -> Snippet {
        if depth == 0 || rng.below(3) == 0 {
            return self.leaf(rng);
        }
        let inner = self.statement(rng, depth - 1);
        let join = if rng.below(5) == 0 { " \\\n" } else { " " };
        let (open, close): (String, &str) = match rng.below(13) {
            0 => (format!("{{{join}"), "\n}"),
            1 => (format!("({join}"), "\n)"),
            2 => (format!("if true; then{join}"), "\nfi"),
            3 => (format!("for i in 1; do{join}"), "\ndone"),
            4 => (format!("case k in k){join}"), "\n;; esac"),
            5 => (format!("g() {{{join}"), "\n}; g"),
            6 => (format!(": \"$({join}"), "\n)\""),
            7 => (format!("x=$({join}"), "\n)"),
            // `wait $!` waits for the process substitution, which `cat` may
            // not (a redirection in it can close the pipe early).
            8 => (format!("cat >/dev/null <({join}"), "\n)\nwait $! || true"),
            9 => (format!("true | {{{join}"), "\n}"),
            10 => (format!("{{{join}"), "\n} & wait $!"),
            11 => {
                let delimiter = self.delimiter();
                let pieces = [
                    vec![text(&format!("cat >/dev/null <<{delimiter}\n$( "))],
                    inner.pieces,
                    vec![text(&format!("\n)\n{delimiter}\n"))],
                ]
                .concat();
                return Snippet {
                    pieces,
                    expected: inner.expected,
                };
            }
            _ => {
                // A backquote reads its text once more: `\`, `` ` `` and `$`
                // of the literal text are escaped (a plain value has none).
                let escape = |piece: Piece| match piece {
                    Piece::Text(text) => Piece::Text(
                        text.chars()
                            .flat_map(|ch| {
                                let escaped = matches!(ch, '\\' | '`' | '$');
                                ['\\'].into_iter().filter(move |_| escaped).chain([ch])
                            })
                            .collect(),
                    ),
                    hole => hole,
                };
                let pieces = [
                    vec![text("x=`")],
                    inner.pieces.into_iter().map(escape).collect(),
                    vec![text("\n`")],
                ]
                .concat();
                return Snippet {
                    pieces,
                    expected: inner.expected,
                };
            }
        };
        let pieces = [vec![Piece::Text(open)], inner.pieces, vec![text(close)]].concat();
        Snippet {
            pieces,
            expected: inner.expected,
        }
    }
}

const PRELUDE: &str = "p() { printf '%s\\0' \"$@\" >>\"$P\"; }; command_not_found_handle() { p \"$@\"; }; export P=probe\n";

/// The places where a user-set `IFS` splits the result of an expansion.
const IFS_LINES: &[&str] = &["IFS=.\n", "IFS=,\n", "IFS=$'\\n'\n", "IFS=$sep\n"];

/// One generated command: its pieces, the values of its holes, what it
/// should leave in the probe, and whether a value lands in arithmetic.
fn generate(rng: &mut Rng) -> (Vec<Piece>, Vec<String>, Option<Vec<u8>>, bool) {
    let mut case = Case {
        values: Vec::new(),
        delimiters: 0,
        mixed: rng.below(4) == 0,
        numeric: false,
    };
    let mut pieces = vec![text(PRELUDE)];
    if rng.below(4) == 0 {
        pieces.push(text(rng.pick(IFS_LINES)));
    }
    let mut expected = Some(Vec::new());
    for _ in 0..1 + rng.below(3) {
        let statement = case.statement(rng, 3);
        pieces.extend(statement.pieces);
        pieces.push(text("\n"));
        expected = match (expected, statement.expected) {
            (Some(mut all), Some(more)) => {
                all.extend(more);
                Some(all)
            }
            _ => None,
        };
    }
    (pieces, case.values, expected, case.numeric)
}

/// The command as `resolve` builds it (each hole a reference, numbered by
/// its hole), or every refusal.
fn build(pieces: &[Piece], values: &[String]) -> Result<String, Vec<(usize, Refusal)>> {
    let mut command = CommandText::default();
    let mut refused = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => command.push_text(text),
            Piece::Hole(hole) => {
                if let Err(refusal) = command.push_value(&[values[*hole].clone()], *hole) {
                    refused.push((*hole, refusal));
                }
            }
        }
    }
    if refused.is_empty() {
        let variables: Vec<String> = VARIABLES.iter().map(|(name, _)| name.to_string()).collect();
        refused = command.landings(&variables);
    }
    if refused.is_empty() {
        Ok(command.into_text())
    } else {
        Err(refused)
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Runs `command` in `dir` from a clean start: the probe's bytes, whether
/// bash succeeded, whether `PWNED` was made, and bash's stderr.
fn probe(command: &str, dir: &Path) -> (Vec<u8>, bool, bool, String) {
    for file in ["probe", "PWNED"] {
        let _ = std::fs::remove_file(dir.join(file));
    }
    let (_, stderr, success) = run_bash(command, dir);
    let probe = std::fs::read(dir.join("probe")).unwrap_or_default();
    (probe, success, dir.join("PWNED").exists(), stderr)
}

/// The neutral stand-in for hole `index`: plain, and found nowhere else.
fn neutral(index: usize) -> String {
    format!("qQ{index}Qq")
}

/// Runs case `index` of `seed`: whether it ran (`false`: refused), or
/// what went wrong.
fn run_case(seed: u64, index: u64, dir: &Path) -> Result<bool, String> {
    let mut rng = Rng(seed ^ index.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let (pieces, values, expected, numeric) = generate(&mut rng);
    let built = build(&pieces, &values);
    let context = |command: &str| {
        format!("seed {seed} case {index} (PIPE_SHELL_SEED={seed}): values {values:?}\ncommand {command:?}")
    };
    for (hole, value) in values.iter().enumerate() {
        let refused_as_data = built.as_ref().err().is_some_and(|refused| {
            refused.iter().any(|(id, refusal)| {
                *id == hole && matches!(refusal, Refusal::NotPlain { .. } | Refusal::Empty)
            })
        });
        if refused_as_data == is_plain_value(value) {
            return Err(format!(
                "hole {hole} ({value:?}) refused as not plain: {refused_as_data}; {}",
                context("")
            ));
        }
    }
    let Ok(command) = built else {
        return Ok(false);
    };
    let (bytes, success, pwned, stderr) = probe(&command, dir);
    let describe = |what: &str| {
        format!(
            "{what}: {}\nprobe {:?}\nexpected {:?}\nstderr {stderr}",
            context(&command),
            String::from_utf8_lossy(&bytes),
            expected
                .as_ref()
                .map(|bytes| String::from_utf8_lossy(bytes)),
        )
    };
    if pwned {
        return Err(describe("a value ran"));
    }
    let Some(expected) = &expected else {
        return Ok(true);
    };
    if bytes != *expected || !success {
        return Err(describe("the values did not arrive as text"));
    }
    // The same command with a neutral value in each hole leaves the same
    // bytes, once each neutral value is replaced by its hole's (but in
    // arithmetic, where the neutral value is a name).
    let neutrals: Vec<String> = (0..values.len()).map(neutral).collect();
    let neutral_command = build(&pieces, &neutrals).ok().filter(|_| !numeric);
    if let Some(command) = neutral_command {
        let (neutral_bytes, success, _, _) = probe(&command, dir);
        let mut replaced = String::from_utf8_lossy(&neutral_bytes).into_owned();
        for (hole, value) in values.iter().enumerate() {
            replaced = replaced.replace(&neutral(hole), value);
        }
        if !success || replaced.as_bytes() != bytes.as_slice() {
            return Err(describe(&format!(
                "the values changed the command's words: with neutral values it left {:?}",
                String::from_utf8_lossy(&neutral_bytes)
            )));
        }
    }
    Ok(true)
}

#[test]
fn plain_values_never_change_a_generated_commands_words_under_bash_and_others_are_refused() {
    let seed = env_number("PIPE_SHELL_SEED", 0x5eed_0046);
    let cases = env_number("PIPE_SHELL_CASES", 1200);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4)) as u64;
    let results: Vec<Result<(u64, u64), String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                scope.spawn(move || {
                    let dir = tempfile::tempdir().map_err(|error| error.to_string())?;
                    let (mut ran, mut refused) = (0, 0);
                    for index in (worker..cases).step_by(threads as usize) {
                        if run_case(seed, index, dir.path())? {
                            ran += 1;
                        } else {
                            refused += 1;
                        }
                    }
                    Ok((ran, refused))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a worker panicked"))
            .collect()
    });
    let (mut ran, mut refused) = (0, 0);
    for result in results {
        let (r, f) = result.unwrap_or_else(|failure| panic!("{failure}"));
        ran += r;
        refused += f;
    }
    eprintln!("seed {seed}: {ran} commands ran under bash, {refused} refused");
    // The grammar must keep reaching bash, or the test checks nothing.
    assert!(
        ran * 2 >= cases,
        "only {ran} of {cases} commands ran ({refused} refused)"
    );
}
