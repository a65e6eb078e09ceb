use std::path::Path;
use std::process::{Command, Stdio};

use proptest::prelude::*;

use super::*;

fn tracker_after(text: &str) -> QuoteTracker {
    let mut tracker = QuoteTracker::default();
    tracker.feed(text);
    tracker
}

fn place_after(text: &str) -> &'static str {
    let tracker = tracker_after(text);
    assert!(
        tracker.lost.is_none(),
        "lost after {text:?}: {:?}",
        tracker.lost
    );
    tracker.place()
}

fn quote_after(text: &str, value: &str) -> Result<String, Refusal> {
    let mut tracker = tracker_after(text);
    let quoted = tracker.quote(&[value.to_string()], 0)?;
    tracker.feed(&quoted);
    match tracker.finish().into_iter().next() {
        Some((_, refusal)) => Err(refusal),
        None => Ok(quoted),
    }
}

#[test]
fn follows_quotes_escapes_and_comments() {
    assert_eq!(place_after("echo "), "bare");
    assert_eq!(place_after("echo \"a "), "double");
    assert_eq!(place_after("echo \"a \\\" "), "double");
    assert_eq!(place_after("echo 'a \" "), "single");
    assert_eq!(place_after("echo \\' "), "bare");
    assert_eq!(place_after("echo $'a "), "ansi-c");
    assert_eq!(place_after("echo $'a\\' "), "ansi-c");
    assert_eq!(place_after("echo a # it's "), "comment");
    assert_eq!(place_after("echo a # it's\necho "), "bare");
    assert_eq!(place_after("echo a#b "), "bare");
    assert_eq!(place_after("echo \\"), "escaped");
    assert_eq!(place_after("echo \"\\"), "escaped");
}

#[test]
fn a_command_substitution_inside_double_quotes_is_a_command() {
    assert_eq!(place_after("echo \"$(echo "), "bare");
    assert_eq!(place_after("echo \"$("), "bare");
    assert_eq!(place_after("echo \"$(echo \"a "), "double");
    assert_eq!(place_after("echo \"$(echo \"$(echo 'a "), "single");
    assert_eq!(place_after("echo \"$(echo a) "), "double");
    assert_eq!(place_after("echo \"$(echo (a) b) "), "double");
    assert_eq!(place_after("echo \"$(echo \")\" "), "bare");
    assert_eq!(place_after("echo \"$(echo # )\n"), "bare");
    assert_eq!(place_after("echo \"$(echo # )\n) "), "double");
    assert_eq!(place_after("echo $(cat <(echo a) "), "bare");
    assert_eq!(place_after("echo $(cat <(echo a)) "), "bare");
}

#[test]
fn a_backquote_is_a_command_of_its_own() {
    assert_eq!(place_after("echo `echo "), "bare");
    assert_eq!(place_after("echo \"`echo "), "bare");
    assert_eq!(place_after("echo \"`echo ' "), "single");
    assert_eq!(place_after("echo \"`echo \\\"a "), "double");
    assert_eq!(place_after("echo \"`echo a` "), "double");
    assert_eq!(place_after("echo `echo \\`echo "), "bare");
    assert_eq!(place_after("echo `echo \\`echo\\` "), "bare");
    // A value inside is quoted for the inside, then escaped for the
    // backquote: the backquote gives `'a$b'` back to the inner command.
    assert_eq!(quote_after("echo `echo ", "a$b").unwrap(), r"'a\$b'");
    assert_eq!(
        quote_after("echo `echo \\`echo ", "a$b").unwrap(),
        r"'a\\\$b'"
    );
    assert_eq!(quote_after("echo \"`echo ", "`").unwrap(), r"'\`'");
}

