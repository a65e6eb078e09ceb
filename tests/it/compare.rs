//! `pipe compare`: runs made through the real binary with small command
//! stages that write metrics, read back as one table. Run ids are those of
//! a fresh project (1, 2, ...), so the snapshots need no filter.

use pipe_test_support::TestProject;
use serde_json::Value;

use crate::reports::text as stdout;

/// One run is a 2 x 2 matrix; each combination writes its own accuracy,
/// loss and time.
const MATRIX: &str = r#"
name: study
params:
  epochs: 1
stages:
  prepare:
    run: echo rows > rows.txt
    outs: [rows.txt]
  train:
    matrix: { precision: [32-true, bf16-mixed], strategy: [single, ddp] }
    run: >-
      case ${matrix.precision}-${matrix.strategy} in
        32-true-single) a=0.9012; s=120.5;;
        32-true-ddp) a=0.9007; s=64.25;;
        bf16-mixed-single) a=0.8991; s=70.125;;
        bf16-mixed-ddp) a=0.9013; s=38.5;;
      esac;
      echo "{\"test\": {\"accuracy\": $a, \"loss\": 0.3}, \"seconds\": $s, \"epochs\": {\"0\": {\"loss\": 1}}, \"rows\": 100}" > m-${matrix.precision}-${matrix.strategy}.json
    deps: [rows.txt]
    metrics: m-${matrix.precision}-${matrix.strategy}.json
"#;

/// A data/split stage that falls back on the pipeline's seed, and a train
/// stage whose accuracy depends on the seed and the learning rate.
const SEEDS: &str = r#"
name: seeds
params:
  seed: 1
  lr: 0.1
stages:
  split:
    uses: data/split@1
    with:
      dataset: data.jsonl
      train: 20
      val: 10
      test: 10
  train:
    run: >-
      echo "{\"val_acc\": 0.8${params.seed}, \"val_loss\": 0.${params.seed}5, \"lr_used\": ${params.lr}}" > metrics.json
    deps: ["${stages.split.outs.dataset}"]
    metrics: metrics.json
"#;

