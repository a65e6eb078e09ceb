//! Which runs `pipe diff`, `pipe compare` and `pipe show` put before the
//! user: by default the last successful runs of one pipeline (as `dvc exp
//! diff` does), failed runs skipped, a warning when runs of different
//! pipelines are compared on purpose; tables worth pasting into a pull
//! request; key metrics first.

use pipe_test_support::TestProject;
use serde_json::Value;

use crate::reports::text as stdout;

/// Two pipelines in one project, each writing its own metrics; `fail`
/// makes alpha's stage fail.
const ALPHA: &str = r#"
name: alpha
params: { x: 1, fail: 0 }
stages:
  fit:
    run: 'test ${params.fail} = 0 && echo "{\"accuracy\": 0.${params.x}}" > alpha.json'
    metrics: alpha.json
"#;

const BETA: &str = r#"
name: beta
params: { y: 1 }
stages:
  fit:
    run: 'echo "{\"accuracy\": 0.${params.y}, \"steps\": 1}" > beta.json'
    metrics: beta.json
"#;

fn two_pipelines() -> TestProject {
    let project = TestProject::new();
    project.write("alpha.yaml", ALPHA);
    project.write("beta.yaml", BETA);
    project
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).to_string()
}

/// The runs `pipe diff ARGS --json` compared.
fn diffed(project: &TestProject, args: &[&str]) -> (i64, i64) {
    let mut all = vec!["diff", "--json"];
    all.extend_from_slice(args);
    let output = project.pipe(&all);
    let diff: Value = serde_json::from_str(&stdout(&output)).unwrap();
    (diff["a"].as_i64().unwrap(), diff["b"].as_i64().unwrap())
}

#[test]
fn diff_compares_the_last_two_successful_runs_of_one_pipeline() {
    let project = two_pipelines();
    // Alternately: alpha #1, beta #2, alpha #3, beta #4.
    assert_eq!(project.run_ok(&["alpha.yaml"]).run_id(), 1);
    assert_eq!(project.run_ok(&["beta.yaml"]).run_id(), 2);
    assert_eq!(project.run_ok(&["alpha.yaml", "-S", "x=2"]).run_id(), 3);
    assert_eq!(project.run_ok(&["beta.yaml", "-S", "y=2"]).run_id(), 4);

    // The newest successful run's pipeline, its last two runs.
    let output = project.pipe(&["diff"]);
    assert!(stdout(&output).starts_with("run #2 -> run #4\n"));
    assert!(!stderr(&output).contains("warning"), "{}", stderr(&output));
    // Another pipeline by name or by file.
    assert_eq!(diffed(&project, &["--pipeline", "alpha"]), (1, 3));
    assert_eq!(diffed(&project, &["--pipeline", "alpha.yaml"]), (1, 3));
    let unknown = project.pipe(&["diff", "--pipeline", "gamma"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("pipelines with recorded runs: alpha, beta"),
        "{}",
        stderr(&unknown)
    );

    // A failed run is skipped by the default choice...
    let failed = project.run(&["alpha.yaml", "-S", "x=3", "-S", "fail=1"]);
    assert_ne!(failed.code, 0);
    assert_eq!(failed.run_id(), 5);
    assert_eq!(diffed(&project, &["--pipeline", "alpha"]), (1, 3));
    assert_eq!(diffed(&project, &[]), (2, 4));
    // ...and compared when named.
    assert_eq!(diffed(&project, &["3", "5"]), (3, 5));
    // One run named: the newest successful run of its pipeline after it.
    assert_eq!(diffed(&project, &["1"]), (1, 3));

    // Two pipelines named on purpose: compared, with a warning.
    let across = project.pipe(&["diff", "1", "2"]);
    assert!(stdout(&across).starts_with("run #1 -> run #2\n"));
    let warning = stderr(&across);
    assert!(
        warning.contains("warning: run #1 is of pipeline `alpha` and run #2 of `beta`")
            && warning.contains("`--pipeline NAME` chooses which"),
        "{warning}"
    );

    // One run under two names: compared with itself, and said so.
    let itself = project.pipe(&["diff", "4", "last~1"]);
    assert_eq!(itself.status.code(), Some(0), "{}", stderr(&itself));
    assert!(stdout(&itself).starts_with("run #4 -> run #4\n"));
    assert!(
        stderr(&itself).contains(
            "warning: both runs named are run #4: it is compared with itself, so nothing differs"
        ),
        "{}",
        stderr(&itself)
    );
}

#[test]
fn a_rerun_that_did_nothing_is_not_what_diff_compares() {
    let project = TestProject::new();
    project.write("pipe.yaml", &ALPHA.replace("name: alpha", "name: solo"));
    project.run_ok(&[]);
    // Nothing to do: not recorded, so there is one run, and diff says how
    // to get a second.
    project.run_ok(&[]);
    let runs: Value = serde_json::from_str(&stdout(&project.pipe(&["runs", "--json"]))).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs:#}");
    let alone = project.pipe(&["diff"]);
    assert_eq!(alone.status.code(), Some(2), "{}", stderr(&alone));
    let message = stderr(&alone);
    assert!(
        message.contains("run #1 is the only successful run of pipeline `solo` to compare")
            && message.contains("pipe run -S KEY=VALUE")
            && message.contains("pipe diff A B"),
        "{message}"
    );
    project.run_ok(&["-S", "x=2"]);
    project.run_ok(&["-S", "x=2"]);
    // `pipe run; pipe run; pipe diff`: the two runs that did something.
    assert_eq!(diffed(&project, &[]), (1, 2));
    let metric = project.pipe(&["diff"]);
    assert!(
        stdout(&metric).contains("fit: accuracy  0.1 -> 0.2"),
        "{}",
        stdout(&metric)
    );
}

/// A matrix key `n` (the sentiment example's), one named `run` (the label
/// column's name), bytes, seconds, free text, a precision and a seed
/// reported back as metrics, and a metric that is the same everywhere.
const STUDY: &str = r#"
name: study
params: { seed: 1, precision: 32-true, other: 5 }
stages:
  train:
    matrix: { n: [1, 2], run: [a] }
    run: >-
      if [ ${params.precision} = 32-true ]; then bytes=1925935268; secs=192; else bytes=1073741824; secs=100.5; fi;
      echo "{\"accuracy\": 0.8${params.seed}${matrix.n}, \"peak_bytes\": $bytes, \"train_seconds\": $secs,
      \"peak_source\": \"cuda allocator ${params.seed}\", \"precision\": \"${params.precision}\", \"rows\": 100, \"seed\": ${params.seed}}"
      > m-${matrix.n}.json
    metrics: m-${matrix.n}.json
"#;

fn study() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", STUDY);
    project.write("beta.yaml", BETA);
    project
}

