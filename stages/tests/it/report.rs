//! `report/html@1` through the real worker, on a hand-made run: two matrix
//! combinations of train and evaluate, curves and per-step CSVs, a
//! confusion matrix. The pasteable Markdown is snapshotted; the HTML is
//! rendered in headless Chromium (`pipe_test_support::chromium`), in a
//! light and in a dark colour scheme.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use pipe_protocol::record::{Combination, StageRoles};
use pipe_protocol::{PlotKind, PlotSpec, RunContext, RunPlot, RunStage};
use pipe_test_support::chromium;
use pipe_test_support::worker::{invocation, run_invocation, Run};
use serde_json::{json, Value};

const CURVES_HEADER: &str =
    "epoch,train_loss,train_acc,val_loss,val_acc,epoch_seconds,samples_per_s\n";

fn stage(name: &str, matrix: &[(&str, &str)], uses: Option<&str>, metrics: Value) -> RunStage {
    let base_name = name.split('@').next().unwrap().to_string();
    RunStage {
        name: name.into(),
        base_name,
        combination: Combination(
            matrix
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
        ),
        uses: uses.map(String::from),
        // What the built-in stages declare: detail and machine facts are
        // left out of the default results table.
        roles: StageRoles {
            detail_metrics: ["epochs", "confusion", "per_class"]
                .map(String::from)
                .to_vec(),
            hardware_metrics: vec!["hardware".into()],
            ..StageRoles::default()
        },
        compute_ms: Some(1500),
        outputs: BTreeMap::new(),
        metrics: serde_json::from_value(metrics).unwrap(),
        plots: Vec::new(),
    }
}

/// A training stage whose curves (and, when given, steps) CSVs are written
/// under `dir`.
fn train_stage(
    dir: &Path,
    precision: &str,
    train_seconds: f64,
    curves: &str,
    steps: Option<&str>,
) -> RunStage {
    let name = format!("train@precision={precision}");
    let files = dir.join(&name);
    std::fs::create_dir_all(&files).unwrap();
    let mut stage = stage(
        &name,
        &[("precision", precision)],
        Some("train/classifier@1"),
        json!({
            "best_epoch": 2,
            "val_acc": 0.8125,
            "val_loss": 0.4196236128689813,
            "epochs_run": 2,
            "train_seconds": train_seconds,
            "precision": precision,
            "strategy": "single",
            "devices": ["cpu"],
            "hardware.cpu": "Test CPU @ 2.0GHz",
            "hardware.cpus": 2,
            "hardware.libtorch": "2.11.0",
            "epochs.1.samples_per_s": 120.4567,
            "epochs.1.epoch_seconds": 5.25,
            "epochs.2.samples_per_s": 131.0,
            "epochs.2.epoch_seconds": 4.75,
            "epochs.10.samples_per_s": 140.0,
        }),
    );
    stage.compute_ms = Some((train_seconds * 1000.0) as u64 + 300);
    let curves_path = files.join("curves.csv");
    std::fs::write(&curves_path, format!("{CURVES_HEADER}{curves}")).unwrap();
    stage
        .outputs
        .insert("checkpoint".into(), files.join("checkpoint"));
    stage.outputs.insert("curves".into(), curves_path);
    if let Some(steps) = steps {
        let steps_path = files.join("steps.csv");
        std::fs::write(
            &steps_path,
            format!("step,epoch,loss,lr,samples_per_s\n{steps}"),
        )
        .unwrap();
        stage.outputs.insert("steps".into(), steps_path);
    }
    stage
}

fn evaluate_stage(precision: &str, accuracy: f64, confusion: Value) -> RunStage {
    stage(
        &format!("evaluate@precision={precision}"),
        &[("precision", precision)],
        Some("eval/classifier@1"),
        json!({
            "split": "test",
            "rows": 100,
            "accuracy": accuracy,
            "precision": 0.8333333333333334,
            "recall": 0.9,
            "f1": 0.8653846153846154,
            "loss": 0.41,
            "macro.precision": 0.85,
            "macro.recall": 0.85,
            "macro.f1": 0.8499,
            "per_class.0.f1": 0.83,
            "per_class.1.f1": 0.87,
            "confusion": confusion,
        }),
    )
}

