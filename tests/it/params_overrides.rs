//! `-S` reaches what a command reads: a command that reads `params.yaml`
//! by itself (its `params:` list, DVC's habit) sees the run's override in
//! the file while it runs, the file is put back byte for byte after, even
//! after a kill -9; and an override the file cannot carry is refused
//! before anything runs (docs/pipeline-spec.md, "Params").

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use pipe_test_support::TestProject;

/// The tests' Python, with PyYAML (scripts/test-python.sh).
pub(crate) fn python() -> PathBuf {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let found = std::process::Command::new(&python)
        .args(["-c", "import yaml"])
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        found,
        "{} with PyYAML is needed: scripts/test.sh and scripts/test-fast.sh install it (scripts/test-python.sh)",
        python.display()
    );
    python
}

const PARAMS: &str = "# the model's settings\ntrain:\n  alpha: 1.0   # the weight\n  lr: 0.001\n  name: 'base'\n  layers:\n    - 64\n    - 32\nseed: 7\n";

/// A script that writes what it read from `params.yaml`, with PyYAML, as
/// JSON: the types as it saw them.
const READER: &str = "import json, sys, yaml\nparams = yaml.safe_load(open('params.yaml'))\nopen(sys.argv[1], 'w').write(json.dumps(params['train'], sort_keys=True))\n";

fn project(extra_command: &str) -> TestProject {
    let project = TestProject::new();
    project.write("params.yaml", PARAMS);
    project.write("read.py", READER);
    project.write(
        "pipe.yaml",
        &format!(
            "params:\n  tag: one\nstages:\n  train:\n    run: {} read.py seen.json{extra_command}\n    deps: [read.py]\n    params: [train]\n    outs: [seen.json]\n",
            python().display()
        ),
    );
    project
}

fn seen(project: &TestProject) -> serde_json::Value {
    serde_json::from_str(&project.read("seen.json")).expect("the script's JSON")
}

#[test]
fn a_command_reading_params_yaml_sees_the_override_and_the_file_is_put_back_byte_for_byte() {
    let project = project("");
    project.write(".gitignore", ".pipe/\nseen.json\n");
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &["commit", "-qm", "start"],
    ] {
        pipe_test_support::git(project.root(), args);
    }
    let run = project.pipe(&[
        "run",
        "-S",
        "train.alpha=0.2",
        "-S",
        "train.lr=1e-5",
        "-S",
        "train.name=x y",
    ]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let seen_then = seen(&project);
    assert_eq!(seen_then["alpha"], serde_json::json!(0.2), "{seen_then}");
    // PyYAML reads `1e-5` as a string; pipe writes a float it reads as one.
    assert_eq!(seen_then["lr"], serde_json::json!(1e-5), "{seen_then}");
    assert_eq!(seen_then["name"], serde_json::json!("x y"), "{seen_then}");
    assert_eq!(seen_then["layers"], serde_json::json!([64, 32]));
    assert_eq!(
        project.read("params.yaml"),
        PARAMS,
        "put back byte for byte"
    );
    assert!(
        stderr.contains("params.yaml holds this run's -S train.alpha, train.lr, train.name")
            && stderr.contains("params.yaml put back as it was"),
        "{stderr}"
    );

    // The record holds the values the command saw.
    let record = project.show_settled("last");
    assert_eq!(record["params"]["train"]["alpha"], serde_json::json!(0.2));
    assert_eq!(record["params"]["train"]["lr"], serde_json::json!(1e-5));
    assert_eq!(record["params"]["train"]["name"], serde_json::json!("x y"));
    // The work tree as the user left it: pipe's own write is no change.
    assert_eq!(record["git_dirty"], serde_json::json!(false), "{record}");

    // Without `-S`, the command reads the file's own values again, and the
    // run's dirty flag is the work tree's, not pipe's write.
    project.run_ok(&[]);
    assert_eq!(seen(&project)["alpha"], serde_json::json!(1.0));
    let diff = project.pipe(&["diff"]);
    let diff = String::from_utf8_lossy(&diff.stdout);
    assert!(diff.contains("seen.json"), "outputs changed:\n{diff}");
}