#[test]
fn compare_md_shows_one_pipeline_what_differs_in_human_units_without_name_clashes() {
    let project = study();
    project.run_ok(&[]);
    project.run_ok(&["beta.yaml"]);
    project.run_ok(&["-S", "seed=2"]);
    project.run_ok(&["-S", "precision=bf16-mixed"]);
    project.run_ok(&["-S", "precision=bf16-mixed", "-S", "seed=2"]);
    project.run_ok(&["beta.yaml", "-S", "y=3"]);
    // The newest run is beta's: `--pipeline` chooses study.
    // The key metric, and by glob two that are not: in the stage, by name,
    // or in full.
    let output = project.pipe(&[
        "compare",
        "--md",
        "--pipeline",
        "study",
        "--metrics",
        "accuracy",
        "--metrics",
        "peak_b*",
        "--metrics",
        "train.*_seconds",
    ]);
    let markdown = stdout(&output);
    insta::assert_snapshot!("compare_pasteable_markdown", markdown);
    let header = markdown
        .lines()
        .find(|line| line.starts_with("| run |"))
        .unwrap();
    // Each name once: the matrix key `n` and `run` beside the row label,
    // no count column.
    assert_eq!(
        header,
        "| run | precision | seed | n | matrix.run | accuracy | peak\\_bytes | train\\_seconds |"
    );
    assert!(
        markdown.contains("(mean of 2)")
            && markdown.contains("1.79 GiB")
            && markdown.contains("3 min 12 s"),
        "{markdown}"
    );
    assert!(!markdown.contains("1925935268"), "{markdown}");
    // The precision was set with `-S`: no warning about it.
    assert!(
        !stderr(&output).contains("precision"),
        "{}",
        stderr(&output)
    );
    assert!(!markdown.contains("WARNING"), "{markdown}");

    // By default the newest run's pipeline, and a note of what was left out.
    let beta = project.pipe(&["compare", "--md"]);
    assert!(
        stderr(&beta).contains(
            "note: comparing runs of pipeline `beta`, the newest run's; left out runs of `study` (#1, #3, #4, #5)"
        ),
        "{}",
        stderr(&beta)
    );
    let beta_table = stdout(&beta);
    let rows: Vec<&str> = beta_table
        .lines()
        .filter(|line| line.starts_with("| \\#"))
        .map(|line| line.split(' ').nth(1).unwrap())
        .collect();
    assert_eq!(rows, ["\\#2", "\\#6"], "{beta_table}");

    // Everything with `--all-columns`, raw values in CSV.
    let all = stdout(&project.pipe(&["compare", "--csv", "--all-columns", "--pipeline", "study"]));
    let columns = all.lines().next().unwrap();
    for column in [
        "train.peak_source",
        "train.precision",
        "train.rows",
        "train.seed",
        "other",
    ] {
        assert!(columns.split(',').any(|name| name == column), "{columns}");
    }
    assert!(all.contains("1925935268"), "{all}");
}

