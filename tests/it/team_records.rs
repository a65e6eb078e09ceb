//! Runs a team shares through a remote: a teammate's pull takes in every
//! run whose record the remote has, as far as the results there bear it
//! out, and a stage whose result is missing costs that stage's outputs
//! and metrics, never the whole run. Driven through the real `pipe`,
//! two projects sharing a `file://` remote.

use std::path::Path;

use pipe_test_support::TestProject;
use serde_json::Value;

/// A stage that runs every time (the tool versions a DVC project writes
/// down with `always_changed`) beside a cached one with metrics.
const PIPELINE: &str = r#"
stages:
  versions:
    run: echo "tool 1.2.3" > versions.txt
    outs: [versions.txt]
    always_run: true
  score:
    run: >-
      echo model > model.txt && printf '{"accuracy": 0.75}' > score.json
    outs: [model.txt]
    metrics: [score.json]
"#;

fn pipeline_with_remote(remote: &Path) -> String {
    format!("cache:\n  remote: file://{}\n{PIPELINE}", remote.display())
}

/// The first project, which ran once and pushed as it ran, and a second
/// with the same pipeline that has run nothing.
fn two_projects(remote: &Path) -> (TestProject, TestProject) {
    let first = TestProject::new();
    first.write("pipe.yaml", &pipeline_with_remote(remote));
    first.run_ok(&[]);
    let second = TestProject::new();
    second.write("pipe.yaml", &first.read("pipe.yaml"));
    (first, second)
}

fn runs_json(project: &TestProject) -> Vec<Value> {
    let output = project.pipe(&["runs", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    serde_json::from_slice::<Value>(&output.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// `pipe show RUN --json`.
fn show_json(project: &TestProject, run: &str) -> Value {
    let output = project.pipe(&["show", run, "--json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

fn stage<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|stage| stage["stage"] == name)
        .unwrap_or_else(|| panic!("no stage {name}: {run}"))
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_teammates_run_with_a_stage_that_always_runs_is_pulled_whole_and_checks_out() {
    let remote = tempfile::tempdir().unwrap();
    let (_first, second) = two_projects(remote.path());
    let pulled = second.pipe(&["cache", "pull", "--all"]);
    assert_eq!(pulled.status.code(), Some(0), "{}", stderr(&pulled));
    assert!(!stderr(&pulled).contains("refused"), "{}", stderr(&pulled));
    let runs = runs_json(&second);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(
        runs[0]
            .get("unverified")
            .is_none_or(|fields| !fields.to_string().contains("versions")),
        "{runs:?}"
    );
    let id = runs[0]["id"].to_string();
    let checkout = second.pipe(&["checkout", &id]);
    assert_eq!(checkout.status.code(), Some(0), "{}", stderr(&checkout));
    assert_eq!(second.read("versions.txt"), "tool 1.2.3\n");
    assert_eq!(second.read("model.txt"), "model\n");
}

#[test]
fn a_pulled_run_whose_result_left_the_remote_keeps_the_rest_and_says_which_stage() {
    let remote = tempfile::tempdir().unwrap();
    let (first, second) = two_projects(remote.path());
    // The result of `score` goes, as a push cut short or a collection
    // would leave it.
    let shown = show_json(&first, "last");
    let key = stage(&shown, "score")["key"]
        .as_str()
        .expect("score's key")
        .to_string();
    let action = remote
        .path()
        .join("actions")
        .join(&key[..2])
        .join(format!("{}.json", &key[2..]));
    std::fs::remove_file(&action).unwrap_or_else(|error| panic!("{action:?}: {error}"));

    let pulled = second.pipe(&["cache", "pull"]);
    assert_eq!(pulled.status.code(), Some(0), "{}", stderr(&pulled));
    assert!(!stderr(&pulled).contains("refused"), "{}", stderr(&pulled));
    let runs = runs_json(&second);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(
        runs[0]["unverified"]
            .to_string()
            .contains("not_in_remote.score"),
        "{runs:?}"
    );
    let id = runs[0]["id"].to_string();
    let pulled_run = show_json(&second, &id);
    let score = stage(&pulled_run, "score");
    assert!(
        score["outputs"]
            .as_object()
            .is_none_or(|outputs| outputs.is_empty()),
        "{score}"
    );
    assert!(
        !pulled_run.to_string().contains("0.75"),
        "a metric the remote cannot bear out: {pulled_run}"
    );

    let shown = second.pipe(&["show", &id]);
    let text = String::from_utf8_lossy(&shown.stdout).into_owned() + &stderr(&shown);
    assert!(
        text.contains(
            "not shown   outputs and metrics of `score` (its result is not in the remote)"
        ) && !text.contains("unverified"),
        "{text}"
    );
    // What the remote still has of the run is pulled and checks out.
    let results = second.pipe(&["cache", "pull", &id]);
    assert_eq!(results.status.code(), Some(0), "{}", stderr(&results));
    let checkout = second.pipe(&["checkout", &id]);
    assert_eq!(checkout.status.code(), Some(0), "{}", stderr(&checkout));
    assert_eq!(second.read("versions.txt"), "tool 1.2.3\n");
    assert!(!second.exists("model.txt"));
}
