//! A run record is hostile input, like an action: one pulled from a remote
//! (anyone who can write the remote wrote it) or read from `.pipe/`. It can
//! make `pipe checkout` write only what the pipeline's stage declares and
//! the stored result holds; the metrics shown for it are read from the
//! result's checked objects; its text reaches a terminal escaped; a
//! checkout that cannot complete changes nothing. Driven through the real
//! `pipe`.

use std::path::{Path, PathBuf};

use pipe_test_support::TestProject;
use serde_json::{json, Value};

use crate::action_trust::{action_files, plant};

/// A stage whose metrics file carries text a terminal would obey.
const PIPELINE: &str = r#"
stages:
  score:
    run: >-
      printf '{"accuracy": 0.8765, "note": "a\\u001b]0;pwned-title\\u0007b\\u009b2J"}' > score.json
      && echo model > model.txt
    outs: [model.txt]
    metrics: [score.json]
"#;

/// A project sharing a `file://` remote with the first one, which ran.
struct Shared {
    remote: tempfile::TempDir,
    first: TestProject,
}

impl Shared {
    fn new() -> Shared {
        let remote = tempfile::tempdir().unwrap();
        let first = TestProject::new();
        first.write("pipe.yaml", &pipeline_with_remote(remote.path()));
        first.run_ok(&[]);
        Shared { remote, first }
    }

    fn clone_project(&self) -> TestProject {
        let project = TestProject::new();
        project.write("pipe.yaml", &self.first.read("pipe.yaml"));
        project
    }

    /// The run record the first project pushed.
    fn record_file(&self) -> PathBuf {
        let mut found = Vec::new();
        walk(&self.remote.path().join("runs"), &mut found);
        assert_eq!(found.len(), 1, "{found:?}");
        found.remove(0)
    }

    /// Adds [`PLANTED`] to the record's outputs of `score`, with the
    /// object of its `model.txt`.
    fn plant_in_record(&self) {
        self.edit_record(|record| {
            let stage = stage_mut(record, "score");
            let artifact = stage["outputs"]["model.txt"].clone();
            for path in PLANTED {
                stage["outputs"][path] = artifact.clone();
            }
        });
    }

    fn edit_record(&self, edit: impl FnOnce(&mut Value)) {
        let path = self.record_file();
        let mut record: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut record);
        std::fs::write(&path, serde_json::to_vec_pretty(&record).unwrap()).unwrap();
    }
}

fn pipeline_with_remote(remote: &Path) -> String {
    format!("cache:\n  remote: file://{}\n{PIPELINE}", remote.display())
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.file_type().unwrap().is_dir() {
            walk(&entry.path(), found);
        } else {
            found.push(entry.path());
        }
    }
}

fn stage_mut<'a>(record: &'a mut Value, name: &str) -> &'a mut Value {
    record["run"]["stages"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|stage| stage["stage"] == name)
        .unwrap()
}

fn pulled_run_ids(project: &TestProject) -> Vec<i64> {
    let runs: Value =
        serde_json::from_slice(&project.pipe(&["runs", "--json"]).stdout).expect("runs --json");
    runs.as_array()
        .unwrap()
        .iter()
        .map(|run| run["id"].as_i64().unwrap())
        .collect()
}

const PLANTED: [&str; 2] = ["conftest.py", ".github/workflows/x.yml"];

#[test]
fn a_pulled_record_with_numbers_the_history_cannot_hold_is_refused_and_the_listings_keep_working() {
    for (field, edit) in [
        ("started_ms", json!({"started_ms": u64::MAX})),
        (
            "ended_ms",
            json!({"ended_ms": 9_300_000_000_000_000_000u64}),
        ),
        (
            "labels_ms",
            json!({"labels_ms": u64::MAX, "name": "forever"}),
        ),
    ] {
        let shared = Shared::new();
        shared.edit_record(|record| {
            for (key, value) in edit.as_object().unwrap() {
                record["run"][key] = value.clone();
            }
        });
        let second = shared.clone_project();
        let pulled = second.pipe(&["cache", "pull", "--all"]);
        let stderr = String::from_utf8_lossy(&pulled.stderr);
        assert!(
            stderr.contains(&format!("`{field}`")) && stderr.contains("out of range"),
            "{field}: {stderr}"
        );
        for listing in [&["runs"][..], &["compare", "--json"], &["runs", "--json"]] {
            let output = second.pipe(listing);
            assert_ne!(output.status.code(), Some(3), "{field}: {listing:?}");
        }
        assert!(pulled_run_ids(&second).is_empty(), "{field}");
    }
    // A stage's duration, the same.
    let shared = Shared::new();
    shared.edit_record(|record| stage_mut(record, "score")["duration_ms"] = json!(u64::MAX));
    let second = shared.clone_project();
    let pulled = second.pipe(&["cache", "pull", "--all"]);
    assert!(
        String::from_utf8_lossy(&pulled.stderr).contains("score.duration_ms"),
        "{}",
        String::from_utf8_lossy(&pulled.stderr)
    );
    assert_eq!(second.pipe(&["runs"]).status.code(), Some(0));
}