#[test]
fn here_documents_are_followed_line_by_line() {
    assert_eq!(place_after("cat <<EOF\n"), "heredoc");
    assert_eq!(place_after("cat <<EOF\nabc "), "heredoc");
    assert_eq!(place_after("cat <<EOF\nabc\nEOF\n"), "bare");
    // The body starts after the line's end, not a line break in quotes.
    assert_eq!(place_after("cat <<EOF; echo \"a\n"), "double");
    assert_eq!(place_after("cat <<EOF; echo \"a\nb\"\n"), "heredoc");
    assert_eq!(place_after("cat <<EOF "), "bare");
    assert_eq!(place_after("cat <<'EOF'\n"), "heredoc-quoted");
    assert_eq!(place_after("cat <<\"EOF\"\n"), "heredoc-quoted");
    assert_eq!(place_after("cat <<\\EOF\n"), "heredoc-quoted");
    assert_eq!(place_after("cat <<E\"O\"F\nx\nEOF\n"), "bare");
    assert_eq!(place_after("cat <<-EOF\n\tx\n\tEOF\n"), "bare");
    assert_eq!(place_after("cat <<EOF\n\tEOF\n"), "heredoc");
    assert_eq!(place_after("cat << EOF\nEOF\n"), "bare");
    assert_eq!(place_after("cat <<A; cat <<B\nA\n"), "heredoc");
    assert_eq!(place_after("cat <<A; cat <<B\nA\nB\n"), "bare");
    assert_eq!(place_after("cat <<EOF\n$(echo "), "bare");
    assert_eq!(place_after("cat <<EOF\n$(echo\nEOF\n"), "bare");
    // `\` + line break joins lines before the delimiter is looked for.
    assert_eq!(place_after("cat <<EOF\nEO\\\nF\n"), "bare");
    assert_eq!(place_after("cat <<'EOF'\nEO\\\nF\n"), "heredoc-quoted");
    assert_eq!(place_after("cat <<EOF\nab\\\\\nEOF\n"), "bare");
    // A here-string is a word.
    assert_eq!(place_after("cat <<<"), "bare");
    assert_eq!(place_after("cat <<"), "delimiter");
    assert_eq!(place_after("cat <<-"), "delimiter");
    assert_eq!(place_after("cat <<E"), "delimiter");
    assert_eq!(place_after("x=$(cat <<EOF\na\nEOF\n) "), "bare");
    // Inside `$(...)` or `<(...)` bash 5.2 also ends the body at a line that
    // starts with the delimiter and holds a `)`, and reads the rest of it.
    assert_eq!(place_after("x=$(cat <<EOF\na\nEOF)\n"), "bare");
    assert_eq!(place_after("x=$(cat <<EOF\na\nEOF)"), "heredoc");
    assert_eq!(place_after("x=\"$(cat <<EOF\na\nEOF x)\n"), "double");
    assert_eq!(place_after("x=\"$(cat <<EOF\na\nEOF; \"x)\n"), "double");
    assert_eq!(place_after("cat <(cat <<EOF\na\nEOF)\n"), "bare");
    assert_eq!(place_after("x=$( (cat <<EOF\nEOF x)\n"), "bare");
    assert_eq!(place_after("(cat <<EOF\nEOF x)\n"), "heredoc");
    assert_eq!(place_after("cat <<EOF\nEOF)\n"), "heredoc");
    assert_eq!(place_after("x=`cat <<EOF\nEOF x)\n"), "heredoc");
}

#[test]
fn arithmetic_and_parameter_expansions_are_followed() {
    assert_eq!(place_after("echo $(( "), "arithmetic");
    assert_eq!(place_after("echo $(( (1 + "), "arithmetic");
    assert_eq!(place_after("echo $(( (1) )) "), "bare");
    assert_eq!(place_after("(( "), "arithmetic");
    assert_eq!(place_after("(( 1 )); echo "), "bare");
    assert_eq!(place_after("echo $[ "), "arithmetic");
    assert_eq!(place_after("echo $[ a[1] ] "), "bare");
    assert_eq!(place_after("echo ${x:-"), "param-word");
    assert_eq!(place_after("echo \"${x:-"), "param-word-double");
    assert_eq!(place_after("echo ${x:-'"), "single");
    assert_eq!(place_after("echo \"${x:-'"), "single");
    assert_eq!(place_after("echo \"${x:-'}'} "), "double");
    assert_eq!(place_after("echo ${x#"), "param-pattern");
    assert_eq!(place_after("echo ${x//"), "param-pattern");
    assert_eq!(place_after("echo ${x/a/"), "param-replacement");
    assert_eq!(place_after("echo ${x:"), "arithmetic");
    assert_eq!(place_after("echo ${x:1:"), "arithmetic");
    assert_eq!(place_after("echo ${a["), "arithmetic");
    assert_eq!(place_after("echo ${"), "param-name");
    assert_eq!(place_after("echo ${x:-{a} "), "bare");
    assert_eq!(place_after("echo ${x:-{a}} "), "bare");
    assert_eq!(place_after("echo ${x:-'}'} "), "bare");
    assert_eq!(place_after("echo ${#x} "), "bare");
    assert_eq!(place_after("echo $"), "dollar");
    assert_eq!(place_after("echo $${x:-"), "bare");
    assert_eq!(place_after("echo \"$${x:-"), "double");
    assert_eq!(place_after("echo $# "), "bare");
}

