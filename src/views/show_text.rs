//! `pipe show RUN` as text: the run and where it came from, what it is
//! doing while it is going, its key metrics (a table of its combinations
//! for a sweep), its report, params, stages, plots and other metrics.
//! Every output path it names is this run's, or says whose it is: the
//! workspace may hold another run's file there.

use std::fmt::Write;

use pipe_engine::{output_holding, CombinationShown, InWorkspace, RunRecord, RunShown};
use serde_json::Value;

use crate::views::value_text::{
    date, git_label_explained, rounded, run_list, show_value, took, unrounded, width,
};

pub fn show_text(shown: &RunShown) -> String {
    let mut out = String::new();
    header(&mut out, shown);
    key_metrics(&mut out, shown);
    params(&mut out, shown);
    stages(&mut out, shown);
    plots(&mut out, shown);
    other_metrics(&mut out, &shown.record);
    out
}

/// `pipe show --open`: the path opened, for a script to take.
pub fn opened(path: &std::path::Path) -> String {
    format!("{}\n", path.display())
}

/// `pipe show --open`: whose output the path holds, and that the
/// workspace was left alone.
pub fn opened_from_cache(run: pipe_engine::RunId, output: &str) -> String {
    format!(
        "run #{run}'s `{output}`, read-only copies from the cache (the workspace is not touched)\n"
    )
}

/// `pipe show --open` whose opener could not start.
pub fn not_opened(error: &std::io::Error) -> String {
    format!("warning: could not open it: {error}\n")
}

fn header(out: &mut String, shown: &RunShown) {
    let run = &shown.record;
    let _ = writeln!(out, "run #{}  {}  {}", run.id, run.pipeline, run.status);
    if let Some(going) = &shown.in_progress {
        let finished = run.stages.len();
        let now = match going.running.as_slice() {
            [] => String::new(),
            running => format!(
                "; running now: {}{}",
                running.join(", "),
                going
                    .pid
                    .map(|pid| format!(" (pid {pid})"))
                    .unwrap_or_default()
            ),
        };
        let _ = writeln!(
            out,
            "in progress: {finished} {} finished so far{now}",
            if finished == 1 { "stage" } else { "stages" }
        );
    }
    if let Some(origins) = shown.restored.only_restored() {
        let _ = writeln!(
            out,
            "restored the results of run {}: nothing ran",
            run_list(&origins)
        );
    }
    if let Some(uid) = &run.uid {
        let _ = writeln!(out, "uid      {uid}");
    }
    if let Some(name) = &run.name {
        let _ = writeln!(out, "name     {name}");
    }
    if !run.tags.is_empty() {
        let _ = writeln!(out, "tags     {}", run.tags.join(", "));
    }
    if let Some(origin) = &run.origin {
        let _ = writeln!(out, "pulled   from {origin}");
    }
    if let Some(unverified) = run.unverified_summary() {
        let _ = writeln!(
            out,
            "unverified  {unverified}: as its record says, not borne out by its results or this repository"
        );
    }
    if let Some(stages) = run.withheld_summary() {
        let _ = writeln!(out, "not shown   outputs and metrics of {stages}");
    }
    let _ = writeln!(out, "started  {} UTC", date(run.started_ms));
    if let Some(end) = run.ended_ms {
        let _ = writeln!(out, "duration {}", took(end.saturating_sub(run.started_ms)));
    }
    let _ = writeln!(out, "commit   {}", git_label_explained(run));
    let _ = writeln!(out, "command  {}", run.argv.join(" "));
    if is_one_combination_of_a_sweep(run) {
        let _ = writeln!(
            out,
            "         one combination of that sweep: -S {}",
            run.overrides
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" -S ")
        );
    }
    workspace_line(out, shown);
}

/// A run of `pipe run -m` whose combinations ran one run each: its
/// command line is the sweep's, its `-S` values its own.
fn is_one_combination_of_a_sweep(run: &RunRecord) -> bool {
    !run.sweep
        && run
            .argv
            .iter()
            .skip(1)
            .take_while(|arg| *arg != "--")
            .any(|arg| arg == "-m" || arg == "--multirun")
}

