//! What a pipeline file can make pipe do, through the real binary: values
//! never become shell syntax, and pipe never deletes or writes a file that
//! is not its own (`.git`, `.pipe`, anything outside the project, reached
//! directly or through a symlink).

use std::os::unix::fs::symlink;

use pipe_test_support::TestProject;

fn stderr_of(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_hostile_param_is_text_not_shell() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { msg: hello }\nstages:\n  bare:\n    run: printf '%s|' ${params.msg} > bare.txt\n    outs: [bare.txt]\n  double:\n    run: printf '%s|' \"<${params.msg}>\" > double.txt\n    outs: [double.txt]\n  single:\n    run: printf '%s|' '<${params.msg}>' > single.txt\n    outs: [single.txt]\n",
    );
    let hostile = r#"$(touch pwned) `touch pwned2` "x" it's * ; touch pwned3"#;
    project.run_ok(&["-S", &format!("msg={hostile}")]);
    for marker in ["pwned", "pwned2", "pwned3"] {
        assert!(
            !project.exists(marker),
            "the value ran as a command: {marker}"
        );
    }
    assert_eq!(project.read("bare.txt"), format!("{hostile}|"));
    assert_eq!(project.read("double.txt"), format!("<{hostile}>|"));
    assert_eq!(project.read("single.txt"), format!("<{hostile}>|"));
}

/// A refused run: exit 2 before anything ran, with a located message that
/// names the reference and the way out (`${raw:...}`).
fn assert_refused_at(output: &std::process::Output, reference: &str, line: usize) {
    let stderr = stderr_of(output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("pipe.yaml:{line}:")), "{stderr}");
    assert!(stderr.contains(reference), "{stderr}");
    assert!(stderr.contains("${raw:"), "{stderr}");
}

fn assert_nothing_ran(project: &TestProject) {
    for marker in ["PWNED", "PWNED2", "PWNED3"] {
        assert!(
            !project.exists(marker),
            "the value ran as a command: {marker}"
        );
    }
}

#[test]
fn a_value_in_a_command_substitution_inside_double_quotes_is_text() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { x: hello }\nstages:\n  subst:\n    run: printf '%s|' \"$(echo ${params.x})\" > subst.txt\n    outs: [subst.txt]\n  backquote:\n    run: printf '%s|' \"`echo ${params.x}`\" > backquote.txt\n    outs: [backquote.txt]\n  bare_backquote:\n    run: x=`echo ${params.x}`; printf '%s|' \"$x\" > bare_backquote.txt\n    outs: [bare_backquote.txt]\n",
    );
    let hostile = "a; touch PWNED `touch PWNED2` $(touch PWNED3) \\ it's \"q\"";
    project.run_ok(&["-S", &format!("x={hostile}")]);
    assert_nothing_ran(&project);
    for file in ["subst.txt", "backquote.txt", "bare_backquote.txt"] {
        assert_eq!(project.read(file), format!("{hostile}|"), "{file}");
    }
}

#[test]
fn a_value_in_an_unquoted_here_document_is_text() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { x: hello }\nstages:\n  s:\n    run: |\n      cat > out.txt <<EOF\n      <${params.x}>\n      EOF\n    outs: [out.txt]\n",
    );
    let hostile = "$(touch PWNED) `touch PWNED2` \\ $HOME it's \"q\"";
    project.run_ok(&["-S", &format!("x={hostile}")]);
    assert_nothing_ran(&project);
    assert_eq!(project.read("out.txt"), format!("<{hostile}>\n"));
}

#[test]
fn a_value_that_would_end_a_quoted_here_document_is_refused() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params:\n  x: \"a\\nEOF\\ntouch PWNED #\"\nstages:\n  s:\n    run: |\n      cat > out.txt <<'EOF'\n      ${params.x}\n      EOF\n    outs: [out.txt]\n",
    );
    let output = project.pipe(&["run"]);
    assert_nothing_ran(&project);
    assert!(!project.exists("out.txt"));
    // A block scalar's reference is located at the block's first line.
    assert_refused_at(&output, "${params.x}", 6);
    assert!(
        stderr_of(&output).contains("here-document ending at `EOF`"),
        "{}",
        stderr_of(&output)
    );
    // Any other value arrives as it is: nothing in the body is syntax.
    let other = "$(touch PWNED) `x` \\ it's";
    project.run_ok(&["-S", &format!("x={other}")]);
    assert_nothing_ran(&project);
    assert_eq!(project.read("out.txt"), format!("{other}\n"));
}

