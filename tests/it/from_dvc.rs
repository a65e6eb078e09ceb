//! `pipe init --from-dvc`: a DVC project shaped like DVC's "get started"
//! (examples/dvc-get-started: prepare -> featurize -> train -> evaluate
//! reading params.yaml, a metrics file kept in git, plots, `foreach`,
//! `vars`, `wdir`, a frozen stage, `always_changed`) converted, run and
//! fresh; what is not carried named at its dvc.yaml line; a malformed
//! dvc.yaml located; an existing pipe.yaml never overwritten; and the
//! example's committed pipe.yaml what the converter writes today.

use std::path::{Path, PathBuf};

use pipe_test_support::{git, TestProject};

use crate::params_overrides::python;

fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/dvc-get-started")
}

/// The example's DVC side (what a DVC user has), written into `project`:
/// everything but what the converter wrote.
fn copy_dvc_project(from: &Path, into: &TestProject, relative: &str) {
    for entry in std::fs::read_dir(from.join(relative)).expect("the example") {
        let entry = entry.expect("an entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = if relative.is_empty() {
            name.clone()
        } else {
            format!("{relative}/{name}")
        };
        if matches!(path.as_str(), "pipe.yaml" | ".gitignore" | ".pipe") {
            continue;
        }
        if entry.file_type().expect("a type").is_dir() {
            copy_dvc_project(from, into, &path);
        } else {
            into.write(&path, &std::fs::read_to_string(entry.path()).expect("text"));
        }
    }
}

fn get_started() -> TestProject {
    let project = TestProject::new();
    copy_dvc_project(&example_dir(), &project, "");
    git(project.root(), &["init", "-q"]);
    git(project.root(), &["add", "-A"]);
    git(project.root(), &["commit", "-qm", "a DVC project"]);
    project
}

/// The line of `dvc.yaml` that holds `text` (1-based).
fn line_of(dvc_yaml: &str, text: &str) -> usize {
    dvc_yaml
        .lines()
        .position(|line| line.contains(text))
        .unwrap_or_else(|| panic!("`{text}` in dvc.yaml"))
        + 1
}