#[test]
fn a_pulled_record_naming_outputs_its_result_does_not_hold_is_refused() {
    let shared = Shared::new();
    shared.plant_in_record();
    let second = shared.clone_project();
    let pulled = second.pipe(&["cache", "pull", "--all"]);
    let stderr = String::from_utf8_lossy(&pulled.stderr);
    assert!(
        stderr.contains("is refused") && stderr.contains("which its result"),
        "{stderr}"
    );
    assert!(second.pipe(&["runs", "--json"]).stdout.starts_with(b"[]"));
    for path in PLANTED {
        assert!(!second.exists(path), "{path} was written");
    }
}

#[test]
fn a_pulled_record_naming_an_output_no_project_may_hold_is_refused_whole() {
    let shared = Shared::new();
    let written = std::fs::read(shared.record_file()).unwrap();
    for hostile in ["../x", "/etc/passwd", ".git/config", "a/./b"] {
        std::fs::write(shared.record_file(), &written).unwrap();
        shared.edit_record(|record| {
            let stage = stage_mut(record, "score");
            stage["outputs"][hostile] = stage["outputs"]["model.txt"].clone();
        });
        let second = shared.clone_project();
        let pulled = second.pipe(&["cache", "pull", "--all"]);
        let stderr = String::from_utf8_lossy(&pulled.stderr);
        assert!(
            stderr.contains(&format!("`{hostile}`")) && stderr.contains("skipped"),
            "{hostile}: {stderr}"
        );
        assert!(pulled_run_ids(&second).is_empty(), "{hostile}");
    }
}

#[test]
fn a_pulled_records_pipeline_file_that_no_project_may_hold_is_dropped_and_the_record_kept() {
    let shared = Shared::new();
    let first: Value =
        serde_json::from_slice(&shared.first.pipe(&["show", "1", "--json"]).stdout).unwrap();
    assert_eq!(first["file"], "pipe.yaml", "{first}");
    let written = std::fs::read(shared.record_file()).unwrap();
    for hostile in [
        "../elsewhere/pipe.yaml",
        "/etc/passwd",
        ".git/config",
        "a/./b",
    ] {
        std::fs::write(shared.record_file(), &written).unwrap();
        shared.edit_record(|record| record["run"]["file"] = json!(hostile));
        let second = shared.clone_project();
        let pulled = second.pipe(&["cache", "pull", "--all"]);
        assert!(pulled.status.success(), "{hostile}: {pulled:?}");
        let ids = pulled_run_ids(&second);
        assert_eq!(ids.len(), 1, "{hostile}");
        let id = ids[0].to_string();
        let show: Value =
            serde_json::from_slice(&second.pipe(&["show", &id, "--json"]).stdout).unwrap();
        assert_eq!(show["file"], Value::Null, "{hostile}: {show}");
        // Its settings are looked at with the pipeline file found here.
        let status = second.pipe(&["status", "--run", &id]);
        assert!(status.status.success(), "{hostile}: {status:?}");
    }
}

