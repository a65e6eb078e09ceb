//! The reader against bash itself. Commands are generated from a small
//! grammar of the places a value can land (leaves) inside the constructs
//! that can hold them (wrappers), each hole given its own random value,
//! hostile or benign. Every leaf records the words its value produced
//! with a probe function `p` (`printf '%s\0' "$@" >> "$P"`), or raw bytes
//! from a here-document or here-string, so the oracle is what bash wrote:
//! each command is either refused by the reader, or runs under
//! `bash -e -o pipefail -c` leaving exactly the probe bytes the user's
//! quoting implies, and no `PWNED` file (nothing a value said ran).
//!
//! Seeded and deterministic: `PIPE_SHELL_CASES` sets how many commands
//! (3,000 by default), `PIPE_SHELL_SEED` the seed; a failure names both.

use std::path::Path;
use std::process::{Command, Stdio};

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
    "-v",
    " ",
    "\t",
    ".",
    "+",
    "$",
    "${x}",
    "(",
    ")",
    "{",
    "}",
    ",",
    "..",
    "=",
    "#",
    ";",
    "&",
    "|",
    "<",
    ">",
    "!",
    "y",
    "EOF1",
    "\\\n",
    "%s",
    "[",
    "]",
    "^",
    "; touch PWNED",
    "x=1",
    "-eq",
    "IFS",
    "é",
    "&&",
    "<(",
];

/// Values a pipeline holds every day.
const BENIGN: &[&str] = &[
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
    "a,b",
    "if",
    "time",
    "coproc",
    "007",
];

fn value(rng: &mut Rng) -> String {
    if rng.below(3) == 0 {
        return rng.pick(BENIGN).to_string();
    }
    let mut value = String::new();
    for _ in 0..1 + rng.below(4) {
        value.push_str(if rng.below(3) == 0 {
            rng.pick(BENIGN)
        } else {
            rng.pick(HOSTILE)
        });
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
/// where the grammar cannot say, for which only "nothing ran" is checked).
struct Snippet {
    pieces: Vec<Piece>,
    expected: Option<Vec<u8>>,
}

struct Case {
    values: Vec<String>,
    delimiters: usize,
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
        let value = value(rng);
        self.values.push(value.clone());
        (Piece::Hole(self.values.len() - 1), value)
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
        match rng.below(44) {
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
            18 => snippet(
                vec![text("p $(( "), h(), text(" ))")],
                is_number_text(&v).then(|| words(&[vb])),
            ),
            19 => snippet(
                vec![text("let r="), h(), text(" || true; p \"${r-}\"")],
                is_number_text(&v).then(|| words(&[vb])),
            ),
            20 => {
                let (other, _) = self.hole(rng);
                snippet(
                    vec![
                        text("[[ "),
                        h(),
                        text(" -eq "),
                        other,
                        text(" ]] || true; p ok"),
                    ],
                    Some(words(&[b"ok"])),
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
                Some(words(&[b"same"])),
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
            31 => {
                // A plain value may name a program (`time`); a path runs as
                // one; a leading `%` names a job (`fg`).
                let known = !v.is_empty()
                    && !v.contains('/')
                    && !v.starts_with('%')
                    && !v
                        .chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || "_-.:@%+,".contains(ch));
                snippet(vec![h(), text(" A")], known.then(|| words(&[vb, b"A"])))
            }
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
                    vec![text(&format!("cat >/dev/null <<{delimiter}\n$("))],
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
                // of the literal text are escaped (the reader escapes values).
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

const PRELUDE: &str = "p() { printf '%s\\0' \"$@\" >>\"$P\"; }; command_not_found_handle() { p \"$@\"; }; y='a[$(touch PWNED)]'; export P=probe\n";

/// One generated command: its pieces, the values of its holes, and what
/// it should leave in the probe.
fn generate(rng: &mut Rng) -> (Vec<Piece>, Vec<String>, Option<Vec<u8>>) {
    let mut case = Case {
        values: Vec::new(),
        delimiters: 0,
    };
    let mut pieces = vec![text(PRELUDE)];
    if rng.below(4) == 0 {
        // A user-set IFS: a value's words must not split on it.
        pieces.push(text("IFS=.\n"));
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
    (pieces, case.values, expected)
}

/// The command as `resolve` builds it, or the reader's refusal.
fn build(pieces: &[Piece], values: &[String]) -> Result<String, Refusal> {
    let mut tracker = QuoteTracker::default();
    let mut command = String::new();
    for (id, piece) in pieces.iter().enumerate() {
        let text = match piece {
            Piece::Text(text) => text.clone(),
            Piece::Hole(hole) => tracker.quote(&[values[*hole].clone()], id)?,
        };
        tracker.feed(&text);
        command.push_str(&text);
    }
    match tracker.finish().into_iter().next() {
        Some((_, refusal)) => Err(refusal),
        None => Ok(command),
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Runs case `index` of `seed`; `Err` says what went wrong.
fn run_case(seed: u64, index: u64, dir: &Path) -> Result<bool, String> {
    let mut rng = Rng(seed ^ index.wrapping_mul(0x2545_f491_4f6c_dd1d));
    let (pieces, values, expected) = generate(&mut rng);
    let Ok(command) = build(&pieces, &values) else {
        return Ok(false);
    };
    for file in ["probe", "PWNED"] {
        let _ = std::fs::remove_file(dir.join(file));
    }
    let output = Command::new("timeout")
        .args(["10", "bash", "-e", "-o", "pipefail", "-c", &command])
        .current_dir(dir)
        .env("LC_ALL", "C.UTF-8")
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("cannot run bash: {error}"))?;
    let probe = std::fs::read(dir.join("probe")).unwrap_or_default();
    let describe = || {
        format!(
            "seed {seed} case {index} (PIPE_SHELL_SEED={seed}): values {values:?}\ncommand {command:?}\nprobe {:?}\nexpected {:?}\nstderr {}",
            String::from_utf8_lossy(&probe),
            expected.as_ref().map(|bytes| String::from_utf8_lossy(bytes)),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    if dir.join("PWNED").exists() {
        return Err(format!("a value ran: {}", describe()));
    }
    if let Some(expected) = &expected {
        if probe != *expected || !output.status.success() {
            return Err(format!(
                "the values did not arrive as text ({}): {}",
                output.status,
                describe()
            ));
        }
    }
    Ok(true)
}

#[test]
fn generated_commands_run_under_bash_as_the_reader_says_or_are_refused() {
    let seed = env_number("PIPE_SHELL_SEED", 0x5eed_0032);
    let cases = env_number("PIPE_SHELL_CASES", 3000);
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
        ran * 4 >= cases,
        "only {ran} of {cases} commands ran ({refused} refused)"
    );
}