/// A run of a speed study: a shared split, then train and evaluate at two
/// precisions; the bf16 training wrote no per-step CSV.
fn matrix_run(dir: &Path) -> RunContext {
    let mut split = stage(
        "split",
        &[],
        Some("data/split@1"),
        json!({"rows": 1000, "train.rows": 800}),
    );
    split.compute_ms = Some(2100);
    RunContext {
        pipeline: "speed-study".into(),
        params: json!({"seed": 42, "train": {"lr": 5.0e-5, "epochs": 2, "model": "tiny-bert"}}),
        stages: vec![
            split,
            train_stage(
                dir,
                "32-true",
                10.0,
                "1,0.693147,0.5,0.650000,0.6,5.250,120.457\n2,0.550000,0.75,0.4196236,0.8125,4.750,131.000\n",
                Some("1,1,0.70,0.00005,\n2,1,0.68,0.0000475,119.5\n3,2,0.52,0.000025,130.0\n4,2,0.50,0.0,131.0\n"),
            ),
            evaluate_stage("32-true", 0.85, json!([[40, 10], [5, 45]])),
            train_stage(
                dir,
                "bf16-mixed",
                4.0,
                "1,0.70,0.5,0.66,0.58,2.000,300.000\n2,0.56,0.74,0.43,0.80,2.000,310.000\n",
                None,
            ),
            evaluate_stage("bf16-mixed", 0.84, json!([[39, 11], [5, 45]])),
        ],
    }
}

/// Runs `report/html@1` with `params` on `run` in `dir`.
fn run_report(dir: &Path, run: &RunContext, params: Value) -> Run {
    std::fs::create_dir_all(dir).unwrap();
    let run_file = dir.join("run.json");
    std::fs::write(&run_file, serde_json::to_string_pretty(run).unwrap()).unwrap();
    let mut invocation = invocation(dir, "report", "report/html", params, None, 1);
    invocation["run"] = json!(run_file);
    run_invocation(env!("CARGO_BIN_EXE_pipe-stage"), dir, &invocation)
}

fn study_params() -> Value {
    json!({
        "metrics": ["train.train_seconds", "train.val_acc", "evaluate.accuracy", "split.rows"],
        "baseline": "precision=32-true",
        "speedup": "train.train_seconds",
    })
}

fn report_file(run: &Run, name: &str) -> String {
    let path = run.output_dir.join("report").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file of the report, by name.
fn report_files(run: &Run) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(run.output_dir.join("report"))
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (
                entry.file_name().into_string().unwrap(),
                std::fs::read(entry.path()).unwrap(),
            )
        })
        .collect()
}

/// The Markdown for a published directory, with the plots as images.
const WITH_IMAGES: &str = "report-with-images.md";

/// The targets of the Markdown's image links.
fn linked_plots(markdown: &str) -> Vec<String> {
    markdown
        .lines()
        .filter(|line| line.starts_with("!["))
        .map(|line| {
            let start = line.rfind("](").unwrap() + 2;
            line[start..line.len() - 1].to_string()
        })
        .collect()
}

