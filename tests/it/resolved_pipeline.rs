//! The defects of loading a pipeline in several passes (issue 9), through
//! the real binary: a `with:` path that another stage writes is an edge of
//! the DAG, catalog errors point at the `with:` value, and two pipelines of
//! one project neither share outputs nor explain themselves with each
//! other's history.

use pipe_test_support::TestProject;
use serde_json::Value;

fn rows(count: usize) -> String {
    (0..count)
        .map(|id| format!("{{\"text\": \"row {id}\", \"label\": {}}}\n", id % 2))
        .collect()
}

/// `split` is declared first and names `make`'s output in `with:`, not in
/// `deps:`: the edge must still exist, or `split` runs first on no file.
const WITH_PATH_EDGE: &str = r#"params: { seed: 1 }
stages:
  split:
    uses: data/split@1
    with:
      dataset: out/rows.jsonl
      train: 6
      val: 2
      test: 2
  make:
    run: mkdir -p out && cp rows.src out/rows.jsonl
    deps: [rows.src]
    outs: [out/rows.jsonl]
"#;

#[test]
fn a_with_path_written_by_another_stage_is_an_edge() {
    let project = TestProject::new();
    project.write("pipe.yaml", WITH_PATH_EDGE);
    project.write("rows.src", &rows(10));

    let dag = project.pipe(&["dag", "--format", "dot"]);
    let dot = String::from_utf8_lossy(&dag.stdout);
    assert!(
        dag.status.success(),
        "{}",
        String::from_utf8_lossy(&dag.stderr)
    );
    assert!(dot.contains("\"make\" -> \"split\""), "{dot}");

    let first = project.run_ok(&[]);
    assert_eq!(first.ran(), ["make", "split"]);
    let order: Vec<&str> = first
        .events
        .iter()
        .filter(|event| event["event"] == "stage_running")
        .filter_map(|event| event["stage"].as_str())
        .collect();
    assert_eq!(order, ["make", "split"]);
    let train = project.read(".pipe/out/pipe/split/dataset/train.jsonl");
    assert_eq!(train.lines().count(), 6);

    // The edge carries staleness too: new rows rerun both.
    project.write("rows.src", &rows(12));
    let second = project.run_ok(&[]);
    assert_eq!(second.ran(), ["make", "split"]);
}

#[test]
fn a_catalog_error_points_at_the_with_value() {
    let project = TestProject::new();
    project.write("data.jsonl", &rows(4));
    project.write(
        "pipe.yaml",
        "stages:\n  split:\n    uses: data/split@1\n    with:\n      dataset: data.jsonl\n      trian: 0.7\n      test: nope\n",
    );
    let output = project.pipe(&["validate"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    // The unknown name at its key, the bad value at the value.
    assert!(stderr.contains("pipe.yaml:6:7"), "{stderr}");
    assert!(stderr.contains("did you mean `train`?"), "{stderr}");
    assert!(stderr.contains("pipe.yaml:7:13"), "{stderr}");
}

const SPLIT_PIPELINE: &str = r#"name: NAME
params: { seed: 1 }
stages:
  split:
    uses: data/split@1
    with: { dataset: data.jsonl, train: TRAIN, val: 1, test: 1 }
  count:
    run: wc -l < ${stages.split.outs.dataset}/train.jsonl > COUNT
    outs: [COUNT]
"#;

fn split_pipeline(name: &str, train: usize) -> String {
    SPLIT_PIPELINE
        .replace("NAME", name)
        .replace("TRAIN", &train.to_string())
        .replace("COUNT", &format!("{name}-count.txt"))
}

fn freshness(project: &TestProject, file: &str) -> Vec<(String, String, Vec<String>)> {
    let output = project.pipe(&["status", "--json", file]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let states: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    states
        .iter()
        .map(|state| {
            (
                state["stage"].as_str().unwrap().to_string(),
                state["freshness"].as_str().unwrap().to_string(),
                state["reasons"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|reason| reason.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn two_pipelines_of_one_project_are_strangers() {
    let project = TestProject::new();
    project.write("data.jsonl", &rows(10));
    project.write("a.yaml", &split_pipeline("a", 6));
    project.write("b.yaml", &split_pipeline("b", 4));

    project.run_ok(&["a.yaml"]);
    // b's `split` has never run: it is explained by its own (empty)
    // history, not by a's `split`.
    let never_run = freshness(&project, "b.yaml");
    let (stage, state, reasons) = &never_run[0];
    assert_eq!((stage.as_str(), state.as_str()), ("split", "stale"));
    assert_eq!(
        reasons,
        &["never run with this key; no earlier run recorded"],
        "compared with another pipeline's stage"
    );
    assert_eq!(never_run[1].1, "stale");
    project.run_ok(&["b.yaml"]);

    // b wrote its own outputs; a's are untouched and still fresh.
    assert_eq!(
        project
            .read(".pipe/out/a/split/dataset/train.jsonl")
            .lines()
            .count(),
        6
    );
    assert_eq!(
        project
            .read(".pipe/out/b/split/dataset/train.jsonl")
            .lines()
            .count(),
        4
    );
    for (stage, state, reasons) in freshness(&project, "a.yaml") {
        assert_eq!(state, "fresh", "{stage}: {reasons:?}");
    }
    let again = project.run_ok(&["a.yaml"]);
    assert!(again.ran().is_empty(), "{:?}", again.stages);
}

#[test]
fn a_dependency_is_named_as_written_dots_and_all() {
    let project = TestProject::new();
    project.write("data/train.v1.csv", "a\n");
    project.write(
        "pipe.yaml",
        "stages:\n  copy:\n    run: cp data/train.v1.csv copy.csv\n    deps: [data/train.v1.csv]\n    outs: [copy.csv]\n",
    );
    project.run_ok(&[]);
    project.write("data/train.v1.csv", "b\n");
    let states = freshness(&project, "pipe.yaml");
    let (_, state, reasons) = &states[0];
    assert_eq!(state, "stale");
    assert_eq!(reasons, &["dependency `data/train.v1.csv` changed"]);
}
