//! Snapshots of what users read: status, why, diff, dag, show, runs.
//! Digests, timings, dates and temp paths are filtered out.

use pipe_test_support::TestProject;

const PIPELINE: &str = r#"
name: report
params:
  lr: 0.1
  epochs: 2
stages:
  prepare:
    run: sort input.txt > prepared.txt
    deps: { input: input.txt }
    outs: { data: prepared.txt }
  train:
    run: >-
      echo "lr=${params.lr}" > model.txt &&
      echo '{"val": {"accuracy": 0.5, "loss": 1.25}, "epochs": ${params.epochs}}' > metrics.json
    deps: { data: "${stages.prepare.outs.data}" }
    outs: { model: model.txt }
    metrics: metrics.json
  evaluate:
    run: wc -c < model.txt > score.txt
    deps: { model: "${stages.train.outs.model}" }
    outs: [score.txt]
"#;

/// The stdout of a command that must have succeeded.
pub(crate) fn text(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "command failed ({:?}):\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).to_string()
}

fn settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(r"[0-9a-f]{12}…", "[digest]…");
    settings.add_filter(r"\b[0-9a-f]{64}\b", "[digest]");
    settings.add_filter(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", "[date]");
    // `pipe runs`: to the minute, without the year.
    settings.add_filter(r"\b\d{2}-\d{2} \d{2}:\d{2}\b", "[date]");
    // A run's uid, whole (`pipe show`) and as listed.
    settings.add_filter(r"\b[0-9a-f]{20}\b", "[uid]");
    settings.add_filter(r"(?m)^(#\d+ +)[0-9a-f]{8}\b", "$1[uid]");
    // Padding depends on how wide the time was, so it goes too.
    settings.add_filter(r" *\b\d+(\.\d+)? (ms|s)\b", " [time]");
    // The header's `took` is right-aligned to the widest time.
    settings.add_filter(r"status +took", "status  took");
    settings.add_filter(r"`[0-9a-f]{12}`", "`[digest]`");
    settings.add_filter(r"\| [0-9a-f]{12} ", "| [digest] ");
    settings.add_filter(r"(?m)^command  .*", "command  [argv]");
    settings
}

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project.write("input.txt", "b\na\n");
    project
}

#[test]
fn status_before_and_after_runs() {
    let project = project();
    let settings = settings();
    settings.bind(|| {
        insta::assert_snapshot!("status_never_run", text(&project.pipe(&["status"])));
        project.run_ok(&[]);
        insta::assert_snapshot!("status_all_fresh", text(&project.pipe(&["status"])));
        project.write("input.txt", "c\nb\na\n");
        std::fs::remove_file(project.path("score.txt")).unwrap();
        insta::assert_snapshot!("status_after_edit", text(&project.pipe(&["status"])));
    });
}

#[test]
fn why_lists_the_changed_key_fields() {
    let project = project();
    project.run_ok(&[]);
    let settings = settings();
    settings.bind(|| {
        insta::assert_snapshot!("why_fresh", text(&project.pipe(&["why", "train"])));
        project.write("input.txt", "z\n");
        project.write("pipe.yaml", &PIPELINE.replace("lr: 0.1", "lr: 0.01"));
        insta::assert_snapshot!("why_stale", text(&project.pipe(&["why", "train"])));
    });
}