#[test]
fn a_matrix_run_reads_as_one_row_per_combination() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_report(
        &dir.path().join("a"),
        &matrix_run(dir.path()),
        study_params(),
    );
    assert!(run.success, "{:?}", run.events);
    let markdown = report_file(&run, "report.md");
    insta::assert_snapshot!(markdown);

    let files = report_files(&run);
    let plots = linked_plots(&report_file(&run, WITH_IMAGES));
    // Stage times, then per training stage loss and accuracy per epoch
    // (32-true also loss and learning rate per step), then two confusion
    // matrices.
    assert_eq!(plots.len(), 1 + 4 + 2 + 2, "{plots:?}");
    for plot in &plots {
        let svg = String::from_utf8(files[plot].clone()).unwrap();
        assert!(svg.starts_with("<svg"), "{plot}");
    }
    let mut expected: Vec<String> = plots.clone();
    expected.extend(["index.html".into(), "report.md".into(), WITH_IMAGES.into()]);
    expected.sort();
    assert_eq!(files.keys().cloned().collect::<Vec<_>>(), expected);

    // The same run again, elsewhere: the same bytes, file for file.
    let again = run_report(
        &dir.path().join("b"),
        &matrix_run(dir.path()),
        study_params(),
    );
    assert!(again.success);
    assert_eq!(files, report_files(&again));
}

#[test]
fn a_run_without_a_matrix_is_one_row_of_every_plain_metric() {
    let dir = tempfile::tempdir().unwrap();
    let mut context = matrix_run(dir.path());
    context.stages.retain(|stage| !stage.name.contains("bf16"));
    for stage in &mut context.stages {
        stage.combination.0.clear();
        stage.name = stage.base_name.clone();
    }
    context.params = json!({});
    let run = run_report(
        &dir.path().join("report"),
        &context,
        json!({"title": "Quickstart"}),
    );
    assert!(run.success, "{:?}", run.events);
    insta::assert_snapshot!(report_file(&run, "report.md"));
}

#[test]
fn the_html_report_renders_in_chromium_and_loads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_report(
        &dir.path().join("report"),
        &matrix_run(dir.path()),
        study_params(),
    );
    assert!(run.success, "{:?}", run.events);
    let screenshot = chromium::artefact_dir().join("report.png");
    let page = run.output_dir.join("report").join("index.html");
    let rendered = chromium::render(&page, &screenshot, (1100, 6000));

    let figures = rendered.checked_figures();
    let plots = linked_plots(&report_file(&run, WITH_IMAGES));
    assert_eq!(
        figures.iter().map(|f| f.plot.clone()).collect::<Vec<_>>(),
        plots,
        "one figure per plot, in the Markdown's order"
    );
    assert!(
        rendered.dom.contains("<h2>Results</h2>") && rendered.dom.contains(">2.5x</td>"),
        "{}",
        rendered.dom
    );
    let png = std::fs::read(&rendered.screenshot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    eprintln!(
        "screenshot of the report: {}",
        rendered.screenshot.display()
    );
}

/// A one-epoch run, as the quickstart makes: a dataset stage that named
/// its classes, a training stage whose epoch is one point and whose step
/// losses differ in the fourth digit, an evaluation.
fn one_epoch_run(dir: &Path) -> RunContext {
    let dataset = stage(
        "dataset",
        &[],
        Some("data/from-csv@1"),
        json!({"rows_kept": 100, "label_names.0": "rotten", "label_names.1": "fresh"}),
    );
    let mut train = train_stage(
        dir,
        "32-true",
        10.0,
        "1,0.52480,0.75,0.52490,0.8125,5.250,120.457\n",
        Some("10,1,0.52472,0.0001,\n20,1,0.52478,0.00009,119.5\n30,1,0.52475,0.00008,130.0\n40,1,0.52481,0.00007,131.0\n"),
    );
    train.combination.0.clear();
    train.name = "train".into();
    train.base_name = "train".into();
    let mut evaluate = evaluate_stage("32-true", 0.85, json!([[40, 10], [5, 45]]));
    evaluate.combination.0.clear();
    evaluate.name = "evaluate".into();
    evaluate.base_name = "evaluate".into();
    RunContext {
        pipeline: "quickstart".into(),
        params: json!({}),
        stages: vec![dataset, train, evaluate],
    }
}