#[test]
fn a_backslash_before_a_reference_cannot_disarm_its_quoting() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { x: abc }\nstages:\n  bare:\n    run: printf '%s|' \\${params.x} > bare.txt\n    outs: [bare.txt]\n  double:\n    run: printf '%s|' \"\\${params.x}\" > double.txt\n    outs: [double.txt]\n",
    );
    let output = project.pipe(&["run", "-S", "x=$(touch PWNED)'"]);
    assert_nothing_ran(&project);
    assert_refused_at(&output, "${params.x}", 4);
    assert_refused_at(&output, "${params.x}", 7);
    assert!(
        stderr_of(&output).contains("after a backslash"),
        "{}",
        stderr_of(&output)
    );
    // A plain value has nothing for the backslash to disarm.
    project.run_ok(&[]);
    assert_eq!(project.read("bare.txt"), "abc|");
    assert_eq!(project.read("double.txt"), "\\abc|");
}

#[test]
fn only_a_number_goes_into_shell_arithmetic() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { x: \"41\" }\nstages:\n  s:\n    run: echo $(( ${params.x} + 1 )) > n.txt\n    outs: [n.txt]\n",
    );
    let output = project.pipe(&["run", "-S", "x=a[$(touch PWNED)]"]);
    assert_nothing_ran(&project);
    assert_refused_at(&output, "${params.x}", 4);
    assert!(
        stderr_of(&output).contains("arithmetic"),
        "{}",
        stderr_of(&output)
    );
    project.run_ok(&[]);
    assert_eq!(project.read("n.txt"), "42\n");
}

#[test]
fn plain_commands_keep_working_and_raw_splices_words() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { lr: 5.0e-5, words: one two, layers: [64, 32] }\nstages:\n  s:\n    run: printf '%s|' --lr ${params.lr} ${raw:params.words} ${params.words} ${params.layers} > ${outs.out}\n    outs: { out: \"my dir/out.txt\" }\n",
    );
    project.run_ok(&[]);
    assert_eq!(
        project.read("my dir/out.txt"),
        "--lr|5.0e-5|one|two|one two|64|32|"
    );
}

#[test]
fn run_as_a_list_runs_without_a_shell() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { msg: hello }\nstages:\n  s:\n    run: [bash, -c, 'printf \"%s|\" \"$@\" > out.txt', argv0, \"${params.msg}\", \"--msg=${params.msg}\"]\n    outs: [out.txt]\n",
    );
    let hostile = "$(touch pwned) a  b *";
    project.run_ok(&["-S", &format!("msg={hostile}")]);
    assert!(!project.exists("pwned"));
    assert_eq!(
        project.read("out.txt"),
        format!("{hostile}|--msg={hostile}|")
    );
}

#[test]
fn an_output_in_git_is_refused_and_the_repository_survives() {
    let project = TestProject::new();
    project.write(".git/HEAD", "ref: refs/heads/main\n");
    for outs in ["[.git]", "[./.git/hooks/../HEAD]", "[.GIT/config]"] {
        project.write(
            "pipe.yaml",
            &format!("stages:\n  s:\n    run: echo x > x.txt\n    outs: {outs}\n"),
        );
        let output = project.pipe(&["run"]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{outs}: {}",
            stderr_of(&output)
        );
        assert!(
            stderr_of(&output).contains("output-in-git-dir"),
            "{}",
            stderr_of(&output)
        );
        assert!(
            stderr_of(&output).contains("pipe.yaml:4:"),
            "{}",
            stderr_of(&output)
        );
        assert_eq!(project.read(".git/HEAD"), "ref: refs/heads/main\n");
    }
}

