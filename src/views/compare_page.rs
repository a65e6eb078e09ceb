//! `pipe compare --html`: one self-contained page to explore the table.
//! Every column is there, the key metrics ticked (what the terminal shows
//! without `--all`), the rest a tick away; rows filter by text; each line
//! (a row, or the mean ± std of a row's seeds) is a `data-key` that the
//! table row and every chart share, so one switch hides it everywhere.
//! It picks the winner at a glance: the best of each key metric marked,
//! changes coloured, no cell wrapped, best first at a header's first
//! click, and a sweep's params drawn against its key metrics
//! (`compare_params`).

use std::collections::BTreeMap;

use pipe_engine::{
    row_label, Column, ColumnKind, CompareTable, Direction, EngineError, Group, Pairs, PlotFile,
    Result, Row, RunId, RunRecord, StepCurves, Verdict,
};
use pipe_report::plot::{columns, draw, DataTable, PlotRun};
use pipe_report::{Better, Cell as PageCell, Document, Explore, Table, Tone};
use pipe_report::{LineChart, Series};

use crate::views::compare_params::{best_value, is_best, param_charts};
use crate::views::compare_view::{
    baseline_text, digits_of, group_label, is_seed_key, shown, text_of, verdict_mark,
};

/// The per-epoch metrics drawn as overlaid curves, one chart each per
/// training stage, one line per row.
const CURVES: &[(&str, &str)] = &[
    ("train_loss", "train loss"),
    ("val_loss", "validation loss"),
    ("val_acc", "validation accuracy"),
];

/// The per-step columns overlaid, one chart each per training stage, one
/// line per row.
const STEP_CURVES: &[(&str, &str)] = &[("loss", "train loss"), ("lr", "learning rate")];

/// The most points of one row's step curve drawn (report/html's limit).
const MAX_STEP_POINTS: usize = 2000;

/// A curve's (x, y) points, or a band's (lower, upper) edges.
type Curve = Vec<(f64, f64)>;

/// Per group (by index), the curve of each of its rows that has one:
/// (row index, points).
type GroupCurves = BTreeMap<usize, Vec<(usize, Curve)>>;

/// Per chart, its [`GroupCurves`].
type Gathered<K> = BTreeMap<K, GroupCurves>;

/// The key a group's table row and lines share: its line number, 1 first,
/// which is also how the page's address names it (`#hide=2`).
fn key_of(group: usize) -> String {
    (group + 1).to_string()
}

/// One self-contained page (pipe-report's): the table as `--md` has it, the
/// warnings, and for every training stage the per-epoch curves of all rows
/// overlaid, read from the runs' recorded metrics (`epochs.N.*`), so a page
/// can be drawn for runs whose outputs are long gone from the workspace;
/// then the rows' per-step curves overlaid (`steps`, read from the cache),
/// then each plot the stages declare with every row's data overlaid
/// (`plots`, read from the cache). `table` has every column (`--all`);
/// `all` ticks them all at first.
pub fn html(
    table: &CompareTable,
    runs: &[RunRecord],
    steps: &StepCurves,
    plots: &[PlotFile],
    all: bool,
) -> Result<String> {
    let mut page = Document::new(format!(
        "pipe compare: {} row{}",
        table.groups.len(),
        if table.groups.len() == 1 { "" } else { "s" }
    ));
    page.paragraph(format!(
        "Baseline: run {}. Changes are against it; ▲/▼ is the direction of the change, ✓ better and ✗ worse by the metric's direction. ★ marks the best value of each key metric; a first click on a metric's header puts the best first.",
        baseline_text(table)
    ));
    for warning in &table.warnings {
        page.paragraph(format!("Warning: {}", warning.message));
    }
    page.heading(2, "Runs");
    page.table(runs_table(table, all));
    let sweep = param_charts(table, &key_of);
    if !sweep.is_empty() {
        page.heading(2, "Params against key metrics");
        page.paragraph(
            "Each param that differs between the rows against each key metric: one point per row (hover for its run), the best ringed; rows with one value at one place sit side by side.",
        );
    }
    for chart in sweep {
        page.small_plot(&chart.name, chart.title, chart.svg);
    }

    let curves = gather_epochs(table, runs);
    if !curves.is_empty() {
        page.heading(2, "Curves");
    }
    for ((stage, metric), groups) in curves {
        let label = label_of(CURVES, metric);
        let file = format!("{stage}-{metric}");
        let series = lines(table, groups, &|row| curve_label(table, row), true);
        overlaid_plot(&mut page, &file, label, "epoch", &stage, series)?;
    }
    step_plots(&mut page, table, steps)?;
    declared_plots(&mut page, table, plots);
    Ok(page.to_html())
}

