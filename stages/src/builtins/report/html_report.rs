//! `report/html@1`: the results of the pipeline as one self-contained HTML
//! page and two Markdown files, one to paste (text and tables) and one
//! with the plots as images: the results table (one row per matrix
//! combination), params, stage times, training curves, throughput,
//! hardware and confusion matrices, and the plots the stages declare of
//! their files (`plots:`). Drawing and page layout are
//! `pipe-report`'s; this module only decides what the run shows.
//!
//! Everything shown comes from the `RunContext` and the files it names,
//! never from a clock, this machine or the run (its id, time, commit, which
//! stages were restored): the engine keys the report on exactly that
//! context, so the same results give the same bytes, and an unchanged
//! pipeline restores its report instead of making it again.

use pipe_protocol::{ParamSpec, RunContext};
use pipe_report::Document;
use serde_json::Value;

use super::model::Options;
use super::plots::declared_plots;
use super::results::{params, results, stage_times};
use super::sections::{confusion_matrix, evaluation, label_names, training};

use crate::{
    BuiltinStage, OutputKind, ParamKind, Result, StageContext, StageError, StageInfo,
    StageInfoBuilder,
};

pub struct HtmlReport;

const OUTPUT: &str = "report";

/// The report's Markdown to paste into a pull request or an issue: tables
/// and text, no image, no link. Named as users look for it first.
const PASTEABLE: &str = "report.md";
/// The report's Markdown for a directory published with its plots: the
/// same, with every plot as an image of the `.svg` file beside it.
const WITH_IMAGES: &str = "report-with-images.md";

impl BuiltinStage for HtmlReport {
    fn info(&self) -> StageInfo {
        StageInfoBuilder::new(
            "report/html",
            1,
            "the run as one self-contained HTML page and as Markdown (to paste, and with images): results \
             by matrix combination, params, stage times, curves, throughput, hardware, confusion matrices, \
             and the plots the stages declare of their files",
        )
        // 2: a pasteable report.md and report-with-images.md; readable,
        // themed charts; per-step curves for one epoch; label names.
        .implementation(3)
        .params([
            ParamSpec::new(
                "title",
                ParamKind::String,
                Some(Value::Null),
                "the report's title; unset: the pipeline's name",
            ),
            ParamSpec::new(
                "metrics",
                ParamKind::StringList,
                Some(Value::Null),
                "the results table's metric columns, as STAGE.METRIC with STAGE the stage's name without \
                 its matrix suffix (`evaluate.accuracy`); unset: every numeric metric except per-epoch \
                 ones (`epochs.`), `confusion`, `per_class` and `hardware.`",
            ),
            ParamSpec::new(
                "baseline",
                ParamKind::String,
                Some(Value::Null),
                "the matrix combination of the baseline row, as KEY=VALUE pairs separated by commas \
                 (`precision=32-true,strategy=single`); unset: the first row",
            ),
            ParamSpec::new(
                "speedup",
                ParamKind::String,
                Some(Value::Null),
                "a time metric as STAGE.METRIC (`train.train_seconds`): adds a `speed-up` column, the \
                 baseline's value divided by each row's",
            ),
        ])
        .output(
            OUTPUT,
            OutputKind::Dir,
            "`index.html` (one file: styles and plots inline, loads nothing); `report.md`, to paste into a \
             pull request or issue (text and tables only: no image, no link); `report-with-images.md` and \
             the plots as the `.svg` files it shows, for a directory that is published",
        )
        .page("index.html")
        .reads_run()
        .build()
    }

    fn run(&self, context: &StageContext) -> Result<()> {
        let run = context.run_context()?;
        let options = Options::read(context, &run)?;
        let document = build_report(&run, &options)?;
        let dir = context.output(OUTPUT);
        std::fs::create_dir_all(&dir).map_err(|e| StageError::io(&dir, e))?;
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| StageError::io(&path, e))
        };
        write("index.html", &document.to_html())?;
        write(
            PASTEABLE,
            &document.to_pasteable_markdown(&format!(
                "see index.html or {WITH_IMAGES} beside this file"
            )),
        )?;
        write(WITH_IMAGES, &document.to_markdown_with_images())?;
        let mut plots = 0;
        for plot in document.plots() {
            write(&plot.file_name, &plot.svg)?;
            plots += 1;
        }
        // Where it lands is the engine's to say: `dir` is a private
        // directory that moves into place only on success.
        context.message(format!(
            "report of {} stages: {plots} plot{}",
            run.stages.len(),
            if plots == 1 { "" } else { "s" },
        ));
        Ok(())
    }
}

