//! A record never points at another run's files: `pipe show RUN` says,
//! for each output path it names, whether the workspace holds that run's
//! result there, and whose it holds when not; `pipe show RUN --open`
//! brings the run's own report (or an output) out of the cache into a
//! view of that run, never touching the workspace.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use pipe_test_support::TestProject;
use serde_json::Value;

use crate::reports::text as stdout;

const PIPELINE: &str = r#"
name: rf
params: { n: 1 }
stages:
  make:
    run: >-
      mkdir -p out && echo "n=${params.n}" > out/value.txt &&
      echo "{\"acc\": ${params.n}}" > m.json
    outs: [out]
    metrics: [m.json]
  report:
    uses: report/html@1
"#;

const REPORT: &str = ".pipe/out/rf/report/report";

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project.run_ok(&["-S", "n=1"]);
    project.run_ok(&["-S", "n=2"]);
    project
}

#[test]
fn show_says_when_the_workspace_holds_another_runs_files_and_open_brings_back_the_runs_own() {
    let project = project();
    let hint = "`pipe show 1 --open` or `pipe checkout 1`";
    let first = stdout(&project.pipe(&["show", "1"]));
    assert!(
        first.contains(&format!(
            "report   {REPORT}/index.html (the workspace holds run #2's: {hint})"
        )),
        "{first}"
    );
    assert!(
        first.contains(&format!(
            "workspace holds 0 of its 3 outputs: 3 are run #2's ({hint})"
        )),
        "{first}"
    );
    let second = stdout(&project.pipe(&["show", "2"]));
    assert!(
        second.contains("workspace holds this run's outputs")
            && second.contains(&format!(
                "report   {REPORT}/index.html (report.md beside it)"
            )),
        "{second}"
    );

    // The same as JSON: each output, and whether the workspace holds it.
    let record: Value =
        serde_json::from_slice(&project.pipe(&["show", "1", "--json"]).stdout).unwrap();
    let outputs = record["outputs_in_workspace"].as_array().expect("a list");
    assert_eq!(outputs.len(), 3, "{record}");
    let out = outputs
        .iter()
        .find(|output| output["path"] == "out")
        .expect("out");
    assert_eq!(
        out,
        &serde_json::json!({"stage": "make", "path": "out", "holds": false, "state": "another_run", "run": 2})
    );
    let record: Value =
        serde_json::from_slice(&project.pipe(&["show", "2", "--json"]).stdout).unwrap();
    assert!(
        record["outputs_in_workspace"]
            .as_array()
            .unwrap()
            .iter()
            .all(|output| output["holds"] == true && output["state"] == "this_run"),
        "{record}"
    );

    // --open: run #1's own report, from the cache, in its view.
    let workspace_report = project.read(&format!("{REPORT}/report.md"));
    let opened = project.pipe(&["show", "1", "--open"]);
    let path = stdout(&opened).trim().to_string();
    assert_eq!(path, format!(".pipe/view/1/{REPORT}/index.html"));
    assert!(
        stderr(&opened).contains("read-only copies from the cache (the workspace is not touched)"),
        "{}",
        stderr(&opened)
    );
    let view = project.read(&format!(".pipe/view/1/{REPORT}/report.md"));
    assert!(view.contains("| n | 1 |"), "{view}");
    assert!(workspace_report.contains("| n | 2 |"), "{workspace_report}");
    assert_eq!(
        project.read(&format!("{REPORT}/report.md")),
        workspace_report,
        "the workspace is not touched"
    );
    let mode = std::fs::metadata(project.path(&path))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o222, 0, "a view is read-only: {mode:o}");
    // An output by name, or a file inside one.
    let value = stdout(&project.pipe(&["show", "1", "--open=out/value.txt"]));
    assert_eq!(value.trim(), ".pipe/view/1/out/value.txt");
    assert_eq!(project.read(".pipe/view/1/out/value.txt"), "n=1\n");
    assert_eq!(project.read("out/value.txt"), "n=2\n");
    let unknown = project.pipe(&["show", "1", "--open=nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("run #1 has no output `nope`")
            && stderr(&unknown).contains("`--open=PATH` (.pipe/out/rf/report/report, m.json, out)"),
        "{}",
        stderr(&unknown)
    );

    // Changed and missing files are said to be.
    std::fs::remove_dir_all(project.path("out")).unwrap();
    project.write("m.json", "{\"acc\": 9}\n");
    let second = stdout(&project.pipe(&["show", "2"]));
    assert!(
        second.contains("workspace holds 1 of its 3 outputs: 1 is changed, 1 is missing"),
        "{second}"
    );
}