#[test]
fn syntax_it_cannot_follow_refuses_every_later_value() {
    for text in [
        "x=$(case a in a) echo ",
        "x=$((echo a); echo ",
        "cat <<EOF; x=$(echo\n",
        "cat <<$x\n",
    ] {
        let mut tracker = tracker_after(text);
        assert!(tracker.lost.is_some(), "{text:?}");
        assert!(tracker.quote(&["a".to_string()], 0).is_err(), "{text:?}");
    }
    // A `case` outside `$(...)` is fine.
    assert_eq!(place_after("case a in a) echo "), "bare");
}

#[test]
fn plain_values_stay_as_written() {
    for plain in [
        "5.0e-5",
        "data/train.csv",
        ".pipe/out/train@p=32-true/model",
        "--lr",
        "a,b",
    ] {
        assert_eq!(quote_after("python train.py ", plain).unwrap(), plain);
        assert_eq!(quote_after("python \"$(echo ", plain).unwrap(), plain);
        assert_eq!(quote_after("cat <<EOF\n", plain).unwrap(), plain);
    }
}

#[test]
fn other_values_become_one_word() {
    let bare = |value: &str| quote_after("echo ", value).unwrap();
    assert_eq!(bare("$(touch x)"), "'$(touch x)'");
    assert_eq!(bare("it's"), r"'it'\''s'");
    assert_eq!(bare(""), "''");
    assert_eq!(bare("A=1"), "'A=1'");
    assert_eq!(bare("~/x"), "'~/x'");
    assert_eq!(
        quote_after("echo \"", "a\"$b`\\").unwrap(),
        "a\\\"\\$b\\`\\\\"
    );
    assert_eq!(quote_after("echo '", "it's").unwrap(), r"it'\''s");
    assert_eq!(
        quote_after("echo \"$(echo ", "a; touch PWNED").unwrap(),
        "'a; touch PWNED'"
    );
    assert_eq!(
        quote_after("cat <<EOF\n", "$(touch PWNED) `x` \\").unwrap(),
        r"\$(touch PWNED) \`x\` \\"
    );
    assert_eq!(
        quote_after("cat <<'EOF'\n", "$(touch PWNED)").unwrap(),
        "$(touch PWNED)"
    );
    assert_eq!(quote_after("echo a # ", "x\ntouch y").unwrap(), "x touch y");
    // A `~` or `{` before it would expand a plain value.
    assert_eq!(quote_after("echo ~", "root").unwrap(), "'root'");
    assert_eq!(quote_after("echo {", "a,b").unwrap(), "'a,b'");
    assert_eq!(quote_after("echo {a,", "b").unwrap(), "b");
    assert_eq!(quote_after("echo ${x:-", "a b").unwrap(), "'a b'");
    assert_eq!(quote_after("echo \"${x:-", "a}$").unwrap(), r"a\}\$");
    assert_eq!(quote_after("echo ${x#", "a/*").unwrap(), "'a/*'");
}