#[test]
fn an_output_through_a_symlink_to_outside_is_refused_before_anything_runs() {
    let project = TestProject::new();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("important.txt"), "keep me").unwrap();
    symlink(elsewhere.path(), project.path("ext")).unwrap();
    project.write(
        "pipe.yaml",
        "stages:\n  s:\n    run: echo x > ext/important.txt\n    outs: [ext/important.txt]\n",
    );
    let output = project.pipe(&["run"]);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("output-outside-project"), "{stderr}");
    assert!(stderr.contains("`ext` is a symbolic link"), "{stderr}");
    assert!(stderr.contains("pipe.yaml:4:"), "{stderr}");
    let kept = std::fs::read_to_string(elsewhere.path().join("important.txt")).unwrap();
    assert_eq!(kept, "keep me");
}

#[test]
fn a_symlink_into_git_does_not_make_git_an_output() {
    let project = TestProject::new();
    project.write(".git/HEAD", "ref: refs/heads/main\n");
    symlink(".git", project.path("meta")).unwrap();
    project.write(
        "pipe.yaml",
        "stages:\n  s:\n    run: echo x > meta/HEAD\n    outs: [meta/HEAD]\n",
    );
    let output = project.pipe(&["run"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr_of(&output));
    assert!(stderr_of(&output).contains("output-in-git-dir"));
    assert_eq!(project.read(".git/HEAD"), "ref: refs/heads/main\n");
}

#[test]
fn outputs_that_overlap_through_a_symlink_are_refused() {
    let project = TestProject::new();
    std::fs::create_dir(project.path("data")).unwrap();
    symlink("data", project.path("alias")).unwrap();
    project.write(
        "pipe.yaml",
        "stages:\n  a:\n    run: echo a > data/x.txt\n    outs: [data/x.txt]\n  b:\n    run: echo b > alias/x.txt\n    outs: [alias/x.txt]\n",
    );
    let output = project.pipe(&["validate"]);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("duplicate-output"), "{stderr}");
    assert!(stderr.contains("really `data/x.txt`"), "{stderr}");
}

#[test]
fn a_dependency_through_a_symlink_depends_on_the_stage_writing_there() {
    let project = TestProject::new();
    std::fs::create_dir(project.path("data")).unwrap();
    symlink("data", project.path("alias")).unwrap();
    project.write(
        "pipe.yaml",
        "stages:\n  make:\n    run: echo made > data/x.txt\n    outs: [data/x.txt]\n  use:\n    run: cat alias/x.txt > used.txt\n    deps: [alias/x.txt]\n    outs: [used.txt]\n",
    );
    // Asking for `use` alone runs what it depends on first.
    project.run_ok(&["use"]);
    assert_eq!(project.read("used.txt"), "made\n");
}

#[test]
fn a_symlink_that_appears_during_the_run_is_caught_before_removing_outputs() {
    let project = TestProject::new();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("important.txt"), "keep me").unwrap();
    // `link` makes `ext` a symlink out of the project after the pipeline
    // was checked; `write` then declares an output under it.
    project.write(
        "pipe.yaml",
        &format!(
            "stages:\n  link:\n    run: ln -s {} ext && touch linked\n    outs: [linked]\n  write:\n    run: echo x > ext/important.txt\n    deps: [linked]\n    outs: [ext/important.txt]\n",
            elsewhere.path().display()
        ),
    );
    let result = project.run(&[]);
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert!(result.stderr.contains("symbolic link"), "{}", result.stderr);
    let kept = std::fs::read_to_string(elsewhere.path().join("important.txt")).unwrap();
    assert_eq!(kept, "keep me");
}

