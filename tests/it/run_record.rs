//! The run record, read one way: every reader (`pipe compare`, its HTML
//! page, the `report/html` stage, `pipe checkout`) takes a run's rows,
//! roles and values from the record through the real binary, and a record
//! that does not parse is an error naming where, never a default.

use pipe_test_support::TestProject;
use serde_json::Value;

use crate::reports::text as stdout;

/// `fit` has one matrix key, `score` two: each `score` row contains the
/// `fit` of its width, so the run has four rows, not six.
const NESTED: &str = r#"
name: nested
stages:
  prepare:
    run: echo rows > rows.txt
    outs: [rows.txt]
  fit:
    matrix: { width: [16, 8] }
    run: >-
      echo "{\"acc\": 0.${matrix.width}, \"epochs\": {\"1\": {\"val_loss\": 0.5}, \"2\": {\"val_loss\": 0.25}}}" > fit-${matrix.width}.json;
      cp fit-${matrix.width}.json fitm-${matrix.width}.json
    deps: [rows.txt]
    outs: { m: "fit-${matrix.width}.json" }
    metrics: "fitm-${matrix.width}.json"
  score:
    matrix: { width: [16, 8], fold: [a, b] }
    run: 'echo "{\"f1\": 0.${matrix.width}1}" > score-${matrix.width}-${matrix.fold}.json'
    deps: ["${stages.fit@width=${matrix.width}.outs.m}"]
    metrics: "score-${matrix.width}-${matrix.fold}.json"
  report:
    uses: report/html@1
    with: { title: Nested }
"#;

fn rows_of_compare(project: &TestProject) -> Vec<(String, String)> {
    let table: Value =
        serde_json::from_str(&stdout(&project.pipe(&["compare", "--json", "1"]))).unwrap();
    table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let value = |key: &str| row["matrix"][key].as_str().unwrap_or("—").to_string();
            (value("width"), value("fold"))
        })
        .collect()
}

/// The first two cells of the report's results rows (width and fold).
fn rows_of_report(project: &TestProject) -> Vec<(String, String)> {
    let markdown = project.read(".pipe/out/nested/report/report/report.md");
    markdown
        .lines()
        .filter(|line| line.starts_with("| 8 ") || line.starts_with("| 16 "))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells[1].to_string(), cells[2].to_string())
        })
        .collect()
}

#[test]
fn one_matrix_run_has_the_same_rows_in_compare_its_page_and_the_report() {
    let project = TestProject::new();
    project.write("pipe.yaml", NESTED);
    project.run_ok(&[]);
    // In the order the matrices declare their values.
    let expected: Vec<(String, String)> = [("16", "a"), ("16", "b"), ("8", "a"), ("8", "b")]
        .iter()
        .map(|(width, fold)| (width.to_string(), fold.to_string()))
        .collect();
    assert_eq!(rows_of_compare(&project), expected);
    assert_eq!(rows_of_report(&project), expected);
    let page = stdout(&project.pipe(&["compare", "--html", "1"]));
    assert!(page.contains("pipe compare: 4 rows"), "{page}");
    for (width, fold) in &expected {
        assert!(
            page.contains(&format!("width={width},fold={fold}")),
            "{page}"
        );
    }
    // Each row's curves are those of the `fit` its combination contains.
    assert!(page.contains("Validation loss per epoch of fit"), "{page}");
}

fn workers_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workers")
}

/// A command stage that declares it makes data, and a third-party
/// worker's stage whose description declares it: pipe knows neither by
/// name.
const DATA: &str = r#"
name: data
params: { words: "one two" }
stages:
  prepare:
    run: 'for word in "$WORDS"; do echo $word; done > words.txt'
    env: { WORDS: "${params.words}" }
    outs: [words.txt]
    makes_data: true
  loud:
    uses: shout@1
    with: { input: words.txt }
  score:
    run: 'echo "{\"lines\": $(wc -l < ${deps.loud})}" > score.json'
    deps: { loud: "${stages.loud.outs.loud}" }
    metrics: score.json
"#;

#[test]
fn stages_that_declare_they_make_data_are_compared_as_data_whoever_wrote_them() {
    let project = TestProject::new();
    project.write("pipe.yaml", DATA);
    let run = |words: &str| {
        let output = project
            .command()
            .args(["run", "-S", &format!("words={words}")])
            .env("PIPE_STAGE_PATH", workers_dir())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    run("one two");
    run("one two three");
    let output = project.pipe(&["compare", "--json", "1", "2"]);
    let table: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let warnings: Vec<&str> = table["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|warning| warning["kind"] == "data")
        .filter_map(|warning| warning["message"].as_str())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|message| message.contains("stage `prepare`")),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|message| message.contains("stage `loud` (shout@1)")),
        "{warnings:?}"
    );
}

