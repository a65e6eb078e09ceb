//! What `status`, `why`, `--dry-run` and a failed run say is true: a stage
//! called fresh is left alone by the next `pipe run`, a restorable one is
//! restored, a run is cited for a result only if the stage had one in it,
//! a failed command shows what ran, a log is pointed at only when it holds
//! something, and a stage being run by another `pipe run` is said to run.

use std::process::{Child, Stdio};
use std::time::Duration;

use pipe_test_support::TestProject;
use serde_json::Value;

const TWO_STAGES: &str = "
params:
  x: 1
stages:
  train:
    run: echo ${params.x} > model.txt
    outs: [model.txt]
  evaluate:
    run: cat model.txt > score.txt
    deps: [model.txt]
    outs: [score.txt]
";

fn stdout_of(project: &TestProject, args: &[&str]) -> String {
    let output = project.pipe(args);
    assert!(
        output.status.success(),
        "pipe {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The status line of `stage` in `pipe status` (or `--dry-run`) text.
fn line_of<'a>(text: &'a str, stage: &str) -> &'a str {
    text.lines()
        .find(|line| line.split_whitespace().next() == Some(stage))
        .unwrap_or_else(|| panic!("no line for `{stage}` in:\n{text}"))
}

fn freshness_of(project: &TestProject, stage: &str) -> String {
    let states: Value =
        serde_json::from_str(&stdout_of(project, &["status", "--json"])).expect("status JSON");
    states
        .as_array()
        .expect("an array")
        .iter()
        .find(|state| state["stage"] == stage)
        .and_then(|state| state["freshness"].as_str())
        .unwrap_or_else(|| panic!("no `{stage}` in {states}"))
        .to_string()
}

#[test]
fn after_a_run_with_set_status_says_the_next_run_restores_what_it_restores() {
    let project = TestProject::new();
    project.write("pipe.yaml", TWO_STAGES);
    project.run_ok(&[]);
    let overridden = project.run_ok(&["-S", "x=2"]);
    assert_eq!(overridden.ran(), vec!["evaluate", "train"]);
    let run = overridden.run_id();

    let status = stdout_of(&project, &["status"]);
    for stage in ["train", "evaluate"] {
        let line = line_of(&status, stage);
        assert!(
            line.contains("restorable")
                && line.contains(&format!(
                    "the workspace holds the result of run #{run} with -S x=2"
                )),
            "{status}"
        );
    }
    assert!(
        status.contains("0 fresh, 2 restorable, 0 stale"),
        "{status}"
    );
    assert_eq!(freshness_of(&project, "evaluate"), "restorable");
    let why = stdout_of(&project, &["why", "evaluate"]);
    assert!(
        why.contains("stage `evaluate` is restorable from the cache"),
        "{why}"
    );
    let dry_run = stdout_of(&project, &["run", "--dry-run"]);
    assert!(
        line_of(&dry_run, "evaluate").contains("would restore"),
        "{dry_run}"
    );

    // What it said is what the run does.
    let next = project.run_ok(&[]);
    assert_eq!(next.status("train"), "restored");
    assert_eq!(next.status("evaluate"), "restored");
    assert_eq!(project.read("score.txt"), "1\n");
    let status = stdout_of(&project, &["status"]);
    assert!(
        status.contains("2 fresh, 0 restorable, 0 stale"),
        "{status}"
    );
}

#[test]
fn after_checking_out_an_older_run_status_says_what_the_next_run_restores() {
    let project = TestProject::new();
    project.write("pipe.yaml", TWO_STAGES);
    let first = project.run_ok(&[]).run_id();
    project.write("pipe.yaml", &TWO_STAGES.replace("x: 1", "x: 3"));
    project.run_ok(&[]);
    let checkout = project.pipe(&["checkout", &first.to_string()]);
    assert!(
        checkout.status.success(),
        "{}",
        String::from_utf8_lossy(&checkout.stderr)
    );
    assert_eq!(project.read("score.txt"), "1\n");

    let status = stdout_of(&project, &["status"]);
    for stage in ["train", "evaluate"] {
        let line = line_of(&status, stage);
        assert!(
            line.contains("restorable")
                && line.contains(&format!("the workspace holds the result of run #{first};")),
            "{status}"
        );
    }
    let next = project.run_ok(&[]);
    assert_eq!(next.status("train"), "restored");
    assert_eq!(next.status("evaluate"), "restored");
    assert_eq!(project.read("score.txt"), "3\n");
}

