//! A sweep run again when every result is in place does what a plain run
//! that finds nothing to do does: it records no run, and says so, naming
//! the run whose record holds those results; `runs`, `show`, `compare`
//! and `diff` go on showing the runs that made them. A plain run of one
//! combination's values does the same, and one that restores them says
//! whose they are.

use pipe_test_support::TestProject;
use serde_json::Value;

use crate::reports::text as stdout;

const PIPELINE: &str = r#"
params: { lr: 1, seed: 1 }
key_metrics: [train.acc]
stages:
  prep:
    run: seq 3 > prep.txt
    outs: [prep.txt]
  train:
    run: >-
      echo "{\"acc\": $(( ${params.lr} * 10 + ${params.seed} ))}" > m-${params.lr}-${params.seed}.json
    deps: [prep.txt]
    metrics: ["m-${params.lr}-${params.seed}.json"]
"#;

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn run_ids(project: &TestProject) -> Vec<i64> {
    let runs: Value = serde_json::from_slice(&project.pipe(&["runs", "--json"]).stdout).unwrap();
    let mut ids: Vec<i64> = runs
        .as_array()
        .expect("a list of runs")
        .iter()
        .map(|run| run["id"].as_i64().expect("an id"))
        .collect();
    ids.sort_unstable();
    ids
}

const SWEEP: [&str; 6] = ["run", "-m", "-S", "lr=1,2", "-S", "seed=1,2"];

#[test]
fn a_sweep_whose_results_are_all_in_place_records_no_run_and_names_the_run_that_holds_them() {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project.run_ok(&[]);
    let first = project.pipe(&SWEEP);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stderr(&first).contains("sweep: 4 combinations in run #2, succeeded"),
        "{}",
        stderr(&first)
    );

    let again = project.pipe(&SWEEP);
    let said = stderr(&again);
    assert!(again.status.success(), "{said}");
    assert!(
        said.contains("nothing to do: 5 stages fresh, no run recorded"),
        "{said}"
    );
    assert!(
        said.contains("sweep: 4 combinations, nothing to do: every result is run #2's"),
        "{said}"
    );
    assert!(said.contains("compare them: pipe compare 2"), "{said}");
    assert_eq!(run_ids(&project), [1, 2], "no run recorded");
    // As JSON too: the run's id is given back.
    let json = project.pipe(&["run", "-m", "--json", "-S", "lr=1,2", "-S", "seed=1,2"]);
    let finished: Vec<Value> = stdout(&json)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["event"] == "run_finished")
        .collect();
    assert_eq!(finished.len(), 1, "{}", stdout(&json));
    assert_eq!(finished[0]["recorded"], false, "{}", stdout(&json));
    assert_eq!(run_ids(&project), [1, 2]);

    // What the user comes back to is the run that made the results.
    let show = stdout(&project.pipe(&["show", "last"]));
    assert!(show.starts_with("run #2 "), "{show}");
    assert!(
        show.contains("combinations  4 (`pipe compare 2` compares them)"),
        "{show}"
    );
    for row in ["  1   1     11", "  2   2     22"] {
        assert!(show.contains(row), "{show}");
    }
    let compare = stdout(&project.pipe(&["compare", "2"]));
    let rows = compare
        .lines()
        .filter(|line| line.starts_with("#2"))
        .count();
    assert_eq!(
        rows, 2,
        "one row per lr, its seeds as mean ± std: {compare}"
    );
    let diff = project.pipe(&["diff"]);
    let diff = stdout(&diff);
    assert!(diff.starts_with("run #1 -> run #2"), "{diff}");
    assert!(
        diff.contains("key metrics") && diff.contains("train@lr=2,seed=2: acc  (absent) -> 22"),
        "{diff}"
    );

    // A plain run of one combination's values finds them in place too.
    let plain = project.pipe(&["run", "-S", "lr=2", "-S", "seed=2"]);
    assert!(
        stderr(&plain).contains("nothing to do: 2 stages fresh, no run recorded"),
        "{}",
        stderr(&plain)
    );
    assert_eq!(run_ids(&project), [1, 2]);
    // With its output gone, it restores the sweep's result, and says whose.
    std::fs::remove_file(project.path("m-2-2.json")).unwrap();
    let restored = project.run_ok(&["-S", "lr=2", "-S", "seed=2"]);
    assert_eq!(restored.status("train"), "restored", "{}", restored.stderr);
    let show = stdout(&project.pipe(&["show", "last"]));
    assert!(
        show.contains("restored the results of run #2: nothing ran"),
        "{show}"
    );
    let runs = stdout(&project.pipe(&["runs"]));
    assert!(runs.contains("restored #2"), "{runs}");
}

/// A sweep whose combinations run one after another: a combination whose
/// result is in place records no run, and its line says whose it is.
#[test]
fn a_combination_run_apart_that_finds_its_result_in_place_records_no_run() {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    // `a b` cannot be part of a stage name: one run per combination. The
    // tag is no input of a stage, so the second finds the first's result.
    let sweep = project.pipe(&["run", "-m", "-S", "lr=3", "-S", "+tag=a b,c d"]);
    let said = stderr(&sweep);
    assert!(sweep.status.success(), "{said}");
    assert!(said.contains("  #1     succeeded   +tag=a b"), "{said}");
    assert!(
        said.contains("  -      fresh       +tag=c d  (nothing to do: every result is run #1's)"),
        "{said}"
    );
    assert_eq!(run_ids(&project), [1]);
}