/// What a reader of a one-epoch report sees, in a light and a dark
/// browser: the step curves instead of one-dot epoch charts, y ticks that
/// differ, a note that the axis is zoomed in, text of a readable size,
/// the class names in the confusion matrix, and ink and background that
/// follow the colour scheme.
#[test]
fn a_one_epoch_report_reads_well_in_light_and_dark() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_report(
        &dir.path().join("report"),
        &one_epoch_run(dir.path()),
        json!({}),
    );
    assert!(run.success, "{:?}", run.events);
    let page = run.output_dir.join("report").join("index.html");
    let light = chromium::render(
        &page,
        &chromium::artefact_dir().join("report-one-epoch.png"),
        (1100, 5000),
    );
    let figures = light.checked_figures();
    let plots: Vec<&str> = figures.iter().map(|f| f.plot.as_str()).collect();
    assert_eq!(
        plots,
        [
            "01-stage-times.svg",
            "02-train-loss-per-step.svg",
            "03-train-learning-rate-per-step.svg",
            "04-evaluate-confusion.svg"
        ],
        "one epoch: no one-dot charts per epoch"
    );
    // The epoch's values are a table instead.
    assert!(
        light
            .dom
            .contains("<th class=\"num\" title=\"sort by this column\">validation accuracy</th>"),
        "{}",
        light.dom
    );
    for figure in &figures {
        assert!(
            figure.min_font >= 12.0,
            "{} has text of {} px",
            figure.plot,
            figure.min_font
        );
        if figure.plot.contains("per-step") {
            // Laid out at the content's width, not half of it.
            assert!(figure.width >= 900, "{figure:?}");
            let ticks = figure.texts_with("text-anchor=\"end\"");
            let mut distinct = ticks.clone();
            distinct.sort();
            distinct.dedup();
            assert!(ticks.len() >= 3, "{}: {ticks:?}", figure.plot);
            assert_eq!(distinct.len(), ticks.len(), "{}: {ticks:?}", figure.plot);
        }
    }
    let loss = &figures[1];
    assert!(
        loss.texts()
            .iter()
            .any(|text| text.starts_with("zoomed in: the values span only 0.52472–0.52481")),
        "{:?}",
        loss.texts()
    );
    let confusion = figures[3].texts();
    for name in ["rotten", "fresh"] {
        assert_eq!(
            confusion.iter().filter(|text| *text == name).count(),
            2,
            "{name} by row and by column: {confusion:?}"
        );
    }
    assert!(chromium::brightness(&light.background()) > 200.0);
    for figure in &figures {
        assert!(chromium::brightness(&figure.ink) < 80.0, "{figure:?}");
    }

    // On a phone-sized screen the plots scroll sideways rather than
    // shrink their text.
    let narrow = chromium::render(
        &page,
        &chromium::artefact_dir().join("report-one-epoch-narrow.png"),
        (400, 5000),
    );
    for figure in narrow.checked_figures() {
        assert!(
            figure.min_font >= 12.0,
            "{} has text of {} px in a narrow window",
            figure.plot,
            figure.min_font
        );
    }

    let dark = chromium::render_dark(
        &page,
        &chromium::artefact_dir().join("report-one-epoch-dark.png"),
        (1100, 5000),
    );
    assert!(
        chromium::brightness(&dark.background()) < 60.0,
        "{}",
        dark.background()
    );
    for figure in dark.checked_figures() {
        assert!(chromium::brightness(&figure.ink) > 180.0, "{figure:?}");
    }
}