#[test]
fn what_cannot_be_made_text_is_refused() {
    let refused = |text: &str, value: &str| {
        let result = quote_after(text, value);
        assert!(result.is_err(), "{text:?} + {value:?} gave {result:?}");
    };
    refused("echo $(( ", "a[$(touch PWNED)]");
    refused("echo $(( ", "1+1");
    refused("(( x = ", "a");
    refused("echo $[ ", "a");
    refused("a[", "$(touch PWNED)");
    refused("echo ${a[", "x");
    refused("echo ${x:", "-1");
    refused("echo $(( $(echo ", "a");
    refused("[[ ", "a[$(touch PWNED)]");
    refused("echo \\", "$(touch PWNED)");
    refused("echo \"\\", "$(touch PWNED)");
    refused("echo \\", "");
    refused("cat <<EOF\n\\", "$(touch PWNED)");
    refused("cat <<'EOF'\n", "a\nEOF\ntouch PWNED");
    refused("cat <<EOF\n", "a\nEOF\ntouch PWNED");
    refused("cat <<-EOF\n", "a\n\tEOF\ntouch PWNED");
    refused("cat <<-EOF\n", "\ta");
    refused("cat <<EOF\n", "EO");
    refused("cat <<EOF\n", "EOF");
    refused("cat <<EOF\n$(echo ", "a\nEOF\n");
    refused("cat <<EOF\n`echo ", "a\nEOF\n");
    refused("cat <<EOF\n${x:-", "'");
    refused("echo \"${x:-", "it's");
    refused("echo \"${x:-'", "a b");
    refused("echo \"${x:-", "<(j");
    refused("echo \"${x:-<", "(j");
    refused("echo \"${x:-<(echo ", "a");
    refused("echo \"${x,", ",a");
    refused("cat <<", "EOF");
    refused("cat << ", "EOF");
    refused("cat <<E", "OF");
    refused("x=$(cat <<EOF\n", "EOF x)");
    refused("x=$(cat <<EOF\n", "a\nEOF; touch PWNED)\n");
    refused("x=$(cat <<EOF\nEOF", " ");
    refused("x=$(cat <<'EOF'\n", "EOFx");
    refused("echo ${", "PATH");
    refused("echo \"${x#", "*");
    refused("echo ${x/a/", "b c");
    refused("echo $'", "a");
    refused("echo ", "a\0b");
    // A reserved word where a command starts is quoted, elsewhere not.
    assert_eq!(quote_after("", "if").unwrap(), "'if'");
    assert_eq!(quote_after("true; ", "done").unwrap(), "'done'");
    assert_eq!(quote_after("echo \"$(", "time").unwrap(), "'time'");
    assert_eq!(quote_after("for x ", "in").unwrap(), "'in'");
    assert_eq!(quote_after("A=1 ", "then").unwrap(), "'then'");
    assert_eq!(quote_after("echo ", "if").unwrap(), "if");
    assert_eq!(quote_after("echo a", "if").unwrap(), "if");
    refused("echo a # ", "a\0b");
    // Where a plain value is fine.
    assert_eq!(quote_after("echo $(( ", "12").unwrap(), "12");
    assert_eq!(quote_after("echo $(( ", "-3").unwrap(), "-3");
    assert_eq!(quote_after("echo \\", "abc").unwrap(), "abc");
    assert_eq!(quote_after("cat <<EOF\n", "EOFX").unwrap(), "EOFX");
    assert_eq!(quote_after("cat <<EOF\nx", "EOF").unwrap(), "EOF");
    assert_eq!(quote_after("cat <<EOF\n", "a\nb\n").unwrap(), "a\nb\n");
    assert_eq!(quote_after("cat <<EOF\n", "EOF x)").unwrap(), "EOF x)");
    assert_eq!(quote_after("x=$(cat <<EOF\n", "xEOF)").unwrap(), "xEOF)");
    assert_eq!(quote_after("echo ${x/a/", "b").unwrap(), "b");
    // Its closing quote lands on the line `EOF` too, which is then `EOF'`.
    assert_eq!(
        quote_after("cat <<EOF\n$(echo ", "a\nEOF").unwrap(),
        "'a\nEOF'"
    );
    assert_eq!(quote_after("echo ${x%", "%a").unwrap(), "'%a'");
    assert_eq!(quote_after("echo ${x%%", "%a").unwrap(), "'%a'");
}

#[test]
fn a_refusal_says_where_and_why() {
    let refusal = quote_after("echo $(( ", "a[$(touch PWNED)]").unwrap_err();
    assert!(refusal.place.contains("arithmetic"), "{refusal:?}");
    assert!(refusal.why.contains("a[$(touch PWNED)]"), "{refusal:?}");
    let refusal = quote_after("cat <<'EOF'\n", "a\nEOF\nb").unwrap_err();
    assert!(refusal.place.contains("`EOF`"), "{refusal:?}");
}