fn sql(project: &TestProject, statement: &str) {
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); db.execute(sys.argv[2]); db.commit()")
        .arg(project.path(".pipe/runs.db"))
        .arg(statement)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_damaged_column_of_the_run_history_is_an_error_naming_it_never_a_default() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  make:\n    run: echo made > made.txt\n    outs: [made.txt]\n",
    );
    project.run_ok(&[]);
    // A checkout of a run whose outputs no longer parse must not restore
    // nothing and succeed.
    sql(
        &project,
        "UPDATE stage_runs SET outputs = '{\"made.txt\": ' WHERE stage = 'make'",
    );
    std::fs::remove_file(project.path("made.txt")).unwrap();
    let checkout = project.pipe(&["checkout", "1"]);
    let stderr = String::from_utf8_lossy(&checkout.stderr);
    assert_eq!(checkout.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("run #1, stage `make`: column `outputs` is damaged"),
        "{stderr}"
    );
    // A status no reader knows is no status: not `interrupted`, not
    // `skipped`.
    sql(&project, "UPDATE runs SET status = 'finished' WHERE id = 1");
    let runs = project.pipe(&["runs"]);
    let stderr = String::from_utf8_lossy(&runs.stderr);
    assert_eq!(runs.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("run #1: column `status` is damaged: `finished` is not a status"),
        "{stderr}"
    );
}

#[test]
fn where_reads_a_value_as_the_override_that_made_the_run_did() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { seed: 1 }\nstages:\n  score:\n    run: 'echo ${params.seed} > seed.txt; echo {} > m.json'\n    metrics: m.json\n",
    );
    project.run_ok(&["-S", "seed=0x10"]);
    project.run_ok(&["-S", "seed=17"]);
    let table: Value = serde_json::from_str(&stdout(&project.pipe(&[
        "compare",
        "--json",
        "--where",
        "seed=0x10",
    ])))
    .unwrap();
    let runs: Vec<i64> = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|row| row["run"].as_i64())
        .collect();
    assert_eq!(runs, [1], "{table:#}");
}

/// The `-S` settings a run was loaded with are kept as data: shown as
/// given, exported with the record, used to name the run whose outputs the
/// workspace holds; a runs.db from before has them read once from argv.
#[test]
fn the_settings_a_run_was_loaded_with_are_recorded_as_data_and_old_runs_get_theirs() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { x: 1 }\nstages:\n  s:\n    run: echo ${params.x} > o.txt\n    outs: [o.txt]\n",
    );
    project.run_ok(&["-S", "x=2", "--set=x=3"]);
    let show: serde_json::Value =
        serde_json::from_slice(&project.pipe(&["show", "--json"]).stdout).unwrap();
    assert_eq!(
        show["overrides"],
        serde_json::json!(["x=2", "x=3"]),
        "{show}"
    );
    assert_eq!(project.read("o.txt"), "3\n");

    // A database from before the column: the settings come from argv once.
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); \
             db.execute('ALTER TABLE runs DROP COLUMN overrides'); \
             db.execute('PRAGMA user_version = 2'); db.commit()",
        )
        .arg(project.path(".pipe/runs.db"))
        .status()
        .unwrap();
    assert!(status.success());
    let show: serde_json::Value =
        serde_json::from_slice(&project.pipe(&["show", "--json"]).stdout).unwrap();
    assert_eq!(
        show["overrides"],
        serde_json::json!(["x=2", "x=3"]),
        "{show}"
    );
    // `why` names the run by them when the workspace holds its outputs.
    project.run_ok(&[]);
    project.pipe(&["checkout", "1"]);
    let why = project.pipe(&["why", "s"]);
    let text = String::from_utf8_lossy(&why.stdout);
    assert!(text.contains("run #1 with -S x=2 -S x=3"), "{text}");
}

/// Settings are stored as data (a param's path, its mode, its value); a
/// run database written before holds the arguments as given, and reads
/// back the same: a plain run's as one value, a sweep's as its values.
#[test]
fn settings_stored_as_arguments_by_an_older_pipe_read_back_as_the_same_data() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { x: 1 }\nstages:\n  s:\n    run: echo ${params.x} > o-${params.x}.txt\n    outs: ['o-${params.x}.txt']\n",
    );
    project.run_ok(&["-S", "x=2"]);
    let sweep = project.pipe(&["run", "-m", "-S", "x=3,4"]);
    assert!(
        sweep.status.success(),
        "{}",
        String::from_utf8_lossy(&sweep.stderr)
    );
    let stored = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT overrides FROM runs WHERE id = 1').fetchone()[0])")
        .arg(project.path(".pipe/runs.db"))
        .output()
        .unwrap();
    let stored: Value = serde_json::from_slice(&stored.stdout).unwrap();
    assert_eq!(stored[0]["path"], serde_json::json!(["x"]), "{stored}");
    assert_eq!(stored[0]["mode"], "replace", "{stored}");

    // As a pipe that kept the arguments wrote them.
    sql(
        &project,
        "UPDATE runs SET overrides = '[\"x=2\"]' WHERE id = 1",
    );
    sql(
        &project,
        "UPDATE runs SET overrides = '[\"x=3,4\"]' WHERE id = 2",
    );
    for (run, shown) in [("1", "x=2"), ("2", "x=3,4")] {
        let show: Value =
            serde_json::from_slice(&project.pipe(&["show", run, "--json"]).stdout).unwrap();
        assert_eq!(show["overrides"], serde_json::json!([shown]), "{show}");
    }
    // The sweep loads again as the sweep: both combinations' stages.
    let status = project.pipe(&["status", "--run", "2"]);
    let text = format!(
        "{}{}",
        stdout(&status),
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(status.status.success(), "{text}");
    assert!(text.contains("as run #2: pipe.yaml -m -S x=3,4"), "{text}");
    assert!(text.contains("s@x=3") && text.contains("s@x=4"), "{text}");
}