/// Whether the workspace holds the run's outputs, and whose they are when
/// it does not.
fn workspace_line(out: &mut String, shown: &RunShown) {
    let outputs = &shown.outputs;
    let held = outputs.iter().filter(|output| output.holds).count();
    if outputs.is_empty() || shown.in_progress.is_some() {
        return;
    }
    if held == outputs.len() {
        let _ = writeln!(out, "workspace holds this run's outputs");
        return;
    }
    // How many of the others are in each state, in the order first met.
    let mut others: Vec<(String, usize)> = Vec::new();
    for output in outputs.iter().filter(|output| !output.holds) {
        let said = match &output.state {
            InWorkspace::AnotherRun { run } => format!("run #{run}'s"),
            InWorkspace::AnotherStage { of } => format!("its {of}'s"),
            InWorkspace::Changed => "changed".to_string(),
            _ => "missing".to_string(),
        };
        match others.iter_mut().find(|(state, _)| *state == said) {
            Some((_, count)) => *count += 1,
            None => others.push((said, 1)),
        }
    }
    let others: Vec<String> = others
        .iter()
        .map(|(state, count)| format!("{count} {} {state}", if *count == 1 { "is" } else { "are" }))
        .collect();
    let _ = writeln!(
        out,
        "workspace holds {held} of its {} outputs: {} ({})",
        outputs.len(),
        others.join(", "),
        bring_back(shown)
    );
}

/// What the workspace holds where a run's output is not.
fn whose(state: &InWorkspace) -> String {
    match state {
        InWorkspace::ThisRun => "this run's".to_string(),
        InWorkspace::AnotherRun { run } => format!("the workspace holds run #{run}'s"),
        InWorkspace::AnotherStage { of } => format!("the workspace holds its {of}'s"),
        InWorkspace::Changed => "changed in the workspace".to_string(),
        InWorkspace::Missing => "not in the workspace".to_string(),
    }
}

/// How to see the run's own outputs: from the cache, or back in the
/// workspace. Where several of its stages wrote one path (a sweep's work
/// trees), one workspace holds one combination's: one stage's output is
/// opened, or one combination applied.
fn bring_back(shown: &RunShown) -> String {
    let run = shown.record.id;
    let shared = shown.outputs.iter().find(|output| {
        !output.holds
            && shown
                .outputs
                .iter()
                .filter(|other| other.path == output.path)
                .count()
                > 1
    });
    let combination = shared.and_then(|output| {
        let stage = shown
            .record
            .stages
            .iter()
            .find(|s| s.stage == output.stage)?;
        let combination = &stage.identity.combination;
        (!combination.is_empty()).then(|| (output, combination.to_string()))
    });
    match combination {
        Some((output, combination)) => format!(
            "one combination's at a time: `pipe show {run} --open={}:{}` or `pipe apply {run} --row {combination}`",
            output.stage, output.path
        ),
        None => format!("`pipe show {run} --open` or `pipe checkout {run}`"),
    }
}

/// ` (the workspace holds run #12's: ...)` after a path of the run that
/// the workspace does not hold this run's result at; empty when it does.
fn mark(shown: &RunShown, path: &str) -> Option<String> {
    let output = output_holding(&shown.outputs, path)?;
    (!output.holds).then(|| format!(" ({}: {})", whose(&output.state), bring_back(shown)))
}

/// The key metrics: a sweep's (or a matrix's) as a table of its
/// combinations, then those of the stages outside them.
fn key_metrics(out: &mut String, shown: &RunShown) {
    let run = &shown.record;
    let summary = run.summary();
    let in_table: Vec<&str> = run
        .stages
        .iter()
        .filter(|stage| !shown.combinations.is_empty() && !stage.identity.combination.is_empty())
        .map(|stage| stage.stage.as_str())
        .collect();
    if !shown.combinations.is_empty() {
        combinations_table(out, run, &shown.combinations);
    }
    let rest: Vec<_> = summary
        .key_metrics
        .iter()
        .filter(|metric| !in_table.contains(&metric.stage.as_str()))
        .collect();
    if !rest.is_empty() {
        let _ = writeln!(out, "key metrics");
        let labels: Vec<String> = rest
            .iter()
            .map(|metric| format!("{}: {}", metric.stage, metric.metric))
            .collect();
        let label_width = width(labels.iter().map(String::as_str));
        for (label, metric) in labels.iter().zip(&rest) {
            let _ = writeln!(
                out,
                "  {label:<label_width$}  {}",
                rounded(&metric.metric, &metric.value)
            );
        }
    }
    for report in &summary.reports {
        let note = mark(shown, report).unwrap_or_else(|| " (report.md beside it)".to_string());
        let _ = writeln!(out, "report   {report}{note}");
    }
}