/// A command with one value put in at each `@V@`, as `resolve` builds it.
pub(super) fn build(template: &str, value: &str) -> Result<String, Refusal> {
    let mut tracker = QuoteTracker::default();
    let mut command = String::new();
    let mut pieces = template.split("@V@");
    let first = pieces.next().unwrap_or_default();
    tracker.feed(first);
    command.push_str(first);
    for (id, piece) in pieces.enumerate() {
        let quoted = tracker.quote(&[value.to_string()], id)?;
        tracker.feed(&quoted);
        command.push_str(&quoted);
        tracker.feed(piece);
        command.push_str(piece);
    }
    match tracker.finish().into_iter().next() {
        Some((_, refusal)) => Err(refusal),
        None => Ok(command),
    }
}

/// What a template prints for a value that arrives as text.
pub(super) type Expect = fn(&str) -> Option<Vec<u8>>;

pub(super) fn with(before: &str, value: &str, after: &str) -> Option<Vec<u8>> {
    Some(format!("{before}{value}{after}").into_bytes())
}

/// Arithmetic prints the number; anything else there must be refused.
fn number(value: &str) -> Option<Vec<u8>> {
    let canonical = value == "0"
        || (value.len() < 18
            && value.starts_with(|ch: char| ('1'..='9').contains(&ch))
            && value.chars().all(|ch| ch.is_ascii_digit()));
    canonical.then(|| format!("{value}\0").into_bytes())
}

