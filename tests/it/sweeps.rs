//! `pipe run -m`: a sweep from the command line, each combination of the
//! comma-separated `-S` values one run, recorded with exactly its values,
//! and compared as one experiment (seeds grouped into mean ± std).

use pipe_test_support::TestProject;
use serde_json::Value;

use crate::reports::text as stdout;

fn project() -> TestProject {
    let project = TestProject::new();
    project.write(
        "score.py",
        "import json, sys\njson.dump({'acc': float(sys.argv[1]) * 10 + int(sys.argv[2])}, open('m.json', 'w'))\n",
    );
    project.write(
        "pipe.yaml",
        "params:\n  lr: 0.1\n  seed: 1\nstages:\n  train:\n    run: python3 score.py ${params.lr} ${params.seed}\n    deps: [score.py]\n    metrics: m.json\n",
    );
    project
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_sweep_runs_and_records_each_combination_with_its_own_values() {
    let project = project();
    let output = project.pipe(&["run", "-m", "-S", "lr=0.1,0.2", "-S", "seed=1,2"]);
    let text = stderr(&output);
    assert!(output.status.success(), "{text}");
    // Every combination writes m.json: each runs in a tree of its own,
    // all in one run, and the project's files are not touched.
    assert!(
        text.contains("sweep: 4 combinations as one run, each in a work tree of its own"),
        "{text}"
    );
    assert!(text.contains("compare them: pipe compare 1"), "{text}");
    assert!(
        !project.exists("m.json"),
        "the project's files are not touched"
    );
    assert!(!project.exists(".pipe/workspaces"), "the trees are removed");
    // The record holds each combination's values and what its command made.
    let show = project.pipe(&["show", "1", "--json"]);
    let record: Value = serde_json::from_slice(&show.stdout).unwrap();
    let mut stages: Vec<&Value> = record["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .collect();
    stages.sort_by_key(|stage| stage["position"].as_u64());
    assert_eq!(stages.len(), 4, "{record}");
    for (stage, (lr, seed)) in stages.iter().zip([(0.1, 1), (0.1, 2), (0.2, 1), (0.2, 2)]) {
        assert_eq!(
            stage["stage"],
            serde_json::json!(format!("train@lr={lr},seed={seed}")),
            "{record}"
        );
        let acc = stage["metrics"]["acc"].as_f64().unwrap();
        assert!((acc - (lr * 10.0 + seed as f64)).abs() < 1e-9, "{record}");
    }

    // One experiment: two rows, each the mean of its two seeds.
    let compare = stdout(&project.pipe(&["compare", "1"]));
    let rows: Vec<&str> = compare
        .lines()
        .filter(|line| line.starts_with('#'))
        .collect();
    assert_eq!(rows.len(), 2, "{compare}");
    assert!(
        rows[0].starts_with("#1 (mean of 2)") && rows[0].contains("2.5 ± 0.71"),
        "{compare}"
    );
    assert!(
        rows[1].starts_with("#1 (mean of 2)") && rows[1].contains("3.5 ± 0.71"),
        "{compare}"
    );

    // Again: recorded, every result restored, so that the sweep compares whole.
    let again = project.pipe(&["run", "-m", "-S", "lr=0.1,0.2", "-S", "seed=1,2"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("run #2 succeeded: 4 restored"),
        "{}",
        stderr(&again)
    );
    // Each result is the one a plain run of its values makes: restored.
    let plain = project.run_ok(&["-S", "lr=0.2", "-S", "seed=1"]);
    assert_eq!(plain.status("train"), "restored", "{}", plain.stderr);
}

/// Values that cannot name a stage (`a b`) make the sweep run one run per
/// combination, in turn, each recorded with exactly its values.
#[test]
fn a_sweep_that_cannot_be_one_run_records_each_combination_as_a_run() {
    let project = project();
    // The tag is an input of the command (through `env:`: `a b` is no
    // plain value): each combination makes a result of its own.
    project.write(
        "pipe.yaml",
        "params:\n  lr: 0.1\n  seed: 1\n  tag: x\nstages:\n  train:\n    run: python3 score.py ${params.lr} ${params.seed} && echo \"$TAG\" > tag.txt\n    env: { TAG: \"${params.tag}\" }\n    deps: [score.py]\n    outs: [tag.txt]\n    metrics: m.json\n",
    );
    let output = project.pipe(&["run", "-m", "-S", "seed=1,2", "-S", "tag=a b,c d"]);
    let text = stderr(&output);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("note: the sweep runs its 4 combinations one run each, in turn: the value `a b` cannot be part of a stage name"),
        "{text}"
    );
    for (number, swept) in ["seed=1 tag=a b", "seed=1 tag=c d", "seed=2 tag=a b"]
        .iter()
        .enumerate()
    {
        assert!(
            text.contains(&format!("sweep {}/4: {swept}", number + 1)),
            "{text}"
        );
    }
    let record: Value =
        serde_json::from_slice(&project.pipe(&["show", "3", "--json"]).stdout).unwrap();
    assert_eq!(record["params"]["seed"], serde_json::json!(2), "{record}");
    assert_eq!(
        record["params"]["tag"],
        serde_json::json!("a b"),
        "{record}"
    );
    assert!(
        text.contains("compare them: pipe compare 1 2 3 4"),
        "{text}"
    );
}

#[test]
fn a_mistake_in_any_combination_stops_the_sweep_before_anything_runs() {
    let project = project();
    let output = project.pipe(&["run", "-m", "-S", "lr=0.1,fast"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("error[param-type]: `-S lr=fast`"),
        "{}",
        stderr(&output)
    );
    assert!(!project.exists("m.json"), "nothing ran");
    let runs = stdout(&project.pipe(&["runs", "--json"]));
    assert_eq!(runs.trim(), "[]");

    let empty = project.pipe(&["run", "-m", "-S", "lr=0.1,,0.2"]);
    assert_eq!(empty.status.code(), Some(2));
    assert!(
        stderr(&empty).contains("cannot sweep `-S lr=0.1,,0.2`: an empty value between commas"),
        "{}",
        stderr(&empty)
    );

    // Without -m, the comma is said to be a sweep's.
    let plain = project.pipe(&["run", "-S", "lr=0.1,0.2"]);
    assert_eq!(plain.status.code(), Some(2));
    assert!(
        stderr(&plain).contains("sweep them: `pipe run -m -S lr=0.1,0.2`"),
        "{}",
        stderr(&plain)
    );
}

#[test]
fn a_dry_run_of_a_sweep_shows_each_combination_and_runs_nothing() {
    let project = project();
    let output = project.pipe(&["run", "-m", "--dry-run", "-S", "seed=1,2,3"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    for number in 1..=3 {
        assert!(
            text.contains(&format!("train@seed={number}  would run"))
                && text.contains(&format!("> python3 score.py 0.1 {number}")),
            "{text}"
        );
    }
    assert!(!project.exists("m.json"));
    assert_eq!(stdout(&project.pipe(&["runs", "--json"])).trim(), "[]");
}

#[test]
fn a_sweep_reports_each_run_as_json_lines() {
    let project = project();
    let output = project.pipe(&[
        "run",
        "-m",
        "--json",
        "-S",
        "seed=1,2",
        "-S",
        "+tag=a b,c d",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let events: Vec<Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let starts: Vec<&Value> = events
        .iter()
        .filter(|event| event["event"] == "sweep_run_starting")
        .collect();
    assert_eq!(starts.len(), 4);
    assert_eq!(starts[1]["number"], 2);
    assert_eq!(
        starts[1]["swept"],
        serde_json::json!(["seed=1", "+tag=c d"])
    );
    let finished = events
        .iter()
        .filter(|event| event["event"] == "run_finished")
        .count();
    assert_eq!(finished, 4);
}

#[test]
fn status_why_and_run_take_a_runs_settings_instead_of_its_s_list() {
    let project = project();
    // Values no stage name can hold: one run per combination, in turn.
    let sweep = project.pipe(&["run", "-m", "-S", "lr=0.1,0.2", "-S", "+tag=a b,c d"]);
    assert!(sweep.status.success(), "{}", stderr(&sweep));
    // The tag is no input of the command: the second value of each lr
    // finds the first's result in place, and records no run, as a plain
    // run that does nothing records none.
    assert!(
        stderr(&sweep).contains(
            "  -      fresh       lr=0.2 +tag=c d  (nothing to do: every result is run #2's)"
        ),
        "{}",
        stderr(&sweep)
    );
    // The work tree holds the last run's result.
    let last = project.pipe(&["status", "--run", "2"]);
    let text = String::from_utf8_lossy(&last.stdout);
    assert!(text.starts_with("train  fresh"), "{text}");
    assert!(
        stderr(&last).contains("as run #2: pipe.yaml -S lr=0.2 -S +tag=a b"),
        "{}",
        stderr(&last)
    );
    let first = stdout(&project.pipe(&["status", "--run", "1"]));
    assert!(first.starts_with("train  restorable"), "{first}");
    let why = stdout(&project.pipe(&["why", "train", "--run", "1"]));
    assert!(why.contains("params.lr  0.2 -> 0.1"), "{why}");
    // Given -S values come after the run's: lr=0.2 is what the work tree
    // holds (the tag is no input of the command).
    let later = stdout(&project.pipe(&["status", "--run", "1", "-S", "lr=0.2"]));
    assert!(later.starts_with("train  fresh"), "{later}");

    // `pipe run --run 1` is run #1's variant again, recorded as such.
    let again = project.pipe(&["run", "--run", "1"]);
    assert!(again.status.success(), "{}", stderr(&again));
    let record: Value =
        serde_json::from_slice(&project.pipe(&["show", "last", "--json"]).stdout).unwrap();
    assert_eq!(
        record["overrides"],
        serde_json::json!(["lr=0.1", "+tag=a b"]),
        "{record}"
    );

    let unknown = project.pipe(&["status", "--run", "99"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("no run matches `99`"),
        "{}",
        stderr(&unknown)
    );
}