#[test]
fn checkout_writes_only_what_the_pipelines_stage_declares_whoever_wrote_the_result() {
    // The strongest writer of the remote: the record and the result under
    // its key both name the planted paths, and the result's manifest
    // declares them, so every check of the result alone passes.
    let shared = Shared::new();
    for action in action_files(shared.remote.path()) {
        let planted: Vec<String> = PLANTED.iter().map(|path| path.to_string()).collect();
        plant(&action, &planted, true);
    }
    shared.plant_in_record();
    let second = shared.clone_project();
    let pulled = second.pipe(&["cache", "pull", "--all"]);
    assert!(pulled.status.success(), "{pulled:?}");
    let ids = pulled_run_ids(&second);
    assert_eq!(ids.len(), 1);
    let checkout = second.pipe(&["checkout", &ids[0].to_string()]);
    let stderr = String::from_utf8_lossy(&checkout.stderr);
    assert_eq!(checkout.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("`conftest.py`, which the stage does not declare"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    for path in PLANTED.iter().chain(&["model.txt", "score.json"]) {
        assert!(!second.exists(path), "{path} was written");
    }
}

#[test]
fn the_metrics_shown_for_a_pulled_record_are_its_results_objects() {
    let shared = Shared::new();
    shared.edit_record(|record| {
        stage_mut(record, "score")["metrics"]["accuracy"] = json!(0.99);
    });
    let second = shared.clone_project();
    let pulled = second.pipe(&["cache", "pull"]);
    assert!(pulled.status.success(), "{pulled:?}");
    let id = pulled_run_ids(&second)[0].to_string();
    let show: Value =
        serde_json::from_slice(&second.pipe(&["show", &id, "--json"]).stdout).unwrap();
    assert_eq!(show["stages"][0]["metrics"]["accuracy"], 0.8765, "{show}");
    let compare = second.pipe(&["compare", &id, "--json"]);
    let compare = String::from_utf8_lossy(&compare.stdout);
    assert!(!compare.contains("0.99"), "{compare}");
    assert!(compare.contains("0.8765"), "{compare}");
    // Checking the run out restores the file those figures came from.
    assert!(second.pipe(&["cache", "pull", &id]).status.success());
    let checkout = second.pipe(&["checkout", &id]);
    assert!(checkout.status.success(), "{checkout:?}");
    assert!(second.read("score.json").contains("0.8765"));
}

/// Bytes a terminal obeys: the window title (OSC 0), the clipboard (OSC
/// 52), clearing the screen (CSI 2J, and its C1 form), a bell, and a
/// right-to-left override.
const HOSTILE: &str =
    "x\u{1b}]0;pwned-title\u{7}\u{1b}]52;c;cGF5bG9hZA==\u{7}\u{1b}[2J\u{9b}2J\u{202e}y";

fn assert_terminal_safe(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for forbidden in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
        assert!(
            !text.contains(forbidden),
            "{what} prints {forbidden:?} raw:\n{text}"
        );
    }
}

#[test]
fn text_from_a_pulled_record_reaches_the_terminal_escaped_and_json_exact() {
    let shared = Shared::new();
    shared.edit_record(|record| {
        record["run"]["pipeline"] = json!(format!("pipe{HOSTILE}"));
        record["run"]["argv"] = json!(["pipe", "run", HOSTILE]);
        record["run"]["git_commit"] = json!(HOSTILE);
        stage_mut(record, "score")["detail"] = json!(HOSTILE);
    });
    let second = shared.clone_project();
    let pulled = second.pipe(&["cache", "pull"]);
    assert_terminal_safe("cache pull", &pulled.stderr);
    let id = pulled_run_ids(&second)[0].to_string();
    for args in [
        vec!["runs"],
        vec!["show", id.as_str()],
        vec!["compare", id.as_str()],
        vec!["compare", id.as_str(), "--md"],
        vec!["diff", id.as_str(), id.as_str()],
        vec!["diff", id.as_str(), id.as_str(), "--md"],
        vec!["why", "score"],
    ] {
        let output = second.pipe(&args);
        assert_terminal_safe(&format!("`{}` stdout", args.join(" ")), &output.stdout);
        assert_terminal_safe(&format!("`{}` stderr", args.join(" ")), &output.stderr);
    }
    let shown = second.pipe(&["show", &id]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("\\x1b]52;c;cGF5bG9hZA==\\x07"), "{text}");
    // The metric text the stage wrote, read from its object, escaped too.
    assert!(text.contains("\\x1b]0;pwned-title\\x07"), "{text}");
    // JSON keeps every value exact.
    let json: Value =
        serde_json::from_slice(&second.pipe(&["show", &id, "--json"]).stdout).unwrap();
    assert_eq!(json["pipeline"], format!("pipe{HOSTILE}"));
    assert_eq!(json["argv"][2], HOSTILE);
    assert_eq!(
        json["stages"][0]["metrics"]["note"],
        "a\u{1b}]0;pwned-title\u{7}b\u{9b}2J"
    );
}

#[test]
fn a_checkout_whose_objects_are_gone_changes_nothing() {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project.run_ok(&[]);
    let first_model = project.read("model.txt");
    project.write(
        "pipe.yaml",
        &PIPELINE.replace("echo model", "echo model-two"),
    );
    project.run_ok(&[]);
    let second_model = project.read("model.txt");
    let second_score = project.read("score.json");
    assert_ne!(first_model, second_model);
    // Run 1's model object goes, as `gc` or a lost disk would take it.
    let object = project
        .object_files()
        .into_iter()
        .find(|path| std::fs::read(path).unwrap() == first_model.as_bytes())
        .expect("run 1's model object");
    std::fs::remove_file(&object).unwrap();

    let checkout = project.pipe(&["checkout", "1"]);
    let stderr = String::from_utf8_lossy(&checkout.stderr);
    assert_eq!(checkout.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("model.txt"), "{stderr}");
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert_eq!(project.read("model.txt"), second_model);
    assert_eq!(project.read("score.json"), second_score);
}