fn json(project: &TestProject, args: &[&str]) -> Value {
    let mut all = vec!["compare", "--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&stdout(&project.pipe(&all))).unwrap()
}

fn seeds_project() -> TestProject {
    let project = TestProject::new();
    let rows: String = (0..40)
        .map(|id| format!("{{\"text\": \"row {id}\", \"label\": {}}}\n", id % 2))
        .collect();
    project.write("data.jsonl", &rows);
    project.write("pipe.yaml", SEEDS);
    project
}

#[test]
fn a_matrix_run_reads_as_one_table_with_deltas_against_the_baseline_row() {
    let project = TestProject::new();
    project.write("pipe.yaml", MATRIX);
    project.run_ok(&[]);
    let markdown = stdout(&project.pipe(&[
        "compare",
        "last",
        "--md",
        "--baseline-row",
        "precision=32-true,strategy=single",
    ]));
    insta::assert_snapshot!("compare_matrix_markdown", markdown);
    // The terminal table puts changes beside values when they fit the
    // width, under them when not.
    let terminal = |columns: &str| {
        let output = project
            .std_command()
            .args([
                "compare",
                "last",
                "--baseline-row",
                "precision=32-true,strategy=single",
            ])
            .env("COLUMNS", columns)
            .output()
            .unwrap();
        stdout(&output)
    };
    insta::assert_snapshot!("compare_matrix_text_wide", terminal("200"));
    insta::assert_snapshot!("compare_matrix_text_80", terminal("80"));
    // Narrower than the changes under their values: each change is its
    // relative part alone, and every line fits.
    let narrow = terminal("52");
    let table_lines: Vec<&str> = narrow
        .lines()
        .take_while(|line| !line.starts_with("baseline:"))
        .collect();
    assert!(
        table_lines.iter().all(|line| line.chars().count() <= 52)
            && table_lines.iter().any(|line| line.trim() == "-0.055%")
            && !table_lines.iter().any(|line| line.contains(" (")),
        "{narrow}"
    );

    let table = json(
        &project,
        &[
            "last",
            "--baseline-row",
            "precision=32-true,strategy=single",
        ],
    );
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "one row per combination: {table:#}");
    // Stages without a matrix belong to every row, and the per-epoch
    // metrics are no columns.
    let names: Vec<&str> = table["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|column| column["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "precision",
            "strategy",
            "train.test.accuracy",
            "train.test.loss",
        ]
    );
    // Not a key metric: left out by default, and said so.
    assert_eq!(
        table["hidden_metrics"],
        serde_json::json!(["train.seconds"])
    );
    // `--metrics` shows it.
    let table = json(
        &project,
        &[
            "last",
            "--baseline-row",
            "precision=32-true,strategy=single",
            "--metrics",
            "seconds",
        ],
    );
    let rows = table["rows"].as_array().unwrap();
    let ddp_bf16 = table["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|group| {
            let row = &rows[group["rows"][0].as_u64().unwrap() as usize];
            row["matrix"]["precision"] == "bf16-mixed" && row["matrix"]["strategy"] == "ddp"
        })
        .unwrap();
    let seconds = &ddp_bf16["cells"]["metric:train.seconds"];
    assert_eq!(seconds["value"], 38.5);
    assert_eq!(seconds["delta"], 38.5 - 120.5);
    // A time is shown, not judged, unless a direction is declared.
    assert_eq!(seconds["verdict"], "changed");
    assert_eq!(table["baseline"]["matrix"]["strategy"], "single");

    // Best first by accuracy; the unknown direction of `rows` must be said.
    let sorted = json(&project, &["last", "--sort", "test.accuracy"]);
    let first = sorted["groups"][0]["rows"][0].as_u64().unwrap() as usize;
    assert_eq!(
        sorted["rows"][first]["matrix"],
        serde_json::json!({"precision": "bf16-mixed", "strategy": "ddp"})
    );
    let unknown = project.pipe(&["compare", "last", "--sort", "rows", "--all"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("--higher train.rows"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
    let higher = json(&project, &["last", "--all", "--higher", "rows"]);
    assert!(higher["columns"]
        .as_array()
        .unwrap()
        .iter()
        .any(|column| column["name"] == "train.rows" && column["direction"] == "higher"));

    let lower = json(
        &project,
        &[
            "last",
            "--baseline-row",
            "precision=32-true,strategy=single",
            "--lower",
            "seconds",
        ],
    );
    // Every other row took less time than the baseline row.
    let verdicts: Vec<&Value> = lower["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|group| &group["cells"]["metric:train.seconds"]["verdict"])
        .filter(|verdict| !verdict.is_null())
        .collect();
    assert_eq!(verdicts, ["better"; 3], "{lower:#}");

    let bad_row = project.pipe(&["compare", "last", "--baseline-row", "precision=64-true"]);
    assert_eq!(bad_row.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_row.stderr)
        .contains("its rows: #1 (precision=32-true,strategy=single)"));
}

#[test]
fn runs_that_differ_only_in_their_seed_are_one_row_with_mean_std_and_n() {
    let project = seeds_project();
    for seed in ["1", "2", "3"] {
        project.run_ok(&["-S", &format!("seed={seed}")]);
    }
    project.run_ok(&["-S", "seed=1", "-S", "lr=0.2"]);
    let output = project.pipe(&["compare", "--md"]);
    let markdown = stdout(&output);
    insta::assert_snapshot!("compare_seeds_markdown", markdown);
    // The warning is on stderr too, for the terminal.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("warning: the data differs: stage `split` (data/split@1)"),
        "{stderr}"
    );

    let table = json(&project, &[]);
    assert_eq!(table["groups"].as_array().unwrap().len(), 2);
    let group = &table["groups"][0];
    assert_eq!(group["n"], 3);
    let accuracy = &group["cells"]["metric:train.val_acc"];
    assert!((accuracy["value"].as_f64().unwrap() - 0.82).abs() < 1e-9);
    assert!((accuracy["std"].as_f64().unwrap() - 0.01).abs() < 1e-9);
    assert_eq!(table["warnings"][0]["kind"], "data");

    let per_seed = json(&project, &["--per-seed"]);
    assert_eq!(per_seed["groups"].as_array().unwrap().len(), 4);

    let csv = stdout(&project.pipe(&["compare", "--csv"]));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0], "run,lr,seed,train.val_acc,train.val_loss",
        "{csv}"
    );
    assert_eq!(lines[1], "1,0.1,1,0.81,0.15", "{csv}");
    let every = stdout(&project.pipe(&["compare", "--csv", "--all"]));
    assert!(
        every
            .lines()
            .next()
            .unwrap()
            .contains("split.test.labels.0"),
        "{every}"
    );
    assert_eq!(lines.len(), 5, "one line per run, seeds not grouped: {csv}");
}