#[test]
fn a_stage_that_depends_on_params_yaml_reruns_on_the_override_and_sees_it() {
    let project = TestProject::new();
    project.write("params.yaml", PARAMS);
    project.write("read.py", READER);
    project.write(
        "pipe.yaml",
        &format!(
            "stages:\n  train:\n    run: {} read.py seen.json\n    deps: [read.py, params.yaml]\n    outs: [seen.json]\n  report:\n    run: echo ${{params.train.alpha}} > alpha.txt\n    outs: [alpha.txt]\n",
            python().display()
        ),
    );
    project.run_ok(&[]);
    let run = project.run_ok(&["-S", "train.alpha=0.5"]);
    assert_eq!(run.status("train"), "ran", "{}", run.stderr);
    assert_eq!(seen(&project)["alpha"], serde_json::json!(0.5));
    assert_eq!(project.read("alpha.txt").trim(), "0.5");
    assert_eq!(project.read("params.yaml"), PARAMS);
}

#[test]
fn an_override_a_command_reading_params_yaml_could_not_see_exits_2_before_anything_runs() {
    let project = project("");
    project.write(
        "pipe.yaml",
        &project
            .read("pipe.yaml")
            .replace("params: [train]", "params: [train, tag]"),
    );
    let cases = [
        // Set in the pipeline file, which the command does not read.
        (
            "tag=two",
            "`tag` is set in the pipeline file, not in params.yaml",
        ),
        // Added: params.yaml does not have it.
        ("+train.beta=2", "params.yaml does not have `train.beta`"),
        // A list over several lines: nothing pipe rewrites in place.
        (
            "train.layers=[8]",
            "params.yaml sets `train.layers` as a mapping or over several lines",
        ),
    ];
    for (argument, why) in cases {
        let run = project.run(&["-S", argument]);
        assert_eq!(run.code, 2, "-S {argument}: {}", run.stderr);
        assert!(
            run.stderr.contains("error[override-unseen]")
                && run.stderr.contains(why)
                && run.stderr.contains("pipe.yaml:7:"),
            "-S {argument}: {}",
            run.stderr
        );
        assert!(!project.exists("seen.json"), "nothing ran");
        assert_eq!(project.read("params.yaml"), PARAMS);
        // validate and status refuse it alike: the run would.
        let validate = project.pipe(&["validate", "-S", argument]);
        assert_eq!(validate.status.code(), Some(2), "-S {argument}");
    }
    let runs = project.pipe(&["runs", "--json"]);
    assert_eq!(String::from_utf8_lossy(&runs.stdout).trim(), "[]");
}

/// `pipe run -S ...` as its own process group, so that a kill -9 of it
/// and of what it started leaves nothing behind.
fn spawn_run(project: &TestProject, args: &[&str]) -> Child {
    use std::os::unix::process::CommandExt;
    project
        .std_command()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start pipe")
}

