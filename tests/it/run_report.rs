//! A stage that reports on its run (`report/html@1`) through the real
//! binary: it runs after every other stage and every time, reads what the
//! run did (cache hits included, with the time their results first took),
//! and its page is where `pipe run` says.

use pipe_test_support::TestProject;

const PIPELINE: &str = r#"name: study
params: { lr: 0.1 }
stages:
  fit:
    matrix: { width: [8, 16] }
    run: 'sleep 0.2; echo "{\"acc\": 0.${matrix.width}, \"loss\": ${params.lr}}" > ${outs.m}'
    outs: { m: "fit-${matrix.width}.json" }
  score:
    matrix: { width: [8, 16] }
    run: 'cp ${stages.fit@width=${matrix.width}.outs.m} score-${matrix.width}.json'
    metrics: "score-${matrix.width}.json"
  report:
    uses: report/html@1
    with:
      title: Widths
      metrics: [score.acc, score.loss]
  publish:
    run: 'cp -r ${stages.report.outs.report} site'
    outs: [site]
"#;

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project
}

#[test]
fn a_report_runs_after_every_stage_and_every_time_and_reads_the_run() {
    let project = project();
    let first = project.run(&[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let order: Vec<&str> = first
        .events
        .iter()
        .filter(|event| event["event"] == "stage_finished")
        .filter_map(|event| event["stage"].as_str())
        .collect();
    let position = |name: &str| order.iter().position(|stage| *stage == name).unwrap();
    for stage in [
        "fit@width=8",
        "fit@width=16",
        "score@width=8",
        "score@width=16",
    ] {
        assert!(position(stage) < position("report"), "{order:?}");
    }
    assert!(position("report") < position("publish"), "{order:?}");

    let markdown = project.read(".pipe/out/study/report/report/report.md");
    assert!(markdown.contains("# Widths"), "{markdown}");
    assert!(markdown.contains("- run: 1"), "{markdown}");
    // One row per matrix combination, in the pipeline's order.
    let rows: Vec<&str> = markdown
        .lines()
        .filter(|line| line.starts_with("| 8 ") || line.starts_with("| 16 "))
        .collect();
    assert_eq!(rows.len(), 2, "{markdown}");
    assert!(
        rows[0].starts_with("| 8 ") && rows[0].contains("0.8"),
        "{markdown}"
    );
    assert!(
        rows[1].starts_with("| 16 ") && rows[1].contains("0.16"),
        "{markdown}"
    );
    assert!(project.path("site/index.html").is_file());

    // A rerun restores nothing new, but the report is a view of this run:
    // it runs again, says run 2, and the stages it lists are fresh.
    let second = project.run(&[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(second.ran(), ["publish", "report"]);
    let markdown = project.read(".pipe/out/study/report/report/report.md");
    assert!(markdown.contains("- run: 2"), "{markdown}");
    assert!(
        markdown.contains("fit@width=8 | command | fresh"),
        "{markdown}"
    );
    // A cache hit keeps the time its result took when it was made.
    let compute_seconds: Vec<f64> = markdown
        .lines()
        .filter(|line| line.starts_with("| fit@width="))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            cells[5].trim_end_matches(" s").parse::<f64>().unwrap()
        })
        .collect();
    assert_eq!(compute_seconds.len(), 2, "{markdown}");
    assert!(
        compute_seconds.iter().all(|seconds| *seconds >= 0.2),
        "{markdown}"
    );

    // `pipe run` ends by naming the page.
    let output = project.command().args(["run"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("report: .pipe/out/study/report/report/index.html"),
        "{stderr}"
    );

    // Each run's report is cached under its own key: checking out run 1
    // brings back the page that reported run 1.
    let checkout = project.pipe(&["checkout", "1"]);
    assert!(
        checkout.status.success(),
        "{}",
        String::from_utf8_lossy(&checkout.stderr)
    );
    let markdown = project.read(".pipe/out/study/report/report/report.md");
    assert!(markdown.contains("- run: 1"), "{markdown}");

    // `pipe status` says why it is never fresh.
    let status = project.pipe(&["why", "report"]);
    let why = String::from_utf8_lossy(&status.stdout);
    assert!(why.contains("it reports on the run"), "{why}");
}

#[test]
fn a_report_is_not_run_when_a_stage_fails_and_names_no_page() {
    let project = project();
    project.write(
        "pipe.yaml",
        &PIPELINE.replace("sleep 0.2;", "test ${matrix.width} = 8;"),
    );
    let run = project.run(&[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.status("fit@width=16"), "failed");
    assert_eq!(run.status("report"), "skipped");
    assert!(!project.exists(".pipe/out/study/report"));
}

#[test]
fn running_one_stage_does_not_pull_in_the_report_but_running_the_report_runs_everything() {
    let project = project();
    let one = project.run(&["fit@width=8"]);
    assert_eq!(one.code, 0, "{}", one.stderr);
    assert_eq!(one.ran(), ["fit@width=8"]);
    let report = project.run(&["report"]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    assert_eq!(
        report.ran(),
        ["fit@width=16", "report", "score@width=16", "score@width=8"]
    );
}