#[test]
fn runs_are_selected_by_pipeline_param_status_and_count() {
    let project = seeds_project();
    project.run_ok(&["-S", "seed=1"]);
    project.run_ok(&["-S", "seed=2", "-S", "lr=0.2"]);
    project.run_ok(&["-S", "seed=3", "-S", "lr=0.2"]);
    project.write("pipe.yaml", &SEEDS.replace("name: seeds", "name: other"));
    project.run_ok(&["-S", "seed=4"]);
    project.write("pipe.yaml", &SEEDS.replace("echo", "false && echo"));
    assert_eq!(project.run(&[]).code, 1);

    let runs = |table: &Value| -> Vec<i64> {
        table["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["run"].as_i64().unwrap())
            .collect()
    };
    // Runs of one pipeline by default, the newest selected run's: the
    // other pipeline's #4, and the runs of `seeds` said to be left out.
    let output = project.pipe(&["compare", "--json", "--per-seed"]);
    let table: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(runs(&table), [4]);
    let note = String::from_utf8_lossy(&output.stderr);
    assert!(
        note.contains("note: comparing runs of pipeline `other`, the newest run's; left out runs of `seeds` (#1, #2, #3)"),
        "{note}"
    );
    // Succeeded runs only by default: the failed #5 is left out.
    assert_eq!(
        runs(&json(&project, &["--per-seed", "--pipeline", "seeds"])),
        [1, 2, 3]
    );
    assert_eq!(
        runs(&json(&project, &["--per-seed", "--status", "any"])),
        [1, 2, 3, 5]
    );
    assert_eq!(
        runs(&json(&project, &["--per-seed", "--status", "failed"])),
        [5]
    );
    assert_eq!(
        runs(&json(
            &project,
            &["--per-seed", "--last", "2", "--pipeline", "seeds"]
        )),
        [2, 3]
    );
    // A pipeline named by its file.
    project.write("other.yaml", "name: other\nstages: {}\n");
    assert_eq!(
        runs(&json(&project, &["--per-seed", "--pipeline", "other.yaml"])),
        [4]
    );
    assert_eq!(
        runs(&json(&project, &["--per-seed", "--where", "lr=0.2"])),
        [2, 3]
    );
    assert_eq!(
        runs(&json(
            &project,
            &["--per-seed", "--where", "lr=0.2", "--where", "seed=3"]
        )),
        [3]
    );
    // Named runs come in the order named, whatever their status.
    assert_eq!(
        runs(&json(&project, &["--per-seed", "last", "1", "last~2"])),
        [5, 1, 3]
    );
    // The baseline is loaded even when the filters leave it out.
    let table = json(
        &project,
        &["--per-seed", "--where", "lr=0.2", "--baseline", "1"],
    );
    assert_eq!(runs(&table), [1, 2, 3]);
    assert_eq!(table["baseline"]["run"], 1);

    let unknown = project.pipe(&["compare", "1", "nosuchref"]);
    assert_eq!(
        unknown.status.code(),
        Some(2),
        "a bad selector is invalid input"
    );
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(stderr.contains("no run matches `nosuchref`"), "{stderr}");
    let nothing = project.pipe(&["compare", "--where", "lr=9"]);
    assert_eq!(nothing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&nothing.stderr).contains("no run matches the selection"));
    let bad_where = project.pipe(&["compare", "--where", "lr"]);
    assert_eq!(bad_where.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_where.stderr).contains("bad `--where lr`"));
}

#[test]
fn rows_on_other_hardware_or_precision_are_warned_about() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"
params:
  precision: 32-true
  gpu: H200
stages:
  train:
    run: >-
      echo '{"accuracy": 0.9, "precision": "${params.precision}", "devices": 1, "hardware": {"gpu": "${params.gpu}"}}' > metrics.json
    metrics: metrics.json
