//! In a source checkout, the first stage of a run that must run starts the
//! builds of the workers that the stages below it will need, so that they
//! build while it runs; a build the run turns out not to need is stopped
//! when the run ends. The cargo is a fake (`worker_build::fake_cargo`), so
//! nothing compiles.

use std::path::Path;
use std::process::Output;

use pipe_test_support::TestProject;
use serde_json::Value;

use crate::worker_build::{copy_real_worker, fake_cargo, pipe_without_workers};

/// A project whose command stage `rows` runs `command`, then writes the
/// rows that `split` (a `pipe-stage` stage) splits.
fn project_with_rows_above_split(command: &str) -> TestProject {
    let project = TestProject::new();
    project.write(
        "rows.src",
        "{\"text\": \"a\", \"label\": 0}\n{\"text\": \"b\", \"label\": 1}\n{\"text\": \"c\", \"label\": 0}\n",
    );
    project.write(
        "pipe.yaml",
        &format!(
            "stages:\n  rows:\n    run: {command:?}\n    deps: {{ src: rows.src }}\n    outs: {{ rows: rows.jsonl }}\n  \
             split:\n    uses: data/split@1\n    with: {{ dataset: \"${{stages.rows.outs.rows}}\", train: 1, val: 1, test: 1, seed: 7 }}\n"
        ),
    );
    project
}

fn run_json(project: &TestProject, pipe: &Path, cargo: &Path) -> Output {
    std::process::Command::new(pipe)
        .current_dir(project.root())
        .env("NO_COLOR", "1")
        .env("CARGO", cargo)
        .env_remove("PIPE_WORKER")
        .env_remove("PIPE_STAGE_PATH")
        .args(["run", "--json"])
        .output()
        .expect("run pipe")
}

fn events(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// Where the first event named `name` (of `stage`, for stage events) is.
fn position(events: &[Value], name: &str, stage: Option<&str>) -> usize {
    events
        .iter()
        .position(|event| {
            event["event"] == name && stage.is_none_or(|stage| event["stage"] == stage)
        })
        .unwrap_or_else(|| panic!("no {name} {stage:?} in {events:#?}"))
}

/// `rows` finishes only once `pipe-stage` is in place (it gives up after
/// two minutes): the worker's build must have started while it ran, not
/// when `split`, below it, came to run.
#[test]
fn a_stage_that_must_run_starts_the_builds_of_the_workers_below_it() {
    let (target, pipe) = pipe_without_workers();
    let worker = target.path().join("debug").join("pipe-stage");
    let project = project_with_rows_above_split(&format!(
        "for i in $(seq 1200); do [ -s '{}' ] && break; sleep 0.1; done; \
         [ -s '{}' ] && cp rows.src rows.jsonl",
        worker.display(),
        worker.display()
    ));
    let cargo = fake_cargo(target.path(), &copy_real_worker());

    let output = run_json(&project, &pipe, &cargo);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let seen = events(&output);
    assert!(
        position(&seen, "worker_build_started", None)
            < position(&seen, "stage_finished", Some("rows")),
        "{seen:#?}"
    );
    let split = &seen[position(&seen, "stage_finished", Some("split"))];
    assert_eq!(split["status"], "ran", "{split}");
    let finished = &seen[position(&seen, "worker_build_finished", None)];
    assert_eq!(finished["succeeded"], true, "{finished}");

    // Nothing to run: no stage starts a build, though the worker is gone.
    std::fs::remove_file(&worker).expect("remove the worker");
    let again = run_json(&project, &pipe, &cargo);
    assert_eq!(again.status.code(), Some(0));
    assert!(
        !events(&again)
            .iter()
            .any(|event| event["event"] == "worker_build_started"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
}

/// `rows` fails once the build has started (a cargo that would take five
/// minutes): `split` is skipped, so the build is not needed, and the run
/// ends at once, the build stopped and said to be, not failed.
#[test]
fn a_build_the_run_turns_out_not_to_need_is_stopped_when_it_ends() {
    let (target, pipe) = pipe_without_workers();
    let started = target.path().join("cargo-started");
    let project = project_with_rows_above_split(&format!(
        "for i in $(seq 1200); do [ -e '{}' ] && break; sleep 0.1; done; exit 3",
        started.display()
    ));
    let cargo = fake_cargo(
        target.path(),
        &format!("touch '{}'\nsleep 300", started.display()),
    );

    let output = run_json(&project, &pipe, &cargo);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(started.exists(), "the build never started: {stderr}");
    let seen = events(&output);
    let rows = &seen[position(&seen, "stage_finished", Some("rows"))];
    assert_eq!(rows["status"], "failed", "{rows}");
    let split = &seen[position(&seen, "stage_finished", Some("split"))];
    assert_eq!(split["status"], "skipped", "{split}");
    let finished = &seen[position(&seen, "worker_build_finished", None)];
    assert_eq!(
        (&finished["succeeded"], &finished["stopped"]),
        (&false.into(), &true.into()),
        "{finished}"
    );
    assert!(
        position(&seen, "worker_build_finished", None) < position(&seen, "run_finished", None),
        "{seen:#?}"
    );
}
