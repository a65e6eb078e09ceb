//! `report/html@1`: the run it is part of as one self-contained HTML page
//! and its Markdown twin: the results table (one row per matrix
//! combination), params, stage times, training curves, throughput,
//! hardware and confusion matrices. Drawing and page layout are
//! `pipe-report`'s; this module only decides what the run shows.
//!
//! Everything shown comes from the `RunContext` and the files it names,
//! never from a clock or this machine, so the same run gives the same
//! bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use pipe_protocol::record::{rows_by_combination, Combination, StageStatus};
use pipe_protocol::{ParamSpec, RunContext, RunStage};
use pipe_report::text::{capitalised, format_duration_ms, format_number, format_utc};
use pipe_report::{BarChart, Cell, Document, HeatMap, LineChart, Series, Table};
use serde_json::Value;

use crate::{
    BuiltinStage, OutputKind, OutputSpec, ParamKind, Result, StageContext, StageError, StageInfo,
};

pub struct HtmlReport;

const OUTPUT: &str = "report";

/// A plot drawn from more points than this keeps every n-th one (and the
/// last): a long run's per-step log would otherwise make a page of
/// megabytes that shows no more than a few thousand points can.
const MAX_PLOT_POINTS: usize = 2000;

impl BuiltinStage for HtmlReport {
    fn info(&self) -> StageInfo {
        StageInfo {
            name: "report/html".into(),
            version: 1,
            implementation: 1,
            summary: "the run as one self-contained HTML page and its Markdown twin: results by matrix combination, \
                      params, stage times, curves, throughput, hardware, confusion matrices"
                .into(),
            params: vec![
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
            ],
            outputs: vec![OutputSpec {
                name: OUTPUT.into(),
                kind: OutputKind::Dir,
                doc: "`index.html` (one file: styles and plots inline, loads nothing), `report.md` and the plots \
                      as `.svg` files it links"
                    .into(),
            }],
            metrics: Vec::new(),
            devices_param: None,
            nodes_param: None,
            reads_run: true,
            roles: Default::default(),
        }
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
        write("report.md", &document.to_markdown())?;
        let mut plots = 0;
        for plot in document.plots() {
            write(&plot.file_name, &plot.svg)?;
            plots += 1;
        }
        // Where it lands is the engine's to say: `dir` is a private
        // directory that moves into place only on success.
        context.message(format!(
            "report of run {}: {} stages, {plots} plot{}",
            run.run_id,
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
        let title = context
            .opt_str("title")?
            .map_or_else(|| run.pipeline.clone(), String::from);
        let metrics = match context.value("metrics")? {
            Value::Null => None,
            _ => Some(
                context
                    .strings("metrics")?
                    .iter()
                    .map(|text| metric_column("metrics", text, run))
                    .collect::<Result<Vec<_>>>()?,
            ),
        };
        let baseline = context
            .opt_str("baseline")?
            .map(parse_combination)
            .transpose()?;
        let speedup = context
            .opt_str("speedup")?
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
    rows_by_combination(run.stages.iter().map(|stage| &stage.combination))
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
    for stage in &run.stages {
        if let Some(confusion) = confusion_matrix(stage)? {
            evaluation(&mut document, stage, confusion)?;
        }
    }
    Ok(document)
}

fn header(document: &mut Document, run: &RunContext) {
    let mut statuses: Vec<(StageStatus, usize)> = Vec::new();
    for stage in &run.stages {
        match statuses
            .iter_mut()
            .find(|(status, _)| *status == stage.status)
        {
            Some((_, count)) => *count += 1,
            None => statuses.push((stage.status, 1)),
        }
    }
    let statuses = statuses
        .iter()
        .map(|(status, count)| format!("{count} {status}"))
        .collect::<Vec<_>>()
        .join(", ");
    let commit = match (&run.git_commit, run.git_dirty) {
        (Some(commit), Some(true)) => format!("{commit} (dirty)"),
        (Some(commit), _) => commit.clone(),
        (None, _) => "not a git checkout".into(),
    };
    document.facts(vec![
        ("pipeline".into(), run.pipeline.clone()),
        ("run".into(), run.run_id.to_string()),
        ("started".into(), format_utc(run.started_ms)),
        ("git commit".into(), commit),
        (
            "stages".into(),
            if statuses.is_empty() {
                "none".into()
            } else {
                statuses
            },
        ),
    ]);
}

/// The numeric metrics of `stages`, in stage order, names sorted.
fn default_columns(stages: &[&RunStage]) -> Vec<MetricColumn> {
    let mut columns: Vec<MetricColumn> = Vec::new();
    for stage in stages {
        for (name, value) in &stage.metrics {
            if value.is_number() && !stage.roles.is_detail_metric(name) {
                let column = MetricColumn {
                    stage: stage.base_name.clone(),
                    metric: name.clone(),
                };
                if !columns.contains(&column) {
                    columns.push(column);
                }
            }
        }
    }
    columns
}

fn results(document: &mut Document, run: &RunContext, options: &Options) -> Result<()> {
    let rows = rows(run);
    let columns = match &options.metrics {
        Some(columns) => columns.clone(),
        None => {
            // With a matrix, the columns are what its stages measured; the
            // stages outside it are the same in every row.
            let with_matrix = run.stages.iter().any(|stage| !stage.combination.is_empty());
            let mut in_rows: Vec<&RunStage> = rows
                .iter()
                .flat_map(|row| row.stages.iter().copied())
                .filter(|stage| !with_matrix || !stage.combination.is_empty())
                .collect();
            in_rows.dedup_by(|a, b| a.name == b.name);
            default_columns(&in_rows)
        }
    };
    let baseline = match &options.baseline {
        None => 0,
        Some(pairs) => baseline_row(&rows, pairs)?,
    };
    let mut keys: Vec<String> = Vec::new();
    for row in &rows {
        for (key, _) in &row.combination.0 {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
    }
    let mut header: Vec<String> = keys.clone();
    header.extend(columns.iter().map(MetricColumn::label));
    if options.speedup.is_some() {
        header.push("speed-up".into());
    }
    let mut table = Table::new(header);
    let baseline_time = options
        .speedup
        .as_ref()
        .and_then(|column| lookup(&rows[baseline], column))
        .and_then(Value::as_f64);
    for row in &rows {
        let mut cells: Vec<Cell> = keys
            .iter()
            .map(|key| {
                row.combination
                    .get(key)
                    .map_or_else(Cell::missing, |value| Cell::text(value.to_string()))
            })
            .collect();
        cells.extend(columns.iter().map(|column| value_cell(lookup(row, column))));
        if let Some(column) = &options.speedup {
            let time = lookup(row, column).and_then(Value::as_f64);
            cells.push(match (baseline_time, time) {
                (Some(base), Some(time)) if base > 0.0 && time > 0.0 => {
                    let ratio = base / time;
                    Cell::number_as(ratio, format!("{}x", format_number(ratio)))
                }
                _ => Cell::missing(),
            });
        }
        table.rows.push(cells);
    }
    document.heading(2, "Results");
    if rows.len() > 1 {
        document.paragraph(format!(
            "One row per matrix combination; baseline: {}.",
            rows[baseline].describe()
        ));
    }
    if let Some(column) = &options.speedup {
        document.paragraph(format!(
            "speed-up: the baseline's {} divided by the row's.",
            column.label()
        ));
    }
    if table.columns.is_empty() {
        document.paragraph("No stage reported a numeric metric.");
    } else {
        document.table(table);
    }
    Ok(())
}

fn baseline_row(rows: &[Row], pairs: &[(String, String)]) -> Result<usize> {
    let listed = || {
        rows.iter()
            .map(Row::describe)
            .collect::<Vec<_>>()
            .join("; ")
    };
    let matching: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(_, row)| pairs.iter().all(|pair| row.combination.0.contains(pair)))
        .map(|(index, _)| index)
        .collect();
    match matching.as_slice() {
        [index] => Ok(*index),
        [] => Err(StageError::param(
            "baseline",
            format!(
                "no matrix combination of this run matches `{}`",
                pairs
                    .iter()
                    .map(|(key, value)| format!("{key}={value}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            format!("the run's combinations: {}", listed()),
        )),
        _ => Err(StageError::param(
            "baseline",
            format!("{} matrix combinations match it", matching.len()),
            format!("name more keys, so that one of these matches: {}", listed()),
        )),
    }
}

/// Nested params as `a.b` -> value text, in the params' own order.
fn flatten_params(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, inner) in map {
                let name = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten_params(&name, inner, out);
            }
        }
        Value::Number(number) => out.push((
            prefix.to_string(),
            number
                .as_f64()
                .filter(|_| number.is_f64())
                .map_or_else(|| number.to_string(), format_number),
        )),
        other => out.push((prefix.to_string(), value_text(other))),
    }
}

fn params(document: &mut Document, run: &RunContext) {
    document.heading(2, "Params");
    let mut flat = Vec::new();
    match &run.params {
        Value::Null => {}
        Value::Object(map) if map.is_empty() => {}
        params => flatten_params("", params, &mut flat),
    }
    if flat.is_empty() {
        document.paragraph("The pipeline has no params.");
        return;
    }
    let mut table = Table::new(vec!["param".into(), "value".into()]);
    for (name, value) in flat {
        table.rows.push(vec![Cell::text(name), Cell::text(value)]);
    }
    document.table(table);
}

fn seconds_cell(ms: Option<u64>) -> Cell {
    ms.map_or_else(Cell::missing, |ms| {
        Cell::number_as(ms as f64 / 1000.0, format_duration_ms(ms))
    })
}

fn stage_times(document: &mut Document, run: &RunContext) -> Result<()> {
    document.heading(2, "Stages");
    if run.stages.is_empty() {
        document.paragraph("No stage ran before the report.");
        return Ok(());
    }
    let mut table = Table::new(
        [
            "stage",
            "uses",
            "status",
            "time in this run",
            "compute time",
        ]
        .map(String::from)
        .to_vec(),
    );
    for stage in &run.stages {
        table.rows.push(vec![
            Cell::text(stage.name.clone()),
            stage
                .uses
                .clone()
                .map_or_else(|| Cell::text("command"), Cell::text),
            Cell::text(stage.status.to_string()),
            seconds_cell(Some(stage.duration_ms)),
            seconds_cell(stage.compute_ms),
        ]);
    }
    document.table(table);
    let seconds = |ms: u64| ms as f64 / 1000.0;
    let chart = BarChart {
        title: "Time per stage".into(),
        value_label: "seconds".into(),
        categories: run.stages.iter().map(|s| s.name.clone()).collect(),
        series: vec![
            (
                "time in this run".into(),
                run.stages.iter().map(|s| seconds(s.duration_ms)).collect(),
            ),
            (
                "compute time".into(),
                run.stages
                    .iter()
                    .map(|s| s.compute_ms.map_or(0.0, seconds))
                    .collect(),
            ),
        ],
    };
    document.plot(
        "stage-times",
        "Time per stage",
        chart.to_svg().map_err(draw_error)?,
    );
    Ok(())
}

fn draw_error(error: pipe_report::ReportError) -> StageError {
    StageError::Other(format!("internal: {error}"))
}

/// A CSV file's numeric columns by header name, in file order.
struct Columns {
    columns: BTreeMap<String, Vec<f64>>,
}

impl Columns {
    fn read(path: &Path) -> Result<Columns> {
        let bad = |message: String| {
            StageError::input(
                format!("`{}`: {message}", path.display()),
                "the report reads the CSV files its training stages wrote; rerun them with `pipe run --force STAGE`",
            )
        };
        let mut reader = csv::Reader::from_path(path).map_err(|e| bad(e.to_string()))?;
        let headers: Vec<String> = reader
            .headers()
            .map_err(|e| bad(e.to_string()))?
            .iter()
            .map(|name| name.trim().to_string())
            .collect();
        let mut columns: BTreeMap<String, Vec<f64>> = headers
            .iter()
            .map(|name| (name.clone(), Vec::new()))
            .collect();
        for record in reader.records() {
            let record = record.map_err(|e| bad(e.to_string()))?;
            let line = record.position().map_or(0, |p| p.line());
            for (name, field) in headers.iter().zip(record.iter()) {
                // An empty field is a value the writer did not have (no
                // throughput before the first timed step): a gap, not an
                // error.
                let value: f64 = match field.trim() {
                    "" => f64::NAN,
                    text => text.parse().map_err(|_| {
                        bad(format!(
                            "line {line}, column `{name}`: `{field}` is not a number"
                        ))
                    })?,
                };
                if let Some(column) = columns.get_mut(name) {
                    column.push(value);
                }
            }
        }
        Ok(Columns { columns })
    }

    /// (x, y) points of two columns, thinned to [`MAX_PLOT_POINTS`]; `None`
    /// when either column is absent.
    fn points(&self, x: &str, y: &str) -> Option<Vec<(f64, f64)>> {
        let (xs, ys) = (self.columns.get(x)?, self.columns.get(y)?);
        let points: Vec<(f64, f64)> = xs.iter().copied().zip(ys.iter().copied()).collect();
        let stride = points.len().div_ceil(MAX_PLOT_POINTS).max(1);
        if stride == 1 {
            return Some(points);
        }
        let last = points.len() - 1;
        Some(
            points
                .iter()
                .enumerate()
                .filter(|(index, _)| index % stride == 0 || *index == last)
                .map(|(_, point)| *point)
                .collect(),
        )
    }
}

/// Named series of `columns` over `x`, those present.
fn series(columns: &Columns, x: &str, ys: &[(&str, &str)]) -> Vec<Series> {
    ys.iter()
        .filter_map(|(column, name)| {
            columns
                .points(x, column)
                .map(|points| Series::new(*name, points))
        })
        .collect()
}

fn line_plot(
    document: &mut Document,
    stage: &RunStage,
    what: &str,
    x_label: &str,
    y_label: &str,
    series: Vec<Series>,
) -> Result<()> {
    if series.is_empty() {
        return Ok(());
    }
    let title = format!("{} of {}", capitalised(what), stage.name);
    let chart = LineChart {
        title: title.clone(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        series,
    };
    let svg = chart.to_svg().map_err(draw_error)?;
    document.plot(&format!("{}-{what}", stage.name), title, svg);
    Ok(())
}

fn training(document: &mut Document, stage: &RunStage) -> Result<()> {
    document.heading(2, format!("Training: {}", stage.name));
    hardware(document, stage);
    if !stage.status.succeeded() {
        document.paragraph(format!("The stage {}: it left no curves.", stage.status));
        return Ok(());
    }
    if let Some(path) = stage.outputs.get("curves") {
        let curves = Columns::read(path)?;
        line_plot(
            document,
            stage,
            "loss per epoch",
            "epoch",
            "loss",
            series(
                &curves,
                "epoch",
                &[
                    ("train_loss", "train loss"),
                    ("val_loss", "validation loss"),
                ],
            ),
        )?;
        line_plot(
            document,
            stage,
            "accuracy per epoch",
            "epoch",
            "accuracy",
            series(
                &curves,
                "epoch",
                &[
                    ("train_acc", "train accuracy"),
                    ("val_acc", "validation accuracy"),
                ],
            ),
        )?;
    }
    if let Some(path) = stage.outputs.get("steps") {
        let steps = Columns::read(path)?;
        line_plot(
            document,
            stage,
            "loss per step",
            "step",
            "loss",
            series(&steps, "step", &[("loss", "train loss")]),
        )?;
        line_plot(
            document,
            stage,
            "learning rate per step",
            "step",
            "learning rate",
            series(&steps, "step", &[("lr", "learning rate")]),
        )?;
    }
    throughput(document, stage);
    Ok(())
}

fn hardware(document: &mut Document, stage: &RunStage) {
    let names = [
        ("hardware.cpu", "CPU"),
        ("hardware.cpus", "CPU threads"),
        ("hardware.gpus", "GPUs"),
        ("hardware.libtorch", "libtorch"),
        ("devices", "devices"),
        ("precision", "precision"),
        ("strategy", "strategy"),
    ];
    let facts: Vec<(String, String)> = names
        .iter()
        .filter_map(|(metric, label)| {
            let value = stage.metrics.get(*metric)?;
            let text = match value {
                // Flattened metrics keep an empty list as itself.
                Value::Array(items) if items.is_empty() => "none".to_string(),
                _ => value_cell(Some(value)).text,
            };
            Some((label.to_string(), text))
        })
        .collect();
    document.facts(facts);
}

/// The `epochs.N.*` throughput metrics as a table, epochs in order.
fn throughput(document: &mut Document, stage: &RunStage) {
    let fields = [
        ("epoch_seconds", "epoch seconds"),
        ("samples_per_s", "samples/s"),
        ("tokens_per_s", "tokens/s"),
    ];
    let mut epochs: BTreeMap<u64, BTreeMap<&str, &Value>> = BTreeMap::new();
    for (name, value) in &stage.metrics {
        let Some((epoch, field)) = name
            .strip_prefix("epochs.")
            .and_then(|rest| rest.split_once('.'))
        else {
            continue;
        };
        if let (Ok(epoch), Some((field, _))) = (
            epoch.parse::<u64>(),
            fields.iter().find(|(known, _)| *known == field),
        ) {
            epochs.entry(epoch).or_default().insert(field, value);
        }
    }
    let present: Vec<&(&str, &str)> = fields
        .iter()
        .filter(|(field, _)| epochs.values().any(|row| row.contains_key(field)))
        .collect();
    if present.is_empty() {
        return;
    }
    let mut header = vec!["epoch".to_string()];
    header.extend(present.iter().map(|(_, label)| label.to_string()));
    let mut table = Table::new(header);
    for (epoch, values) in &epochs {
        let mut row = vec![Cell::number(*epoch as f64)];
        row.extend(
            present
                .iter()
                .map(|(field, _)| value_cell(values.get(field).copied())),
        );
        table.rows.push(row);
    }
    document.heading(3, format!("Throughput of {}", stage.name));
    document.table(table);
}

/// The stage's confusion matrix: metric `confusion` as rows of counts, or
/// flattened as `confusion.I.J`. `None` when it reported none.
fn confusion_matrix(stage: &RunStage) -> Result<Option<Vec<Vec<f64>>>> {
    let bad = |message: &str| {
        StageError::input(
            format!("stage `{}`: metric `confusion` {message}", stage.name),
            "a confusion matrix is a square table of counts, `confusion: [[..], [..]]` in metrics.json",
        )
    };
    let number = |value: &Value| {
        value
            .as_f64()
            .ok_or_else(|| bad("holds a value that is not a number"))
    };
    let mut rows: Vec<Vec<f64>> = Vec::new();
    if let Some(value) = stage.metrics.get("confusion") {
        let Value::Array(items) = value else {
            return Err(bad("is not a list of rows"));
        };
        for item in items {
            let Value::Array(cells) = item else {
                return Err(bad("is not a list of rows"));
            };
            rows.push(cells.iter().map(number).collect::<Result<_>>()?);
        }
    } else {
        let mut cells: BTreeMap<(usize, usize), f64> = BTreeMap::new();
        for (name, value) in &stage.metrics {
            let Some((row, column)) = name
                .strip_prefix("confusion.")
                .and_then(|rest| rest.split_once('.'))
            else {
                continue;
            };
            let (Ok(row), Ok(column)) = (row.parse(), column.parse()) else {
                return Err(bad(&format!(
                    "has a cell `{name}` that is not confusion.ROW.COLUMN"
                )));
            };
            cells.insert((row, column), number(value)?);
        }
        if cells.is_empty() {
            return Ok(None);
        }
        let size = cells.keys().map(|&(r, c)| r.max(c) + 1).max().unwrap_or(0);
        if size > 1000 {
            return Err(bad("has more than 1000 classes"));
        }
        rows = (0..size)
            .map(|r| {
                (0..size)
                    .map(|c| cells.get(&(r, c)).copied().unwrap_or(0.0))
                    .collect()
            })
            .collect();
    }
    if rows.is_empty() || rows.iter().any(|row| row.len() != rows.len()) {
        return Err(bad("is not square"));
    }
    Ok(Some(rows))
}

fn evaluation(document: &mut Document, stage: &RunStage, confusion: Vec<Vec<f64>>) -> Result<()> {
    document.heading(2, format!("Evaluation: {}", stage.name));
    let scores = [
        ("accuracy", "accuracy"),
        ("precision", "precision"),
        ("recall", "recall"),
        ("f1", "F1"),
        ("macro.precision", "macro precision"),
        ("macro.recall", "macro recall"),
        ("macro.f1", "macro F1"),
        ("loss", "loss"),
        ("rows", "rows"),
    ];
    let mut table = Table::new(vec!["metric".into(), "value".into()]);
    for (metric, label) in scores {
        if let Some(value) = stage.metrics.get(metric) {
            table
                .rows
                .push(vec![Cell::text(label), value_cell(Some(value))]);
        }
    }
    if !table.rows.is_empty() {
        document.table(table);
    }
    let title = format!("Confusion matrix of {}", stage.name);
    let chart = HeatMap {
        title: title.clone(),
        row_label: "true label".into(),
        column_label: "predicted label".into(),
        labels: (0..confusion.len())
            .map(|label| label.to_string())
            .collect(),
        cells: confusion,
    };
    let svg = chart.to_svg().map_err(draw_error)?;
    document.plot(&format!("{}-confusion", stage.name), title, svg);
    Ok(())
}

#[cfg(test)]
mod tests {
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
            status: StageStatus::Ran,
            duration_ms: 1,
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
            status: StageStatus::Ran,
            duration_ms: 1,
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