"#,
    );
    project.run_ok(&[]);
    // The precision changed in the file, not on purpose with `-S` (which
    // `run_choice` checks gives no warning).
    let edited = project.read("pipe.yaml").replace("32-true", "bf16-mixed");
    project.write("pipe.yaml", &edited);
    project.run_ok(&["-S", "gpu=A100"]);
    let table = json(&project, &[]);
    let messages: Vec<(&str, &str)> = table["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|warning| {
            (
                warning["kind"].as_str().unwrap(),
                warning["message"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        messages,
        [
            (
                "hardware",
                "the hardware differs: `hardware.gpu` is H200 in #1; A100 in #2"
            ),
            (
                "precision",
                "the precision differs and is not a matrix key: 32-true in #1; bf16-mixed in #2"
            ),
        ]
    );
}

#[test]
fn diff_shows_the_digits_that_tell_values_apart_and_key_metrics_first() {
    let project = TestProject::new();
    let pipeline = |loss: &str, rows: u32| {
        format!(
            "stages:\n  train:\n    run: >-\n      echo '{{\"rows\": {rows}, \"val_loss\": {loss}, \"val_acc\": 0.4196236128689813}}' > m.json\n    metrics: m.json\n"
        )
    };
    project.write("pipe.yaml", &pipeline("0.41962361", 10));
    project.run_ok(&[]);
    project.write("pipe.yaml", &pipeline("0.41962999", 12));
    project.run_ok(&[]);
    let text = stdout(&project.pipe(&["diff"]));
    let section = |text: &str, title: &str| -> Vec<String> {
        text.lines()
            .skip_while(|line| *line != title)
            .skip(1)
            .take_while(|line| !line.is_empty())
            .map(str::to_string)
            .collect()
    };
    // Key metrics lead, an unchanged one said to be; the rest is counted.
    assert_eq!(
        section(&text, "key metrics"),
        [
            "  train: val_acc    0.4196    unchanged",
            "  train: val_loss  0.41962 -> 0.41963  +6.38e-6 (+0.0015%) ▲ worse",
            "  1 other metric changed (--all lists it)",
        ],
        "{text}"
    );
    let all = stdout(&project.pipe(&["diff", "--all"]));
    assert_eq!(
        section(&all, "other metrics"),
        ["  train: rows  10 -> 12  +2 (+20%) ▲"],
        "{all}"
    );
    let json: Value = serde_json::from_str(&stdout(&project.pipe(&["diff", "--json"]))).unwrap();
    let metric = |name: &str| {
        json["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|metric| metric["metric"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {json}"))
    };
    let rows = metric("rows");
    assert_eq!(rows["direction"], "unknown");
    assert_eq!(rows["verdict"], "changed");
    assert_eq!(rows["key"], false);
    assert_eq!(metric("val_loss")["b"], 0.41962999);
    assert_eq!(metric("val_loss")["key"], true);
    assert_eq!(metric("val_acc")["verdict"], "same");
}

/// Runs of a training stage with per-epoch curves, read as one page: the
/// table, and each curve of every run overlaid, rendered in a real
/// headless Chromium that may load nothing.
#[test]
fn the_html_page_overlays_every_runs_curves_and_loads_nothing() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"
name: curves
params: { lr: 0.1 }
stages:
  train:
    run: >-
      echo "{\"val_acc\": 0.${params.lr}, \"epochs\": {
        \"1\": {\"train_loss\": 0.9, \"val_loss\": 0.8, \"val_acc\": 0.6},
        \"2\": {\"train_loss\": 0.5, \"val_loss\": 0.${params.lr}, \"val_acc\": 0.${params.lr}}}}" > m.json
    metrics: m.json
"#,
    );
    for lr in ["0.1", "0.7", "0.8"] {
        project.run_ok(&["-S", &format!("lr={}", lr.trim_start_matches("0."))]);
    }
    let page = stdout(&project.pipe(&["compare", "--html"]));
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    let file = project.path("compare.html");
    std::fs::write(&file, &page).unwrap();
    let screenshot = pipe_test_support::chromium::artefact_dir().join("compare.png");
    let rendered = pipe_test_support::chromium::render(&file, &screenshot, (1100, 3000));
    let figures = rendered.checked_figures();
    let plots: Vec<&str> = figures.iter().map(|figure| figure.plot.as_str()).collect();
    // The param that differs against the key metric, then the curves.
    assert_eq!(plots.len(), 4, "{plots:?}");
    assert!(plots[0].ends_with("-train.val-acc-by-lr.svg"), "{plots:?}");
    for figure in &figures {
        // Three runs, three lines (each with its point markers), or
        // three points.
        assert!(figure.marks >= 3, "{figure:?}");
    }
    // Every run is a row, and a line of each chart named by the run and
    // the param that differs between the rows.
    for (run, lr) in [("#1", "1"), ("#2", "7"), ("#3", "8")] {
        assert!(
            rendered.dom.contains(&format!("<td>{run}</td>")),
            "{}",
            rendered.dom
        );
        assert_eq!(
            rendered
                .dom
                .matches(&format!(">\n{run} lr={lr}\n</text>"))
                .count(),
            3,
            "{run} lr={lr} in every legend"
        );
    }
}