/// Every context pipe knows, with what a value put there prints. Each runs
/// under `bash -e -o pipefail -c`, as a stage's `run:` does.
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
    ("printf '%s\\0' \"$( (printf '%s.' @V@) )\"", |v| {
        with("", v, ".\0")
    }),
    ("printf '%s\\0' \"$(printf '%s.' \"<@V@>\")\"", |v| {
        with("<", v, ">.\0")
    }),
    (
        "printf '%s\\0' \"$(printf '%s' \"$(printf '%s.' @V@)\")\"",
        |v| with("", v, ".\0"),
    ),
    ("printf '%s\\0' \"$(printf '%s.' '<@V@>')\"", |v| {
        with("<", v, ">.\0")
    }),
    ("cat <(printf '%s.' @V@)", |v| with("", v, ".")),
    ("x=`printf '%s.' @V@`; printf '%s\\0' \"$x\"", |v| {
        with("", v, ".\0")
    }),
    ("printf '%s\\0' \"`printf '%s.' @V@`\"", |v| {
        with("", v, ".\0")
    }),
    ("printf '%s\\0' \"`printf '%s.' \\\"<@V@>\\\"`\"", |v| {
        with("<", v, ">.\0")
    }),
    (
        "x=`printf '%s' \"\\`printf '%s.' @V@\\`\"`; printf '%s\\0' \"$x\"",
        |v| with("", v, ".\0"),
    ),
    (
        "x=`printf '%s' \"$(printf '%s.' @V@)\"`; printf '%s\\0' \"$x\"",
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
    ("printf '%s\\0' $(( $(printf '%s' @V@) ))", number),
    ("a=(); a[@V@]=1; printf '%s\\0' \"${!a[@]}\"", number),
    ("a=(x y); printf '%s\\0' \"${a[@V@]:-}\"", |_| None),
    ("x=abcdef; printf '%s\\0' \"${x:@V@}\"", |_| None),
    ("x=abcdef; printf '%s\\0' \"${x:1:@V@}\"", |_| None),
    ("printf '%s\\0' ok # @V@", |_| with("", "ok", "\0")),
    ("printf '%s\\0' \"$(printf ok # @V@\n)\"", |_| {
        with("", "ok", "\0")
    }),
    ("x=`printf ok # @V@`; printf '%s\\0' \"$x\"", |_| {
        with("", "ok", "\0")
    }),
    ("printf '%s\\0' ${unset_var:-@V@}", |v| with("", v, "\0")),
    ("printf '%s\\0' \"${unset_var:-@V@}\"", |v| {
        with("", v, "\0")
    }),
    ("printf '%s\\0' ${unset_var:-'<@V@>'}", |v| {
        with("<", v, ">\0")
    }),
    ("printf '%s\\0' ${unset_var:-\"<@V@>\"}", |v| {
        with("<", v, ">\0")
    }),
    ("x=a@V@b; printf '%s\\0' \"${x#a@V@}\"", |_| {
        with("", "b", "\0")
    }),
    ("x=a@V@b; printf '%s\\0' ${x%@V@b}", |_| with("", "a", "\0")),
    ("x=a@V@b; printf '%s\\0' \"${x%'@V@b'}\"", |_| {
        with("", "a", "\0")
    }),
    ("x=ab; printf '%s\\0' ${x/b/@V@}", |v| with("a", v, "\0")),
    ("x=ab; printf '%s\\0' \"${x/b/@V@}\"", |v| {
        with("a", v, "\0")
    }),
    ("[[ @V@ == @V@ ]] && printf '%s\\0' ok", |_| {
        with("", "ok", "\0")
    }),
    ("[[ @V@ -eq 0 ]] || true; printf '%s\\0' ok", |_| {
        with("", "ok", "\0")
    }),
    ("printf '%s\\0' ~@V@", |v| with("~", v, "\0")),
    ("printf '%s\\0' {@V@}", |v| with("{", v, "}\0")),
    ("printf '%s\\0' {a,@V@}", |_| None),
    ("printf '%s\\0' x=@V@", |v| with("x=", v, "\0")),
    ("printf '%s\\0' \"$(cat <<EOF\n<@V@>\nEOF\n)\"", |v| {
        with("<", v, ">\0")
    }),
    ("cat <<EOF\n`printf '%s.' \\\"<@V@>\\\"`\nEOF\n", |_| None),
    ("cat <<EOF\n\"<@V@>\"\nEOF\n", |v| with("\"<", v, ">\"\n")),
    ("cat <<EOF\n'<@V@>'\nEOF\n", |v| with("'<", v, ">'\n")),
    ("cat <<EOF\n$(printf '%s.' \"<@V@>\")\nEOF\n", |v| {
        with("<", v, ">.\n")
    }),
    ("printf '%s\\0' \"${unset_var:-'@V@'}\"", |v| {
        with("'", v, "'\0")
    }),
    ("x=a@V@b; printf '%s\\0' \"${x#'a@V@'}\"", |_| {
        with("", "b", "\0")
    }),
    (
        "printf '%s\\0' \"${unset_var:-$(printf '%s.' @V@)}\"",
        |v| with("", v, ".\0"),
    ),
    ("a=(); a+=(@V@); printf '%s\\0' \"${a[@]}\"", |v| {
        with("", v, "\0")
    }),
    ("for i in @V@; do printf '%s\\0' \"$i\"; done", |v| {
        with("", v, "\0")
    }),
    ("case @V@ in *) printf '%s\\0' ok;; esac", |_| {
        with("", "ok", "\0")
    }),
    (
        "case x in @V@) printf '%s\\0' same;; *) printf '%s\\0' ok;; esac",
        |v| with("", if v == "x" { "same" } else { "ok" }, "\0"),
    ),
    ("printf '%s\\0' @V@ # @V@", |v| with("", v, "\0")),
    (": <<'EOF'\n@V@\nEOF\nprintf '%s\\0' ok", |_| {
        with("", "ok", "\0")
    }),
    (": <<EOF\n@V@\nEOF\nprintf '%s\\0' ok", |_| {
        with("", "ok", "\0")
    }),
    ("{ printf '%s\\0' @V@; }", |v| with("", v, "\0")),
    ("if true; then printf '%s\\0' @V@; fi", |v| {
        with("", v, "\0")
    }),
    ("f() { printf '%s\\0' \"$@\"; }; f @V@", |v| {
        with("", v, "\0")
    }),
    (
        "printf '%s\\0' \"$(f() { printf '%s.' \"$1\"; }; f @V@)\"",
        |v| with("", v, ".\0"),
    ),
    ("x=$(printf '%s.' @V@) && printf '%s\\0' \"$x\"", |v| {
        with("", v, ".\0")
    }),
    ("cat ${unset_var:-<(printf '%s.' @V@)}", |v| {
        with("", v, ".")
    }),
    ("printf '%s\\0' \"${unset_var:-<@V@}\"", |v| {
        with("<", v, "\0")
    }),
    ("printf '%s\\0' \"${unset_var:-@V@(x)}\"", |v| {
        with("", v, "(x)\0")
    }),
    (
        "x=$(cat <<EOF\n<@V@>\nEOF\n) && printf '%s\\0' \"$x\"",
        |v| with("<", v, ">\0"),
    ),
    (
        "x=$(cat <<'EOF'\n@V@\nEOF\n) && printf '%s\\0' \"$x.\"",
        |v| with("", v.trim_end_matches('\n'), ".\0"),
    ),
    ("cat <(cat <<'EOF'\n<@V@>\nEOF\n)", |v| with("<", v, ">\n")),
    (
        "x=$(cat <<-EOF\n\t<@V@>\n\tEOF)\nprintf '%s\\0' \"$x\"",
        |v| with("<", v, ">\0"),
    ),
];

