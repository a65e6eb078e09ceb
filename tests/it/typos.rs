//! The typos of a first hour: a misspelt `-S` param or stage name is a
//! located error with a suggestion before anything runs, `+key=value` adds
//! a param on purpose, and a project is found from a subdirectory.

use std::path::Path;
use std::process::Output;

use pipe_test_support::TestProject;

/// Command stages reading `seed`, `train.smoothing` and `train.lr`.
const PIPELINE: &str = r#"name: typos
params:
  seed: 7
  train:
    smoothing: 1.0
    lr: 0.1
stages:
  prepare:
    run: echo "seed=${params.seed}" > data.txt
    outs: { data: data.txt }
  train:
    run: >-
      cat ${deps.data} > model.txt &&
      echo "smoothing=${params.train.smoothing} lr=${params.train.lr}" >> model.txt
    deps: { data: "${stages.prepare.outs.data}" }
    outs: { model: model.txt }
"#;

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn pipe_in(project: &TestProject, dir: &Path, args: &[&str]) -> Output {
    project
        .command()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run pipe")
}

#[test]
fn a_misspelt_override_at_any_depth_is_refused_with_a_suggestion_and_nothing_runs() {
    let project = project();
    for (argument, suggestion, line) in [
        (
            "train.smothing=0.2",
            "did you mean `train.smoothing`?",
            "pipe.yaml:4:3",
        ),
        ("seeed=1", "did you mean `seed`?", "pipe.yaml:2:1"),
        ("train.lrr=0.1", "did you mean `train.lr`?", "pipe.yaml:4:3"),
        ("trian.lr=0.1", "did you mean `train.lr`?", "pipe.yaml:2:1"),
        (
            "smoothing=0.2",
            "did you mean `train.smoothing`?",
            "pipe.yaml:2:1",
        ),
    ] {
        for command in [
            &["run", "-S", argument][..],
            &["run", "--dry-run", "-S", argument],
            &["status", "-S", argument],
            &["why", "train", "-S", argument],
            &["validate", "-S", argument],
            &["dag", "-S", argument],
        ] {
            let output = project.pipe(command);
            let text = stderr(&output);
            assert_eq!(output.status.code(), Some(2), "{command:?}: {text}");
            assert!(
                text.contains(&format!("error[unknown-param]: `-S {argument}`")),
                "{command:?}: the error quotes the argument: {text}"
            );
            assert!(text.contains(suggestion), "{command:?}: {text}");
            assert!(
                text.contains(line),
                "{command:?}: located at {line}: {text}"
            );
            assert!(
                text.contains(&format!("`-S +{argument}`")),
                "{command:?}: says how to add a new param: {text}"
            );
            assert!(output.stdout.is_empty(), "{command:?}: nothing planned");
        }
    }
    assert!(
        !project.exists("data.txt") && !project.exists(".pipe/runs.db"),
        "nothing ran and no run was recorded"
    );
}

#[test]
fn a_misspelt_override_of_a_param_from_params_yaml_points_into_it() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  a:\n    run: echo ${params.seed} > a.txt\n    outs: [a.txt]\n",
    );
    project.write("params.yaml", "seed: 1\nlr: 0.1\n");
    let output = project.pipe(&["run", "-S", "sed=2"]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains("params.yaml:1:1") && text.contains("did you mean `seed`?"),
        "{text}"
    );
    assert!(!project.exists("a.txt"));
}

#[test]
fn plus_adds_a_param_and_a_plain_override_only_replaces_one() {
    let project = project();
    let refused = project.pipe(&["run", "-S", "newkey=1"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("there is no param `newkey`"));
    assert!(!project.exists("data.txt"));

    let added = project.run(&["-S", "+newkey=1", "-S", "+train.extra.depth=2"]);
    assert_eq!(added.code, 0, "{}", added.stderr);
    assert_eq!(added.ran(), ["prepare", "train"]);
    let shown = project.pipe(&["show", "--json"]);
    let record: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(record["params"]["newkey"], 1, "{record}");
    assert_eq!(record["params"]["train"]["extra"]["depth"], 2, "{record}");

    // `+` is for a new key; `++` sets one either way.
    let exists = project.pipe(&["run", "-S", "+seed=8"]);
    assert_eq!(exists.status.code(), Some(2), "{}", stderr(&exists));
    assert!(
        stderr(&exists).contains("`seed` is already a param")
            && stderr(&exists).contains("drop the `+`"),
        "{}",
        stderr(&exists)
    );
    let set = project.run(&["-S", "++seed=8", "-S", "train.lr=0.2"]);
    assert_eq!(set.code, 0, "{}", set.stderr);
    assert_eq!(project.read("data.txt"), "seed=8\n");
    assert_eq!(project.read("model.txt"), "seed=8\nsmoothing=1.0 lr=0.2\n");
}

#[test]
fn a_misspelt_stage_reference_is_one_error_with_a_suggestion() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        &PIPELINE.replace("stages.prepare.outs", "stages.prepar.outs"),
    );
    let output = project.pipe(&["validate"]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert_eq!(
        text.matches("error[").count(),
        1,
        "one error, not a second one about `${{deps.data}}`: {text}"
    );
    assert!(text.contains("unknown stage `prepar`"), "{text}");
    assert!(text.contains("did you mean `prepare`?"), "{text}");
}