/// A run that ran nothing and restored what an earlier run made is that
/// run's result again: `pipe runs`, `pipe show` and their JSON say whose,
/// rather than list it as if it had produced its metrics.
#[test]
fn a_run_that_only_restored_results_says_whose_they_are() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: {a: 1}\nstages:\n  prep:\n    run: echo x > prep.txt\n    outs: [prep.txt]\n  s:\n    run: 'cat prep.txt > /dev/null && echo \"{\\\"acc\\\": ${params.a}}\" > m.json'\n    deps: [prep.txt]\n    metrics: m.json\n",
    );
    project.run_ok(&[]);
    project.run_ok(&["-S", "a=2"]);
    project.run_ok(&[]);
    let runs = stdout(&project.pipe(&["runs"]));
    let line = |run: &str| {
        runs.lines()
            .find(|line| line.trim_start().starts_with(run))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("#3").contains("restored #1"), "{runs}");
    // #2 ran `s` and found `prep` in place: it made its own result.
    assert!(line("#2").contains("succeeded"), "{runs}");
    assert!(line("#1").contains("succeeded"), "{runs}");
    let show = stdout(&project.pipe(&["show", "3"]));
    assert!(
        show.contains("restored the results of run #1: nothing ran"),
        "{show}"
    );
    assert!(
        show.lines()
            .any(|line| line.trim_start().starts_with("s ") && line.ends_with("from #1")),
        "{show}"
    );
    let shown: Value =
        serde_json::from_str(&stdout(&project.pipe(&["show", "3", "--json"]))).unwrap();
    assert_eq!(shown["restored_from"], serde_json::json!([1]));
    assert_eq!(shown["id"], 3);
    let listed: Value = serde_json::from_str(&stdout(&project.pipe(&["runs", "--json"]))).unwrap();
    assert_eq!(listed[0]["restored_from"], serde_json::json!([1]));
    assert!(listed[1].get("restored_from").is_none(), "{listed}");

    // The other value restored too: from #2, not #1.
    project.run_ok(&["-S", "a=2"]);
    let runs = stdout(&project.pipe(&["runs"]));
    assert!(
        runs.lines()
            .find(|line| line.trim_start().starts_with("#4"))
            .is_some_and(|line| line.contains("restored #2")),
        "{runs}"
    );
}

#[test]
fn a_record_keeps_the_command_as_typed_not_where_pipe_is_installed() {
    // The tests run `pipe` by its absolute path in the target directory,
    // as a shell does for `pipe` on the PATH.
    let remote = tempfile::tempdir().unwrap();
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  a:\n    run: echo a > a.txt\n    outs: [a.txt]\n",
    );
    let url = format!("file://{}", remote.path().display());
    let ran = project.run_with_env(&[("PIPE_REMOTE".to_string(), url)], &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let installed = assert_cmd::cargo::cargo_bin("pipe");
    let installed = installed.parent().unwrap().to_str().unwrap();
    let record = project.show_settled("last");
    assert_eq!(record["argv"][0], "pipe", "{record}");
    assert_eq!(record["argv"][1], "run", "{record}");
    assert!(!record.to_string().contains(installed), "{record}");
    // Nor does the record the remote keeps name it.
    let runs = remote.path().join("runs");
    let pushed: Vec<String> = walk(&runs)
        .iter()
        .map(|path| std::fs::read_to_string(path).unwrap())
        .collect();
    assert_eq!(pushed.len(), 1, "{runs:?}");
    assert!(pushed[0].contains("\"pipe\""), "{}", pushed[0]);
    assert!(!pushed[0].contains(installed), "{}", pushed[0]);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.file_type().unwrap().is_dir() {
            files.extend(walk(&entry.path()));
        } else {
            files.push(entry.path());
        }
    }
    files
}