fn build_report(run: &RunContext, options: &Options) -> Result<Document> {
    let mut document = Document::new(&options.title);
    header(&mut document, run);
    results(&mut document, run, options)?;
    params(&mut document, run);
    stage_times(&mut document, run)?;
    for stage in &run.stages {
        if stage.outputs.contains_key("curves") {
            training(&mut document, stage)?;
        }
    }
    let names = label_names(run);
    for stage in &run.stages {
        if let Some(confusion) = confusion_matrix(stage)? {
            evaluation(&mut document, stage, confusion, names.as_deref())?;
        }
    }
    declared_plots(&mut document, run)?;
    Ok(document)
}

fn header(document: &mut Document, run: &RunContext) {
    document.facts(vec![
        ("pipeline".into(), run.pipeline.clone()),
        ("stages".into(), run.stages.len().to_string()),
    ]);
    document.paragraph(
        "These are the stages' results, whether this run computed them or restored \
         them from the cache; the run itself, with its time and commit, is in pipe show.",
    );
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::model::{parse_combination, MAX_PLOT_POINTS};
    use super::super::results::default_columns;
    use super::super::sections::Columns;
    use super::*;
    use pipe_protocol::record::Combination;
    use pipe_protocol::RunStage;
    use serde_json::json;

    #[test]
    fn the_default_columns_leave_out_what_a_stage_declares_as_detail() {
        let mut train = RunStage {
            name: "train".into(),
            base_name: "train".into(),
            combination: Combination::default(),
            uses: None,
            roles: pipe_protocol::record::StageRoles {
                detail_metrics: vec!["epochs".into()],
                hardware_metrics: vec!["hardware".into()],
                ..Default::default()
            },
            compute_ms: None,
            outputs: BTreeMap::new(),
            metrics: BTreeMap::new(),
            plots: Vec::new(),
        };
        for (name, value) in [
            ("epochs.1.val_acc", 0.5),
            ("hardware.cpus", 2.0),
            ("accuracy", 0.9),
            ("epochs_run", 1.0),
        ] {
            train.metrics.insert(name.into(), json!(value));
        }
        let columns: Vec<String> = default_columns(&[&train])
            .into_iter()
            .map(|column| column.metric)
            .collect();
        assert_eq!(columns, ["accuracy", "epochs_run"]);
    }

    #[test]
    fn a_long_log_is_thinned_to_every_nth_point_and_the_last() {
        let steps: Vec<f64> = (1..=10_001).map(f64::from).collect();
        let columns = Columns {
            columns: BTreeMap::from([
                ("step".to_string(), steps.clone()),
                ("loss".to_string(), steps),
            ]),
        };
        let points = columns.points("step", "loss").unwrap();
        assert!(points.len() <= MAX_PLOT_POINTS + 1, "{}", points.len());
        assert_eq!(points.first(), Some(&(1.0, 1.0)));
        assert_eq!(points.last(), Some(&(10_001.0, 10_001.0)));
        assert_eq!(points[1].0 - points[0].0, 6.0, "every 6th of 10,001 points");
        assert_eq!(columns.points("step", "lr"), None);
    }

    #[test]
    fn a_baseline_is_key_value_pairs() {
        assert_eq!(
            parse_combination("precision=32-true, strategy=single").unwrap(),
            [
                ("precision".to_string(), "32-true".to_string()),
                ("strategy".to_string(), "single".to_string())
            ]
        );
        let error = parse_combination("precision").unwrap_err().to_string();
        assert!(error.contains("`precision` is not KEY=VALUE"), "{error}");
        assert!(parse_combination("=x").is_err());
    }

    #[test]
    fn a_flattened_confusion_matrix_is_read_like_rows() {
        let stage = |metrics: Value| RunStage {
            name: "evaluate".into(),
            base_name: "evaluate".into(),
            combination: Combination::default(),
            uses: None,
            roles: Default::default(),
            compute_ms: None,
            outputs: BTreeMap::new(),
            metrics: serde_json::from_value(metrics).unwrap(),
            plots: Vec::new(),
        };
        let flat = stage(json!({"confusion.0.0": 3, "confusion.0.1": 1, "confusion.1.1": 4}));
        assert_eq!(
            confusion_matrix(&flat).unwrap(),
            Some(vec![vec![3.0, 1.0], vec![0.0, 4.0]])
        );
        let nested = stage(json!({"confusion": [[3, 1], [0, 4]]}));
        assert_eq!(
            confusion_matrix(&nested).unwrap(),
            confusion_matrix(&flat).unwrap()
        );
        let ragged = stage(json!({"confusion": [[3, 1], [0]]}));
        assert!(confusion_matrix(&ragged)
            .unwrap_err()
            .to_string()
            .contains("is not square"));
        assert_eq!(
            confusion_matrix(&stage(json!({"accuracy": 0.5}))).unwrap(),
            None
        );
    }
}