#[test]
fn a_restore_through_a_new_symlink_is_refused() {
    let project = TestProject::new();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("important.txt"), "keep me").unwrap();
    let pipeline = |link_first: bool| {
        format!(
            "stages:\n  link:\n    run: {}touch linked\n    outs: [linked]\n  write:\n    run: mkdir -p ext && echo x > ext/important.txt\n    deps: [linked]\n    outs: [ext/important.txt]\n",
            if link_first {
                format!("rm -rf ext && ln -s {} ext && ", elsewhere.path().display())
            } else {
                String::new()
            }
        )
    };
    project.write("pipe.yaml", &pipeline(false));
    project.run_ok(&[]);
    // Same `linked`, so `write`'s key is unchanged and its result would be
    // restored into `ext/`, which is now a link out of the project.
    std::fs::remove_dir_all(project.path("ext")).unwrap();
    project.write("pipe.yaml", &pipeline(true));
    let result = project.run(&[]);
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert!(result.stderr.contains("symbolic link"), "{}", result.stderr);
    let kept = std::fs::read_to_string(elsewhere.path().join("important.txt")).unwrap();
    assert_eq!(kept, "keep me");
}

/// A NUL byte cannot be part of a path, a command, an argument, an
/// environment value or a setting passed to a program: a YAML escape
/// (`"\0"`) or a `-S` value that brings one is a located error, exit 2,
/// before anything runs, never a failure half-way through the run.
#[test]
fn a_nul_byte_is_refused_where_it_is_written_before_anything_runs() {
    let stage = |body: &str| {
        format!("params: {{ x: plain }}\nstages:\n  first:\n    run: touch first.txt\n    outs: [first.txt]\n  s:\n{body}")
    };
    let cases: &[(&str, String, &[&str], &str)] = &[
        (
            "an output from -S",
            stage("    run: touch out.txt\n    outs: [\"out/${params.x}.txt\"]\n"),
            &["-S", r#"x="a\0b""#],
            "pipe.yaml:8:",
        ),
        (
            "an output in YAML",
            stage("    run: touch out.txt\n    outs: [\"out/a\\0b.txt\"]\n"),
            &[],
            "pipe.yaml:8:",
        ),
        (
            "metrics",
            stage("    run: touch out.txt\n    metrics: [\"m\\0.json\"]\n"),
            &[],
            "pipe.yaml:8:",
        ),
        (
            "a dependency from -S",
            stage("    deps: [\"in/${params.x}\"]\n    run: touch out.txt\n"),
            &["-S", r#"x="a\0b""#],
            "pipe.yaml:7:",
        ),
        (
            "a command in YAML",
            stage("    run: \"echo a\\0b > out.txt\"\n"),
            &[],
            "pipe.yaml:7:",
        ),
        (
            "an argument",
            stage("    run: [touch, \"a\\0b\"]\n"),
            &[],
            "pipe.yaml:7:",
        ),
        (
            "an argument from -S",
            stage("    run: [touch, \"${params.x}\"]\n"),
            &["-S", r#"x="a\0b""#],
            "pipe.yaml:7:",
        ),
        (
            "an env value from -S",
            stage("    run: touch out.txt\n    env: { X: \"v${params.x}\" }\n"),
            &["-S", r#"x="a\0b""#],
            "pipe.yaml:8:",
        ),
        (
            "the remote's directory",
            format!(
                "cache: {{ remote: \"/tmp/r\\0x\" }}\n{}",
                stage("    run: touch out.txt\n")
            ),
            &[],
            "pipe.yaml:1:",
        ),
        (
            "a Slurm setting",
            format!(
                "executor: {{ type: slurm, partition: \"a\\0b\" }}\n{}",
                stage("    run: touch out.txt\n")
            ),
            &[],
            "pipe.yaml:1:",
        ),
    ];
    for (what, yaml, extra, place) in cases {
        let project = TestProject::new();
        project.write("pipe.yaml", yaml);
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        let output = project.pipe(&args);
        let stderr = stderr_of(&output);
        assert_eq!(output.status.code(), Some(2), "{what}:\n{stderr}");
        assert!(stderr.contains("NUL byte"), "{what}:\n{stderr}");
        assert!(stderr.contains(place), "{what}: not at {place}\n{stderr}");
        assert!(!stderr.contains("panicked"), "{what}:\n{stderr}");
        assert!(!project.exists("first.txt"), "{what}: a stage ran");
        assert!(
            !project.exists(".pipe/runs.db"),
            "{what}: a run was recorded"
        );
    }
}

#[test]
fn a_line_continuation_cannot_open_a_command_substitution_or_a_here_document() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { x: hello }\nstages:\n  subst:\n    run: |\n      printf '%s|' \"$\\\n      (printf '%s' ${params.x})\" > subst.txt\n    outs: [subst.txt]\n  heredoc:\n    run: |\n      cat > heredoc.txt <\\\n      <EOF\n      <${params.x}>\n      EOF\n    outs: [heredoc.txt]\n",
    );
    let hostile = "a; touch PWNED $(touch PWNED2) `touch PWNED3` it's";
    project.run_ok(&["-S", &format!("x={hostile}")]);
    assert_nothing_ran(&project);
    assert_eq!(project.read("subst.txt"), format!("{hostile}|"));
    assert_eq!(project.read("heredoc.txt"), format!("<{hostile}>\n"));
}

#[test]
fn a_value_a_builtin_would_evaluate_is_refused_at_the_reference() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { x: name }\nstages:\n  test:\n    run: \"[ -v ${params.x} ] || true; touch test.txt\"\n    outs: [test.txt]\n  declare:\n    run: x=(1); declare x=${params.x}; touch declare.txt\n    outs: [declare.txt]\n  printf:\n    run: printf -v ${params.x} %s v; touch printf.txt\n    outs: [printf.txt]\n  trap:\n    run: trap 'echo ${params.x}' EXIT; touch trap.txt\n    outs: [trap.txt]\n",
    );
    // `[ -v ]` evaluates only a subscript; the others take a `(...)` too.
    for (hostile, lines) in [
        ("a[$(touch PWNED)]", &[4, 7, 10, 13][..]),
        ("($(touch PWNED))", &[7, 10, 13][..]),
    ] {
        let output = project.pipe(&["run", "-S", &format!("x={hostile}")]);
        assert_nothing_ran(&project);
        for line in lines {
            assert_refused_at(&output, "${params.x}", *line);
        }
    }
    // A plain value is a name, or text, to each of them.
    project.run_ok(&[]);
    for file in ["test.txt", "declare.txt", "printf.txt", "trap.txt"] {
        assert!(project.exists(file), "{file}");
    }
}