/// The table: one row per group, every column, those the terminal shows
/// by default ticked. A value's change against the baseline follows it,
/// coloured by its verdict; the best value of each key metric is marked;
/// headers are the short labels the terminal shows (abbreviated when
/// long), the full name their tooltip.
fn runs_table(table: &CompareTable, all: bool) -> Table {
    let mut columns = vec!["run".to_string()];
    columns.extend(table.columns.iter().map(|column| column.name.clone()));
    let mut shown_table = Table::new(columns);
    let digits: Vec<usize> = table
        .columns
        .iter()
        .map(|column| digits_of(table, column))
        .collect();
    // Only the key metrics': the winner is picked by what the pipeline
    // says matters, not by every number a stage reports.
    let best: Vec<Option<f64>> = table
        .columns
        .iter()
        .map(|column| column.key.then(|| best_value(table, column)).flatten())
        .collect();
    for (index, group) in table.groups.iter().enumerate() {
        let first = &table.rows[group.rows[0]];
        let mut label = group_label(group, &first.matrix);
        if group.n > 1 {
            label = format!("{label} (mean of {})", group.n);
        }
        let mut cells = vec![PageCell::text(label)];
        for (column_index, column) in table.columns.iter().enumerate() {
            let cell = group.cells.get(&column.id);
            let shown = shown(column, cell, digits[column_index]);
            let mut page_cell = match cell.and_then(|cell| cell.value.as_f64()) {
                Some(number) if column.numeric => PageCell::number_as(number, shown.value),
                _ => PageCell::text(shown.value),
            };
            if !shown.change.is_empty() {
                let mark = verdict_mark(shown.verdict);
                let tone = match shown.verdict {
                    Some(Verdict::Better) => Some(Tone::Better),
                    Some(Verdict::Worse) => Some(Tone::Worse),
                    _ => None,
                };
                page_cell =
                    page_cell.with_change(format!("{} {}{mark}", shown.arrow, shown.change), tone);
            }
            if is_best(table, column, index, best[column_index]) {
                page_cell = page_cell.as_best();
            }
            cells.push(page_cell);
        }
        shown_table.rows.push(cells);
    }
    let mut on = vec![true];
    on.extend(table.columns.iter().map(|column| all || column.by_default));
    let mut short_names = vec![None];
    short_names.extend(short_headers(&table.columns));
    let mut better = vec![None];
    better.extend(table.columns.iter().map(|column| match column.direction {
        Some(Direction::Higher) => Some(Better::Higher),
        Some(Direction::Lower) => Some(Better::Lower),
        _ => None,
    }));
    shown_table.explore = Some(Explore {
        row_keys: (0..table.groups.len()).map(key_of).collect(),
        shown: on,
        short_names,
        better,
    });
    shown_table
}

/// The most characters of a header before it is abbreviated.
const HEADER_CHARS: usize = 16;