/// `pipe` in the project with the tests' Python (PyYAML) as `python`.
fn pipe_with_python(project: &TestProject, args: &[&str]) -> std::process::Output {
    let bin = python().parent().expect("the venv's bin").to_path_buf();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&path)))
        .expect("PATH");
    project
        .command()
        .env("PATH", path)
        .args(args)
        .output()
        .expect("run pipe")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_dvc_get_started_project_is_converted_runs_and_is_fresh() {
    let project = get_started();
    let init = project.pipe(&["init", "--from-dvc"]);
    let (stdout, stderr) = (text(&init.stdout), text(&init.stderr));
    assert!(init.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("created pipe.yaml from dvc.yaml"),
        "{stdout}"
    );
    let dvc_yaml = project.read("dvc.yaml");
    for (place, what) in [
        (
            line_of(&dvc_yaml, "frozen: true"),
            "`frozen: true` of stage `stopwords`",
        ),
        (
            line_of(&dvc_yaml, "persist: true"),
            "`persist` of output `logs/history.txt`",
        ),
        (
            line_of(&dvc_yaml, "text-classifier:"),
            "artifact `text-classifier`",
        ),
    ] {
        let said = format!("dvc.yaml:{place}:");
        assert!(
            stderr.lines().any(|line| line.starts_with(&said)
                && line.contains("not carried")
                && line.contains(what)),
            "{what} at {said}:\n{stderr}"
        );
    }
    assert!(stderr.contains(" of dvc.yaml not carried"), "{stderr}");
    let ignore = project.read(".gitignore");
    assert!(ignore.lines().any(|line| line == "/model.json"), "{ignore}");
    assert!(
        !ignore.lines().any(|line| line == "/eval/metrics.json"),
        "`cache: false` is the user's, in git: {ignore}"
    );

    let run = pipe_with_python(&project, &["run"]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(project.read("eval/metrics.json").contains("accuracy"));
    assert!(
        project.exists("site/index.html"),
        "the `wdir` stage wrote in site/"
    );
    assert!(project.exists("reports/test.json") && project.exists("summaries/train.txt"));
    // DVC's `dvc plots show` is the run's report page here: the ROC and PR
    // curves the converter carried into `plots:` are drawn on it.
    let pages: Vec<std::path::PathBuf> = std::fs::read_dir(project.path(".pipe/out"))
        .expect(".pipe/out")
        .map(|entry| {
            entry
                .expect("entry")
                .path()
                .join("pipe-report/report/index.html")
        })
        .filter(|page| page.is_file())
        .collect();
    let page = std::fs::read_to_string(pages.first().expect("the report page")).expect("page");
    for plotted in ["eval/plots/roc.csv", "eval/plots/prc.json"] {
        assert!(page.contains(plotted), "{plotted} on the page");
    }
    assert!(
        page.contains("<polyline") || page.contains("<path"),
        "a curve is drawn"
    );

    let status = pipe_with_python(&project, &["status", "--json"]);
    let states: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    let states = states.as_array().expect("a list");
    // The ten stages of dvc.yaml's eight, and the report drawing the plots.
    assert_eq!(states.len(), 12, "{states:?}");
    for state in states {
        // DVC's `always_changed` runs every time, as pipe's `always_run`,
        // and the report, which reads every stage's result, after it.
        let expected = match state["stage"] == "versions" || state["stage"] == "pipe-report" {
            true => "stale",
            false => "fresh",
        };
        assert_eq!(state["freshness"], expected, "{state}");
    }
}

#[test]
fn the_examples_pipe_yaml_is_what_the_converter_writes_today() {
    let converted = pipe_engine::convert_dvc_project(&example_dir()).expect("the example converts");
    let committed = std::fs::read_to_string(example_dir().join("pipe.yaml")).expect("pipe.yaml");
    assert!(
        committed == converted.text,
        "examples/dvc-get-started/pipe.yaml is not what `pipe init --from-dvc` writes today: \
         move it away and run `pipe init --from-dvc examples/dvc-get-started` to write it again\n\
         --- written today:\n{}",
        converted.text
    );
}

#[test]
fn a_malformed_dvc_yaml_is_located_and_nothing_is_written() {
    for (dvc_yaml, located) in [
        ("stages:\n  train: [\n", "dvc.yaml:"),
        ("- just\n- a list\n", "dvc.yaml:1:1"),
        (
            "stages:\n  train:\n    cmd: echo ${nope}\n",
            "dvc.yaml:3:15",
        ),
    ] {
        let project = TestProject::new();
        project.write("dvc.yaml", dvc_yaml);
        let init = project.pipe(&["init", "--from-dvc"]);
        let stderr = text(&init.stderr);
        assert_eq!(init.status.code(), Some(2), "{dvc_yaml:?}: {stderr}");
        assert!(
            stderr.contains(located),
            "{dvc_yaml:?} at {located}: {stderr}"
        );
        assert!(!project.exists("pipe.yaml"), "{dvc_yaml:?}");
    }
}

#[test]
fn an_existing_pipe_yaml_is_never_overwritten() {
    let project = get_started();
    project.write("pipe.yaml", "# mine\n");
    let init = project.pipe(&["init", "--from-dvc"]);
    assert_eq!(init.status.code(), Some(5), "{}", text(&init.stderr));
    assert!(
        text(&init.stderr).contains("would overwrite"),
        "{}",
        text(&init.stderr)
    );
    assert_eq!(project.read("pipe.yaml"), "# mine\n");
}

#[test]
fn vars_files_other_params_files_matrices_and_mappings_are_carried_or_named() {
    let project = TestProject::new();
    project.write(
        "params.yaml",
        "train:\n  lr: 1e-3\n  epochs: 2\n  fast: true\nmodels: [small, large]\n",
    );
    project.write("config.yaml", "threads: 4\n");
    project.write("other.yaml", "alpha: 1\n");
    project.write(
        "dvc.yaml",
        "vars:\n  - config.yaml\nstages:\n  fit:\n    matrix:\n      model: ${models}\n      seed: [1, 2]\n    cmd: echo ${item.model} ${item.seed} ${key} --lr ${train.lr} -j ${threads} > out-${key}.txt\n    params:\n      - train.epochs\n      - other.yaml:\n          - alpha\n    deps:\n      - https://example.org/data.csv\n    outs:\n      - out-${item.model}-${item.seed}.txt\n  flags:\n    cmd: echo ${train} \\${HOME} $USER > flags.txt\n    outs:\n      - flags.txt:\n          push: false\n    meta: {owner: me}\n    weird: 1\n",
    );
    let init = project.pipe(&["init", "--from-dvc"]);
    let stderr = text(&init.stderr);
    assert!(init.status.success(), "{stderr}");
    let pipe_yaml = project.read("pipe.yaml");
    for expected in [
        "params:\n  threads: 4\n",
        "model: ${params.models}",
        "seed: [1, 2]",
        // `1e-3` is `0.001` to DVC: written as DVC runs it.
        "echo ${matrix.model} ${matrix.seed} ${matrix.model}-${matrix.seed} --lr 0.001 -j ${params.threads} > out-${matrix.model}-${matrix.seed}.txt",
        "params: [train.epochs]",
        "deps: [other.yaml]",
        // A mapping unpacked as DVC does; `\${` is pipe's `$${`.
        "echo --lr 0.001 --epochs ${params.train.epochs} --fast $${HOME} $USER > flags.txt",
    ] {
        assert!(pipe_yaml.contains(expected), "{expected}\n{pipe_yaml}");
    }
    for named in [
        "dvc.yaml:2:5: written otherwise: vars file `config.yaml`",
        "params `alpha` of `other.yaml`",
        "a URL",
        "`push` of output `flags.txt`",
        "`meta` of stage `flags`",
        "`weird` of stage `flags`",
    ] {
        assert!(stderr.contains(named), "{named}\n{stderr}");
    }
    let validate = project.pipe(&["validate"]);
    assert!(validate.status.success(), "{}", text(&validate.stderr));
}