#[test]
fn an_operand_of_an_arithmetic_test_must_be_a_number() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { a: \"1\", b: \"1\" }\nstages:\n  s:\n    run: y=${params.a}; [[ ${params.b} -eq 1 ]] && echo one > n.txt || echo other > n.txt\n    outs: [n.txt]\n",
    );
    // `b=y` names the variable that `a` filled: bash would evaluate its text.
    let output = project.pipe(&["run", "-S", "a=a[$(touch PWNED)]", "-S", "b=y"]);
    assert_nothing_ran(&project);
    assert_refused_at(&output, "${params.b}", 4);
    assert!(
        stderr_of(&output).contains("arithmetic test"),
        "{}",
        stderr_of(&output)
    );
    project.run_ok(&[]);
    assert_eq!(project.read("n.txt"), "one\n");
}

#[test]
fn a_value_keeps_its_words_as_an_assignment_tilde_regex_or_split_would_not() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { cmd: \"q+=X\", user: root, re: z.z, dotted: a.b }\nstages:\n  s:\n    run: |\n      command_not_found_handle() { printf '%s|' \"$1\" >> out.txt; }\n      ${params.cmd}\n      v=~${params.user}\n      [[ zzz =~ ^${params.re}$ ]] && m=match || m=other\n      IFS=.\n      printf '%s|' \"$${q-unset}\" \"$v\" \"$m\" $${u:-${params.dotted}} >> out.txt\n    outs: [out.txt]\n",
    );
    project.run_ok(&[]);
    assert_nothing_ran(&project);
    assert_eq!(project.read("out.txt"), "q+=X|unset|~root|other|a.b|");
}