/// The Markdown to paste holds no image and no link, so nothing breaks
/// once it is pasted into a comment: plots are left out, and a confusion
/// matrix is a table of counts; the other Markdown shows every plot.
#[test]
fn the_pasteable_markdown_has_no_image_and_no_link() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_report(
        &dir.path().join("report"),
        &one_epoch_run(dir.path()),
        json!({}),
    );
    assert!(run.success, "{:?}", run.events);
    let pasteable = report_file(&run, "report.md");
    for forbidden in ["![", "](", "<img", "href", ".svg)"] {
        assert!(
            !pasteable.contains(forbidden),
            "{forbidden} in:\n{pasteable}"
        );
    }
    assert!(
        pasteable.contains(
            "**Confusion matrix of evaluate**\n\n| true \\\\ predicted | rotten | fresh |\n| --- | ---: | ---: |\n| rotten | 40 | 10 |\n| fresh | 5 | 45 |\n"
        ),
        "{pasteable}"
    );
    assert!(
        pasteable.ends_with(
            "\n3 plots are not shown here: see index.html or report-with-images.md beside this file\n"
        ),
        "{pasteable}"
    );
    let with_images = report_file(&run, WITH_IMAGES);
    assert_eq!(linked_plots(&with_images).len(), 4, "{with_images}");
}

/// The check above is only as good as the harness: a page that reaches
/// out, and writes to the console, is seen doing both.
#[test]
fn the_chromium_harness_sees_requests_and_console_lines() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("leaky.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><img src=\"http://example.invalid/pixel.png\">\
         <script>console.error('from the page')</script></body></html>",
    )
    .unwrap();
    let rendered = chromium::render(&page, &dir.path().join("leaky.png"), (400, 300));
    assert!(
        rendered
            .requests
            .iter()
            .any(|request| request.contains("example.invalid")),
        "{:?}\n{}",
        rendered.requests,
        rendered.log
    );
    assert!(
        rendered
            .console
            .iter()
            .any(|line| line.contains("from the page")),
        "{}",
        rendered.log
    );
}

#[test]
fn hostile_names_and_params_stay_text_in_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = "<script>alert(1)</script> a|b\nc";
    let mut context = matrix_run(dir.path());
    let mut params = serde_json::Map::new();
    params.insert("note".into(), json!(hostile));
    params.insert(hostile.into(), json!(1));
    context.params = Value::Object(params);
    context.stages[0].name = hostile.into();
    context.stages[0].base_name = hostile.into();
    context.stages[2].combination.0[0].1 = hostile.to_string();
    let run = run_report(&dir.path().join("report"), &context, json!({}));
    assert!(run.success, "{:?}", run.events);

    let html = report_file(&run, "index.html");
    assert_eq!(
        html.matches("<script").count(),
        1,
        "only the page's own script"
    );
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt; a|b\nc"),
        "{html}"
    );

    let markdown = report_file(&run, "report.md");
    assert!(!markdown.contains("<script"), "{markdown}");
    let escaped = "&lt;script&gt;alert(1)&lt;/script&gt; a\\|b<br>c";
    assert!(
        markdown.contains(&format!("| note | {escaped} |")),
        "{markdown}"
    );
    assert!(
        markdown.contains(&format!("| {escaped} | 1 |")),
        "{markdown}"
    );
    assert!(
        markdown.contains(&format!("| {escaped} | data/split@1 |")),
        "{markdown}"
    );
    // Every table row still has its table's number of cells.
    for block in markdown
        .split("\n\n")
        .filter(|block| block.starts_with('|'))
    {
        let cells = |line: &str| line.replace("\\|", "").matches('|').count();
        let lines: Vec<&str> = block.lines().collect();
        for line in &lines {
            assert_eq!(cells(line), cells(lines[0]), "{line}\n{block}");
        }
    }
    for plot in linked_plots(&report_file(&run, WITH_IMAGES)) {
        assert!(
            plot.chars()
                .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '.')),
            "{plot}"
        );
    }
}

