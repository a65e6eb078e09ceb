//! `pipe` in a source checkout builds a worker when a stage that needs it
//! must run, never to load a pipeline or to restore results, and reports
//! the build as it reports a run: a plain line on stderr, nothing under
//! `--quiet`, JSON events on stdout under `--json`; cargo's own lines go
//! to the build's log. The builds here are one that fails at once
//! (`CARGO=false`) and fake cargos that print what cargo prints and copy
//! the real worker into place, or fail as rustc does, so no test compiles
//! anything.

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

/// A project whose `split` succeeds once its worker is built.
fn project_that_splits() -> TestProject {
    let project = TestProject::new();
    project.write(
        "rows.jsonl",
        "{\"text\": \"a\", \"label\": 0}\n{\"text\": \"b\", \"label\": 1}\n{\"text\": \"c\", \"label\": 0}\n",
    );
    project.write(
        "pipe.yaml",
        "stages:\n  split:\n    uses: data/split@1\n    with: { dataset: rows.jsonl, train: 1, val: 1, test: 1, seed: 7 }\n",
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

/// A `cargo` that answers as cargo would the three calls a worker build
/// makes: `-vV` and `metadata` (a resolve of `pipe-stages` and two
/// dependencies: 3 crates to build), then `build`, which runs `build`.
pub(crate) fn fake_cargo(dir: &Path, build: &str) -> PathBuf {
    let metadata = serde_json::json!({
        "packages": [
            {"id": "stages 0.1", "name": "pipe-stages"},
            {"id": "serde 1", "name": "serde"},
            {"id": "libc 0.2", "name": "libc"},
        ],
        "workspace_members": ["stages 0.1"],
        "resolve": {"nodes": [
            {"id": "stages 0.1", "deps": [{"pkg": "serde 1", "dep_kinds": [{"kind": null}]}]},
            {"id": "serde 1", "deps": [{"pkg": "libc 0.2", "dep_kinds": [{"kind": "build"}]}]},
            {"id": "libc 0.2", "deps": []},
        ]},
    });
    let cargo = dir.join("fake-cargo");
    std::fs::write(
        &cargo,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n-vV) echo 'cargo 1.0'; echo 'host: test-host' ;;\n\
             metadata) echo '{metadata}' ;;\nbuild)\n{build}\n;;\n*) exit 2 ;;\nesac\n"
        ),
    )
    .expect("write cargo");
    let mut permissions = std::fs::metadata(&cargo).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&cargo, permissions).unwrap();
    cargo
}

/// What a fake cargo's build does to succeed: puts the real `pipe-stage`
/// where the build would.
pub(crate) fn copy_real_worker() -> String {
    let real_worker = assert_cmd::cargo::cargo_bin("pipe").with_file_name("pipe-stage");
    format!(
        "cp '{}' \"$CARGO_TARGET_DIR/debug/pipe-stage\"",
        real_worker.display()
    )
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
    let project = project_that_splits();

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
    // cargo's step is reported as it starts and as it ends (here at once,
    // with nothing built and no total: `false` is no cargo to ask).
    assert_eq!(
        names,
        [
            "worker_build_started",
            "worker_build_progress",
            "worker_build_progress",
            "worker_build_finished",
            "stage_finished"
        ]
    );
    let find = |name: &str| events.iter().find(|event| event["event"] == name).unwrap();
    let build = find("worker_build_started");
    assert_eq!(build["workers"], serde_json::json!(["pipe-stage"]));
    assert_eq!(build["libtorch"], false);
    assert_eq!(build["profile"], "dev");
    let log = build["log"].as_str().unwrap();
    assert!(log.ends_with("/debug/pipe-stage.build.log"), "{log}");
    let step = find("worker_build_progress");
    assert_eq!(
        (&step["step"], &step["done"], &step["total"], &step["unit"]),
        (&"cargo".into(), &0.into(), &Value::Null, &"crates".into())
    );
    assert_eq!(find("worker_build_finished")["log"], log);
    let stage = find("stage_finished");
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
    let project = project_that_splits();
    let cargo = fake_cargo(target.path(), &format!("sleep 2\n{}", copy_real_worker()));

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

/// cargo's lines go to the build's log, not to the terminal: a build
/// that works shows what it built, how far it got and how long it took;
/// one that fails shows the end of the log (rustc's error) and names it.
#[test]
fn a_worker_builds_output_goes_to_its_log_and_a_failure_shows_the_end_of_it() {
    let (target, pipe) = pipe_without_workers();
    let project = project_that_splits();
    let artifact = |id: &str| {
        format!(
            "echo '{{\"reason\":\"compiler-artifact\",\"package_id\":\"{id}\",\"fresh\":false}}'"
        )
    };
    let works = fake_cargo(
        target.path(),
        &format!(
            "echo '   Compiling libc v0.2.1' >&2\n{}\necho '   Compiling serde v1.0.0' >&2\n{}\n{}\n{}",
            artifact("libc 0.2"),
            artifact("serde 1"),
            artifact("serde 1"),
            copy_real_worker()
        ),
    );
    let built = std::process::Command::new(&pipe)
        .current_dir(project.root())
        .env("NO_COLOR", "1")
        .env("CARGO", &works)
        .env("PIPE_PROGRESS_INTERVAL", "0")
        .env_remove("PIPE_WORKER")
        .env_remove("PIPE_STAGE_PATH")
        .arg("run")
        .output()
        .expect("run pipe");
    let stderr = String::from_utf8_lossy(&built.stderr);
    assert_eq!(built.status.code(), Some(0), "{stderr}");
    let log = target.path().join("debug").join("pipe-stage.build.log");
    assert!(
        stderr.contains(&format!(
            "building `pipe-stage` (first use or sources changed); cargo's output: {}",
            log.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("Compiling"), "{stderr}");
    // A line per reading with no interval: the count against the total
    // cargo metadata gave, one crate of which the build never reached.
    assert!(
        stderr.contains("building `pipe-stage` (cargo, dev): 2/3 crates, "),
        "{stderr}"
    );
    assert!(stderr.contains("built `pipe-stage` in "), "{stderr}");
    assert!(stderr.contains(" (2 crates)"), "{stderr}");
    let logged = std::fs::read_to_string(&log).expect("the build's log");
    assert!(
        logged.contains("   Compiling libc v0.2.1\n   Compiling serde v1.0.0\n"),
        "{logged}"
    );

    // The worker gone again: built again, and this time rustc fails.
    let fails = fake_cargo(
        target.path(),
        "echo '   Compiling pipe-stages v0.1.0' >&2\n\
         echo 'error[E0425]: cannot find value `rows` in this scope' >&2\n\
         echo ' --> stages/src/split.rs:12:5' >&2\n\
         echo 'error: could not compile `pipe-stages` (lib) due to 1 previous error' >&2\n\
         exit 101",
    );
    std::fs::remove_file(target.path().join("debug").join("pipe-stage")).expect("remove worker");
    let failed = std::process::Command::new(&pipe)
        .current_dir(project.root())
        .env("NO_COLOR", "1")
        .env("CARGO", &fails)
        .env_remove("PIPE_WORKER")
        .env_remove("PIPE_STAGE_PATH")
        .args(["--quiet", "run", "--force", "split"])
        .output()
        .expect("run pipe");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("building `pipe-stage` failed after")
            && stderr.contains(&format!("the end of its log, {}:", log.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "    │ error[E0425]: cannot find value `rows` in this scope\n    │  --> stages/src/split.rs:12:5\n"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "building `pipe-stage` failed (exit code 101): the last lines of its log are above, all of it is in {}",
            log.display()
        )),
        "{stderr}"
    );
}