/// Per column, the header shown when it is not the full name: the label
/// the terminal shows (`val_acc` for `train.val_acc`), and a label longer
/// than [`HEADER_CHARS`] shortened to its last dotted part
/// (`memory.peak_rss_bytes` -> `peak_rss_bytes`) or cut in the middle
/// (`optimize…e_bytes`), unless that would head two columns alike.
fn short_headers(columns: &[Column]) -> Vec<Option<String>> {
    let shortened = |label: &str| -> String {
        if label.chars().count() <= HEADER_CHARS {
            return label.to_string();
        }
        let last = label.rsplit('.').next().unwrap_or(label);
        if last.chars().count() <= HEADER_CHARS {
            return last.to_string();
        }
        let chars: Vec<char> = last.chars().collect();
        let head: String = chars[..HEADER_CHARS / 2].iter().collect();
        let tail: String = chars[chars.len() - (HEADER_CHARS / 2 - 1)..]
            .iter()
            .collect();
        format!("{head}…{tail}")
    };
    let wanted: Vec<String> = columns
        .iter()
        .map(|column| shortened(&column.label))
        .collect();
    columns
        .iter()
        .zip(&wanted)
        .map(|(column, short)| {
            let unique = wanted.iter().filter(|other| *other == short).count() == 1;
            let header = if unique { short } else { &column.label };
            (*header != column.name).then(|| header.clone())
        })
        .collect()
}

/// A curve's name in a legend: its row, and the value of each param that
/// differs between the rows (`#4 lr=0.0001 seed=2`), so that a reader
/// need not look the runs up.
fn curve_label(table: &CompareTable, row: &Row) -> String {
    let mut label = row_label(row.run, &row.matrix);
    label.push_str(&differing_params(table, row, false));
    label
}

/// ` lr=0.0001 seed=2`: the params that differ between the rows, as `row`
/// has them; `no_seed` leaves seeds out (a line over seeds has none).
fn differing_params(table: &CompareTable, row: &Row, no_seed: bool) -> String {
    let mut text = String::new();
    for column in &table.columns {
        if column.kind != ColumnKind::Param || !column.differs {
            continue;
        }
        if no_seed && is_seed_key(&column.name) {
            continue;
        }
        if let Some(value) = row.values.get(&column.id) {
            text.push_str(&format!(" {}={}", column.label, text_of(value)));
        }
    }
    text
}

/// A line over the seeds of `group`: `#1,#2 lr=0.0001 (mean ± std of 2
/// seeds)`, its params with `with_params`.
fn group_curve_label(
    table: &CompareTable,
    group: &Group,
    seeds: usize,
    with_params: bool,
) -> String {
    let first = &table.rows[group.rows[0]];
    let mut label = group_label(group, &first.matrix);
    if with_params {
        label.push_str(&differing_params(table, first, true));
    }
    format!("{label} (mean ± std of {seeds} seeds)")
}