#[test]
fn a_stage_below_one_the_run_restores_is_stale_when_its_new_key_is_not_cached() {
    let project = TestProject::new();
    // `evaluate` was never run on the result `train` has with x=1.
    project.write("pipe.yaml", TWO_STAGES);
    project.run_ok(&["--", "train"]);
    project.run_ok(&["-S", "x=2"]);
    let status = stdout_of(&project, &["status"]);
    assert!(line_of(&status, "train").contains("restorable"), "{status}");
    assert!(line_of(&status, "evaluate").contains("stale"), "{status}");
    // `--dry-run` says so too, with the command that will run.
    let dry_run = stdout_of(&project, &["run", "--dry-run"]);
    assert!(
        line_of(&dry_run, "train").contains("would restore")
            && dry_run.contains("evaluate  would run")
            && dry_run.contains("evaluate  would run  dependency `model.txt` changed\n    > cat model.txt > score.txt\n"),
        "{dry_run}"
    );
    let next = project.run_ok(&[]);
    assert_eq!(next.status("train"), "restored");
    assert_eq!(next.status("evaluate"), "ran");
}

const FAILS_WITH_TWO: &str = "
params:
  x: 1
stages:
  train:
    run: if [ ${params.x} = 2 ]; then exit 3; fi; echo ${params.x} > model.txt
    outs: [model.txt]
";

#[test]
fn why_after_a_failed_run_cites_the_last_run_with_a_result_and_names_the_failed_one_as_failed() {
    let project = TestProject::new();
    project.write("pipe.yaml", FAILS_WITH_TWO);
    let good = project.run_ok(&[]).run_id();
    project.write("pipe.yaml", &FAILS_WITH_TWO.replace("x: 1", "x: 2"));
    let failed = project.run(&[]);
    assert_eq!(failed.code, 1, "{}", failed.stderr);
    assert_eq!(failed.status("train"), "failed");
    let failed = failed.run_id();

    let why = stdout_of(&project, &["why", "train"]);
    assert!(why.contains("stage `train` is stale"), "{why}");
    assert!(why.contains("param `x` changed"), "{why}");
    assert!(
        why.contains(&format!("changed since run #{good} (key")),
        "{why}"
    );
    assert!(
        why.contains(&format!("it failed in run #{failed}")),
        "{why}"
    );
    assert!(!why.contains("the one it had"), "{why}");
    assert!(!why.contains("no longer in the cache"), "{why}");
    let json: Value =
        serde_json::from_str(&stdout_of(&project, &["why", "train", "--json"])).expect("JSON");
    assert_eq!(json["previous_run"], good, "{json}");
    assert_eq!(json["failed_run"], failed, "{json}");

    let status = stdout_of(&project, &["status"]);
    assert!(
        line_of(&status, "train").contains("param `x` changed"),
        "{status}"
    );
}

#[test]
fn a_stage_that_only_ever_failed_never_had_a_result() {
    let project = TestProject::new();
    project.write("pipe.yaml", &FAILS_WITH_TWO.replace("x: 1", "x: 2"));
    let failed = project.run(&[]);
    assert_eq!(failed.code, 1, "{}", failed.stderr);
    let run = failed.run_id();
    let why = stdout_of(&project, &["why", "train"]);
    assert!(
        why.contains("no earlier result of this stage is recorded")
            && why.contains(&format!("it failed in run #{run}")),
        "{why}"
    );
    assert!(!why.contains("the one it had"), "{why}");
    let status = stdout_of(&project, &["status"]);
    assert!(
        line_of(&status, "train")
            .contains(&format!("it never had a result; it failed in run #{run}")),
        "{status}"
    );
}

const PASSWORD: &str = "pa55-shown-nowhere";
const TOKEN: &str = "tok-shown-nowhere";