/// Runs `command` as a stage does, in `dir`; its stdout and stderr.
pub(super) fn run_bash(command: &str, dir: &Path) -> (Vec<u8>, String) {
    let output = Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", command])
        .current_dir(dir)
        .env("LC_ALL", "C.UTF-8")
        .stdin(Stdio::null())
        .output()
        .expect("run bash");
    (
        output.stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Puts `value` through `template`: the command is refused, or runs
/// printing exactly what it would with the value as text, and runs nothing
/// the value says.
pub(super) fn check(template: &str, expect: Expect, value: &str, dir: &Path) {
    let Ok(command) = build(template, value) else {
        return;
    };
    let (stdout, stderr) = run_bash(&command, dir);
    assert!(
        !dir.join("PWNED").exists(),
        "the value {value:?} ran in {template:?}: {command:?}"
    );
    assert!(
        !stderr.contains("command not found"),
        "a line of {value:?} ran in {template:?}: {command:?}: {stderr}"
    );
    if let Some(expected) = expect(value) {
        assert!(
            stdout == expected,
            "the value {value:?} did not arrive as text in {template:?}: {command:?}\nprinted {:?}, expected {:?}\n{stderr}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&expected),
        );
    }
}

/// `check` for every template.
fn check_value(value: &str) {
    let dir = tempfile::tempdir().expect("temporary directory");
    for (template, expect) in TEMPLATES {
        check(template, *expect, value, dir.path());
    }
}

#[test]
fn hostile_values_arrive_as_text_or_are_refused_in_every_context() {
    for value in [
        "a; touch PWNED",
        "$(touch PWNED)",
        "`touch PWNED`",
        "a\nEOF\ntouch PWNED",
        "a\n\tEOF\ntouch PWNED",
        "EOF",
        "a[$(touch PWNED)]",
        "x[$(touch PWNED)]",
        "it's \"q\" \\ $HOME * ?",
        "a\\\ntouch PWNED",
        ") ; touch PWNED ; (",
        "'; touch PWNED; '",
        "\"; touch PWNED; \"",
        "}; touch PWNED; ${x",
        "\\`touch PWNED\\`",
        "",
        "\n",
        "a,b",
        "a..c",
        "root",
        "12",
        "-3",
        "007",
        "5.0e-5",
        "data/train.csv",
    ] {
        check_value(value);
    }
}

#[test]
fn plain_places_quote_rather_than_refuse() {
    let places = [
        "echo ",
        "echo \"",
        "echo '",
        "echo \"$(echo ",
        "echo `echo ",
        "echo \"`echo ",
        "cat <<EOF\n",
        "cat <<'EOF'\n",
        "echo ${x:-",
        "echo a # ",
    ];
    for value in ["a; touch PWNED", "$(touch PWNED)", "it's \"q\" \\ `x` *"] {
        for place in places {
            assert!(
                quote_after(place, value).is_ok(),
                "{place:?} refused {value:?}"
            );
        }
    }
}

/// Pieces that mean something to some shell context.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any::<char>().prop_filter("a NUL is refused everywhere", |ch| *ch != '\0').prop_map(String::from),
        3 => prop::sample::select(vec![
            "a", "EOF", "\nEOF\n", "EOF\n", "\tEOF", "A", "\nA\n", "B", "\n", "\t", " ", "'",
            "\"", "\\", "`", "$", "$(", ")", "(", "((", "{", "}", "[", "]", ",", "..", "~",
            "#", ";", "&", "|", "<", ">", "<<", "*", "?", "!", "=", "x=1", "-", "0", "7",
            "12", "$(touch PWNED)", "`touch PWNED`", "; touch PWNED", "\ntouch PWNED\n",
            "a[$(touch PWNED)]", "\\\n", "é", "\r", "%s", "'\\''", "${x}", "$((1))",
            "\\`", "&", "/", "<(", ">(", "\"$(", "${x:-", "}", "EOF)", "EOF )",
        ])
        .prop_map(String::from),
    ]
}