fn wait_for(mut condition: impl FnMut() -> bool, what: &str) {
    for _ in 0..3000 {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting for {what}");
}

#[test]
fn a_run_killed_while_params_yaml_holds_its_override_is_put_back_by_the_next_command() {
    let project = project(" && touch started && sleep 600");
    let mut run = spawn_run(&project, &["run", "-S", "train.alpha=0.3"]);
    let group = run.id() as i32;
    wait_for(|| project.exists("started"), "the command to start");
    let during = project.read("params.yaml");
    assert!(during.contains("alpha: 0.3   # the weight"), "{during}");

    // While the run lives, another command reads the file as it was and
    // leaves the run's write alone.
    let validate = project.pipe(&["status", "--json"]);
    assert!(validate.status.success());
    assert!(project.read("params.yaml").contains("alpha: 0.3"));

    // SAFETY: kill(2) of the process group this test started.
    unsafe {
        libc::kill(-group, libc::SIGKILL);
    }
    let _ = run.wait();
    assert!(project.read("params.yaml").contains("alpha: 0.3"));
    let status = project.pipe(&["status"]);
    assert!(status.status.success());
    assert_eq!(
        project.read("params.yaml"),
        PARAMS,
        "put back by `pipe status`"
    );
    assert!(
        String::from_utf8_lossy(&status.stderr).contains("put params.yaml back as it was"),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(!project.exists(".pipe/params-override/journal.json"));
}

#[test]
fn a_params_yaml_edited_during_the_run_is_left_as_edited_and_its_old_bytes_kept() {
    let project = project(" && sh edit.sh");
    project.write("edit.sh", "echo 'extra: 1' >> params.yaml\n");
    let run = project.pipe(&["run", "-S", "train.alpha=0.4"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains("params.yaml was changed during the run, so pipe left it as it is"),
        "{stderr}"
    );
    let now = project.read("params.yaml");
    assert!(
        now.contains("alpha: 0.4") && now.ends_with("extra: 1\n"),
        "{now}"
    );
    assert_eq!(
        project.read(".pipe/params-override/params.yaml.before-run"),
        PARAMS
    );
}

#[test]
fn a_journal_naming_a_file_outside_the_project_is_removed_and_nothing_written() {
    let project = project("");
    let outside = tempfile::tempdir().expect("dir");
    let victim = outside.path().join("params.yaml");
    std::fs::write(&victim, "mine: 1\n").expect("write");
    let digest = |text: &str| blake3::hash(text.as_bytes()).to_hex().to_string();
    for file in [
        format!("{}", victim.display()),
        "../params.yaml".to_string(),
        "read.py".to_string(),
    ] {
        project.write(".pipe/params-override/original", "mine: 1\n");
        project.write(
            ".pipe/params-override/journal.json",
            &serde_json::json!({
                "file": file,
                "original": digest("mine: 1\n"),
                "written": digest(PARAMS),
            })
            .to_string(),
        );
        let status = project.pipe(&["status"]);
        assert!(status.status.success(), "{file}");
        assert!(
            !project.exists(".pipe/params-override/journal.json"),
            "{file}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine: 1\n");
        assert_eq!(project.read("params.yaml"), PARAMS);
        assert_eq!(project.read("read.py"), READER);
    }
}

#[test]
fn a_param_pyyaml_reads_otherwise_than_pipe_is_warned_of_where_it_is_written() {
    let project = TestProject::new();
    project.write(
        "params.yaml",
        "train:\n  lr: 1e-4\n  fast: yes\n  seed: 7\nother: 1e-4\n",
    );
    project.write("read.py", READER);
    project.write(
        "pipe.yaml",
        &format!(
            "stages:\n  train:\n    run: {} read.py seen.json\n    params: [train]\n    outs: [seen.json]\n  echo:\n    run: echo ${{params.other}} > other.txt\n    outs: [other.txt]\n",
            python().display()
        ),
    );
    let validate = project.pipe(&["validate"]);
    let stderr = String::from_utf8_lossy(&validate.stderr);
    assert!(
        validate.status.success(),
        "a warning, not an error: {stderr}"
    );
    assert!(
        stderr.contains("warning[yaml-1-1]: stage `train` reads `train.lr` by itself: a YAML 1.1 reader such as PyYAML reads `1e-4` as the string \"1e-4\", pipe records the number 0.0001")
            && stderr.contains("--> params.yaml:2:7")
            && stderr.contains("write `0.0001`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("reads `yes` as the boolean true")
            && stderr.contains("--> params.yaml:3:9"),
        "{stderr}"
    );
    // What the command is handed through `${params.other}` is pipe's value.
    assert!(!stderr.contains("other"), "{stderr}");
    // And the command did read what the warning says.
    project.run_ok(&[]);
    assert_eq!(seen(&project)["lr"], serde_json::json!("1e-4"));
}

/// A `-S` that is not `key.path=value` with a YAML value is a usage error
/// (exit 2) where the command line is read, before any pipeline file is
/// looked for, saying what is wrong and how to write it.
#[test]
fn a_malformed_setting_is_a_usage_error_saying_how_to_write_it() {
    let project = TestProject::new();
    for (args, said, hint) in [
        (
            &["run", "-S", "train.lr"][..],
            "`-S train.lr`: expected `key.path=value`",
            "hint: write e.g. `-S train.lr=VALUE`",
        ),
        (
            &["status", "-S", "a..b=1"][..],
            "`-S a..b=1`: `a..b` is not a param path",
            "hint: name the param with its dotted path",
        ),
        (
            &["run", "-S", "tags=[a, b"][..],
            "`-S tags=[a, b`: the value is not valid YAML",
            "hint: quote the value for the shell",
        ),
        (
            &["run", "-m", "-S", "lr=1,,2"][..],
            "cannot sweep `-S lr=1,,2`: an empty value between commas",
            "hint: write each swept param once",
        ),
    ] {
        let output = project.pipe(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
        assert!(stderr.contains(hint), "{args:?}: {stderr}");
    }
    assert!(!project.exists(".pipe/runs.db"));
}
