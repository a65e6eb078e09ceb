//! `pipe run -m` as one matrix run: where the combinations can share the
//! work tree (every output a stage writes differs between the values it
//! depends on), the sweep is one run in which a stage the same in every
//! combination runs once and the others once per distinct version, side
//! by side under `-j`, named like a declared matrix's expansions, recorded
//! with every swept value, and compared as that matrix's rows.

use pipe_test_support::TestProject;
use serde_json::Value;

use crate::reports::text as stdout;

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `train` waits (up to a minute) until every other version of it has
/// started: run one after another, the first would give up and fail.
const SIDE_BY_SIDE: &str = r#"
params: { lr: 1, seed: 1, rows: 3 }
stages:
  prep:
    run: seq ${params.rows} > prep.txt && echo prep >> calls.log
    outs: [prep.txt]
  train:
    run: >-
      mkdir -p started && touch started/${params.lr}-${params.seed} &&
      for i in $(seq 600); do [ $(ls started | wc -l) -ge 4 ] && break; sleep 0.1; done &&
      [ $(ls started | wc -l) -ge 4 ] &&
      echo "{\"acc\": $(( $(wc -l < prep.txt) * ${params.lr} + ${params.seed} ))}" > m-${params.lr}-${params.seed}.json
    deps: [prep.txt]
    metrics: ["m-${params.lr}-${params.seed}.json"]
"#;

#[test]
fn a_sweep_runs_as_one_matrix_run_its_versions_side_by_side() {
    let project = TestProject::new();
    project.write("pipe.yaml", SIDE_BY_SIDE);
    // The plan first: the one run's stages, nothing run.
    let plan = project.pipe(&["run", "-m", "-S", "lr=1,2", "-S", "seed=1,2", "--dry-run"]);
    assert!(plan.status.success(), "{}", stderr(&plan));
    let planned = format!("{}{}", stdout(&plan), stderr(&plan));
    assert!(
        planned.contains("train ×4") && planned.contains("5 stages"),
        "{planned}"
    );
    // `-v`: each expansion.
    let every = project.pipe(&[
        "run",
        "-v",
        "-m",
        "-S",
        "lr=1,2",
        "-S",
        "seed=1,2",
        "--dry-run",
    ]);
    assert!(
        stdout(&every).contains("train@lr=2,seed=1"),
        "{}",
        stdout(&every)
    );
    assert!(!project.exists("calls.log") && !project.exists(".pipe/runs.db"));
    let output = project.pipe(&["run", "-m", "-S", "lr=1,2", "-S", "seed=1,2", "-j", "4"]);
    let text = stderr(&output);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("sweep: 4 combinations as one run: train ×4"),
        "{text}"
    );
    assert!(
        text.contains("sweep: 4 combinations in run #1, succeeded"),
        "{text}"
    );
    assert!(text.contains("compare them: pipe compare 1"), "{text}");
    // What every combination has in common ran once.
    assert_eq!(project.read("calls.log"), "prep\n");

    let record: Value =
        serde_json::from_slice(&project.pipe(&["show", "1", "--json"]).stdout).unwrap();
    assert_eq!(record["sweep"], true, "{record}");
    assert_eq!(
        record["overrides"],
        serde_json::json!(["lr=1,2", "seed=1,2"])
    );
    // The run says every value it used.
    assert_eq!(
        record["params"]["lr"],
        serde_json::json!([1, 2]),
        "{record}"
    );
    assert_eq!(record["params"]["rows"], 3, "{record}");
    let stages = record["stages"].as_array().unwrap();
    let acc_of = |name: &str| {
        stages
            .iter()
            .find(|stage| stage["stage"] == name)
            .unwrap_or_else(|| panic!("no {name} in {record}"))["metrics"]["acc"]
            .as_i64()
    };
    assert_eq!(acc_of("train@lr=1,seed=1"), Some(4));
    assert_eq!(acc_of("train@lr=2,seed=2"), Some(8));
    let train = stages
        .iter()
        .find(|stage| stage["stage"] == "train@lr=2,seed=1")
        .unwrap();
    assert_eq!(train["base_name"], "train", "{train}");
    assert_eq!(
        train["combination"],
        serde_json::json!([["lr", "2"], ["seed", "1"]]),
        "{train}"
    );
    assert_eq!(stages.len(), 5, "{record}");

    // Compared as a matrix: a row per lr, its seeds as mean ± std.
    let compare = stdout(&project.pipe(&["compare", "1"]));
    let rows: Vec<&str> = compare
        .lines()
        .filter(|line| line.starts_with('#'))
        .collect();
    assert_eq!(rows.len(), 2, "{compare}");
    assert!(
        rows[0].contains("4.5 ± 0.71") && rows[1].contains("7.5 ± 0.71"),
        "{compare}"
    );

    // `--run` loads the sweep again, as one run: nothing to do.
    let status = project.pipe(&["status", "--run", "1"]);
    assert!(
        stderr(&status).contains("as run #1: pipe.yaml -m -S lr=1,2 -S seed=1,2"),
        "{}",
        stderr(&status)
    );
    assert!(
        stdout(&status).contains("5 stages: 5 fresh"),
        "{}",
        stdout(&status)
    );
    let why = stdout(&project.pipe(&["why", "--run", "1", "train@lr=1,seed=2"]));
    assert!(why.contains("is fresh"), "{why}");
    // And the same sweep again finds every result in place: nothing to
    // do, no run recorded, the run that holds them named.
    let again = project.pipe(&["run", "-m", "-S", "lr=1,2", "-S", "seed=1,2"]);
    assert!(
        stderr(&again).contains("sweep: 4 combinations, nothing to do: every result is run #1's"),
        "{}",
        stderr(&again)
    );
}