/// How many random (template, value) pairs the property tries: 256, or
/// `PIPE_QUOTING_CASES` for a longer hunt.
fn cases() -> u32 {
    std::env::var("PIPE_QUOTING_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_values_arrive_as_text_or_are_refused_in_every_context(
        template in 0..TEMPLATES.len(),
        value in prop::collection::vec(fragment(), 0..8).prop_map(|pieces| pieces.concat())
    ) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (template, expect) = TEMPLATES[template];
        check(template, expect, &value, dir.path());
    }
}

/// Pieces of shell syntax for random commands around a value.
fn syntax() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "echo ",
        "printf '%s' ",
        "cat ",
        " ",
        "\n",
        ";",
        "\"",
        "'",
        "`",
        "\\`",
        "$(",
        ")",
        "(",
        "((",
        "))",
        "$((",
        "${x:-",
        "${x#",
        "${x/a/",
        "}",
        "{",
        "<<EOF\n",
        "<<'EOF'\n",
        "<<-EOF\n",
        "EOF\n",
        "EOF",
        "\t",
        "#",
        "\\",
        "$",
        "$'",
        "<(",
        "[[ ",
        " ]]",
        "a[",
        "]",
        "x=",
        "case a in a) ",
        ";; esac",
        "|",
        "&&",
        "<<<",
        "~",
        "a",
        "1",
        "EOF)",
        "$[",
        "for i in ",
        "; do ",
        "; done",
        "$$",
        "$#",
        "\"$(",
        "$\"",
        "<<\\EOF\n",
        "<<\"EOF\"\n",
        " EOF",
        "\\\n",
        "'EOF'",
        ">(",
        "${#",
        "${x:",
        "${a[",
        "case ",
        " in ",
        " esac",
        "{ ",
        " }",
        "if ",
        "; then ",
        "; fi",
        "\"`",
        "`\"",
        "=",
    ])
    .prop_map(String::from)
}

/// Pieces of a value that would run `touch PWNED` if read as syntax.
fn payload() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "touch PWNED",
        "$(touch PWNED)",
        "`touch PWNED`",
        ";",
        "\n",
        "'",
        "\"",
        ")",
        "(",
        "EOF",
        "\\",
        "$",
        "{",
        "}",
        "a[",
        "]",
        "#",
        " ",
        "&&",
        "|",
        "<(",
        "x",
        "1",
        "EOF)",
        "\t",
    ])
    .prop_map(String::from)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Whatever shell text surrounds it, a value the tracker accepts never
    /// runs: no literal piece names `PWNED`, so a `PWNED` file can only come
    /// from a value read as syntax.
    #[test]
    fn random_commands_never_run_a_value(
        before in prop::collection::vec(syntax(), 0..10).prop_map(|pieces| pieces.concat()),
        after in prop::collection::vec(syntax(), 0..6).prop_map(|pieces| pieces.concat()),
        twice in any::<bool>(),
        value in prop::collection::vec(payload(), 1..6).prop_map(|pieces| pieces.concat()),
    ) {
        let template = if twice {
            format!("{before}@V@{after}@V@\n")
        } else {
            format!("{before}@V@{after}\n")
        };
        let Ok(command) = build(&template, &value) else {
            return Ok(());
        };
        let dir = tempfile::tempdir().expect("temporary directory");
        let status = Command::new("timeout")
            .args(["5", "bash", "-e", "-o", "pipefail", "-c", &command])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run bash");
        prop_assert!(
            !dir.path().join("PWNED").exists(),
            "the value {value:?} ran in {command:?} ({status})"
        );
    }
}
