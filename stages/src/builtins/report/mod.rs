//! `report/html@1`: the results of the pipeline as one self-contained HTML
//! page and two Markdown files, one to paste (text and tables) and one
//! with the plots as images: the results table (one row per matrix
//! combination), params, stage times, training curves, throughput,
//! hardware and confusion matrices. Drawing and page layout are
//! `pipe-report`'s; this module only decides what the run shows.
//!
//! Everything shown comes from the `RunContext` and the files it names,
//! never from a clock, this machine or the run (its id, time, commit, which
//! stages were restored): the engine keys the report on exactly that
//! context, so the same results give the same bytes, and an unchanged
//! pipeline restores its report instead of making it again.

use std::collections::BTreeSet;

use pipe_protocol::record::{rows_by_combination, Combination};
use pipe_protocol::{ParamSpec, RunContext, RunStage};
use pipe_report::{Cell, Document};
use serde::Deserialize;
use serde_json::Value;

mod results;
mod sections;

use results::{params, results, stage_times};
use sections::{confusion_matrix, evaluation, label_names, training};

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

/// A plot drawn from more points than this keeps every n-th one (and the
/// last): a long run's per-step log would otherwise make a page of
/// megabytes that shows no more than a few thousand points can.
const MAX_PLOT_POINTS: usize = 2000;

impl BuiltinStage for HtmlReport {
    fn info(&self) -> StageInfo {
        StageInfoBuilder::new(
            "report/html",
            1,
            "the run as one self-contained HTML page and as Markdown (to paste, and with images): results \
             by matrix combination, params, stage times, curves, throughput, hardware, confusion matrices",
        )
        // 2: a pasteable report.md and report-with-images.md; readable,
        // themed charts; per-step curves for one epoch; label names.
        .implementation(2)
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

/// A results-table column: metric `metric` of the stage named `stage`
/// (its base name: the same in every matrix combination).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct MetricColumn {
    stage: String,
    metric: String,
}

impl MetricColumn {
    fn label(&self) -> String {
        format!("{}.{}", self.stage, self.metric)
    }
}

/// The stage's params, one field per `ParamSpec` of its `info()`, as
/// given; [`Options`] is what the report makes of them.
#[derive(Deserialize)]
struct ReportParams {
    title: Option<String>,
    /// Unset: the default columns.
    metrics: Option<Vec<String>>,
    baseline: Option<String>,
    speedup: Option<String>,
}

struct Options {
    title: String,
    /// `None`: the default columns.
    metrics: Option<Vec<MetricColumn>>,
    /// KEY=VALUE pairs, in the order written.
    baseline: Option<Vec<(String, String)>>,
    speedup: Option<MetricColumn>,
}

impl Options {
    fn read(context: &StageContext, run: &RunContext) -> Result<Options> {
        let params: ReportParams = context.params()?;
        let title = params.title.unwrap_or_else(|| run.pipeline.clone());
        let metrics = params
            .metrics
            .map(|metrics| {
                metrics
                    .iter()
                    .map(|text| metric_column("metrics", text, run))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        let baseline = params
            .baseline
            .as_deref()
            .map(parse_combination)
            .transpose()?;
        let speedup = params
            .speedup
            .as_deref()
            .map(|text| metric_column("speedup", text, run))
            .transpose()?;
        Ok(Options {
            title,
            metrics,
            baseline,
            speedup,
        })
    }
}

/// `evaluate.accuracy` against the run's stages: the longest stage name
/// that prefixes it (stage names may hold dots), and a metric that stage
/// reported somewhere in the run.
fn metric_column(param: &str, text: &str, run: &RunContext) -> Result<MetricColumn> {
    let base_names: BTreeSet<&str> = run.stages.iter().map(|s| s.base_name.as_str()).collect();
    let listed = base_names.iter().copied().collect::<Vec<_>>().join(", ");
    let stage = base_names
        .iter()
        .copied()
        .filter(|base| {
            text.strip_prefix(base)
                .is_some_and(|rest| rest.len() > 1 && rest.starts_with('.'))
        })
        .max_by_key(|base| base.len())
        .ok_or_else(|| {
            StageError::param(
                param,
                format!("`{text}` names no stage of this run and a metric of it"),
                format!("write STAGE.METRIC with STAGE one of: {listed}"),
            )
        })?;
    let metric = &text[stage.len() + 1..];
    let of_stage: Vec<&RunStage> = run.stages.iter().filter(|s| s.base_name == stage).collect();
    let known: BTreeSet<&str> = of_stage
        .iter()
        .flat_map(|s| s.metrics.keys().map(String::as_str))
        .collect();
    // A stage that failed everywhere reported nothing: its column stays
    // empty rather than failing the report of what did run.
    if !known.is_empty() && !known.contains(metric) {
        let listed = known.iter().copied().collect::<Vec<_>>().join(", ");
        return Err(StageError::param(
            param,
            format!("stage `{stage}` has no metric `{metric}` in this run"),
            format!("its metrics: {listed}"),
        ));
    }
    Ok(MetricColumn {
        stage: stage.to_string(),
        metric: metric.to_string(),
    })
}

/// `precision=32-true,strategy=single` -> its pairs.
fn parse_combination(text: &str) -> Result<Vec<(String, String)>> {
    text.split(',')
        .map(|pair| {
            pair.split_once('=')
                .map(|(key, value)| (key.trim().to_string(), value.trim().to_string()))
                .filter(|(key, _)| !key.is_empty())
                .ok_or_else(|| {
                    StageError::param(
                        "baseline",
                        format!("`{pair}` is not KEY=VALUE"),
                        "write the baseline's matrix values as KEY=VALUE pairs separated by commas, e.g. \
                         `precision=32-true,strategy=single`",
                    )
                })
        })
        .collect()
}

/// A matrix value as the row shows it: text without quotes.
fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// One row of the results table: a matrix combination and the stages it
/// shows, those without a matrix included.
struct Row<'a> {
    combination: Combination,
    stages: Vec<&'a RunStage>,
}

impl Row<'_> {
    fn describe(&self) -> String {
        if self.combination.is_empty() {
            return "(no matrix)".into();
        }
        self.combination.to_string()
    }
}

/// The run's rows: the record's one definition of them, which `pipe
/// compare` and its HTML page read too.
fn rows(run: &RunContext) -> Vec<Row<'_>> {
    rows_by_combination(run.stages.iter().map(|stage| {
        let shows_something = !stage.metrics.is_empty() || stage.roles.makes_data;
        stage.combination.splitting_rows(shows_something)
    }))
    .into_iter()
    .map(|row| Row {
        combination: row.combination,
        stages: row.stages.iter().map(|&index| &run.stages[index]).collect(),
    })
    .collect()
}

/// The value of `column` in `row`.
fn lookup<'a>(row: &Row<'a>, column: &MetricColumn) -> Option<&'a Value> {
    row.stages
        .iter()
        .filter(|stage| stage.base_name == column.stage)
        .find_map(|stage| stage.metrics.get(&column.metric))
}

fn value_cell(value: Option<&Value>) -> Cell {
    match value {
        None | Some(Value::Null) => Cell::missing(),
        Some(Value::Number(number)) => number.as_f64().map_or_else(Cell::missing, Cell::number),
        Some(Value::String(text)) => Cell::text(text.clone()),
        Some(Value::Array(items)) => {
            Cell::text(items.iter().map(value_text).collect::<Vec<_>>().join(", "))
        }
        Some(other) => Cell::text(other.to_string()),
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

    use super::results::default_columns;
    use super::sections::Columns;
    use super::*;
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
