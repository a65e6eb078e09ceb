//! Values are data, through the real binary: a `${...}` goes into a `run:`
//! command's text only when it is plain, whatever program reads the text
//! again; any other value (from `-S`, the params file, a replayed run) is
//! refused at load, exit 2, before anything runs, and reaches a command
//! whole through `env:`, the list form of `run:` or the params file
//! (docs/pipeline-spec.md, "Values in a command").

use pipe_test_support::TestProject;

const HOSTILE: &str = "a; touch PWNED";

fn stderr_of(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Exit 2 with a `bad-reference` at each `pipe.yaml:LINE:COL`, and nothing
/// run or recorded.
fn assert_refused_at(
    project: &TestProject,
    output: &std::process::Output,
    places: &[(usize, usize)],
) {
    let stderr = stderr_of(output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    for (line, col) in places {
        assert!(
            stderr.contains(&format!("pipe.yaml:{line}:{col}\n")),
            "not at {line}:{col}:\n{stderr}"
        );
    }
    assert_eq!(
        stderr.matches("error[bad-reference]").count(),
        places.len(),
        "{stderr}"
    );
    assert!(stderr.contains("is not plain"), "{stderr}");
    assert!(stderr.contains("env:"), "{stderr}");
    assert!(!project.exists("PWNED"), "a value ran");
    assert!(!project.exists(".pipe/runs.db"), "a run was recorded");
}

/// Each way an inner program can read a command's text as code (the
/// routes of issue 46), one stage each.
const ROUTES: &[(&str, &str)] = &[
    (
        "here_string",
        "bash <<< \"echo ${params.x}\" > here_string.txt",
    ),
    (
        "here_string_quoted",
        "bash <<< 'echo ${params.x}' > here_string_quoted.txt",
    ),
    ("piped", "echo \"echo ${params.x}\" | bash > piped.txt"),
    (
        "piped_sh",
        "printf '%s\\n' \"echo ${params.x}\" | sh > piped_sh.txt",
    ),
    (
        "sourced",
        "source <(echo \"echo ${params.x}\") > sourced.txt",
    ),
    (
        "restricted",
        "rbash -c \"echo ${params.x}\" > restricted.txt",
    ),
    (
        "aliased",
        "shopt -s expand_aliases; alias greet=\"echo ${params.x}\"\n      greet > aliased.txt",
    ),
    (
        "bash_env",
        "BASH_ENV=${params.x} bash -c 'echo ok' > bash_env.txt",
    ),
    ("evaluated", "eval \"echo ${params.x}\" > evaluated.txt"),
    ("trapped", "trap 'echo ${params.x} > trapped.txt' EXIT"),
];

/// The pipeline of [`ROUTES`], each command a block scalar (`run: |`),
/// and where each reference is reported: a block scalar's references are
/// located at its first line.
fn routes_pipeline() -> (String, Vec<(usize, usize)>) {
    let mut text = String::from("params: { x: hello }\nstages:\n");
    let mut places = Vec::new();
    for (name, command) in ROUTES {
        places.push((text.lines().count() + 3, 7));
        text.push_str(&format!(
            "  {name}:\n    run: |\n      {command}\n    outs: [{name}.txt]\n"
        ));
    }
    (text, places)
}

#[test]
fn every_route_by_which_an_inner_program_reads_a_value_as_code_is_refused_at_load() {
    let project = TestProject::new();
    let (pipeline, places) = routes_pipeline();
    project.write("pipe.yaml", &pipeline);
    let output = project.pipe(&["run", "-S", &format!("x={HOSTILE}")]);
    assert_refused_at(&project, &output, &places);
    for (name, _) in ROUTES {
        assert!(!project.exists(&format!("{name}.txt")), "{name} ran");
    }
    // A plain value goes through every one of them as the text it is.
    project.run_ok(&["-S", "x=hello"]);
    assert!(!project.exists("PWNED"));
    for (name, _) in ROUTES {
        let expected = if *name == "bash_env" {
            "ok\n"
        } else {
            "hello\n"
        };
        assert_eq!(project.read(&format!("{name}.txt")), expected, "{name}");
    }
}

#[test]
fn a_value_that_is_not_plain_reaches_the_command_whole_through_env_argv_or_the_params_file() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { msg: hello }\nstages:\n  inline:\n    run: printf '%s|' ${params.msg} > inline.txt\n    outs: [inline.txt]\n",
    );
    let hostile = r#"$(touch PWNED) `touch PWNED` "x" it's * ; touch PWNED"#;
    let output = project.pipe(&["run", "-S", &format!("msg={hostile}")]);
    assert_refused_at(&project, &output, &[(4, 23)]);

    project.write("params.yaml", "msg: hello\n");
    project.write(
        "pipe.yaml",
        r#"stages:
  env:
    run: printf '%s|' "$MSG" > env.txt
    env: { MSG: "${params.msg}" }
    outs: [env.txt]
  argv:
    run: [bash, -c, 'printf "%s|" "$@" > argv.txt', argv0, "${params.msg}", "--msg=${params.msg}"]
    outs: [argv.txt]
  file:
    run: python3 -c "open('file.txt', 'w').write(open('params.yaml').read())"
    params: [msg]
    outs: [file.txt]
"#,
    );
    project.run_ok(&["-S", &format!("msg={hostile}")]);
    assert!(!project.exists("PWNED"), "a value ran");
    assert_eq!(project.read("env.txt"), format!("{hostile}|"));
    assert_eq!(
        project.read("argv.txt"),
        format!("{hostile}|--msg={hostile}|")
    );
    assert!(
        project.read("file.txt").contains("touch PWNED"),
        "{}",
        project.read("file.txt")
    );
    assert_eq!(project.read("params.yaml"), "msg: hello\n", "put back");
}

