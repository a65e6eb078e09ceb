//! The four families of issue 32's sweep, each against bash itself: line
//! continuations, builtins that evaluate an argument, arithmetic that
//! reaches a variable through a name, and values that would arrive as
//! other words (an assignment, a tilde prefix, a regular expression, a
//! split). Every case puts hostile and benign values through a command
//! and requires a refusal, or the value's bytes and nothing run.

use super::tests::{build, check, run_bash, with, Expect};
use super::*;

/// Values that run `touch PWNED`, or change their words, if read as
/// anything but text.
const VALUES: &[&str] = &[
    "$(touch PWNED)",
    "`touch PWNED`",
    "a[$(touch PWNED)]",
    "x[$(touch PWNED)]=1",
    "($(touch PWNED))",
    "a; touch PWNED",
    "'; touch PWNED; '",
    "\\'; touch PWNED; '",
    "\\x41",
    "q+=X",
    "-v",
    "root",
    "~",
    "z.z",
    "a.b",
    "y",
    "12",
    "5.0e-5",
    "data/train.csv",
];

fn check_all(cases: &[(&str, Expect)]) {
    let dir = tempfile::tempdir().expect("temporary directory");
    for (template, expect) in cases {
        for value in VALUES {
            check(template, *expect, value, dir.path());
        }
    }
}

/// `template` with `@A@` and `@B@` each given its own value, as `resolve`
/// builds a command with two references.
fn build_two(template: &str, a: &str, b: &str) -> Result<String, Refusal> {
    let mut tracker = QuoteTracker::default();
    let mut command = String::new();
    let mut rest = template;
    let mut id = 0;
    while let Some(start) = rest.find(['@']) {
        let (before, marker) = rest.split_at(start);
        tracker.feed(before);
        command.push_str(before);
        let value = match &marker[..3] {
            "@A@" => a,
            "@B@" => b,
            _ => unreachable!("only @A@ and @B@ in templates"),
        };
        let quoted = tracker.quote(&[value.to_string()], id)?;
        id += 1;
        tracker.feed(&quoted);
        command.push_str(&quoted);
        rest = &marker[3..];
    }
    tracker.feed(rest);
    command.push_str(rest);
    match tracker.finish().into_iter().next() {
        Some((_, refusal)) => Err(refusal),
        None => Ok(command),
    }
}

#[test]
fn a_backslash_newline_is_removed_before_the_reader_reads_on() {
    check_all(&[
        ("printf '%s\\0' \"$\\\n(printf '%s.' @V@)\"", |v| {
            with("", v, ".\0")
        }),
        ("cat <\\\n<EOF\n<@V@>\nEOF\n", |v| with("<", v, ">\n")),
        ("cat <<EO\\\nF\n<@V@>\nEOF\n", |v| with("<", v, ">\n")),
        ("printf '%s\\0' $\\\n'<@V@>'", |_| None),
        ("printf '%s\\0' \"<@V@>\\\n\"", |v| with("<", v, ">\0")),
        ("printf '%s\\0' @V@\\\n@V@", |v| {
            with("", v, &format!("{v}\0"))
        }),
        (
            "printf '%s\\0' \"$(printf '%s.' \"$\\\n(printf '%s' @V@)\")\"",
            |v| with("", v, ".\0"),
        ),
        ("cat <<EOF\n$\\\n(printf '%s.' @V@)\nEOF\n", |v| {
            with("", v, ".\n")
        }),
        (
            "x=`printf '%s.' \"$\\\n(printf '%s' @V@)\"`; printf '%s\\0' \"$x\"",
            |v| with("", v, ".\0"),
        ),
    ]);
    // Where bash keeps `\` + line break, so does the reader.
    assert_eq!(place_after("echo '\\\n"), "single");
    assert_eq!(place_after("echo \"$\\\n("), "bare");
    assert_eq!(place_after("cat <\\\n<EOF\n"), "heredoc");
    assert_eq!(place_after("cat <<EO\\\nF\n"), "heredoc");
    assert_eq!(place_after("cat <<'EOF'\n\\\n"), "heredoc-quoted");
    assert_eq!(place_after("echo \\\\\n"), "bare");
}

fn place_after(text: &str) -> &'static str {
    let mut tracker = QuoteTracker::default();
    tracker.feed(text);
    assert!(tracker.lost.is_none(), "lost after {text:?}");
    tracker.place()
}