/// (base stage, metric) -> per group the curve of each row that has it,
/// from the stages the table found for the row.
fn gather_epochs(table: &CompareTable, runs: &[RunRecord]) -> Gathered<(String, &'static str)> {
    let by_id: BTreeMap<RunId, &RunRecord> = runs.iter().map(|run| (run.id, run)).collect();
    let mut curves: Gathered<(String, &'static str)> = BTreeMap::new();
    for (index, row) in table.rows.iter().enumerate() {
        let Some(run) = by_id.get(&row.run) else {
            continue;
        };
        for stage in row.stages.iter().filter_map(|&index| run.stages.get(index)) {
            let base = &stage.identity.base_name;
            for (metric, _) in CURVES {
                let suffix = format!(".{metric}");
                let mut points: Vec<(f64, f64)> = stage
                    .metrics
                    .iter()
                    .filter_map(|(name, value)| {
                        let epoch = name.strip_prefix("epochs.")?.strip_suffix(&suffix)?;
                        Some((epoch.parse::<f64>().ok()?, value.as_f64()?))
                    })
                    .collect();
                if points.is_empty() {
                    continue;
                }
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                curves
                    .entry((base.clone(), metric))
                    .or_default()
                    .entry(row.group)
                    .or_default()
                    .push((index, points));
            }
        }
    }
    curves
}

/// One chart's lines, in the table's order: a group of one result is its
/// row's curve, named by `single`; a group of seeds is their mean with a
/// band of ± one (sample) std, as the table shows `mean ± std`. A row that
/// restored another's result is that result again and not counted twice.
fn lines(
    table: &CompareTable,
    groups: GroupCurves,
    single: &dyn Fn(&Row) -> String,
    with_params: bool,
) -> Vec<Series> {
    let mut series = Vec::new();
    for (index, mut members) in groups {
        let group = &table.groups[index];
        if !group.distinct.is_empty() {
            members.retain(|(row, _)| group.distinct.contains(row));
        }
        let key = key_of(index);
        let curves: Vec<&[(f64, f64)]> = members.iter().map(|(_, points)| &points[..]).collect();
        match mean_curve(&curves) {
            Some((mean, band)) if members.len() > 1 => series.push(
                Series::new(
                    group_curve_label(table, group, members.len(), with_params),
                    mean,
                )
                .with_band(band)
                .with_key(key),
            ),
            // One result, or seeds with no point in common: each its own.
            _ => series.extend(members.iter().map(|(row, points)| {
                Series::new(single(&table.rows[*row]), points.clone()).with_key(key.clone())
            })),
        }
    }
    series
}

/// The mean of `curves` at each x that every one of them has, and per
/// point (mean - std, mean + std) with the sample std; `None` when they
/// share no x. Points where a seed has no value are left out rather than
/// averaged over fewer seeds, so every point is the mean of the same runs.
fn mean_curve(curves: &[&[(f64, f64)]]) -> Option<(Curve, Curve)> {
    let (first, others) = curves.split_first()?;
    let mut mean = Vec::new();
    let mut band = Vec::new();
    for &(x, y) in *first {
        let mut values = vec![y];
        for other in others {
            match other.iter().find(|point| point.0 == x) {
                Some(point) => values.push(point.1),
                None => break,
            }
        }
        if values.len() < curves.len() {
            continue;
        }
        let n = values.len() as f64;
        let average = values.iter().sum::<f64>() / n;
        let std = if values.len() > 1 {
            (values.iter().map(|v| (v - average).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        mean.push((x, average));
        band.push((average - std, average + std));
    }
    (!mean.is_empty()).then_some((mean, band))
}

/// The rows' step curves overlaid: with one epoch, the per-epoch charts are
/// a dot per row, and these show how each row trained.
fn step_plots(page: &mut Document, table: &CompareTable, steps: &StepCurves) -> Result<()> {
    let mut charts: Gathered<(&str, &str)> = BTreeMap::new();
    for curve in &steps.curves {
        let Some(x) = curve.columns.get("step") else {
            continue;
        };
        let row = &table.rows[curve.row];
        for (column, _) in STEP_CURVES {
            let Some(y) = curve.columns.get(*column) else {
                continue;
            };
            // A long run's step log is thinned to every n-th point and the
            // last, as the report does: a few thousand show all there is.
            let all = x.len().min(y.len());
            let stride = all.div_ceil(MAX_STEP_POINTS).max(1);
            let points: Vec<(f64, f64)> = (0..all)
                .filter(|&index| index % stride == 0 || index + 1 == all)
                .map(|index| (x[index], y[index]))
                .collect();
            charts
                .entry((curve.stage.as_str(), column))
                .or_default()
                .entry(row.group)
                .or_default()
                .push((curve.row, points));
        }
    }
    if !charts.is_empty() || !steps.unreadable.is_empty() {
        page.heading(2, "Curves per step");
    }
    if !steps.unreadable.is_empty() {
        page.paragraph(format!(
            "Per-step curves that could not be read, so are not drawn: {}.",
            steps.unreadable.join("; ")
        ));
    }
    for ((stage, column), groups) in charts {
        let label = label_of(STEP_CURVES, column);
        let file = format!("{stage}-{column}-per-step");
        let series = lines(table, groups, &|row| row_label(row.run, &row.matrix), false);
        overlaid_plot(page, &file, label, "step", stage, series)?;
    }
    Ok(())
}

/// The label a curve is drawn with: `labels`' own, else its name.
fn label_of<'a>(labels: &[(&str, &'a str)], name: &'a str) -> &'a str {
    labels
        .iter()
        .find(|(each, _)| *each == name)
        .map_or(name, |(_, label)| label)
}

/// One chart of the rows' curves of `label` per `x` (epoch or step) of
/// `stage`, as plot `file` of the page.
fn overlaid_plot(
    page: &mut Document,
    file: &str,
    label: &str,
    x: &str,
    stage: &str,
    series: Vec<Series>,
) -> Result<()> {
    let title = format!(
        "{} per {x} of {stage}",
        pipe_report::text::capitalised(label)
    );
    let chart = LineChart {
        title: title.clone(),
        x_label: x.into(),
        y_label: label.to_string(),
        series,
    };
    let svg = chart
        .to_svg()
        .map_err(|e| EngineError::Internal(format!("cannot draw `{title}`: {e}")))?;
    page.plot(file, title, svg);
    Ok(())
}

/// Each plot the rows' stages declare, one chart per stage and file with
/// every row's data overlaid (a confusion matrix: one per row), legends
/// naming the rows and the params that differ between them. A row whose
/// file cannot be read or drawn as declared is named under the chart,
/// and the others are drawn.
fn declared_plots(page: &mut Document, table: &CompareTable, plots: &[PlotFile]) {
    let mut charts: Vec<((&str, String), Vec<&PlotFile>)> = Vec::new();
    for file in plots {
        let id = (
            file.stage.as_str(),
            generalised(&file.spec.path, &table.rows[file.row].matrix),
        );
        match charts.iter_mut().find(|(each, _)| *each == id) {
            Some((_, files)) => files.push(file),
            None => charts.push((id, vec![file])),
        }
    }
    if !charts.is_empty() {
        page.heading(2, "Plots");
    }
    for ((stage, path), files) in charts {
        // As the first row's run declared it: runs that declared it
        // otherwise are drawn the same way, so that they overlay.
        let mut spec = files[0].spec.clone();
        spec.title.get_or_insert_with(|| path.clone());
        let spec = &spec;
        let mut problems = Vec::new();
        let mut read: Vec<(usize, DataTable)> = Vec::new();
        for file in &files {
            let row = &table.rows[file.row];
            let data = file
                .content
                .as_ref()
                .map_err(String::clone)
                .and_then(|bytes| {
                    DataTable::read(&file.spec.path, bytes).map_err(|e| e.to_string())
                })
                .and_then(|data| drawable(spec, &data).map(|()| data));
            match data {
                Ok(data) => read.push((file.row, data)),
                Err(problem) => problems.push(format!("#{} {stage}: {problem}", row.run)),
            }
        }
        let runs: Vec<PlotRun> = read
            .iter()
            .map(|(row, data)| PlotRun {
                name: curve_label(table, &table.rows[*row]),
                key: Some(key_of(table.rows[*row].group)),
                data,
            })
            .collect();
        match draw(spec, &runs) {
            Ok(figures) if !runs.is_empty() => {
                for figure in figures {
                    let title = format!("{} of {stage}", figure.title);
                    page.plot_with_table(
                        &format!("{stage}-{path}"),
                        title,
                        figure.svg,
                        figure.table,
                    );
                }
            }
            Ok(_) => {}
            Err(error) => problems.push(error.to_string()),
        }
        if !problems.is_empty() {
            page.paragraph(format!(
                "Not drawn in {path} of {stage}: {}.",
                problems.join("; ")
            ));
        }
    }
}

/// `path` with each value of the row's matrix combination that stands
/// between separators written as its key: the expansions of a matrix
/// stage write `eval/svm/roc.csv` and `eval/tree/roc.csv`, and both are
/// the plot `eval/{model}/roc.csv`, overlaid in one chart.
fn generalised(path: &str, matrix: &Pairs) -> String {
    let separator = |ch: Option<char>| ch.is_none_or(|ch| "/._-=@".contains(ch));
    let mut path = path.to_string();
    for (key, value) in &matrix.0 {
        if value.is_empty() {
            continue;
        }
        let mut out = String::with_capacity(path.len());
        let mut rest = path.as_str();
        while let Some(at) = rest.find(value.as_str()) {
            let before = if at > 0 {
                rest[..at].chars().last()
            } else {
                out.chars().last()
            };
            let after = rest[at + value.len()..].chars().next();
            out.push_str(&rest[..at]);
            if separator(before) && separator(after) {
                out.push_str(&format!("{{{key}}}"));
            } else {
                out.push_str(value);
            }
            rest = &rest[at + value.len()..];
        }
        out.push_str(rest);
        path = out;
    }
    path
}

/// Whether `data` can be drawn as `spec` says: its columns there, and
/// numbers where the chart needs them.
fn drawable(spec: &pipe_protocol::PlotSpec, data: &DataTable) -> std::result::Result<(), String> {
    let chosen = columns(spec, data).map_err(|e| e.to_string())?;
    if spec.kind.is_confusion() {
        return Ok(());
    }
    let numeric = chosen
        .y
        .iter()
        .chain((spec.kind != pipe_protocol::PlotKind::Bar).then_some(&chosen.x));
    for column in numeric {
        data.numbers(column).map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{generalised, mean_curve, short_headers, Column, ColumnKind, Pairs};

    fn column(name: &str, label: &str) -> Column {
        Column {
            id: format!("metric:{name}"),
            name: name.into(),
            label: label.into(),
            kind: ColumnKind::Metric,
            stage: None,
            metric: None,
            direction: None,
            numeric: true,
            differs: true,
            key: true,
            unit: None,
            by_default: true,
        }
    }

    #[test]
    fn long_headers_are_cut_unless_two_would_read_alike() {
        let columns = [
            column("train.val_acc", "val_acc"),
            column("lr", "lr"),
            column("train.memory.peak_rss_bytes", "memory.peak_rss_bytes"),
            column(
                "train.memory.optimizer_state_bytes",
                "memory.optimizer_state_bytes",
            ),
            column("a.throughput.tokens_per_s", "a.throughput.tokens_per_s"),
            column("b.throughput.tokens_per_s", "b.throughput.tokens_per_s"),
        ];
        assert_eq!(
            short_headers(&columns),
            [
                Some("val_acc".to_string()),
                None,
                Some("peak_rss_bytes".to_string()),
                Some("optimize…e_bytes".to_string()),
                // Both would be `tokens_per_s`: each keeps its label.
                None,
                None,
            ]
        );
    }

    #[test]
    fn a_matrix_value_between_separators_is_written_as_its_key() {
        let matrix = Pairs(vec![
            ("model".into(), "svm".into()),
            ("n".into(), "1".into()),
        ]);
        assert_eq!(
            generalised("eval/svm/roc-1.csv", &matrix),
            "eval/{model}/roc-{n}.csv"
        );
        assert_eq!(
            generalised("eval/svms/roc1.csv", &matrix),
            "eval/svms/roc1.csv"
        );
        assert_eq!(generalised("1/svm", &matrix), "{n}/{model}");
    }

    #[test]
    fn a_mean_curve_keeps_the_points_every_seed_has_with_the_sample_std() {
        let a = [(1.0, 0.5), (2.0, 0.6), (3.0, 0.7)];
        let b = [(1.0, 0.7), (2.0, 0.8)];
        let (mean, band) = mean_curve(&[&a, &b]).unwrap();
        assert_eq!(mean.len(), 2, "epoch 3 is only one seed's");
        assert!((mean[0].1 - 0.6).abs() < 1e-12 && mean[0].0 == 1.0);
        // Sample std of 0.5 and 0.7: 0.1 * sqrt(2).
        let std = 0.1 * 2f64.sqrt();
        assert!((band[0].0 - (0.6 - std)).abs() < 1e-12, "{band:?}");
        assert!((band[0].1 - (0.6 + std)).abs() < 1e-12, "{band:?}");
        assert!(mean_curve(&[&a, &[(9.0, 1.0)]]).is_none());
    }
}