#[test]
fn a_value_from_the_params_file_or_a_replayed_run_goes_through_the_same_rule() {
    let project = TestProject::new();
    project.write("params.yaml", &format!("x: \"{HOSTILE}\"\n"));
    project.write(
        "pipe.yaml",
        "stages:\n  s:\n    run: echo ${params.x} > s.txt\n    outs: [s.txt]\n",
    );
    let output = project.pipe(&["run"]);
    assert_refused_at(&project, &output, &[(3, 15)]);

    // Run #1 takes the value through `env:`; replayed into a command's
    // text, it is refused as a `-S` of it would be.
    project.write("params.yaml", "x: plain\n");
    project.write(
        "pipe.yaml",
        "stages:\n  s:\n    run: printf '%s' \"$X\" > s.txt\n    env: { X: \"${params.x}\" }\n    outs: [s.txt]\n",
    );
    project.run_ok(&["-S", &format!("x={HOSTILE}")]);
    assert_eq!(project.read("s.txt"), HOSTILE);
    project.write(
        "pipe.yaml",
        "stages:\n  s:\n    run: echo ${params.x} > s.txt\n    outs: [s.txt]\n",
    );
    let output = project.pipe(&["run", "--run", "1"]);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pipe.yaml:3:15\n"), "{stderr}");
    assert!(stderr.contains("is not plain"), "{stderr}");
    assert!(!project.exists("PWNED"), "a replayed value ran");
    assert_eq!(
        project.read("s.txt"),
        HOSTILE,
        "the stage did not run again"
    );
}

#[test]
fn a_plain_value_where_bash_gives_its_characters_meaning_is_refused() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { user: root, list: \"a,b\", dotted: a.b, n: \"41\", end: EOF }\nstages:\n  s:\n    run: |\n      v=~${params.user}\n      echo {x,${params.list}}\n      IFS=.; echo $${u:-${params.dotted}}\n      echo $(( ${params.n} + 1 )) > n.txt\n      cat <<EOF\n      ${params.end}\n      EOF\n    env: { MSG: \"a[$(touch PWNED)]\" }\n    outs: [n.txt]\n",
    );
    let output = project.pipe(&["run", "-S", "n=MSG"]);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    for why in [
        "it follows a `~`",
        "inside a `{...}`",
        "the command sets `IFS`",
        "it names `MSG`, a variable of the stage's `env:`",
        "here-document",
    ] {
        assert!(stderr.contains(why), "{why}:\n{stderr}");
    }
    assert_eq!(
        stderr.matches("error[bad-reference]").count(),
        5,
        "{stderr}"
    );
    assert!(!project.exists("PWNED"));
    // A number in arithmetic is what it says.
    project.write(
        "pipe.yaml",
        "params: { n: \"41\" }\nstages:\n  s:\n    run: echo $(( ${params.n} + 1 )) > n.txt\n    env: { MSG: \"a[$(touch PWNED)]\" }\n    outs: [n.txt]\n",
    );
    project.run_ok(&[]);
    assert_eq!(project.read("n.txt"), "42\n");
}

#[test]
fn a_path_that_is_not_plain_is_refused_with_a_hint_to_rename_it() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  s:\n    run: echo x > ${outs.out}\n    outs: { out: \"my dir/out.txt\" }\n",
    );
    let output = project.pipe(&["run"]);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pipe.yaml:3:19\n"), "{stderr}");
    assert!(stderr.contains("rename the path"), "{stderr}");
    assert!(stderr.contains("\"$OUT\""), "{stderr}");
    // Through `env:`, the path arrives whole.
    project.write(
        "pipe.yaml",
        "stages:\n  s:\n    run: echo x > \"$OUT\"\n    env: { OUT: \"${outs.out}\" }\n    outs: { out: \"my dir/out.txt\" }\n",
    );
    project.write("my dir/.keep", "");
    project.run_ok(&[]);
    assert_eq!(project.read("my dir/out.txt"), "x\n");
}

#[test]
fn plain_commands_keep_working_and_raw_splices_words() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { lr: 5.0e-5, words: one two, layers: [64, 32] }\nstages:\n  s:\n    run: printf '%s|' --lr ${params.lr} ${raw:params.words} ${params.layers} > ${outs.out}\n    outs: { out: \"my_dir/out.txt\" }\n",
    );
    project.run_ok(&[]);
    assert_eq!(project.read("my_dir/out.txt"), "--lr|5.0e-5|one|two|64|32|");
}