#[test]
fn builtins_that_evaluate_a_word_take_only_plain_values() {
    check_all(&[
        ("[ -v @V@ ] || true; printf '%s\\0' ok", |_| None),
        ("test -v @V@ || true; printf '%s\\0' ok", |_| None),
        ("[ @V@ @V@ ] || true; printf '%s\\0' ok", |_| None),
        ("declare @V@ 2>/dev/null || true; printf '%s\\0' ok", |_| {
            None
        }),
        ("x=(1); declare x=@V@; printf '%s\\0' \"$x\"", |v| {
            with("", v, "\0")
        }),
        ("x=(1); declare x=\"@V@\"; printf '%s\\0' \"$x\"", |v| {
            with("", v, "\0")
        }),
        ("typeset -a x=@V@; printf '%s\\0' ok", |_| None),
        (
            "f() { local -a x; local x=@V@; }; f; printf '%s\\0' ok",
            |_| None,
        ),
        (
            "export -a x=@V@ 2>/dev/null || true; printf '%s\\0' ok",
            |_| None,
        ),
        ("readonly -a x=@V@; printf '%s\\0' ok", |_| None),
        ("declare -i x=@V@ || true; printf '%s\\0' ok", |_| None),
        ("printf -v @V@ %s x || true; printf '%s\\0' ok", |_| None),
        ("printf @V@ @V@ x || true; printf '%s\\0' ok", |_| None),
        ("printf -v@V@ %s x || true; printf '%s\\0' ok", |_| None),
        ("read @V@ <<< x || true; printf '%s\\0' ok", |_| None),
        ("a=(1); unset @V@ || true; printf '%s\\0' ok", |_| None),
        ("mapfile -t @V@ <<< a || true; printf '%s\\0' ok", |_| None),
        (
            "f() { :; }; mapfile -C f -c 1 @V@ <<< a || true; printf '%s\\0' ok",
            |_| None,
        ),
        (
            "sleep 0 & wait -p @V@ -n || true; printf '%s\\0' ok",
            |_| None,
        ),
        ("trap \"printf '%s\\0' x@V@\" EXIT", |v| with("x", v, "\0")),
        ("trap 'printf \"%s\\0\" @V@' EXIT", |v| with("", v, "\0")),
        ("eval \"printf '%s\\0' '@V@'\"", |v| with("", v, "\0")),
        (
            "compgen -W @V@ >/dev/null || true; printf '%s\\0' ok",
            |_| None,
        ),
        ("bash -c \"printf '%s\\0' @V@\"", |v| with("", v, "\0")),
        ("timeout 5 sh -c 'printf \"%s\\0\" \"$1\"' sh @V@", |v| {
            with("", v, "\0")
        }),
        ("bash <<EOF\nprintf '%s\\0' @V@\nEOF\n", |v| {
            with("", v, "\0")
        }),
        (
            "PS4=@V@; set -x; true 2>/dev/null; set +x; printf '%s\\0' ok",
            |_| None,
        ),
        ("command eval \"printf '%s\\0' @V@\"", |v| with("", v, "\0")),
        ("e\\val \"printf '%s\\0' @V@\"", |v| with("", v, "\0")),
        ("let x=@V@ || true; printf '%s\\0' ok", |_| None),
    ]);
}

#[test]
fn a_value_that_would_name_an_evaluating_command_is_refused() {
    let dir = tempfile::tempdir().expect("temporary directory");
    for (name, argument) in [
        ("eval", "touch PWNED"),
        ("trap", "touch PWNED"),
        ("bash", "-c"),
    ] {
        let template = "@A@ @B@ EXIT";
        for (a, b) in [(name, argument), (name, "$(touch PWNED)")] {
            let Ok(command) = build_two(template, a, b) else {
                continue;
            };
            let _ = run_bash(&command, dir.path());
            assert!(!dir.path().join("PWNED").exists(), "{command:?} ran");
        }
    }
    assert!(build_two("@A@ 'touch PWNED' EXIT", "trap", "").is_err());
    assert!(build_two("ev@A@ 'touch PWNED'", "al", "").is_err());
    assert!(build_two("printf '%s\\0' @A@", "eval", "").is_ok());
}

#[test]
fn arithmetic_reaches_a_variable_through_a_name_so_only_numbers_go_there() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let templates = [
        "y=@A@; [[ @B@ -eq 0 ]] || true; printf '%s\\0' ok",
        "y=@A@; [[ 0 -lt \"@B@\" ]] || true; printf '%s\\0' ok",
        "y=@A@; [[ ( @B@ -ge 1 ) ]] || true; printf '%s\\0' ok",
        "y=@A@; (( @B@ )) || true; printf '%s\\0' ok",
        "y=@A@; let @B@ || true; printf '%s\\0' ok",
        "y=@A@; declare -i n=@B@ || true; printf '%s\\0' ok",
        "y=@A@; printf '%s\\0' \"${z[@B@]-ok}\"",
    ];
    for template in templates {
        for b in ["y", "y+1", "a[$(touch PWNED)]", "x=1"] {
            let Ok(command) = build_two(template, "a[$(touch PWNED)]", b) else {
                continue;
            };
            let _ = run_bash(&command, dir.path());
            assert!(!dir.path().join("PWNED").exists(), "{command:?} ran");
        }
        // A number is fine, and `==` compares text.
        assert!(build_two(template, "1", "7").is_ok(), "{template}");
    }
    assert!(build_two("[[ @A@ == @B@ ]]", "y", "y").is_ok());
    assert!(build_two("[[ -f @A@ ]]", "data/train.csv", "").is_ok());
    // `test`'s `-eq` reads integers only: nothing is evaluated there.
    assert!(build_two("y=@A@; [ @B@ -eq 0 ]", "a[$(touch PWNED)]", "y").is_ok());
}