#[test]
fn diff_of_two_runs_in_text_markdown_and_json() {
    let project = project();
    project.run_ok(&[]);
    project.write(
        "pipe.yaml",
        &PIPELINE
            .replace("lr: 0.1", "lr: 0.01")
            .replace("\"accuracy\": 0.5", "\"accuracy\": 0.75"),
    );
    project.run_ok(&[]);
    let settings = settings();
    settings.bind(|| {
        insta::assert_snapshot!("diff_text", text(&project.pipe(&["diff"])));
        insta::assert_snapshot!(
            "diff_markdown",
            text(&project.pipe(&["diff", "last~1", "last", "--md"]))
        );
    });
    let json: serde_json::Value =
        serde_json::from_str(&text(&project.pipe(&["diff", "1", "2", "--json"]))).unwrap();
    let delta = json["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "val.accuracy")
        .unwrap();
    assert_eq!(delta["delta"], 0.25);
    assert_eq!(delta["relative"], 0.5);
    assert_eq!(delta["direction"], "higher");
    assert_eq!(delta["verdict"], "better");
    assert_eq!(json["params"][0]["field"], "lr");
    let stages: Vec<&str> = json["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["evaluate", "train"]);
}

#[test]
fn dag_in_three_formats() {
    let project = project();
    let settings = settings();
    settings.bind(|| {
        insta::assert_snapshot!("dag_ascii", text(&project.pipe(&["dag"])));
        insta::assert_snapshot!("dag_dot", text(&project.pipe(&["dag", "--format", "dot"])));
        insta::assert_snapshot!(
            "dag_mermaid",
            text(&project.pipe(&["dag", "--format", "mermaid"]))
        );
    });
}

#[test]
fn runs_and_show() {
    let project = project();
    project.run_ok(&[]);
    project.run_ok(&["-S", "epochs=3"]);
    let settings = settings();
    settings.bind(|| {
        insta::assert_snapshot!("runs_table", text(&project.pipe(&["runs"])));
        insta::assert_snapshot!("show_last", text(&project.pipe(&["show", "last"])));
    });
    let runs: serde_json::Value =
        serde_json::from_str(&text(&project.pipe(&["runs", "--json"]))).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2);
}

#[test]
fn runs_are_found_by_git_ref() {
    let project = project();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(project.root())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .unwrap();
        assert!(
            status.status.success(),
            "{}",
            String::from_utf8_lossy(&status.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["add", "pipe.yaml", "input.txt"]);
    git(&["commit", "-qm", "one"]);
    git(&["tag", "baseline"]);
    project.run_ok(&[]);
    project.write("pipe.yaml", &PIPELINE.replace("lr: 0.1", "lr: 0.2"));
    git(&["commit", "-qam", "two"]);
    project.run_ok(&[]);
    let show = project.show_settled("baseline");
    assert_eq!(show["id"], 1);
    assert_eq!(show["git_dirty"], false);
    let diff = text(&project.pipe(&["diff", "baseline", "HEAD"]));
    assert!(diff.contains("lr") && diff.contains("0.1 -> 0.2"), "{diff}");
}

#[test]
fn dry_run_changes_nothing() {
    let project = project();
    let settings = settings();
    settings.bind(|| {
        insta::assert_snapshot!("dry_run", text(&project.pipe(&["run", "--dry-run"])));
    });
    assert!(!project.exists("prepared.txt"));
}

/// What the terminal reporter writes on stderr for a run, line by line,
/// as cargo-nextest snapshots its displayer: stderr is not a terminal
/// here, so these are the plain lines a CI log gets.
fn run_lines(project: &TestProject) -> String {
    let output = project.pipe(&["run"]);
    String::from_utf8_lossy(&output.stderr).to_string()
}

#[test]
fn the_terminal_reporters_lines_for_a_run_a_no_op_an_edit_and_a_failure() {
    let project = project();
    let mut settings = settings();
    settings.add_filter(r"\(\s*\[time\]\)", "([time])");
    settings.bind(|| {
        insta::assert_snapshot!("run_lines_first", run_lines(&project));
        insta::assert_snapshot!("run_lines_no_op", run_lines(&project));
        project.write("input.txt", "c\nb\na\n");
        insta::assert_snapshot!("run_lines_after_edit", run_lines(&project));
        project.write(
            "pipe.yaml",
            &PIPELINE.replace("wc -c < model.txt > score.txt", "echo boom >&2; exit 3"),
        );
        insta::assert_snapshot!("run_lines_failed", run_lines(&project));
    });
}