/// With `$BROWSER` set, `--open` opens the page with it; without it or a
/// display, it only prints the path (as in every other test).
#[test]
fn open_hands_the_page_to_the_browser_when_one_is_set() {
    let project = project();
    project.write(
        "browser.sh",
        // Written aside and renamed: the test may look between `>`
        // creating the file and printf filling it.
        "#!/bin/sh\nprintf '%s' \"$1\" > \"$(dirname \"$0\")/opening.txt\" && mv \"$(dirname \"$0\")/opening.txt\" \"$(dirname \"$0\")/opened.txt\"\n",
    );
    let script = project.path("browser.sh");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let opened = project
        .command()
        .env("BROWSER", &script)
        .args(["show", "1", "--open"])
        .output()
        .unwrap();
    assert!(opened.status.success(), "{}", stderr(&opened));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !project.exists("opened.txt") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let handed = project.read("opened.txt");
    assert!(
        handed.ends_with(&format!(".pipe/view/1/{REPORT}/index.html")),
        "{handed}"
    );
}

/// `pipe show` of a sweep run lists its own combinations, each with its
/// values and key metrics, and says which params it swept; a run of a
/// sweep whose combinations ran apart says which combination it is.
#[test]
fn show_of_a_sweep_lists_its_combinations_and_a_run_of_one_says_which() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"
params: { lr: 1, seed: 1 }
stages:
  train:
    run: >-
      echo "{\"acc\": $(( ${params.lr} * 10 + ${params.seed} ))}" > m-${params.lr}-${params.seed}.json
    metrics: ["m-${params.lr}-${params.seed}.json"]
"#,
    );
    let sweep = project.pipe(&["run", "-m", "-S", "lr=1,2", "-S", "seed=1,2"]);
    assert!(sweep.status.success(), "{}", stderr(&sweep));
    let show = stdout(&project.pipe(&["show", "1"]));
    let table: Vec<&str> = show
        .lines()
        .skip_while(|line| !line.starts_with("combinations"))
        .take(6)
        .collect();
    assert_eq!(
        table,
        [
            "combinations  4 (`pipe compare 1` compares them)",
            "  lr  seed  train: acc",
            "  1   1     11",
            "  1   2     12",
            "  2   1     21",
            "  2   2     22",
        ],
        "{show}"
    );
    assert!(
        show.contains("  lr    [1,2]  (swept: one value per combination)"),
        "{show}"
    );

    // `a b` cannot be part of a stage name: one run per combination.
    let apart = project.pipe(&[
        "run",
        "-m",
        "-S",
        "lr=3",
        "-S",
        "+tag=a b,c d",
        "--force-all",
    ]);
    assert!(apart.status.success(), "{}", stderr(&apart));
    let show = stdout(&project.pipe(&["show", "last"]));
    assert!(
        show.contains("         one combination of that sweep: -S lr=3 -S +tag=c d"),
        "{show}"
    );
    assert!(!show.contains("combinations  "), "{show}");
}

/// A sweep whose combinations write one path runs each in a work tree of
/// its own: the workspace can hold one combination's output at a time,
/// and `show` says whose it holds and how to see or bring back another's.
#[test]
fn show_of_a_sweep_in_work_trees_names_the_combination_the_workspace_holds() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { n: 1 }\nstages:\n  train:\n    run: echo \"model ${params.n}\" > model.txt\n    outs: [model.txt]\n",
    );
    project.run_ok(&[]);
    let sweep = project.pipe(&["run", "-m", "-S", "n=2,3"]);
    assert!(
        stderr(&sweep).contains("each in a work tree of its own"),
        "{}",
        stderr(&sweep)
    );
    let how = "one combination's at a time: `pipe show 2 --open=train@n=2:model.txt` or `pipe apply 2 --row n=2`";
    let show = stdout(&project.pipe(&["show", "2"]));
    assert!(
        show.contains(&format!(
            "workspace holds 0 of its 2 outputs: 2 are run #1's ({how})"
        )),
        "{show}"
    );
    let opened = stdout(&project.pipe(&["show", "2", "--open=train@n=3:model.txt"]));
    assert_eq!(opened.trim(), ".pipe/view/2/train@n=3/model.txt");
    assert_eq!(
        project.read(".pipe/view/2/train@n=3/model.txt"),
        "model 3\n"
    );
    assert_eq!(
        project.read("model.txt"),
        "model 1\n",
        "the workspace is not touched"
    );

    let applied = project.pipe(&["apply", "2", "--row", "n=3"]);
    assert!(applied.status.success(), "{}", stderr(&applied));
    let show = stdout(&project.pipe(&["show", "2"]));
    assert!(
        show.contains(&format!(
            "workspace holds 1 of its 2 outputs: 1 is its train@n=3's ({how})"
        )),
        "{show}"
    );
}
