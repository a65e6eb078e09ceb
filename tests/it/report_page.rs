//! The `report/html` page of a run, through the real binary: how its
//! results table lays out in a laptop's window (Chromium), and how it
//! spells a number that names stages.

use pipe_test_support::{chromium, TestProject};

/// The speed study's shape (pipelines/speed-study.yaml): a matrix of
/// precisions by setups, and the report's six metric columns and speed-up,
/// with values as long as a real run's.
const SPEED_STUDY: &str = r#"name: speed-study
params:
  precisions: [32-true, bf16-mixed, 16-mixed]
  setups: [single, ddp2, zero2-4, fsdp4]
stages:
  train:
    matrix: { precision: "${params.precisions}", setup: "${params.setups}" }
    run: >-
      echo "{\"train_seconds\": 4821.5, \"samples_per_s\": 123.456, \"val_acc\": 0.91321,
      \"throughput\": {\"mfu\": 0.41234}, \"memory\": {\"optimizer_bytes\": 1567890123}}" > t-${matrix.precision}-${matrix.setup}.json
    metrics: t-${matrix.precision}-${matrix.setup}.json
  evaluate:
    matrix: { precision: "${params.precisions}", setup: "${params.setups}" }
    run: 'echo "{\"accuracy\": 0.91234}" > e-${matrix.precision}-${matrix.setup}.json'
    metrics: e-${matrix.precision}-${matrix.setup}.json
  report:
    uses: report/html@1
    with:
      title: Mixed precision and data parallelism, DistilBERT on IMDB
      metrics: [train.train_seconds, evaluate.accuracy, train.samples_per_s, train.throughput.mfu, train.memory.optimizer_bytes, train.val_acc]
      speedup: train.train_seconds
"#;

/// At 1280 px, a laptop's window, the results table fits the page: every
/// column shows, MFU and the speed-up included, with nothing to scroll.
#[test]
fn the_results_table_of_a_speed_study_fits_a_1280_px_window() {
    let project = TestProject::new();
    project.write("pipe.yaml", SPEED_STUDY);
    let run = project.run(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let page = project.path(".pipe/out/speed-study/report/report/index.html");
    let rendered = chromium::render(
        &page,
        &chromium::artefact_dir().join("report-1280.png"),
        (1280, 3000),
    );
    rendered.checked_figures();
    let widths = rendered.table_widths();
    assert!(widths.len() >= 3, "results, params, stages: {widths:?}");
    for (table, shows) in &widths {
        assert!(
            table <= shows,
            "a table {table} px wide in a box of {shows}: {widths:?}"
        );
    }
    // The results table (the first) has its last columns on the page.
    let results = rendered.dom.split("<h2>Results</h2>").nth(1).unwrap();
    let results = results.split("</table>").next().unwrap();
    for header in ["mfu", "speed-up"] {
        assert!(results.contains(&format!("{header}</th>")), "{results}");
    }
    // Values stay whole: `bf16-mixed` is not broken at its hyphen.
    assert!(results.contains("<td>bf16-mixed</td>"), "{results}");
}

/// A matrix over lr written `1.0e-4` names its stages `train@lr=1.0e-4`:
/// the params table writes that number the same way, in the list the
/// matrix comes from and wherever a param has that value, and leaves a
/// number no matrix names as it was.
#[test]
fn the_report_spells_a_number_as_the_stage_names_do() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"name: lrs
params: { lrs: [1.0e-4, 3.0e-4], train: { lr: 1.0e-4, warmup: 0.0625 } }
stages:
  train:
    matrix: { lr: "${params.lrs}" }
    run: 'echo "{\"acc\": 0.5}" > m-${matrix.lr}.json'
    metrics: m-${matrix.lr}.json
  report:
    uses: report/html@1
"#,
    );
    let run = project.run(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let dir = ".pipe/out/lrs/report/report";
    let markdown = project.read(&format!("{dir}/report.md"));
    assert!(markdown.contains("| train@lr=1.0e-4 |"), "{markdown}");
    assert!(markdown.contains("| 1.0e-4 | 0.5 |"), "{markdown}");
    assert!(
        markdown.contains("| lrs | \\[1.0e-4,3.0e-4\\] |"),
        "{markdown}"
    );
    assert!(markdown.contains("| train.lr | 1.0e-4 |"), "{markdown}");
    assert!(markdown.contains("| train.warmup | 0.0625 |"), "{markdown}");
    let html = project.read(&format!("{dir}/index.html"));
    for page in [&markdown, &html] {
        assert!(
            !page.contains("0.0001") && !page.contains("0.0003"),
            "{page}"
        );
    }
}