#[test]
fn mistakes_in_its_params_name_what_exists() {
    let dir = tempfile::tempdir().unwrap();
    let context = matrix_run(dir.path());
    let error = |name: &str, params: Value| {
        let run = run_report(&dir.path().join(name), &context, params);
        assert!(!run.success, "{name} succeeded");
        run.error()
    };
    let message = error("baseline", json!({"baseline": "precision=16-mixed"}));
    assert!(
        message.contains("no matrix combination of this run matches `precision=16-mixed`")
            && message.contains("precision=32-true; precision=bf16-mixed"),
        "{message}"
    );
    let message = error("pair", json!({"baseline": "fp32"}));
    assert!(message.contains("`fp32` is not KEY=VALUE"), "{message}");
    let message = error("metric", json!({"metrics": ["evaluate.acuracy"]}));
    assert!(
        message.contains("stage `evaluate` has no metric `acuracy`")
            && message.contains("accuracy"),
        "{message}"
    );
    let message = error("stage", json!({"speedup": "training.seconds"}));
    assert!(
        message.contains("`training.seconds` names no stage")
            && message.contains("evaluate, split, train"),
        "{message}"
    );
}

#[test]
fn a_broken_curves_file_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let context = matrix_run(dir.path());
    let curves: PathBuf = context.stages[1].outputs["curves"].clone();
    std::fs::write(
        &curves,
        format!("{CURVES_HEADER}1,0.5,0.5,0.5,0.5,1,1\n2,oops,0.5,0.5,0.5,1,1\n"),
    )
    .unwrap();
    let run = run_report(&dir.path().join("report"), &context, json!({}));
    let message = run.error();
    assert!(
        message.contains(&format!(
            "`{}`: line 3, column `train_loss`: `oops` is not a number",
            curves.display()
        )),
        "{message}"
    );
}

#[test]
fn declared_plots_are_drawn_and_a_missing_column_is_named_with_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let roc = dir.path().join("roc.csv");
    std::fs::write(&roc, "fpr,tpr,threshold\n0,0,1\n0.2,0.8,0.5\n1,1,0\n").unwrap();
    let labels = dir.path().join("confusion.csv");
    std::fs::write(&labels, "actual,predicted\ncat,cat\ndog,cat\ndog,dog\n").unwrap();
    let mut evaluate = stage("evaluate", &[], None, json!({"accuracy": 0.9}));
    let plot = |path: &str, file: &Path, kind: PlotKind, y: &[&str]| RunPlot {
        spec: PlotSpec {
            kind,
            y: y.iter().map(|y| y.to_string()).collect(),
            ..PlotSpec::new(path)
        },
        file: file.to_path_buf(),
    };
    evaluate.plots = vec![
        plot("eval/roc.csv", &roc, PlotKind::Line, &["tpr"]),
        plot("eval/confusion.csv", &labels, PlotKind::Confusion, &[]),
    ];
    let mut context = RunContext {
        pipeline: "plots".into(),
        params: json!({}),
        stages: vec![evaluate],
    };
    let run = run_report(&dir.path().join("report"), &context, json!({}));
    assert!(run.success, "{:?}", run.events);
    let html = report_file(&run, "index.html");
    assert!(html.contains("Plots: evaluate"), "{html}");
    let files = report_files(&run);
    assert!(
        files.contains_key("02-evaluate-eval-roc.csv.svg"),
        "{:?}",
        files.keys()
    );
    // The confusion matrix's counts are in the Markdown to paste.
    let pasteable = report_file(&run, "report.md");
    assert!(pasteable.contains("| dog | 1 | 1 |"), "{pasteable}");
    context.stages[0].plots[0].spec.y = vec!["TPR".into()];
    let run = run_report(&dir.path().join("again"), &context, json!({}));
    let message = run.error();
    assert!(
        message.contains(
            "plot file `eval/roc.csv`: no column `TPR`; its columns: fpr, tpr, threshold"
        ),
        "{message}"
    );
}

#[test]
fn without_a_run_file_it_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let invocation = invocation(dir.path(), "report", "report/html", json!({}), None, 1);
    let run = run_invocation(env!("CARGO_BIN_EXE_pipe-stage"), dir.path(), &invocation);
    let message = run.error();
    assert!(
        message.contains("`report/html` reports on its run, but the invocation names no run file"),
        "{message}"
    );
}