/// A pipeline declares which way metrics the built-in rules do not know
/// improve; diff and compare judge by it, and the command line overrides it.
#[test]
fn a_pipeline_declares_the_direction_of_its_own_metrics() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"
name: asr
params: { beam: 4 }
directions: { score.wer: lower, bleu: higher }
stages:
  score:
    run: >-
      echo "{\"wer\": 0.${params.beam}, \"bleu\": 2${params.beam}}" > m.json
    metrics: m.json
"#,
    );
    project.run_ok(&["-S", "beam=4"]);
    project.run_ok(&["-S", "beam=2"]);

    let table = json(&project, &[]);
    let direction = |name: &str| {
        table["columns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|column| column["name"] == name)
            .unwrap_or_else(|| panic!("no column {name}: {table:#}"))["direction"]
            .clone()
    };
    assert_eq!(direction("score.wer"), "lower");
    assert_eq!(direction("score.bleu"), "higher");
    // Run 2 has the lower error and the lower bleu.
    let cell =
        |metric: &str| table["groups"][1]["cells"][&format!("metric:score.{metric}")].clone();
    assert_eq!(cell("wer")["verdict"], "better", "{table:#}");
    assert_eq!(cell("bleu")["verdict"], "worse", "{table:#}");
    // Sorting needs a direction: the declared one serves.
    let sorted = json(&project, &["--sort", "wer"]);
    assert_eq!(sorted["groups"][0]["runs"], serde_json::json!([2]));
    // The command line wins.
    let flipped = json(&project, &["--higher", "wer"]);
    assert_eq!(
        flipped["groups"][1]["cells"]["metric:score.wer"]["verdict"],
        "worse"
    );
    let diff: Value = serde_json::from_str(&stdout(&project.pipe(&["diff", "--json"]))).unwrap();
    let wer = diff["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|change| change["metric"] == "wer")
        .unwrap()
        .clone();
    assert_eq!(wer["direction"], "lower", "{diff:#}");
    assert_eq!(wer["verdict"], "better", "{diff:#}");
}

#[test]
fn a_direction_that_is_neither_higher_nor_lower_is_a_located_error() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "directions: { wer: down }\nstages:\n  a: { run: echo }\n",
    );
    let output = project.pipe(&["validate"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error[bad-direction]"), "{stderr}");
    assert!(stderr.contains("pipe.yaml:1:20"), "{stderr}");
    assert!(stderr.contains("must be `higher` or `lower`"), "{stderr}");
}

/// A runs.db from before `directions:` existed keeps its history: the
/// column is added, old runs have none, new runs record theirs.
#[test]
fn a_run_database_from_before_directions_is_upgraded_in_place() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  score:\n    run: >-\n      echo '{\"wer\": 0.5}' > m.json\n    metrics: m.json\n",
    );
    project.run_ok(&[]);
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); \
             db.execute('ALTER TABLE runs DROP COLUMN directions'); \
             db.execute('PRAGMA user_version = 0'); db.commit()",
        )
        .arg(project.path(".pipe/runs.db"))
        .status()
        .unwrap();
    assert!(status.success());
    project.write(
        "pipe.yaml",
        "directions: { wer: lower }\nstages:\n  score:\n    run: >-\n      echo '{\"wer\": 0.4}' > m.json\n    metrics: m.json\n",
    );
    project.run_ok(&[]);
    let table = json(&project, &["--status", "any"]);
    assert_eq!(table["rows"].as_array().unwrap().len(), 2, "{table:#}");
    assert_eq!(
        table["groups"][1]["cells"]["metric:score.wer"]["verdict"],
        "better"
    );
}

