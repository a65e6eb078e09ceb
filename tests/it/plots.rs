//! Plots a user declares of their own files (`plots:`), through the real
//! binary, in a project of the shape a DVC user brings: an evaluation
//! script (Python, standard library only) that writes a ROC curve as CSV,
//! a precision-recall curve as DVC's JSON object, the labels of each
//! sample for a confusion matrix, and a log per epoch as TSV. The run's
//! report draws each from the file's content; `pipe compare --html`
//! overlays the runs, each read from the cache by its recorded digest;
//! `pipe show` names them; a mistake in a spec is a located error.

use pipe_test_support::{chromium, TestProject};
use serde_json::Value;

/// Scores a classifier would give 200 samples, `noise` apart from their
/// labels: a smaller noise gives a better ROC curve.
const EVALUATE: &str = r#"import json, os, random, sys

noise = float(sys.argv[1])
rng = random.Random(7)
labels = [i % 2 for i in range(200)]
scores = [0.5 + (0.25 if y else -0.25) + rng.uniform(-1, 1) * noise for y in labels]
os.makedirs("eval/plots", exist_ok=True)
thresholds = sorted(set(scores), reverse=True)
positives = sum(labels)
negatives = len(labels) - positives
with open("eval/plots/roc.csv", "w") as roc:
    roc.write("fpr,tpr,threshold\n0,0,1.5\n")
    records = []
    for t in thresholds:
        tp = sum(1 for s, y in zip(scores, labels) if s >= t and y)
        fp = sum(1 for s, y in zip(scores, labels) if s >= t and not y)
        roc.write(f"{fp / negatives},{tp / positives},{t}\n")
        records.append({"precision": tp / (tp + fp), "recall": tp / positives, "threshold": t})
with open("eval/plots/prc.json", "w") as prc:
    json.dump({"prc": records}, prc)
with open("eval/plots/confusion.csv", "w") as confusion:
    confusion.write("actual,predicted\n")
    for s, y in zip(scores, labels):
        confusion.write(f"{y},{int(s >= 0.5)}\n")
with open("eval/log.tsv", "w") as log:
    log.write("epoch\tloss\taccuracy\n")
    for epoch in range(1, 6):
        log.write(f"{epoch}\t{1 / epoch + noise}\t{1 - noise / epoch}\n")
accuracy = sum(1 for s, y in zip(scores, labels) if int(s >= 0.5) == y) / len(labels)
with open("eval/metrics.json", "w") as metrics:
    json.dump({"accuracy": accuracy}, metrics)
"#;

/// DVC's stage-level forms: a path with `x`/`y`, `template:`, `cache:`.
const PIPELINE: &str = r#"name: dvc-shape
params: { noise: 0.2 }
stages:
  evaluate:
    run: python3 evaluate.py ${params.noise}
    deps: [evaluate.py]
    metrics: eval/metrics.json
    plots:
      - eval/plots/roc.csv:
          x: fpr
          y: tpr
          title: ROC
      - eval/plots/prc.json:
          cache: false
          template: linear
          x: recall
          y: precision
      - eval/plots/confusion.csv:
          template: confusion
          x: actual
          y: predicted
      - eval/log.tsv
  report:
    uses: report/html@1
"#;

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("evaluate.py", EVALUATE);
    project.write("pipe.yaml", PIPELINE);
    project
}

fn stdout(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// The `<polyline>`s of a figure's series (not its legend's).
fn series_lines(svg: &str) -> Vec<&str> {
    svg.split("<g class=\"series\"")
        .skip(1)
        .filter_map(|group| group.split("</g>").next())
        .filter(|group| group.contains("<polyline"))
        .collect()
}

fn figure<'a>(figures: &'a [chromium::Figure], name: &str) -> &'a chromium::Figure {
    figures
        .iter()
        .find(|figure| figure.plot.contains(name))
        .unwrap_or_else(|| {
            let names: Vec<&str> = figures.iter().map(|f| f.plot.as_str()).collect();
            panic!("no plot `{name}` among {names:?}")
        })
}