#[test]
fn a_failed_command_is_shown_as_it_ran_with_its_credentials_masked() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        &format!(
            "
params:
  source: \"http://reader:{PASSWORD}@127.0.0.1:9/data.csv\"
  query: \"http://reader:{PASSWORD}@127.0.0.1:9/data.csv?access_token={TOKEN}&v=1\"
  epochs: 7
stages:
  fetch:
    run: test -n ${{params.source}} && exit ${{params.epochs}}
    outs: [data.csv]
  listed:
    run: [sh, -c, \"exit 5\", \"${{params.query}}\"]
    outs: [listed.txt]
"
        ),
    );
    let output = project.pipe(&["run"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("    > test -n http://***@127.0.0.1:9/data.csv && exit 7"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "    > sh -c 'exit 5' 'http://***@127.0.0.1:9/data.csv?access_token=***&v=1'"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains(PASSWORD) && !stderr.contains(TOKEN),
        "{stderr}"
    );

    // With -v, before it runs; and in the JSON event of its end.
    let verbose = project.pipe(&["run", "-v", "--", "fetch"]);
    let stderr = String::from_utf8_lossy(&verbose.stderr);
    let announced = stderr
        .find("stage `fetch`: > test -n http://***@")
        .unwrap_or_else(|| panic!("no command before the run:\n{stderr}"));
    let failed = stderr.find("✗ failed").expect("a failure line");
    assert!(announced < failed, "{stderr}");
    assert!(
        !stderr.contains(PASSWORD) && !stderr.contains(TOKEN),
        "{stderr}"
    );
    let json = project.run(&["--", "fetch"]);
    let finished = json
        .events
        .iter()
        .find(|event| event["event"] == "stage_finished")
        .expect("stage_finished");
    assert_eq!(
        finished["command"], "test -n http://***@127.0.0.1:9/data.csv && exit 7",
        "{finished}"
    );
}

#[test]
fn a_failure_points_at_its_log_only_when_the_log_holds_something() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "
stages:
  silent:
    run: exit 3
    outs: [a.txt]
  speaks:
    run: echo boom >&2; exit 3
    outs: [b.txt]
",
    );
    let output = project.pipe(&["run"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("full log: .pipe/logs/1/speaks.log") && stderr.contains("│ boom"),
        "{stderr}"
    );
    assert!(!stderr.contains("silent.log"), "{stderr}");
    assert!(stderr.contains("> exit 3"), "{stderr}");
}

#[test]
fn quiet_keeps_the_failure_and_drops_the_rest() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "
stages:
  fine:
    run: echo fine > a.txt
    outs: [a.txt]
  broken:
    run: cat a.txt; echo boom >&2; exit 3
    deps: [a.txt]
    outs: [b.txt]
",
    );
    let output = project.pipe(&["run", "-q"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("✗ failed") && stderr.contains("broken") && stderr.contains("│ boom"),
        "{stderr}"
    );
    assert!(
        stderr.contains("> cat a.txt; echo boom >&2; exit 3"),
        "{stderr}"
    );
    assert!(
        stderr.contains("run #1 failed: 1 ran, 1 failed"),
        "{stderr}"
    );
    assert!(!stderr.contains("✓ ran"), "{stderr}");
    assert!(!stderr.contains("running"), "{stderr}");

    // A success with -q says nothing at all.
    project.write(
        "pipe.yaml",
        "
stages:
  fine:
    run: echo fine > a.txt
    outs: [a.txt]
",
    );
    let quiet = project.pipe(&["run", "-q"]);
    assert!(quiet.status.success());
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
}

/// `pipe run` in the background, its output thrown away.
fn spawn_run(project: &TestProject) -> Child {
    project
        .std_command()
        .arg("run")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start pipe run")
}