/// A run that only restored an earlier run's result is that result again:
/// on the earlier run's line (`#1,#3`), said under the table (`same
/// result ...: #3 = #1`), counted once, never a second sample of a mean
/// nor a line that hides the first.
#[test]
fn a_run_that_restored_an_earlier_result_is_folded_into_its_line_and_said() {
    let project = TestProject::new();
    let pipeline = |lr: &str| {
        format!(
            "params:\n  lr: {lr}\nstages:\n  train:\n    run: >-\n      echo '{{\"val_acc\": '$(python3 -c 'print(0.5 + {lr})')'}}' > m.json\n    params: [lr]\n    metrics: m.json\n"
        )
    };
    project.write("pipe.yaml", &pipeline("0.1"));
    project.run_ok(&[]);
    project.write("pipe.yaml", &pipeline("0.2"));
    project.run_ok(&[]);
    project.write("pipe.yaml", &pipeline("0.1"));
    let third = project.run_ok(&[]);
    assert_eq!(third.status("train"), "restored", "{}", third.stderr);

    let text = stdout(&project.pipe(&["compare", "1", "2", "3"]));
    let lines: Vec<&str> = text.lines().filter(|line| line.starts_with('#')).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("#1,#3 "), "{text}");
    assert!(!lines[0].contains("mean of"), "{text}");
    assert!(
        text.contains(
            "\nsame result as an earlier run (restored it), shown on its line: #3 = #1\n"
        ),
        "{text}"
    );
    let table = json(&project, &["1", "2", "3"]);
    let group = &table["groups"][0];
    assert_eq!(group["n"], 1, "{table:#}");
    assert_eq!(
        group["repeats"],
        serde_json::json!([{"run": 3, "same_as": 1}])
    );
    assert_eq!(group["cells"]["metric:train.val_acc"]["value"], 0.6);
}

/// A line that is the mean over a matrix's seeds is not named by its
/// first row's seed (`#1 (seed=1)`), and the page's legends name each
/// row's seed.
#[test]
fn a_line_over_matrix_seeds_is_not_named_by_one_seed() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  train:\n    matrix: { seed: [1, 2] }\n    run: >-\n      echo '{\"val_acc\": 0.${matrix.seed}}' > m${matrix.seed}.json\n    metrics: [\"m${matrix.seed}.json\"]\n",
    );
    project.run_ok(&[]);
    let markdown = stdout(&project.pipe(&["compare", "--md"]));
    assert!(markdown.contains("Baseline: run \\#1."), "{markdown}");
    assert!(
        markdown.contains("| \\#1 (mean of 2) (baseline) |"),
        "{markdown}"
    );
    assert!(!markdown.contains("seed=1"), "{markdown}");
}

/// Runs that repeat earlier results make long labels (`#1,#3,#5 (#3 =
/// #1, #5 = #1: same result)` once took a table to 111 columns at
/// `COLUMNS=100`): the labels name the runs, the line under the table
/// says which repeat which, and no line is wider than the terminal.
#[test]
fn labels_of_repeated_runs_never_widen_the_table_past_the_terminal() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"
name: wide
key_metrics: [train.val_accuracy, train.val_loss, train.val_f1, train.test_accuracy, train.test_loss]
params: { lr: 1 }
stages:
  train:
    run: >-
      echo "{\"val_accuracy\": 0.8${params.lr}5, \"val_loss\": 0.4${params.lr}1, \"val_f1\": 0.7${params.lr}3,
        \"test_accuracy\": 0.8${params.lr}7, \"test_loss\": 0.3${params.lr}9}" > m.json
    metrics: m.json
"#,
    );
    for lr in ["1", "2", "1", "2", "1"] {
        project.run_ok(&["-S", &format!("lr={lr}")]);
    }
    let output = project
        .std_command()
        .args(["compare"])
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    let text = stdout(&output);
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}\n{text}",
            line.chars().count()
        );
    }
    let lines: Vec<&str> = text.lines().filter(|line| line.starts_with('#')).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("#1,#3,#5 "), "{text}");
    assert!(lines[1].starts_with("#2,#4 "), "{text}");
    assert!(
        !lines.iter().any(|line| line.contains("same result")),
        "{text}"
    );
    assert!(
        text.contains("shown on its line: #3 = #1, #5 = #1, #4 = #2\n"),
        "{text}"
    );
}