#[test]
fn a_plot_shows_the_stored_bytes_of_its_file_in_the_report_compare_and_show() {
    let project = project();
    project.run_ok(&["-S", "noise=0.2"]);
    let second = project.run_ok(&["-S", "noise=0.6"]);
    assert_eq!(second.status("report"), "ran", "{}", second.stderr);

    // The run's report: the ROC and PR curves, the confusion matrix and
    // the log, drawn from the files this run wrote.
    let page = project.path(".pipe/out/dvc-shape/report/report/index.html");
    let rendered = chromium::render(
        &page,
        &chromium::artefact_dir().join("plots-report.png"),
        (1100, 5000),
    );
    let figures = rendered.checked_figures();
    let roc = figure(&figures, "eval-plots-roc.csv");
    assert_eq!(series_lines(&roc.svg).len(), 1, "{}", roc.svg);
    assert!(
        roc.texts().contains(&"ROC".to_string()),
        "{:?}",
        roc.texts()
    );
    let prc = figure(&figures, "eval-plots-prc.json");
    assert_eq!(series_lines(&prc.svg).len(), 1, "{}", prc.svg);
    let confusion = figure(&figures, "eval-plots-confusion.csv");
    assert!(confusion.svg.contains("heat-map"), "{}", confusion.svg);
    let log = figure(&figures, "eval-log.tsv");
    assert_eq!(
        series_lines(&log.svg).len(),
        2,
        "loss and accuracy per epoch"
    );
    let markdown = project.read(".pipe/out/dvc-shape/report/report/report.md");
    assert!(markdown.contains("actual \\\\ predicted"), "{markdown}");

    // `pipe compare --html`: one ROC curve per run, each run's own data
    // from the cache though the workspace holds only the last run's.
    let html = stdout(&project.pipe(&["compare", "--html"]));
    let file = project.path("compare.html");
    std::fs::write(&file, &html).unwrap();
    let rendered = chromium::render(
        &file,
        &chromium::artefact_dir().join("plots-compare.png"),
        (1100, 6000),
    );
    let figures = rendered.checked_figures();
    let roc = figure(&figures, "evaluate-eval-plots-roc.csv");
    let lines = series_lines(&roc.svg);
    assert_eq!(lines.len(), 2, "{}", roc.svg);
    assert_ne!(
        lines[0].split("points=").nth(1),
        lines[1].split("points=").nth(1)
    );
    let legend = roc.texts().join(" | ");
    assert!(
        legend.contains("noise=0.2") && legend.contains("noise=0.6"),
        "{legend}"
    );
    assert!(roc.svg.contains("data-key=\"1\"") && roc.svg.contains("data-key=\"2\""));
    // A confusion matrix per run.
    let matrices = figures
        .iter()
        .filter(|figure| figure.plot.contains("confusion.csv"))
        .count();
    assert_eq!(matrices, 2);

    // `pipe show` names the plots, and `--json` has their specs.
    let shown = stdout(&project.pipe(&["show", "last"]));
    assert!(
        shown.contains("eval/plots/roc.csv") && shown.contains("line x=fpr y=tpr"),
        "{shown}"
    );
    assert!(shown.contains("confusion x=actual y=predicted"), "{shown}");
    assert!(shown.contains("eval/log.tsv") && shown.contains("line x=auto y=auto"));
    let json: Value =
        serde_json::from_str(&stdout(&project.pipe(&["show", "last", "--json"]))).unwrap();
    let evaluate = json["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|stage| stage["stage"] == "evaluate")
        .unwrap();
    assert_eq!(evaluate["plots"][1]["path"], "eval/plots/prc.json");
    assert_eq!(evaluate["plots"][1]["kind"], "line");
    assert_eq!(evaluate["plots"][2]["kind"], "confusion");
}

/// The plot files are outputs: restored with their stage, and the report
/// keyed on their digests and on the specs, so a changed spec makes a new
/// report and reruns nothing else.
#[test]
fn a_changed_plot_spec_makes_a_new_report_and_reruns_nothing_else() {
    let project = project();
    project.run_ok(&[]);
    std::fs::remove_dir_all(project.path("eval")).unwrap();
    let restored = project.run_ok(&[]);
    assert_eq!(
        restored.status("evaluate"),
        "restored",
        "{}",
        restored.stderr
    );
    assert!(project.read("eval/plots/roc.csv").starts_with("fpr,tpr"));
    project.write(
        "pipe.yaml",
        &PIPELINE.replace("title: ROC", "title: ROC curve"),
    );
    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.ran(), ["report"], "{}", rerun.stderr);
    let html = project.read(".pipe/out/dvc-shape/report/report/index.html");
    assert!(html.contains("ROC curve"));
}

#[test]
fn a_run_whose_plot_object_is_gone_is_named_on_the_compare_page_and_the_others_drawn() {
    let project = project();
    let first = project.run_ok(&["-S", "noise=0.2"]);
    project.run_ok(&["-S", "noise=0.6"]);
    let record: Value = serde_json::from_str(&stdout(&project.pipe(&[
        "show",
        &first.run_id().to_string(),
        "--json",
    ])))
    .unwrap();
    let evaluate = record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|stage| stage["stage"] == "evaluate")
        .unwrap();
    let digest = evaluate["outputs"]["eval/plots/roc.csv"]["digest"]
        .as_str()
        .unwrap();
    std::fs::remove_file(project.path(&format!(
        ".pipe/cache/objects/{}/{}",
        &digest[..2],
        &digest[2..]
    )))
    .unwrap();
    let html = stdout(&project.pipe(&["compare", "--html"]));
    assert!(
        html.contains(&format!("#{} evaluate:", first.run_id())) && html.contains("missing"),
        "{html}"
    );
    let roc = html
        .split("data-plot=\"")
        .find(|plot| plot.contains("roc.csv"))
        .expect("the other run's ROC curve is drawn");
    assert_eq!(
        series_lines(roc.split("</figure>").next().unwrap()).len(),
        1
    );
}

