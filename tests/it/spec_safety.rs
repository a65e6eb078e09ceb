//! What a pipeline file can make pipe do, through the real binary: the
//! list form of `run:` has no shell, and pipe never deletes or writes a
//! file that is not its own (`.git`, `.pipe`, anything outside the
//! project, reached directly or through a symlink). Values in a shell
//! command: `run_values.rs`.

use std::os::unix::fs::symlink;

use pipe_test_support::TestProject;

fn stderr_of(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
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
fn an_output_in_a_nested_repository_or_named_with_a_control_character_is_refused_where_written() {
    // pipe deletes an output before its stage runs, and the cache never
    // stores a path in a `.git/` at any depth nor one with a control
    // character: a run could not be reused, nor its record read back.
    let project = TestProject::new();
    project.write("vendor/lib/.git/HEAD", "ref: refs/heads/main\n");
    for (outs, code) in [
        ("[vendor/lib/.git]", "output-in-git-dir"),
        ("[./vendor/lib/.Git/HEAD]", "output-in-git-dir"),
        ("[\"out\\tput.txt\"]", "bad-path"),
    ] {
        project.write(
            "pipe.yaml",
            &format!("stages:\n  s:\n    run: echo x > x.txt\n    outs: {outs}\n"),
        );
        let output = project.pipe(&["run"]);
        let stderr = stderr_of(&output);
        assert_eq!(output.status.code(), Some(2), "{outs}: {stderr}");
        assert!(stderr.contains(code), "{outs}: {stderr}");
        assert!(stderr.contains("pipe.yaml:4:"), "{outs}: {stderr}");
        assert!(!project.exists("x.txt"), "{outs}: the stage ran");
        assert_eq!(
            project.read("vendor/lib/.git/HEAD"),
            "ref: refs/heads/main\n"
        );
    }
}

#[test]
fn removing_orphans_never_deletes_what_a_tampered_ledger_names_in_git_or_pipes_state() {
    let project = TestProject::new();
    project.write(".git/config", "[core]\n");
    project.write(
        "pipe.yaml",
        "stages:\n  s:\n    run: echo x > x.txt\n    outs: [x.txt]\n",
    );
    project.run_ok(&[]);
    project.write("old.txt", "an output no stage declares now\n");
    // The ledger of outputs earlier runs declared, as pipe writes it, with
    // lines no run of pipe wrote.
    project.write(
        ".pipe/outputs/pipe",
        "old.txt\n.git/config\n.pipe/runs.db\nvendor/.git\nx.txt\n",
    );
    project.write("vendor/.git/HEAD", "ref: refs/heads/main\n");
    let removed = project.pipe(&["run", "--remove-orphans"]);
    let said = stderr_of(&removed);
    assert!(removed.status.success(), "{said}");
    assert!(said.contains("removed 1 output"), "{said}");
    assert!(!project.exists("old.txt"), "{said}");
    assert_eq!(project.read(".git/config"), "[core]\n");
    assert!(project.exists(".pipe/runs.db"));
    assert!(project.exists("vendor/.git/HEAD"));
    assert!(project.exists("x.txt"));
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