/// One line per combination: its values, then its key metrics.
fn combinations_table(out: &mut String, run: &RunRecord, rows: &[CombinationShown]) {
    let mut keys: Vec<&str> = Vec::new();
    let mut metrics: Vec<(&str, &str)> = Vec::new();
    for row in rows {
        for key in row.combination.keys() {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        for metric in &row.key_metrics {
            let column = (metric.stage.as_str(), metric.metric.as_str());
            if !metrics.contains(&column) {
                metrics.push(column);
            }
        }
    }
    let mut table: Vec<Vec<String>> = vec![keys
        .iter()
        .map(|key| key.to_string())
        .chain(
            metrics
                .iter()
                .map(|(stage, metric)| format!("{stage}: {metric}")),
        )
        .collect()];
    for row in rows {
        let values = keys
            .iter()
            .map(|key| row.combination.get(key).unwrap_or("-").to_string());
        let figures = metrics.iter().map(|(stage, name)| {
            row.key_metrics
                .iter()
                .find(|metric| metric.stage == *stage && metric.metric == *name)
                .map(|metric| rounded(&metric.metric, &metric.value))
                .unwrap_or_else(|| "-".to_string())
        });
        table.push(values.chain(figures).collect());
    }
    let _ = writeln!(
        out,
        "combinations  {} (`pipe compare {}` compares them)",
        rows.len(),
        run.id
    );
    let widths: Vec<usize> = (0..table[0].len())
        .map(|column| width(table.iter().map(|row| row[column].as_str())))
        .collect();
    for row in &table {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, &width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "  {}", cells.join("  ").trim_end());
    }
}

/// The params; a sweep's swept ones hold every value, said as such.
fn params(out: &mut String, shown: &RunShown) {
    let run = &shown.record;
    let params = pipe_engine::flatten_params(&run.params);
    if params.is_empty() || run.params == Value::Null {
        return;
    }
    let _ = writeln!(out, "params");
    let param_width = width(params.keys().map(String::as_str));
    for (name, value) in &params {
        let swept = match shown.swept.contains(name) {
            true => "  (swept: one value per combination)",
            false => "",
        };
        let _ = writeln!(
            out,
            "  {name:<param_width$}  {}{swept}",
            show_value(&Some(value.clone()))
        );
    }
}

fn stages(out: &mut String, shown: &RunShown) {
    let run = &shown.record;
    let _ = writeln!(out, "stages");
    let running: &[String] = shown
        .in_progress
        .as_ref()
        .map_or(&[], |going| going.running.as_slice());
    let stage_width = width(
        run.stages
            .iter()
            .map(|stage| stage.stage.as_str())
            .chain(running.iter().map(String::as_str)),
    );
    let durations: Vec<String> = run
        .stages
        .iter()
        .map(|stage| took(stage.duration_ms))
        .collect();
    let duration_width = width(durations.iter().map(String::as_str)).max(7);
    for (stage, duration) in run.stages.iter().zip(&durations) {
        let mut detail = stage
            .detail
            .as_deref()
            .map(|detail| format!("  {detail}"))
            .unwrap_or_default();
        if let Some(job) = &stage.job {
            let node = stage
                .node
                .as_deref()
                .map(|node| format!(" on {node}"))
                .unwrap_or_default();
            detail = format!("  [Slurm job {job}{node}]{detail}");
        }
        if let Some(origin) = shown.restored.stages.get(&stage.stage) {
            detail = format!("  from #{origin}{detail}");
        }
        let _ = writeln!(
            out,
            "  {:<stage_width$}  {:<8}  {duration:>duration_width$}{detail}",
            stage.stage,
            stage.status.as_str(),
        );
    }
    for stage in running {
        let _ = writeln!(out, "  {stage:<stage_width$}  running");
    }
}

fn plots(out: &mut String, shown: &RunShown) {
    let run = &shown.record;
    let plots: Vec<(&str, &pipe_protocol::PlotSpec)> = run
        .stages
        .iter()
        .flat_map(|stage| {
            stage
                .identity
                .plots
                .iter()
                .map(|plot| (stage.stage.as_str(), plot))
        })
        .collect();
    if plots.is_empty() {
        return;
    }
    let _ = writeln!(out, "plots");
    let stage_width = width(run.stages.iter().map(|stage| stage.stage.as_str()));
    let path_width = width(plots.iter().map(|(_, plot)| plot.path.as_str()));
    for (stage, plot) in plots {
        let _ = writeln!(
            out,
            "  {stage:<stage_width$}  {:<path_width$}  {}{}",
            plot.path,
            plot.summary(),
            mark(shown, &plot.path).unwrap_or_default()
        );
    }
}

fn other_metrics(out: &mut String, run: &RunRecord) {
    let summary = run.summary();
    if summary.other_metrics.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "{}",
        if summary.key_metrics.is_empty() {
            "metrics"
        } else {
            "other metrics"
        }
    );
    for metric in &summary.other_metrics {
        let _ = writeln!(
            out,
            "  {}: {} = {}",
            metric.stage,
            metric.metric,
            unrounded(&metric.metric, &metric.value)
        );
    }
}
