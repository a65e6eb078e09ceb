//! The `cargo install` route (docs/install.md), through the real commands:
//! `pipe` and `pipe-stage` installed from this repository into a temporary
//! root, then used in an empty directory outside the repository with
//! nothing of the checkout on PATH: `pipe init`, then the quickstart, which
//! runs every stage but training and says at the training stage what to
//! install; then the training worker installed beside them, and the same
//! run finishes with a test accuracy.
//!
//! It installs from the checkout (`cargo install --path`, the clone's form
//! in docs/install.md) in debug, with the workspace's target directory, so
//! that it reuses what the suite compiled and takes seconds. (The `--git`
//! form builds the same crates from a clone cargo makes; its cold time is
//! in docs/performance.md.)

use std::path::{Path, PathBuf};
use std::process::Command;

use pipe_test_support::RunResult;

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cargo_install(root: &Path, crate_dir: &str, env: &[(&str, String)]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .current_dir(repository())
        .args([
            "install", "--locked", "--debug", "--quiet", "--path", crate_dir, "--root",
        ])
        .arg(root)
        .envs(env.iter().map(|(name, value)| (name, value)))
        .output()
        .expect("run cargo install");
    assert!(
        output.status.success(),
        "cargo install --path {crate_dir} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `pipe` from the installation, in `dir`, with PATH holding only the
/// installation, a Python of its own (for the quickstart's `pip download`)
/// and the system's directories.
fn installed_pipe(root: &Path, python: &Path, dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(root.join("bin/pipe"))
        .current_dir(dir)
        .env_clear()
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .env("NO_COLOR", "1")
        .env(
            "PATH",
            format!(
                "{}:{}:/usr/local/bin:/usr/bin:/bin",
                root.join("bin").display(),
                python.display()
            ),
        )
        .args(args)
        .output()
        .expect("run the installed pipe")
}

#[test]
fn cargo_install_gives_a_pipe_that_starts_and_runs_a_project_anywhere() {
    let root = tempfile::tempdir().expect("install root");
    cargo_install(root.path(), ".", &[]);
    cargo_install(root.path(), "stages", &[]);
    for binary in ["pipe", "pipe-stage"] {
        assert!(
            root.path().join("bin").join(binary).is_file(),
            "{binary} not installed"
        );
    }

    // A Python outside the checkout, with pip, for the wheels the
    // quickstart's first stages fetch.
    let venv = tempfile::tempdir().expect("venv dir");
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(venv.path())
        .status()
        .expect("python3 -m venv");
    assert!(status.success());
    let python = venv.path().join("bin");

    let work = tempfile::tempdir().expect("an empty directory");
    let project = work.path().join("sentiment");
    let init = installed_pipe(root.path(), &python, work.path(), &["init", "sentiment"]);
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );

    let quick = ["run", "--json", "-S", "train.limit_train_samples=256"];
    let first = RunResult::from_output(installed_pipe(root.path(), &python, &project, &quick));
    assert_eq!(first.code, 1, "{}", first.stderr);
    for stage in ["corpus", "model", "dataset", "split", "tokenize"] {
        assert_eq!(first.status(stage), "ran", "{stage}: {}", first.stderr);
    }
    assert_eq!(first.status("train"), "failed");
    assert!(
        first.stderr.contains("which is not installed")
            && first
                .stderr
                .contains("cargo install --locked --git REPO pipe-train"),
        "{}",
        first.stderr
    );
    assert_eq!(first.status("evaluate"), "skipped");

    // The training worker beside them, built against the suite's libtorch
    // (its rpath points there: nothing to set at run time).
    let venv_bin = repository().join(".venv/bin");
    let mut env = vec![];
    if std::env::var_os("LIBTORCH").is_none() {
        env.push(("LIBTORCH_USE_PYTORCH", "1".to_string()));
        env.push((
            "PATH",
            format!(
                "{}:{}",
                venv_bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        ));
    }
    cargo_install(root.path(), "train", &env);

    let second = RunResult::from_output(installed_pipe(root.path(), &python, &project, &quick));
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(
        second.ran(),
        ["evaluate", "report", "train"],
        "{:?}",
        second.stages
    );
    let show = installed_pipe(root.path(), &python, &project, &["show", "--json"]);
    let record: serde_json::Value = serde_json::from_slice(&show.stdout).expect("show --json");
    let evaluate = record["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|stage| stage["stage"] == "evaluate"))
        .expect("evaluate's record");
    let accuracy = evaluate["metrics"]["accuracy"]
        .as_f64()
        .expect("a test accuracy");
    assert!((0.0..=1.0).contains(&accuracy), "{accuracy}");
}

/// Without `pipe-stage-train`, pipe knows its stages from a description
/// built into it (engine/src/training_stages.json): it must be what the
/// worker itself describes, or keys and checks would drift.
#[test]
fn training_stages_json_is_what_the_worker_describes() {
    // A pipeline that trains makes a checkout's pipe build the worker.
    let project = pipe_test_support::TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  train:\n    uses: train/classifier@1\n    with: { tokens: t, model: m, num_labels: 2 }\n",
    );
    let _ = project.pipe(&["validate"]);
    let worker = assert_cmd::cargo::cargo_bin("pipe").with_file_name("pipe-stage-train");
    let output = Command::new(&worker)
        .arg("describe")
        .output()
        .expect("pipe-stage-train describe");
    assert!(output.status.success());
    let described: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let built_in: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repository().join("engine/src/training_stages.json"))
            .expect("the file"),
    )
    .expect("JSON");
    assert_eq!(
        described, built_in,
        "engine/src/training_stages.json is stale: `pipe-stage-train describe > engine/src/training_stages.json`"
    );
}