#[test]
fn a_precision_changed_in_the_file_still_warns() {
    let project = study();
    project.run_ok(&[]);
    project.write("pipe.yaml", &STUDY.replace("32-true", "16-mixed"));
    project.run_ok(&[]);
    let output = project.pipe(&["compare", "--md"]);
    assert!(
        stderr(&output).contains("warning: the precision differs and is not a matrix key"),
        "{}",
        stderr(&output)
    );
}

const SHOWN: &str = r#"
name: shown
directions: { score: higher }
stages:
  evaluate:
    run: >-
      echo '{"a_count": 3, "accuracy": 0.8060109289617486, "b_note": "x", "loss": 0.41962361,
      "score": 12.3456789, "epochs": {"1": {"val_acc": 0.5}}}' > metrics.json
    metrics: metrics.json
  report:
    uses: report/html@1
"#;

#[test]
fn show_puts_the_key_metrics_rounded_and_the_report_first() {
    let project = TestProject::new();
    project.write("pipe.yaml", SHOWN);
    project.run_ok(&[]);
    let shown = stdout(&project.pipe(&["show"]));
    let lines: Vec<&str> = shown.lines().collect();
    let at = |text: &str| {
        lines
            .iter()
            .position(|line| line.starts_with(text))
            .unwrap_or_else(|| panic!("no `{text}` in:\n{shown}"))
    };
    // Accuracy and loss by name, `score` as the pipeline's directions
    // declare it, rounded as `pipe diff` rounds; per-epoch detail is not key.
    assert_eq!(
        lines[at("key metrics")..at("key metrics") + 4],
        [
            "key metrics",
            "  evaluate: accuracy  0.806",
            "  evaluate: loss      0.4196",
            "  evaluate: score     12.35",
        ]
    );
    let report = ".pipe/out/shown/report/report/index.html";
    assert_eq!(
        lines[at("report ")],
        format!("report   {report} (report.md beside it)")
    );
    assert!(project.path(report).is_file());
    assert!(at("key metrics") < at("stages"), "{shown}");
    assert!(at("stages") < at("other metrics"), "{shown}");
    assert!(shown.contains("  evaluate: a_count = 3"), "{shown}");
    assert!(
        shown.contains("  evaluate: epochs.1.val_acc = 0.5"),
        "{shown}"
    );
    assert!(!shown.contains("0.8060109289617486"), "{shown}");
}

#[test]
fn every_json_flag_says_what_it_prints() {
    let project = TestProject::new();
    let commands: [&[&str]; 12] = [
        &["run"],
        &["status"],
        &["why"],
        &["runs"],
        &["show"],
        &["diff"],
        &["compare"],
        &["stages"],
        &["cache", "verify"],
        &["cache", "push"],
        &["cache", "pull"],
        &["cache", "status"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.push("--help");
        let help = stdout(&project.pipe(&args));
        let line = help
            .lines()
            .find(|line| line.trim_start().starts_with("--json"))
            .unwrap_or_else(|| panic!("no --json in `pipe {}`:\n{help}", command.join(" ")));
        assert!(
            line.trim_start().trim_start_matches("--json").trim().len() > 10,
            "`pipe {} --json` has no help text: {line:?}",
            command.join(" ")
        );
    }
}

/// The README's example: `features` expands over `n` and reports nothing,
/// one `evaluate` reports the metrics. Rows split by `n` would show each
/// run's one accuracy twice, beside an `n` that changes nothing.
#[test]
fn a_matrix_stage_that_reports_nothing_does_not_split_compares_rows() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"
name: sentiment
params: { smoothing: 1 }
stages:
  features:
    matrix: { n: [1, 2] }
    run: echo ${matrix.n} > f${matrix.n}.txt
    outs: { f: "f${matrix.n}.txt" }
  evaluate:
    run: 'cat f1.txt f2.txt > /dev/null && echo "{\"accuracy\": 0.7${params.smoothing}}" > m.json'
    deps: { a: "${stages.features@n=1.outs.f}", b: "${stages.features@n=2.outs.f}" }
    metrics: m.json
"#,
    );
    project.run_ok(&[]);
    project.run_ok(&["-S", "smoothing=2"]);
    let output = project.pipe(&["compare", "--md"]);
    let table = stdout(&output);
    assert!(output.status.success(), "{}", stderr(&output));
    let rows: Vec<&str> = table
        .lines()
        .filter(|line| line.starts_with("| \\#"))
        .collect();
    assert_eq!(rows.len(), 2, "one row per run:\n{table}");
    assert!(!table.contains("| n |") && !table.contains("n="), "{table}");
    assert!(rows[1].contains("0.72"), "{table}");
}