/// The expansions of a matrix stage write a file each; a `path:` item
/// names them through the matrix, and the compare page draws them as one
/// plot, a line per expansion.
#[test]
fn a_matrix_stages_plots_overlay_as_one_plot_across_its_expansions() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"name: models
stages:
  evaluate:
    matrix: { model: [svm, tree] }
    run: >-
      mkdir -p eval/${matrix.model} &&
      printf 'fpr,tpr\n0,0\n0.3,0.${matrix.model}\n1,1\n' | sed 's/svm/8/; s/tree/6/' > eval/${matrix.model}/roc.csv &&
      echo '{"auc": 0.8}' > eval/${matrix.model}/metrics.json
    metrics: eval/${matrix.model}/metrics.json
    plots:
      - path: eval/${matrix.model}/roc.csv
        x: fpr
        y: tpr
"#,
    );
    project.run_ok(&[]);
    let html = stdout(&project.pipe(&["compare", "--html"]));
    let plots: Vec<&str> = html.split("<figure ").skip(1).collect();
    let roc: Vec<&&str> = plots
        .iter()
        .filter(|plot| plot.contains("roc.csv"))
        .collect();
    assert_eq!(roc.len(), 1, "{html}");
    assert!(roc[0].contains("eval/{model}/roc.csv"), "{}", roc[0]);
    assert_eq!(series_lines(roc[0]).len(), 2, "{}", roc[0]);
}

/// Each mistake where it is written, with what fits.
#[test]
fn bad_plot_specs_are_located_errors_saying_what_fits() {
    let project = project();
    project.write(
        "pipe.yaml",
        r#"name: bad
stages:
  evaluate:
    run: python3 evaluate.py 0.1
    plots:
      - eval/log.tsv
      - eval/plots/roc.csv:
          x: fpr
          yy: tpr
      - eval/plots/prc.json:
          kind: linear
      - eval/plots/confusion.csv:
          kind: confusion
          template: confusion
      - eval/${params.x}.csv:
          x: a
      - eval/log.tsv
  report:
    uses: report/html@1
    plots: [report.csv]
"#,
    );
    let output = project.pipe(&["validate"]);
    assert_eq!(output.status.code(), Some(2));
    let errors = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "error[unknown-key]: unknown key `yy` in a plot of stage `evaluate`",
        "--> pipe.yaml:9:11",
        "did you mean `y`?",
        "error[bad-plot]: `kind` of a plot of stage `evaluate` is `linear`",
        "`linear` is a DVC template: write it as `template:`",
        "--> pipe.yaml:11:17",
        "has both `kind` and `template`",
        "--> pipe.yaml:14:11",
        "is a key, where `${...}` is not read",
        "error[duplicate-plot]: `eval/log.tsv` is plotted twice",
        "--> pipe.yaml:17:9",
        "error[misplaced-key]: `plots` in stage `report`, which has `uses`",
    ] {
        assert!(errors.contains(expected), "{expected}:\n{errors}");
    }
}

#[test]
fn dvc_templates_load_as_the_kinds_they_mean_and_a_plot_inside_an_output_directory_is_that_output()
{
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"name: templates
stages:
  write:
    run: >-
      mkdir -p out && printf 'x,y\n1,2\n2,3\n' > out/a.csv && cp out/a.csv b.csv && cp out/a.csv c.csv &&
      cp out/a.csv d.csv && cp out/a.csv e.csv && printf 'actual,predicted\n1,1\n0,1\n' > f.csv
    outs: [out]
    plots:
      - out/a.csv: { template: smooth }
      - b.csv: { template: simple }
      - c.csv: { template: scatter }
      - d.csv: { template: bar_horizontal }
      - e.csv: { kind: step }
      - f.csv: { template: confusion_normalized }
"#,
    );
    project.run_ok(&[]);
    let json: Value =
        serde_json::from_str(&stdout(&project.pipe(&["show", "last", "--json"]))).unwrap();
    let stage = &json["stages"][0];
    let kinds: Vec<&str> = stage["plots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|plot| plot["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "line",
            "line",
            "scatter",
            "bar",
            "step",
            "confusion_normalized"
        ]
    );
    // `out/a.csv` is inside the output `out`: no output of its own.
    let outputs: Vec<&String> = stage["outputs"].as_object().unwrap().keys().collect();
    assert_eq!(
        outputs,
        ["b.csv", "c.csv", "d.csv", "e.csv", "f.csv", "out"]
    );
}
