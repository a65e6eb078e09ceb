//! A pulled run record shows only what its results bear out: params that
//! contradict the manifests its keys hash refuse it; a commit whose files
//! are not the dependencies it hashed refuses it when it claims a clean
//! run, and a commit this repository cannot check is shown as the
//! record's word only and never made a ref's run; directions from a record
//! never turn worse into better. Through the real binary, a `file://`
//! remote whose records are edited as its writer could.

use std::path::{Path, PathBuf};

use pipe_test_support::{git, TestProject};
use serde_json::{json, Value};

fn pipeline(remote: &Path) -> String {
    format!(
        r#"cache:
  remote: file://{}
params:
  n: 5
stages:
  train:
    run: bash train.sh ${{params.n}}
    deps: [train.sh]
    outs: [model.txt]
    metrics: [metrics.json]
"#,
        remote.display()
    )
}

const TRAIN: &str = "printf '{\"loss\": 0.%s}' \"$1\" > metrics.json; echo \"$1\" > model.txt\n";

fn records(remote: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|ext| ext == "json") {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(&remote.join("runs"), &mut found);
    found.sort();
    found
}

fn edit(record: &Path, change: impl FnOnce(&mut Value)) {
    let mut value: Value = serde_json::from_slice(&std::fs::read(record).unwrap()).unwrap();
    change(&mut value);
    std::fs::write(record, serde_json::to_vec(&value).unwrap()).unwrap();
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A git project that ran once at main and pushed.
fn pushed(remote: &Path) -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", &pipeline(remote));
    project.write("train.sh", TRAIN);
    project.write(".gitignore", "/model.txt\n/metrics.json\n");
    git(project.root(), &["init", "-q", "-b", "main"]);
    git(project.root(), &["add", "-A"]);
    git(project.root(), &["commit", "-qm", "the project"]);
    project.run_ok(&[]);
    project
}

fn clone_of(project: &TestProject) -> TestProject {
    let clone = TestProject::new();
    git(
        clone.root(),
        &["clone", "-q", &project.root().display().to_string(), "."],
    );
    clone
}

#[test]
fn a_pulled_record_whose_params_contradict_its_results_is_refused() {
    let remote = tempfile::tempdir().unwrap();
    let first = pushed(remote.path());
    let [record] = &records(remote.path())[..] else {
        panic!("one record")
    };
    edit(record, |value| value["run"]["params"]["n"] = json!(7));
    let second = clone_of(&first);
    let pulled = second.pipe(&["cache", "pull"]);
    assert!(
        stderr(&pulled).contains("it says param `n` was 7, but its results were made with 5"),
        "{}",
        stderr(&pulled)
    );
    assert_eq!(stdout(&second.pipe(&["runs", "--json"])).trim(), "[]");
}

#[test]
fn a_pulled_record_claiming_a_commit_its_files_were_not_at_is_refused_or_marked() {
    let remote = tempfile::tempdir().unwrap();
    let first = pushed(remote.path());
    let main = git(first.root(), &["rev-parse", "HEAD"]).trim().to_string();
    // A run on a branch whose train.sh differs, its record then claiming
    // to be main's clean run.
    git(first.root(), &["checkout", "-q", "-b", "feature"]);
    first.write("train.sh", &format!("{TRAIN}echo tuned >> model.txt\n"));
    git(first.root(), &["commit", "-qam", "tuned"]);
    first.run_ok(&[]);
    git(first.root(), &["checkout", "-q", "main"]);
    let feature_commit = git(first.root(), &["rev-parse", "feature"])
        .trim()
        .to_string();
    let forged = records(remote.path())
        .into_iter()
        .find(|path| path.display().to_string().contains(&feature_commit))
        .unwrap();
    edit(&forged, |value| {
        value["run"]["git_commit"] = json!(main);
        value["run"]["git_dirty"] = json!(false);
    });
    let second = clone_of(&first);
    let pulled = second.pipe(&["cache", "pull"]);
    assert!(
        stderr(&pulled).contains("it says it ran clean at commit")
            && stderr(&pulled).contains("`train.sh` there is not the file"),
        "{}",
        stderr(&pulled)
    );
    let listed: Value = serde_json::from_str(&stdout(&second.pipe(&["runs", "--json"]))).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "main's own run only");

    // A commit this repository does not have: kept, shown as the record's
    // word, and never what a ref names.
    let third_remote = tempfile::tempdir().unwrap();
    let elsewhere = pushed(third_remote.path());
    let [record] = &records(third_remote.path())[..] else {
        panic!("one record")
    };
    edit(record, |value| {
        value["run"]["git_commit"] = json!("0123456789abcdef0123456789abcdef01234567")
    });
    let third = clone_of(&elsewhere);
    third.pipe(&["cache", "pull"]);
    let shown = stdout(&third.pipe(&["show", "1"]));
    assert!(shown.contains("unverified  its commit"), "{shown}");
    assert!(shown.contains("pulled   from"), "{shown}");
}

#[test]
fn directions_from_a_pulled_record_never_turn_worse_into_better() {
    let remote = tempfile::tempdir().unwrap();
    let first = pushed(remote.path());
    first.run_ok(&["-S", "n=9"]);
    for record in records(remote.path()) {
        edit(&record, |value| {
            value["run"]["directions"] = json!({"train.loss": "higher"})
        });
    }
    let second = clone_of(&first);
    second.pipe(&["cache", "pull"]);
    let diff: Value =
        serde_json::from_str(&stdout(&second.pipe(&["diff", "1", "2", "--json"]))).unwrap();
    let loss = diff["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|metric| metric["metric"] == "loss")
        .unwrap()
        .clone();
    assert_eq!(loss["verdict"], "worse", "{diff}");
    // The same record's direction, run here, is the pipeline's word.
    let mine = first.pipe(&["diff", "1", "2", "--json"]);
    assert!(mine.status.success());
}

#[test]
fn a_record_whose_result_another_run_stored_first_is_kept_and_said_so() {
    let remote = tempfile::tempdir().unwrap();
    let url = format!("file://{}", remote.path().display());
    let pipeline = "stages:\n  train:\n    run: >-\n      echo model > model.txt;\n      printf '{\"accuracy\": 0.9, \"seconds\": %s}' \"$(date +%s%N)\" > metrics.json\n    outs: [model.txt]\n    metrics: [metrics.json]\n";
    let with_remote = |project: &TestProject, args: &[&str]| {
        let output = project
            .std_command()
            .env("PIPE_REMOTE", &url)
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        output
    };
    // Two jobs of one commit at once: each computes the key's result, and
    // the first to push keeps its own in the remote.
    let first = TestProject::new();
    first.write("pipe.yaml", pipeline);
    let second = TestProject::new();
    second.write("pipe.yaml", pipeline);
    second.run_ok(&[]);
    with_remote(&first, &["run"]);
    with_remote(&second, &["cache", "push", "--all"]);

    let third = TestProject::new();
    third.write("pipe.yaml", pipeline);
    let pulled = with_remote(&third, &["cache", "pull"]);
    assert!(!stderr(&pulled).contains("skipped"), "{}", stderr(&pulled));
    let listed: Value = serde_json::from_str(&stdout(&third.pipe(&["runs", "--json"]))).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2, "both runs are kept");
    let superseded = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["unverified"].to_string().contains("superseded.train"))
        .expect("the second job's run, marked");
    let shown = stdout(&third.pipe(&["show", &superseded["id"].to_string()]));
    assert!(
        shown.contains("another run's result for the same key was stored first"),
        "{shown}"
    );
}