#[test]
fn a_misspelt_expansion_of_a_matrix_stage_gets_a_suggestion() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  features:\n    matrix: { n: [1, 2] }\n    run: echo ${matrix.n} > f${matrix.n}.txt\n    outs: { f: \"f${matrix.n}.txt\" }\n  train:\n    run: cat ${deps.one} > model.txt\n    deps: { one: \"${stages.featurs@n=1.outs.f}\" }\n    outs: [model.txt]\n",
    );
    let output = project.pipe(&["validate"]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert_eq!(text.matches("error[").count(), 1, "{text}");
    assert!(text.contains("did you mean `features@n=1`?"), "{text}");
}

#[test]
fn a_misspelt_stage_on_the_command_line_gets_a_suggestion() {
    let project = project();
    for command in [
        &["why", "trian"][..],
        &["run", "trian"],
        &["run", "pipe.yaml", "trian"],
        &["run", "--force", "trian"],
        &["run", "--dry-run", "trian"],
    ] {
        let output = project.pipe(command);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{command:?}: {text}");
        assert!(
            text.contains("no stage named `trian`"),
            "{command:?}: {text}"
        );
        assert!(
            text.contains("did you mean `train`?"),
            "{command:?}: {text}"
        );
    }
    assert!(!project.exists("data.txt"));

    // A built-in stage's name too.
    let output = project.pipe(&["stages", "trian/classifier"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("did you mean `train/classifier`?"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_misspelt_where_param_of_compare_is_not_an_empty_selection() {
    let project = project();
    project.run_ok(&[]);
    let typo = project.pipe(&["compare", "--where", "train.smothing=1.0"]);
    let text = stderr(&typo);
    assert_eq!(typo.status.code(), Some(2), "{text}");
    assert!(
        text.contains("no recorded run has a param `train.smothing`")
            && text.contains("did you mean `train.smoothing`?"),
        "{text}"
    );
    // A param that exists, with a value no run had, selects nothing.
    let empty = project.pipe(&["compare", "--where", "train.smoothing=5"]);
    assert_eq!(empty.status.code(), Some(2));
    assert!(
        stderr(&empty).contains("no run matches the selection"),
        "{}",
        stderr(&empty)
    );
    let found = project.pipe(&["compare", "--where", "train.smoothing=1.0", "--csv"]);
    assert_eq!(found.status.code(), Some(0), "{}", stderr(&found));

    // A pipeline name too.
    for command in ["compare", "diff"] {
        let output = project.pipe(&[command, "--pipeline", "typo"]);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("did you mean `typos`?"),
            "{command}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn commands_find_the_project_from_a_subdirectory() {
    let project = project();
    // No `.git`: the walk stops at the first `pipe.yaml` above.
    let sub = project.path("notebooks/deep");
    std::fs::create_dir_all(&sub).unwrap();

    let status = pipe_in(&project, &sub, &["status"]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    assert!(String::from_utf8_lossy(&status.stdout).contains("2 stale"));

    let run = pipe_in(&project, &sub, &["run", "-q"]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    assert_eq!(
        project.read("data.txt"),
        "seed=7\n",
        "outputs land in the project root"
    );
    assert!(!sub.join("data.txt").exists() && !sub.join(".pipe").exists());

    let status = pipe_in(&project, &sub, &["status"]);
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("2 fresh"),
        "{}",
        stderr(&status)
    );
    // A path the user gives is read from where they are.
    let explicit = pipe_in(&project, &sub, &["status", "../../pipe.yaml"]);
    assert_eq!(explicit.status.code(), Some(0), "{}", stderr(&explicit));
    let why = pipe_in(&project, &sub, &["why", "trian"]);
    assert!(
        stderr(&why).contains("no stage named `trian` in `../../pipe.yaml`"),
        "{}",
        stderr(&why)
    );
    let runs = pipe_in(&project, &sub, &["runs"]);
    assert!(String::from_utf8_lossy(&runs.stdout).contains("#1"));

    // The walk stops at the project root: a pipe.yaml above it is not taken.
    let outer = TestProject::new();
    outer.write("pipe.yaml", PIPELINE);
    let inner = outer.path("inner/sub");
    std::fs::create_dir_all(inner.join("../.pipe")).unwrap();
    std::fs::create_dir_all(&inner).unwrap();
    let output = pipe_in(&outer, &inner, &["status"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no pipeline file"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_param_of_a_built_in_stage_that_its_with_does_not_set_is_explained() {
    let project = TestProject::new();
    project.write("data.jsonl", "{\"text\": \"a\", \"label\": 0}\n");
    project.write(
        "pipe.yaml",
        "params:\n  split: { train: 0.5 }\nstages:\n  split:\n    uses: data/split@1\n    with:\n      dataset: data.jsonl\n      train: ${params.split.train}\n      val: 0.25\n      test: 0.25\n",
    );
    let output = project.pipe(&["validate", "-S", "split.seed=3"]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains("stage `split` (data/split@1) takes a param `seed` its `with:` does not set")
            && text.contains("add `seed: ${params.split.seed}` under its `with:`"),
        "{text}"
    );
    let literal = project.pipe(&["validate", "-S", "split.val=0.3"]);
    let text = stderr(&literal);
    assert_eq!(literal.status.code(), Some(2), "{text}");
    assert!(
        text.contains("sets `val` in its `with:` without a param")
            && text.contains("write `val: ${params.split.val}` there"),
        "{text}"
    );
}
