//! The values rule, case by case and against bash: in every place the old
//! context reader knew (its templates, kept here), a plain value arrives
//! as the text it is and runs nothing, or is refused where bash gives its
//! characters a meaning; any other value is refused.

use std::path::Path;
use std::process::{Command, Stdio};

use super::*;

/// The names of the `env:` entries the commands here run with; each holds
/// code that arithmetic would run if it read the variable.
pub(super) const VARIABLES: &[(&str, &str)] =
    &[("y", "a[$(touch PWNED)]"), ("MSG", "x[$(touch PWNED)]")];

fn variables() -> Vec<String> {
    VARIABLES.iter().map(|(name, _)| name.to_string()).collect()
}

/// `template` with each `@V@` given `value` (`@V@` is one reference, as
/// `${params.x}` written twice is two), as `resolve` builds a command.
pub(super) fn build(template: &str, value: &str) -> Result<String, Refusal> {
    let mut command = CommandText::default();
    for (id, piece) in template.split("@V@").enumerate() {
        if id > 0 {
            command.push_value(&[value.to_string()], id)?;
        }
        command.push_text(piece);
    }
    match command.landings(&variables()).into_iter().next() {
        Some((_, refusal)) => Err(refusal),
        None => Ok(command.into_text()),
    }
}

/// Runs `command` as a stage does, in `dir`, with [`VARIABLES`] in its
/// environment: its stdout, its stderr, and whether it succeeded.
pub(super) fn run_bash(command: &str, dir: &Path) -> (Vec<u8>, String, bool) {
    let output = Command::new("timeout")
        .args(["10", "bash", "-e", "-o", "pipefail", "-c", command])
        .current_dir(dir)
        .env("LC_ALL", "C.UTF-8")
        .envs(VARIABLES.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run bash");
    (
        output.stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
        output.status.success(),
    )
}

#[test]
fn a_plain_value_goes_in_as_it_is_and_a_list_as_one_word_an_item() {
    let mut command = CommandText::default();
    command.push_text("python train.py --lr ");
    command.push_value(&["5.0e-5".into()], 0).unwrap();
    command.push_text(" --layers ");
    command.push_value(&["64".into(), "32".into()], 1).unwrap();
    command.push_text(" > ");
    command.push_value(&["out/x@n:1,m:2".into()], 2).unwrap();
    assert!(command.landings(&[]).is_empty());
    assert_eq!(
        command.into_text(),
        "python train.py --lr 5.0e-5 --layers 64 32 > out/x@n:1,m:2"
    );
}

#[test]
fn a_value_that_is_not_plain_or_is_empty_is_refused_wherever_it_lands() {
    for value in [
        "a; touch PWNED",
        "a b",
        "$(touch PWNED)",
        "'",
        "x=1",
        "~",
        "*",
        "é",
        "a\nb",
    ] {
        for place in [
            "echo @V@",
            "echo \"@V@\"",
            "echo '@V@'",
            "cat <<'E'\n@V@\nE\n",
        ] {
            assert_eq!(
                build(place, value),
                Err(Refusal::NotPlain {
                    value: value.to_string()
                }),
                "{place:?}"
            );
        }
    }
    assert_eq!(build("echo @V@", ""), Err(Refusal::Empty));
    // `=` only where it assigns nothing: a matrix stage's output path.
    for value in [
        "a=1", "a+=1", "=1", "x,a=1", "0:a-=1", "_x=", "a==b", "1,a=2.5",
    ] {
        assert!(!is_plain_value(value), "{value}");
    }
    for value in [
        ".pipe/out/p/train@lr=0.1/model",
        ".pipe/out/p/train@lr=0.1,seed=1/model",
        "a.b=1",
        "1=2",
        "-a=1",
        "a@b=c",
    ] {
        assert!(is_plain_value(value), "{value}");
    }
    let mut command = CommandText::default();
    assert_eq!(command.push_value(&[], 0), Err(Refusal::Empty));
    assert_eq!(
        command.push_value(&["a".into(), "b c".into()], 0),
        Err(Refusal::NotPlain {
            value: "b c".into()
        })
    );
    // A NUL goes in, and the whole command is refused (`nul-byte`).
    assert!(command.push_value(&["a\0b".into()], 0).is_ok());
    let why = Refusal::NotPlain {
        value: "a; b".into(),
    }
    .why();
    assert!(why.contains("`a; b`") && why.contains("';'"), "{why}");
}

#[test]
fn a_value_that_would_begin_a_here_document_line_with_its_delimiter_is_refused() {
    let heredoc = |delimiter: &str| {
        Err(Refusal::HereDocument {
            delimiter: delimiter.to_string(),
        })
    };
    assert_eq!(build("cat <<EOF\n@V@\nEOF\n", "EOF"), heredoc("EOF"));
    assert_eq!(build("cat <<'EOF'\n@V@\nEOF\n", "EOF"), heredoc("EOF"));
    assert_eq!(build("cat <<-EOF\n\t@V@\n\tEOF\n", "EOF"), heredoc("EOF"));
    assert_eq!(build("cat <<EOF\nE@V@\nEOF\n", "OF"), heredoc("EOF"));
    assert_eq!(build("cat <\\\n<EOF\n@V@\nEOF\n", "EOF"), heredoc("EOF"));
    assert_eq!(build("cat <<EOF\nEO\\\n@V@\nEOF\n", "F"), heredoc("EOF"));
    // Inside `$(...)` bash 5 also ends it at a line that begins with it.
    assert_eq!(build("x=$(cat <<EOF\n@V@\nEOF\n)", "EOFx"), heredoc("EOF"));
    assert_eq!(build("cat <<@V@\nx\nEND\n", "END"), Err(Refusal::Delimiter));
    assert!(build("cat <<EOF\n<@V@>\nEOF\n", "EOF").is_ok());
    assert!(build("cat <<EOF\n@V@\nEOF\n", "DONE").is_ok());
    assert!(build("cat <<< @V@", "EOF").is_ok());
}

#[test]
fn a_value_where_bash_expands_braces_tilde_or_ifs_is_refused() {
    assert_eq!(build("echo {@V@}", "a,b"), Err(Refusal::Brace));
    assert_eq!(build("echo {@V@}", "1..3"), Err(Refusal::Brace));
    assert_eq!(build("echo {\"a b\",@V@}", "a,b"), Err(Refusal::Brace));
    assert_eq!(build("awk '{print @V@}'", "a,b"), Err(Refusal::Brace));
    assert!(build("echo {a,b}@V@", "a,b").is_ok());
    assert!(build("echo ${x:-@V@}", "a,b").is_ok());
    assert!(build("{ echo @V@; }", "a,b").is_ok());
    assert!(build("echo {@V@}", "a.b").is_ok());
    for place in [
        "echo ~@V@",
        "v=~@V@",
        "v=a:~@V@",
        "echo ~a@V@",
        "echo ${u:-~@V@}",
    ] {
        assert_eq!(build(place, "root"), Err(Refusal::Tilde), "{place}");
    }
    assert!(build("echo ~/@V@", "root").is_ok());
    for (place, value) in [
        ("${x%@V@}", "%s"),
        ("${x:@V@}", "-a"),
        ("${x:@V@}", "+a"),
        ("${x/@V@/r}", "/a"),
        ("${x,@V@}", ",a"),
        ("${x@V@}", ":-a"),
        ("${x@V@}", "a"),
        ("${x[1]%@V@}", "%a"),
    ] {
        assert_eq!(
            build(place, value),
            Err(Refusal::Operator),
            "{place} {value}"
        );
    }
    for (place, value) in [("${x%@V@}", "a%"), ("${x:@V@}", "1"), ("${x/a/@V@}", "/b")] {
        assert!(build(place, value).is_ok(), "{place} {value}");
    }
    let split = |separators: &str| {
        Err(Refusal::Split {
            separators: Some(separators.to_string()),
        })
    };
    assert_eq!(build("IFS=.; echo ${u:-@V@}", "a.b"), split("."));
    assert_eq!(build("IFS=',.'; echo $(echo @V@)", "a,b"), split(",."));
    assert_eq!(build("IFS=$'\\n,'; echo @V@", "a,b"), split(","));
    assert_eq!(
        build("IFS=$sep; echo @V@", "a.b"),
        Err(Refusal::Split { separators: None })
    );
    assert!(build("IFS=$sep; echo @V@", "ab").is_ok());
    assert!(build("IFS=.; echo @V@", "a,b").is_ok());
    assert!(build("while IFS= read -r l; do echo @V@; done", "a.b").is_ok());
    assert!(build("IFS=$'\\n\\t'; echo \"$IFS\" @V@", "a.b").is_ok());
    assert!(build("unset IFS; echo @V@", "a.b").is_ok());
}

#[test]
fn a_value_naming_a_variable_of_the_stages_env_is_refused() {
    for value in ["y", "MSG", "y+1", "lr:MSG"] {
        assert!(
            matches!(
                build("echo $(( @V@ ))", value),
                Err(Refusal::Variable { .. })
            ),
            "{value}"
        );
    }
    for value in ["yy", "msg", "1y", "12"] {
        assert!(build("echo $(( @V@ ))", value).is_ok(), "{value}");
    }
}

type Expect = fn(&str) -> Option<Vec<u8>>;

fn with(before: &str, value: &str, after: &str) -> Option<Vec<u8>> {
    Some(format!("{before}{value}{after}").into_bytes())
}

/// Arithmetic prints a number as it is written; a name there reads a
/// variable, what it prints is the command's.
fn number(value: &str) -> Option<Vec<u8>> {
    let canonical = value == "0"
        || (value.len() < 18
            && value.starts_with(|ch: char| ('1'..='9').contains(&ch))
            && value.chars().all(|ch| ch.is_ascii_digit()));
    canonical.then(|| format!("{value}\0").into_bytes())
}

fn ok(_: &str) -> Option<Vec<u8>> {
    with("", "ok", "\0")
}

fn unknown(_: &str) -> Option<Vec<u8>> {
    None
}

/// Inside `[[ ... ]]` a word that starts with `-` may be an operator
/// (`-v`, `-f`).
fn not_an_operator(value: &str) -> Option<Vec<u8>> {
    (!value.starts_with('-')).then(|| ok(value))?
}

/// In a regular expression `.` and `+` are the expression's.
fn regex(value: &str, found: bool) -> Option<Vec<u8>> {
    let literal = !value.contains(['.', '+']);
    literal.then(|| with("", if found { "match" } else { "other" }, "\0"))?
}

/// The places the old context reader knew (its templates and those of its
/// families), each with what a plain value put there prints; `unknown`
/// where the place gives the value a meaning of its own (a number, a
/// program, a name), for which only "nothing ran" is checked.
const TEMPLATES: &[(&str, Expect)] = &[
    ("printf '%s\\0' @V@", |v| with("", v, "\0")),
    ("printf '%s\\0' \"<@V@>\"", |v| with("<", v, ">\0")),
    ("printf '%s\\0' '<@V@>'", |v| with("<", v, ">\0")),
    ("printf '%s\\0' $'<@V@>'", |v| with("<", v, ">\0")),
    ("printf '%s\\0' $\"<@V@>\"", |v| with("<", v, ">\0")),
    ("(printf '%s\\0' @V@)", |v| with("", v, "\0")),
    ("printf '%s\\0' \"$(printf '%s.' @V@)\"", |v| {
        with("", v, ".\0")
    }),
    ("printf '%s\\0' \"$(printf '%s.' '<@V@>')\"", |v| {
        with("<", v, ">.\0")
    }),
    ("cat <(printf '%s.' @V@)", |v| with("", v, ".")),
    ("x=`printf '%s.' @V@`; printf '%s\\0' \"$x\"", |v| {
        with("", v, ".\0")
    }),
    ("printf '%s\\0' \"`printf '%s.' \\\"<@V@>\\\"`\"", |v| {
        with("<", v, ">.\0")
    }),
    (
        "x=`printf '%s' \"\\`printf '%s.' @V@\\`\"`; printf '%s\\0' \"$x\"",
        |v| with("", v, ".\0"),
    ),
    ("cat <<EOF\n@V@\nEOF\n", |v| with("", v, "\n")),
    ("cat <<EOF\n<@V@>\nEOF\n", |v| with("<", v, ">\n")),
    ("cat <<'EOF'\n@V@\nEOF\n", |v| with("", v, "\n")),
    ("cat <<-EOF\n\t@V@\n\tEOF\n", |v| with("", v, "\n")),
    ("cat <<-\"EOF\"\n\t<@V@>\n\tEOF\n", |v| with("<", v, ">\n")),
    ("cat <<EOF\n$(printf '%s.' @V@)\nEOF\n", |v| {
        with("", v, ".\n")
    }),
    ("cat <<EOF\n`printf '%s.' @V@`\nEOF\n", |v| {
        with("", v, ".\n")
    }),
    ("cat <<EOF\n${unset_var:-@V@}\nEOF\n", |v| with("", v, "\n")),
    ("cat <<A; cat <<'B'\n@V@\nA\n<@V@>\nB\n", |v| {
        with(v, "\n<", &format!("{v}>\n"))
    }),
    ("cat <<<@V@", |v| with("", v, "\n")),
    ("printf '%s\\0' \\@V@", |v| with("", v, "\0")),
    ("printf '%s\\0' \"\\@V@\"", |v| with("\\", v, "\0")),
    ("cat <<EOF\n\\@V@\nEOF\n", |v| with("\\", v, "\n")),
    ("printf '%s\\0' $(( @V@ ))", number),
    ("(( x = @V@ )) || true; printf '%s\\0' \"$x\"", number),
    ("printf '%s\\0' $[ @V@ ]", number),
    ("a=(); a[@V@]=1; printf '%s\\0' \"${!a[@]}\"", number),
    ("a=(x y); printf '%s\\0' \"${a[@V@]:-}\"", unknown),
    ("x=abcdef; printf '%s\\0' \"${x:@V@}\"", unknown),
    ("x=abcdef; printf '%s\\0' \"${x:1:@V@}\"", unknown),
    ("printf '%s\\0' ok # @V@", ok),
    ("printf '%s\\0' \"$(printf ok # @V@\n)\"", ok),
    ("printf '%s\\0' ${unset_var:-@V@}", |v| with("", v, "\0")),
    ("printf '%s\\0' \"${unset_var:-@V@}\"", |v| {
        with("", v, "\0")
    }),
    ("printf '%s\\0' ${unset_var:-'<@V@>'}", |v| {
        with("<", v, ">\0")
    }),
    ("x=a@V@b; printf '%s\\0' \"${x#a@V@}\"", |_| {
        with("", "b", "\0")
    }),
    ("x=a@V@b; printf '%s\\0' ${x%@V@b}", |_| with("", "a", "\0")),
    ("x=ab; printf '%s\\0' ${x/b/@V@}", |v| with("a", v, "\0")),
    ("x=ab; printf '%s\\0' \"${x/b/@V@}\"", |v| {
        with("a", v, "\0")
    }),
    ("[[ @V@ == @V@ ]] && printf '%s\\0' ok", not_an_operator),
    (
        "[[ @V@ -eq 0 ]] 2>/dev/null || true; printf '%s\\0' ok",
        not_an_operator,
    ),
    ("printf '%s\\0' ~@V@", |v| with("~", v, "\0")),
    ("printf '%s\\0' {@V@}", |v| with("{", v, "}\0")),
    ("printf '%s\\0' {a,@V@}", |v| with("a\0", v, "\0")),
    ("printf '%s\\0' x=@V@", |v| with("x=", v, "\0")),
    ("printf '%s\\0' \"$(cat <<EOF\n<@V@>\nEOF\n)\"", |v| {
        with("<", v, ">\0")
    }),
    ("cat <<EOF\n'<@V@>'\nEOF\n", |v| with("'<", v, ">'\n")),
    ("a=(); a+=(@V@); printf '%s\\0' \"${a[@]}\"", |v| {
        with("", v, "\0")
    }),
    ("for i in @V@; do printf '%s\\0' \"$i\"; done", |v| {
        with("", v, "\0")
    }),
    (
        "case x in @V@) printf '%s\\0' same;; *) printf '%s\\0' ok;; esac",
        |v| with("", if v == "x" { "same" } else { "ok" }, "\0"),
    ),
    (": <<EOF\n@V@\nEOF\nprintf '%s\\0' ok", ok),
    ("f() { printf '%s\\0' \"$@\"; }; f @V@", |v| {
        with("", v, "\0")
    }),
    ("cat ${unset_var:-<(printf '%s.' @V@)}", |v| {
        with("", v, ".")
    }),
    ("printf '%s\\0' \"${unset_var:-@V@(x)}\"", |v| {
        with("", v, "(x)\0")
    }),
    (
        "x=$(cat <<-EOF\n\t<@V@>\n\tEOF)\nprintf '%s\\0' \"$x\"",
        |v| with("<", v, ">\0"),
    ),
    ("x=(1); declare x=@V@; printf '%s\\0' \"$x\"", |v| {
        with("", v, "\0")
    }),
    (
        "declare -i x=@V@ 2>/dev/null || true; printf '%s\\0' ok",
        unknown,
    ),
    (
        "printf -v @V@ %s x 2>/dev/null || true; printf '%s\\0' ok",
        ok,
    ),
    ("read @V@ <<< x 2>/dev/null || true; printf '%s\\0' ok", ok),
    ("trap \"printf '%s\\0' x@V@\" EXIT", |v| with("x", v, "\0")),
    ("eval \"printf '%s\\0' '@V@'\"", |v| with("", v, "\0")),
    ("eval \"printf '%s\\0' @V@\"", |v| with("", v, "\0")),
    ("bash -c \"printf '%s\\0' @V@\"", |v| with("", v, "\0")),
    ("bash <<< \"printf '%s\\0' @V@\"", |v| with("", v, "\0")),
    ("echo \"printf '%s\\0' @V@\" | bash", |v| with("", v, "\0")),
    ("source <(echo \"printf '%s\\0' @V@\")", |v| {
        with("", v, "\0")
    }),
    ("bash <<EOF\nprintf '%s\\0' @V@\nEOF\n", |v| {
        with("", v, "\0")
    }),
    (
        "shopt -s expand_aliases\nalias greet=\"printf '%s\\0' @V@\"\ngreet",
        |v| with("", v, "\0"),
    ),
    (
        "PS4=@V@; set -x; true 2>/dev/null; set +x; printf '%s\\0' ok",
        ok,
    ),
    ("let x=@V@ 2>/dev/null || true; printf '%s\\0' ok", unknown),
    (
        "[[ zzz =~ ^@V@$ ]] && printf '%s\\0' match || printf '%s\\0' other",
        |v| regex(v, v == "zzz"),
    ),
    (
        "[[ a.b =~ @V@ ]] && printf '%s\\0' match || printf '%s\\0' other",
        |v| regex(v, "a.b".contains(v)),
    ),
    ("IFS=.; printf '%s\\0' ${unset_var:-@V@}", |v| {
        with("", v, "\0")
    }),
    ("IFS=.; x=ab; printf '%s\\0' ${x/b/@V@}", |v| {
        with("a", v, "\0")
    }),
    ("IFS=,; printf '%s\\0' $(printf '%s' @V@)", |v| {
        with("", v, "\0")
    }),
    ("v=a:~@V@; printf '%s\\0' \"$v\"", |v| with("a:~", v, "\0")),
    (
        "command_not_found_handle() { :; }; @V@ 2>/dev/null || true; printf '%s\\0' ok",
        unknown,
    ),
];

/// Plain values that mean something somewhere, and everyday ones.
const PLAIN: &[&str] = &[
    "a",
    "y",
    "MSG",
    "root",
    "z.z",
    "a.b",
    "a,b",
    "1..3",
    "12",
    "-3",
    "007",
    "5.0e-5",
    "data/train.csv",
    "EOF",
    "B",
    "zzz",
    "IFS",
    "eval",
    "if",
    "-v",
    "%s",
    "+",
    "x@y:1",
    "out/t@lr=0.1",
    "k.v=1",
];

/// Values that run `touch PWNED` or change words if read as anything but
/// text.
const OTHERS: &[&str] = &[
    "",
    "a; touch PWNED",
    "$(touch PWNED)",
    "`touch PWNED`",
    "a\nEOF\ntouch PWNED",
    "a[$(touch PWNED)]",
    "it's \"q\" \\ $HOME * ?",
    "q+=X",
    "BASH_ENV=x",
    "~",
    "a b",
    "\t",
];

/// Puts `value` through `template`: a value that is not plain must be
/// refused; a plain one is refused, or the command prints what the
/// template says and runs nothing of the value's.
fn check(template: &str, expect: Expect, value: &str, dir: &Path) -> bool {
    let built = build(template, value);
    if !is_plain_value(value) {
        assert!(
            matches!(built, Err(Refusal::NotPlain { .. } | Refusal::Empty)),
            "{value:?} in {template:?} was not refused: {built:?}"
        );
        return false;
    }
    let Ok(command) = built else {
        return false;
    };
    let _ = std::fs::remove_file(dir.join("PWNED"));
    let (stdout, stderr, _) = run_bash(&command, dir);
    assert!(
        !dir.join("PWNED").exists(),
        "the value {value:?} ran in {template:?}: {command:?}"
    );
    assert!(
        !stderr.contains("command not found"),
        "a word of {value:?} ran in {template:?}: {command:?}: {stderr}"
    );
    if let Some(expected) = expect(value) {
        assert!(
            stdout == expected,
            "the value {value:?} did not arrive as text in {template:?}: {command:?}\nprinted {:?}, expected {:?}\n{stderr}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&expected),
        );
    }
    true
}

#[test]
fn in_every_place_the_old_reader_knew_a_plain_value_is_text_and_any_other_is_refused() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let ran: usize = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                scope.spawn(move || {
                    let dir = tempfile::tempdir().expect("temporary directory");
                    let mut ran = 0;
                    for (template, expect) in TEMPLATES.iter().skip(worker).step_by(threads) {
                        for value in PLAIN.iter().chain(OTHERS) {
                            ran += usize::from(check(template, *expect, value, dir.path()));
                        }
                    }
                    ran
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a worker panicked"))
            .sum()
    });
    // Most plain values must go in, or the rule checks little.
    assert!(
        ran * 10 >= TEMPLATES.len() * PLAIN.len() * 7,
        "only {ran} commands ran"
    );
}
