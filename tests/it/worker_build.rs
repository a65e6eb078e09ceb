//! `pipe` in a source checkout builds a worker when a stage that needs it
//! must run, never to load a pipeline or to restore results, and reports
//! the build as it reports a run: a plain line on stderr, nothing under
//! `--quiet`, JSON events on stdout under `--json`. The builds here are one
//! that fails at once (`CARGO=false`) and a slow one that copies the real
//! worker into place, so no test compiles anything.

use std::path::{Path, PathBuf};
use std::process::Output;

use pipe_test_support::TestProject;
use serde_json::Value;

/// A `pipe` of its own in a fresh cargo-like target directory: the checkout
/// it was compiled from is its source, and it finds no `pipe-stage` beside
/// it, so the first `uses:` stage it must run builds one.
pub(crate) fn pipe_without_workers() -> (tempfile::TempDir, PathBuf) {
    // Under cargo's target directory, so that the binary can be hard-linked.
    let target = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    std::fs::write(
        target.path().join("CACHEDIR.TAG"),
        "Signature: 8a477f597d28d172789f06886806bc55\n",
    )
    .expect("write CACHEDIR.TAG");
    let profile = target.path().join("debug");
    std::fs::create_dir(&profile).expect("profile dir");
    let pipe = profile.join("pipe");
    let built = assert_cmd::cargo::cargo_bin("pipe");
    if std::fs::hard_link(&built, &pipe).is_err() {
        std::fs::copy(&built, &pipe).expect("copy pipe");
    }
    (target, pipe)
}

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("rows.jsonl", "{\"text\": \"a\", \"label\": 0}\n");
    project.write(
        "pipe.yaml",
        "stages:\n  split:\n    uses: data/split@1\n    with: { dataset: rows.jsonl, train: 1 }\n",
    );
    project
}

fn run(project: &TestProject, pipe: &Path, args: &[&str]) -> Output {
    let mut command = std::process::Command::new(pipe);
    command
        .current_dir(project.root())
        .env("NO_COLOR", "1")
        .env("CARGO", "false")
        .env_remove("PIPE_WORKER")
        .env_remove("PIPE_STAGE_PATH")
        .args(args);
    command.output().expect("run pipe")
}

fn events(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

#[test]
fn a_worker_is_built_only_when_a_stage_that_needs_it_must_run() {
    let (_target, pipe) = pipe_without_workers();
    let project = project();

    // Loading, checking and planning know the stage from the catalog built
    // into pipe: no build.
    for args in [
        &["validate"][..],
        &["status"],
        &["run", "--dry-run"],
        &["stages"],
    ] {
        let output = run(&project, &pipe, args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("building"), "{args:?}: {stderr}");
    }

    // The run must run `split`: the build is tried then, and its failure
    // fails the stage, saying why.
    let plain = run(&project, &pipe, &["run"]);
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert_eq!(plain.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("building `pipe-stage` (first use or sources changed)"),
        "{stderr}"
    );
    assert!(stderr.contains("building `pipe-stage` failed"), "{stderr}");
    assert!(plain.stdout.is_empty(), "data on stdout without --json");

    let json = run(&project, &pipe, &["run", "--json"]);
    assert_eq!(json.status.code(), Some(1));
    let events = events(&json);
    let names: Vec<&str> = events
        .iter()
        .map(|event| event["event"].as_str().unwrap_or_default())
        .filter(|name| name.starts_with("worker_build") || *name == "stage_finished")
        .collect();
    assert_eq!(
        names,
        [
            "worker_build_started",
            "worker_build_finished",
            "stage_finished"
        ]
    );
    let build = events
        .iter()
        .find(|event| event["event"] == "worker_build_started")
        .unwrap();
    assert_eq!(build["workers"], serde_json::json!(["pipe-stage"]));
    assert_eq!(build["libtorch"], false);
    let stage = events
        .iter()
        .find(|event| event["event"] == "stage_finished")
        .unwrap();
    assert_eq!(stage["status"], "failed");

    let quiet = run(&project, &pipe, &["--quiet", "run"]);
    let stderr = String::from_utf8_lossy(&quiet.stderr);
    assert_eq!(quiet.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("first use"), "{stderr}");
}

/// The stage's recorded time is its own: building the worker first (here
/// a "cargo" that takes 2 s and puts the real `pipe-stage` in place) is
/// reported as the build's, not added to the stage's, or the first run of
/// a checkout would record minutes of compiling as what `split` costs.
#[test]
fn the_time_a_worker_build_takes_is_not_the_stage_time() {
    let (target, pipe) = pipe_without_workers();
    let project = TestProject::new();
    project.write(
        "rows.jsonl",
        "{\"text\": \"a\", \"label\": 0}\n{\"text\": \"b\", \"label\": 1}\n{\"text\": \"c\", \"label\": 0}\n",
    );
    project.write(
        "pipe.yaml",
        "stages:\n  split:\n    uses: data/split@1\n    with: { dataset: rows.jsonl, train: 1, val: 1, test: 1, seed: 7 }\n",
    );
    let real_worker = assert_cmd::cargo::cargo_bin("pipe").with_file_name("pipe-stage");
    let cargo = target.path().join("slow-cargo");
    std::fs::write(
        &cargo,
        format!(
            "#!/bin/sh\nsleep 2\ncp '{}' \"$CARGO_TARGET_DIR/debug/pipe-stage\"\n",
            real_worker.display()
        ),
    )
    .expect("write cargo");
    let mut permissions = std::fs::metadata(&cargo).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&cargo, permissions).unwrap();

    let output = std::process::Command::new(&pipe)
        .current_dir(project.root())
        .env("NO_COLOR", "1")
        .env("CARGO", &cargo)
        .env_remove("PIPE_WORKER")
        .env_remove("PIPE_STAGE_PATH")
        .args(["run", "--json"])
        .output()
        .expect("run pipe");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let events = events(&output);
    let find = |name: &str| {
        events
            .iter()
            .find(|event| event["event"] == name)
            .unwrap_or_else(|| panic!("no {name} event: {events:?}"))
    };
    let build = find("worker_build_finished");
    assert_eq!(build["succeeded"], true, "{build}");
    let build_ms = build["duration_ms"].as_u64().unwrap();
    assert!(build_ms >= 2000, "{build}");
    let stage = find("stage_finished");
    assert_eq!(stage["status"], "ran", "{stage}");
    let stage_ms = stage["duration_ms"].as_u64().unwrap();
    assert!(
        stage_ms < build_ms,
        "stage {stage_ms} ms, build {build_ms} ms"
    );

    let shown = std::process::Command::new(&pipe)
        .current_dir(project.root())
        .args(["show", "last", "--json"])
        .output()
        .expect("pipe show");
    let record: Value = serde_json::from_slice(&shown.stdout).expect("show --json");
    let recorded = record["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|stage| stage["stage"] == "split"))
        .unwrap_or_else(|| panic!("no split in {record}"));
    assert!(
        recorded["duration_ms"].as_u64().unwrap() < build_ms,
        "{recorded}"
    );
}
