//! A stage that reports on its run (`report/html@1`) through the real
//! binary: it runs after every other stage, reads their results (cache hits
//! included, with the time their results first took), is keyed on them so
//! that it is restored while they are unchanged, and its page is where
//! `pipe run` says.

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
fn a_report_runs_after_every_stage_and_is_restored_while_their_results_are_unchanged() {
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
    // Nothing of the run itself: the same results give the same page.
    assert!(!markdown.contains("- run:"), "{markdown}");
    assert!(markdown.contains("- stages: 4"), "{markdown}");
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
    let first_page = markdown;

    // After the run, everything is fresh, the report included.
    let status = project.pipe(&["status", "--json"]);
    let states: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    for state in states.as_array().unwrap() {
        assert_eq!(state["freshness"], "fresh", "{state}");
    }

    // Nothing changed: nothing runs, the report neither.
    let second = project.run(&[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(second.ran().is_empty(), "{:?}", second.stages);
    assert_eq!(second.status("report"), "fresh");

    // A changed result makes a new report; `why` says which result.
    let why = project.pipe(&["why", "report", "-S", "lr=0.2"]);
    let why = String::from_utf8_lossy(&why.stdout);
    assert!(why.contains("is stale"), "{why}");
    let third = project.run(&["-S", "lr=0.2"]);
    assert_eq!(third.code, 0, "{}", third.stderr);
    assert!(third.ran().contains(&"report"), "{:?}", third.stages);
    let markdown = project.read(".pipe/out/study/report/report/report.md");
    assert!(markdown.contains("0.2"), "{markdown}");

    // Back to the first params: every stage is restored from the cache, the
    // report too, byte for byte the first page, with the time each result
    // took when it was made.
    let fourth = project.run(&[]);
    assert_eq!(fourth.code, 0, "{}", fourth.stderr);
    assert!(fourth.ran().is_empty(), "{:?}", fourth.stages);
    assert_eq!(fourth.status("report"), "restored");
    let markdown = project.read(".pipe/out/study/report/report/report.md");
    assert_eq!(markdown, first_page);
    let compute_seconds: Vec<f64> = markdown
        .lines()
        .filter(|line| line.starts_with("| fit@width="))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // As format_seconds spells a time under a minute.
            let cell = cells[3];
            match cell.strip_suffix(" ms") {
                Some(ms) => ms.parse::<f64>().unwrap() / 1000.0,
                None => cell.trim_end_matches(" s").parse::<f64>().unwrap(),
            }
        })
        .collect();
    assert_eq!(compute_seconds.len(), 2, "{markdown}");
    assert!(
        compute_seconds.iter().all(|seconds| *seconds >= 0.2),
        "{markdown}"
    );

    // `pipe run` ends by naming the page, made or restored.
    project.write("score-8.json", "{}");
    let output = project.command().args(["run"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("report: .pipe/out/study/report/report/index.html"),
        "{stderr}"
    );
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

/// Through the real binary: the dataset stage records the names of the
/// classes it mapped, and the report's confusion matrix shows them; the
/// report's `report.md` is the one to paste (no image, no link), and
/// `report-with-images.md` shows every plot from the files beside it.
#[test]
fn the_report_names_the_classes_and_its_markdown_pastes_without_images() {
    let project = TestProject::new();
    project.write(
        "reviews.csv",
        "text,category\ngood,fresh\nbad,rotten\nfine,fresh\nawful,rotten\nmeh,plot\n",
    );
    project.write(
        "pipe.yaml",
        r#"name: labels
stages:
  dataset:
    uses: data/from-csv@1
    with:
      file: reviews.csv
      text_column: text
      label_column: category
      labels: { fresh: 1, rotten: 0 }
  evaluate:
    run: 'test -s ${stages.dataset.outs.dataset} && echo "{\"accuracy\": 0.75, \"confusion\": [[1, 1], [0, 2]]}" > m.json'
    metrics: m.json
  report:
    uses: report/html@1
"#,
    );
    let run = project.run(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let show: serde_json::Value =
        serde_json::from_slice(&project.pipe(&["show", "last", "--json"]).stdout).unwrap();
    let dataset = show["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|stage| stage["stage"] == "dataset")
        .unwrap_or_else(|| panic!("{show:#}"));
    assert_eq!(dataset["metrics"]["label_names.0"], "rotten", "{dataset:#}");
    assert_eq!(dataset["metrics"]["label_names.1"], "fresh", "{dataset:#}");

    let dir = ".pipe/out/labels/report/report";
    let pasteable = project.read(&format!("{dir}/report.md"));
    assert!(
        pasteable.contains("| true \\\\ predicted | rotten | fresh |\n| --- | ---: | ---: |\n| rotten | 1 | 1 |\n| fresh | 0 | 2 |\n"),
        "{pasteable}"
    );
    for forbidden in ["![", "](", "<img", "href"] {
        assert!(
            !pasteable.contains(forbidden),
            "{forbidden} in:\n{pasteable}"
        );
    }
    let with_images = project.read(&format!("{dir}/report-with-images.md"));
    let images: Vec<&str> = with_images
        .lines()
        .filter_map(|line| line.strip_prefix("!["))
        .filter_map(|line| line.rsplit_once("](")?.1.strip_suffix(')'))
        .collect();
    assert!(
        images.contains(&"02-evaluate-confusion.svg"),
        "{with_images}"
    );
    for image in images {
        assert!(project.exists(&format!("{dir}/{image}")), "{image}");
    }
}