fn wait_for(mut condition: impl FnMut() -> bool, what: &str) {
    for _ in 0..6000 {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting for {what}");
}

const WAITS_FOR_GO: &str = "
stages:
  slow:
    run: touch started; while [ ! -e go ]; do sleep 0.02; done; echo done > out.txt
    outs: [out.txt]
  after:
    run: cat out.txt > copy.txt
    deps: [out.txt]
    outs: [copy.txt]
";

#[test]
fn status_during_a_run_says_the_stage_runs_and_in_which_run() {
    let project = TestProject::new();
    project.write("pipe.yaml", WAITS_FOR_GO);
    let mut run = spawn_run(&project);
    wait_for(|| project.exists("started"), "the stage to start");

    let status = stdout_of(&project, &["status"]);
    let line = line_of(&status, "slow");
    assert!(
        line.contains("running") && line.contains(&format!("running in run #1 (pid {})", run.id())),
        "{status}"
    );
    assert!(!status.contains("no longer in the cache"), "{status}");
    assert!(
        line_of(&status, "after").contains("upstream stage `slow` is running"),
        "{status}"
    );
    assert!(status.contains(", 1 running"), "{status}");
    assert_eq!(freshness_of(&project, "slow"), "running");
    let why = stdout_of(&project, &["why", "slow"]);
    assert!(why.contains("stage `slow` is running"), "{why}");
    // With a remote too: a running stage is not counted as fresh.
    let remote = tempfile::tempdir().unwrap();
    let remote_arg = remote.path().to_str().unwrap();
    let remote_arg = format!("--remote={remote_arg}");
    let status = stdout_of(&project, &["status", &remote_arg]);
    assert!(line_of(&status, "slow").contains("running"), "{status}");
    assert!(
        status.contains("2 stages: 0 fresh, 0 restorable, 1 stale"),
        "{status}"
    );
    assert!(status.contains("; 1 running now"), "{status}");

    project.write("go", "");
    assert!(run.wait().expect("wait for pipe run").success());
    let status = stdout_of(&project, &["status"]);
    assert!(
        status.contains("2 fresh, 0 restorable, 0 stale\n"),
        "{status}"
    );
    assert!(
        !project.exists(".pipe/running/")
            || std::fs::read_dir(project.path(".pipe/running"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn status_after_a_killed_run_does_not_say_the_stage_runs() {
    let project = TestProject::new();
    project.write("pipe.yaml", WAITS_FOR_GO);
    let mut run = spawn_run(&project);
    wait_for(|| project.exists("started"), "the stage to start");
    assert_eq!(freshness_of(&project, "slow"), "running");
    run.kill().expect("kill -9 pipe run");
    run.wait().expect("reap the killed pipe");

    let status = stdout_of(&project, &["status"]);
    assert!(line_of(&status, "slow").contains("stale"), "{status}");
    assert!(!status.contains("running"), "{status}");
    // The next run removes what the killed one left, and runs the stage.
    project.write("go", "");
    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.status("slow"), "ran");
    let left: Vec<_> = std::fs::read_dir(project.path(".pipe/running"))
        .map(|entries| entries.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_dependency_inside_a_restored_output_directory_is_judged_on_what_the_run_restores() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "
params:
  x: 1
stages:
  train:
    run: mkdir -p model/parts && echo ${params.x} > model/parts/weights.txt && echo config > model/config.txt
    outs: [model]
  evaluate:
    run: cat model/parts/weights.txt > score.txt
    deps: [model/parts/weights.txt]
    outs: [score.txt]
",
    );
    project.run_ok(&[]);
    let overridden = project.run_ok(&["-S", "x=2"]).run_id();
    let status = stdout_of(&project, &["status"]);
    assert!(
        line_of(&status, "evaluate").contains(&format!(
            "restorable  the workspace holds the result of run #{overridden} with -S x=2"
        )),
        "{status}"
    );
    let next = project.run_ok(&[]);
    assert_eq!(next.status("train"), "restored");
    assert_eq!(next.status("evaluate"), "restored");
}

#[test]
fn a_param_now_used_and_a_dependency_added_or_removed_are_named_as_such() {
    let project = TestProject::new();
    project.write("in.txt", "1\n");
    project.write("other.txt", "2\n");
    project.write(
        "pipe.yaml",
        "params:\n  x: 1\nstages:\n  a:\n    run: echo hi > a.txt\n    outs: [a.txt]\n",
    );
    project.run_ok(&[]);
    let status = |project: &TestProject| {
        String::from_utf8_lossy(&project.pipe(&["status"]).stdout).into_owned()
    };
    project.write(
        "pipe.yaml",
        "params:\n  x: 1\nstages:\n  a:\n    run: echo ${params.x} > a.txt\n    deps: [in.txt]\n    outs: [a.txt]\n",
    );
    let said = status(&project);
    assert!(said.contains("param `x` now used"), "{said}");
    assert!(said.contains("dependency `in.txt` added"), "{said}");
    assert!(!said.contains("``"), "an empty name: {said}");
    project.run_ok(&[]);
    project.write(
        "pipe.yaml",
        "params:\n  x: 1\nstages:\n  a:\n    run: echo ${params.x} > a.txt\n    deps: [other.txt]\n    outs: [a.txt]\n",
    );
    let said = status(&project);
    assert!(said.contains("dependency `in.txt` removed"), "{said}");
    assert!(said.contains("dependency `other.txt` added"), "{said}");
}

#[test]
fn a_stage_stale_only_because_of_what_is_above_says_it_reruns_only_if_its_inputs_change() {
    let project = TestProject::new();
    let pipeline = |command: &str| {
        format!(
            "stages:\n  a:\n    run: {command}\n    outs: [a.txt]\n  b:\n    run: cat a.txt > b.txt\n    deps: [a.txt]\n    outs: [b.txt]\n"
        )
    };
    project.write("pipe.yaml", &pipeline("echo same > a.txt"));
    project.run_ok(&[]);
    // `a` changes but makes the same file: `b` is kept (early cutoff).
    project.write("pipe.yaml", &pipeline("echo same | cat > a.txt"));
    let status = stdout_of(&project, &["status"]);
    assert!(
        status.contains("upstream stage `a` is stale; stale unless its inputs come out the same"),
        "{status}"
    );
    let run = project.run_ok(&[]);
    assert_eq!(run.status("b"), "fresh", "early cutoff");
    // Below a forced stage, a dry run says the same, never `fresh`.
    let dry = stdout_of(&project, &["run", "-n", "--force", "a"]);
    let b = dry
        .lines()
        .find(|line| line.starts_with("b "))
        .unwrap_or_default();
    assert!(
        b.contains("would run") && b.contains("stale unless its inputs come out the same"),
        "{dry}"
    );
}