#[test]
fn values_arrive_as_the_words_the_quoting_gives() {
    check_all(&[
        (
            "command_not_found_handle() { printf '%s\\0' \"$1\"; }; @V@; printf '%s\\0' \"${q-unset}\"",
            // A path is run as one, not looked up.
            |v| (!v.contains('/')).then(|| format!("{v}\0unset\0").into_bytes()),
        ),
        ("v=~@V@; printf '%s\\0' \"$v\"", |v| with("~", v, "\0")),
        ("v=a:~@V@; printf '%s\\0' \"$v\"", |v| with("a:~", v, "\0")),
        ("printf '%s\\0' a=~@V@", |v| with("a=~", v, "\0")),
        ("export v=b:~@V@; printf '%s\\0' \"$v\"", |v| {
            with("b:~", v, "\0")
        }),
        ("printf '%s\\0' ${y:-~@V@}", |v| with("~", v, "\0")),
        ("IFS=.; printf '%s\\0' ${y:-@V@}", |v| with("", v, "\0")),
        ("IFS=.; printf '%s\\0' ${y:-a@V@}", |v| with("a", v, "\0")),
        ("IFS=.; x=ab; printf '%s\\0' ${x/b/@V@}", |v| with("a", v, "\0")),
        ("x=ab; IFS=. printf '%s\\0' ${x/b/@V@}", |v| with("a", v, "\0")),
        (
            "[[ zzz =~ ^@V@$ ]] && printf '%s\\0' match || printf '%s\\0' other",
            |v| with("", if v == "zzz" { "match" } else { "other" }, "\0"),
        ),
        (
            "[[ a.b =~ @V@ ]] && printf '%s\\0' match || printf '%s\\0' other",
            |v| {
                let found = v.is_empty() || "a.b".contains(v);
                with("", if found { "match" } else { "other" }, "\0")
            },
        ),
    ]);
    // Plain values stay unquoted where they are not syntax.
    assert_eq!(
        build("printf '%s\\0' a=@V@", "5.0e-5").unwrap(),
        "printf '%s\\0' a=5.0e-5"
    );
    assert_eq!(
        build("v=@V@", "data/train.csv").unwrap(),
        "v=data/train.csv"
    );
    assert_eq!(build("echo @V@", "a+b").unwrap(), "echo a+b");
    assert_eq!(build("@V@", "q+=X").unwrap(), "'q+=X'");
    assert_eq!(build("v=~@V@", "root").unwrap(), "v=~'root'");
    assert_eq!(build("[[ a =~ @V@ ]]", "abc").unwrap(), "[[ a =~ abc ]]");
    // A number in a command inside arithmetic (or in a `$((` that is a
    // `$( (`) is a word too: `~0` would be `$PWD`.
    assert_eq!(
        build("x=$(( $(v=a:~@V@; echo 1) ))", "0").unwrap(),
        "x=$(( $(v=a:~'0'; echo 1) ))"
    );
}

#[test]
fn builtins_that_only_read_a_word_take_any_value() {
    // Checked against bash: these neither parse nor evaluate a quoted
    // argument, so the usual quoting is enough, and no value is refused.
    for template in [
        "getopts a @V@",
        "shift @V@",
        "x=(1); export x=@V@",
        "export X=\"<@V@>\"",
        "printf '%s\\0' @V@ @V@",
        "printf -- @V@",
        "select @V@ in a; do break; done",
    ] {
        for value in VALUES {
            assert!(
                build(template, value).is_ok(),
                "{template} refused {value:?}"
            );
        }
    }
    assert!(build("[ @V@ -eq 0 ]", "y").is_ok());
    check_all(&[
        ("getopts a @V@ || true; printf '%s\\0' ok", |_| {
            with("", "ok", "\0")
        }),
        ("shift @V@ 2>/dev/null || true; printf '%s\\0' ok", |_| {
            with("", "ok", "\0")
        }),
        (
            "[ @V@ -eq 0 ] 2>/dev/null || true; printf '%s\\0' ok",
            |_| with("", "ok", "\0"),
        ),
        ("x=(1); export x=@V@; printf '%s\\0' \"$x\"", |v| {
            with("", v, "\0")
        }),
        ("export X=\"<@V@>\"; printf '%s\\0' \"$X\"", |v| {
            with("<", v, ">\0")
        }),
        ("printf '%s\\0' @V@ @V@", |v| {
            with(v, "\0", &format!("{v}\0"))
        }),
        (
            "printf -- @V@ 2>/dev/null || true; printf '%s\\0' ok",
            |_| None,
        ),
    ]);
}