/// A built-in stage's versions get output directories of their own, and
/// the stages that read them read their own combination's.
#[test]
fn a_swept_data_stage_writes_each_version_apart_and_its_readers_follow() {
    let project = TestProject::new();
    let rows: String = (0..20)
        .map(|row| format!("{{\"text\": \"row {row}\", \"label\": {}}}\n", row % 2))
        .collect();
    project.write("data.jsonl", &rows);
    project.write(
        "pipe.yaml",
        "params: { seed: 1 }\nstages:\n  split:\n    uses: data/split@1\n    with: { dataset: data.jsonl, train: 0.5, val: 0.25, test: 0.25, seed: \"${params.seed}\" }\n  first:\n    run: head -1 ${stages.split.outs.dataset}/train.jsonl > first-${params.seed}.txt\n    outs: [\"first-${params.seed}.txt\"]\n",
    );
    let output = project.pipe(&["run", "-m", "-S", "seed=1,2"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("as one run: split ×2, first ×2"),
        "{}",
        stderr(&output)
    );
    for seed in ["1", "2"] {
        let split = project.read(&format!(
            ".pipe/out/pipe/split@seed={seed}/dataset/train.jsonl"
        ));
        let first = project.read(&format!("first-{seed}.txt"));
        assert_eq!(first, format!("{}\n", split.lines().next().unwrap()));
    }
    assert_ne!(project.read("first-1.txt"), project.read("first-2.txt"));
}

/// Two versions of a stage that write one path cannot share the
/// project's work tree: each combination's runs in a tree of its own,
/// still one run, and the project's path is not touched.
#[test]
fn a_sweep_whose_stage_writes_one_path_runs_each_combination_in_a_tree_of_its_own() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { lr: 1 }\nstages:\n  train:\n    run: echo ${params.lr} > model.txt\n    outs: [model.txt]\n",
    );
    let output = project.pipe(&["run", "-m", "-S", "lr=1,2"]);
    let text = stderr(&output);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("sweep: 2 combinations as one run, each in a work tree of its own under .pipe/workspaces/ (your files are not touched): train ×2"),
        "{text}"
    );
    assert!(text.contains("compare them: pipe compare 1"), "{text}");
    assert!(!project.exists("model.txt"));
    // Each tree's result is what a plain run of its values makes.
    let plain = project.run_ok(&["-S", "lr=2"]);
    assert_eq!(plain.status("train"), "restored", "{}", plain.stderr);
    assert_eq!(project.read("model.txt"), "2\n");
}

/// A swept param named like a key of the stage's own matrix keeps both
/// apart in names and in compare: `train@lr=5,params.lr=2`.
#[test]
fn a_swept_param_named_like_the_stages_matrix_key_is_named_by_its_path() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: {lr: 1}\nstages:\n  train:\n    matrix: {lr: [5, 6]}\n    run: 'echo \"{\\\"acc\\\": ${matrix.lr}${params.lr}}\" > m-${matrix.lr}-${params.lr}.json'\n    metrics: [\"m-${matrix.lr}-${params.lr}.json\"]\n",
    );
    let output = project.pipe(&["run", "-m", "-S", "lr=1,2"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let compare = stdout(&project.pipe(&["compare", "--csv"]));
    let mut lines = compare.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("run,lr,params.lr,"), "{compare}");
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 4, "{compare}");
    assert!(
        rows.iter().any(|row| row.starts_with("1,6,2,62")),
        "{compare}"
    );
}

/// A sweep's rows beside a plain run's: each row shows its own value in
/// the swept param's one column (`train.lr`), not the run's list of them
/// beside a second column keyed `lr`.
#[test]
fn a_sweeps_rows_show_their_own_value_in_the_swept_params_column() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: {train: {lr: 0.5, epochs: 2}}\nstages:\n  train:\n    run: 'echo ${params.train.lr} > lr.txt && echo \"{\\\"acc\\\": ${params.train.epochs}}\" > m.json'\n    outs: [lr.txt]\n    metrics: [m.json]\n",
    );
    project.run_ok(&[]);
    let output = project.pipe(&[
        "run",
        "-m",
        "-S",
        "train.lr=1e-1,0.3",
        "-S",
        "train.epochs=2,4",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let compare = stdout(&project.pipe(&["compare", "--csv"]));
    let mut lines = compare.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("run,train.epochs,train.lr,") && !header.contains(",lr,"),
        "{compare}"
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 5, "{compare}");
    for row in [
        "1,2,0.5,2",
        "2,2,0.1,2",
        "2,4,0.1,4",
        "2,2,0.3,2",
        "2,4,0.3,4",
    ] {
        assert!(
            rows.iter().any(|line| line.starts_with(row)),
            "{row}: {compare}"
        );
    }
}
