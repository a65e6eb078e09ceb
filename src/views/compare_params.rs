//! The compare page's view of a sweep: each param that differs between the
//! rows against each key metric, one small scatter each, one point per
//! row; and which value of a metric is the best, which the table marks too.

use pipe_engine::{Column, ColumnKind, CompareTable, Direction};
use pipe_report::{ParamChart, ParamPoint};
use serde_json::Value;

use crate::views::compare_view::{digits_of, group_label, is_seed_key, shown, text_of};

/// The most params drawn against each metric, and the most metrics: a
/// sweep of more is read in the table, by sorting.
const MAX_PARAMS: usize = 6;
const MAX_METRICS: usize = 3;

/// One small chart: its plot name on the page, title and SVG.
pub(crate) struct Drawn {
    pub(crate) name: String,
    pub(crate) title: String,
    pub(crate) svg: String,
}

/// The best value of `column` over the table's lines, by its direction:
/// none for a column without one, or whose lines all have one value
/// (nothing to pick).
pub(crate) fn best_value(table: &CompareTable, column: &Column) -> Option<f64> {
    let values: Vec<f64> = table
        .groups
        .iter()
        .filter_map(|group| group.cells.get(&column.id)?.value.as_f64())
        .filter(|value| value.is_finite())
        .collect();
    let (low, high) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), &value| {
            (low.min(value), high.max(value))
        });
    if values.len() < 2 || low == high || !column.numeric {
        return None;
    }
    match column.direction? {
        Direction::Higher => Some(high),
        Direction::Lower => Some(low),
        Direction::Unknown => None,
    }
}

/// Whether `group`'s cell of `column` holds the column's best value.
pub(crate) fn is_best(
    table: &CompareTable,
    column: &Column,
    group: usize,
    best: Option<f64>,
) -> bool {
    let value = table.groups[group]
        .cells
        .get(&column.id)
        .and_then(|cell| cell.value.as_f64());
    best.is_some() && value == best
}

/// The charts of a sweep: for each key metric (the metrics shown when none
/// is key; those with a direction first), each param or matrix key that
/// differs between the lines against it; none when nothing differs or
/// there is one line. `key_of` names a line as the page's controls do.
pub(crate) fn param_charts(table: &CompareTable, key_of: &dyn Fn(usize) -> String) -> Vec<Drawn> {
    if table.groups.len() < 2 {
        return Vec::new();
    }
    let params: Vec<&Column> = table
        .columns
        .iter()
        .filter(|column| matches!(column.kind, ColumnKind::Param | ColumnKind::Matrix))
        .filter(|column| column.differs && !is_seed_key(&column.name))
        .take(MAX_PARAMS)
        .collect();
    let numeric_metric = |column: &&Column| column.kind == ColumnKind::Metric && column.numeric;
    let mut metrics: Vec<&Column> = table
        .columns
        .iter()
        .filter(numeric_metric)
        .filter(|column| column.key)
        .collect();
    if metrics.is_empty() {
        metrics = table
            .columns
            .iter()
            .filter(numeric_metric)
            .filter(|column| column.by_default)
            .collect();
    }
    // Results before timings: a metric that is better one way first.
    metrics.sort_by_key(|column| matches!(column.direction, None | Some(Direction::Unknown)));
    let mut charts = Vec::new();
    for metric in metrics.into_iter().take(MAX_METRICS) {
        for param in &params {
            if let Some(chart) = param_chart(table, param, metric, key_of) {
                let svg = chart.to_svg();
                charts.push(Drawn {
                    name: format!("{}-by-{}", metric.name, param.name),
                    title: chart.title,
                    svg,
                });
            }
        }
    }
    charts
}

/// `metric` against `param`, one point per line that has both as a
/// single value (a line over seeds has its mean; a param that differs
/// within a line has no one place).
fn param_chart(
    table: &CompareTable,
    param: &Column,
    metric: &Column,
    key_of: &dyn Fn(usize) -> String,
) -> Option<ParamChart> {
    let best = best_value(table, metric);
    let digits = digits_of(table, metric);
    let mut values: Vec<(String, Option<f64>)> = Vec::new();
    let mut points = Vec::new();
    for (index, group) in table.groups.iter().enumerate() {
        let Some(x) = group.cells.get(&param.id).map(|cell| &cell.value) else {
            continue;
        };
        let Some(y) = group
            .cells
            .get(&metric.id)
            .and_then(|cell| cell.value.as_f64())
        else {
            continue;
        };
        if matches!(x, Value::Array(_) | Value::Object(_) | Value::Null) {
            continue;
        }
        let x_text = text_of(x);
        let at = match values.iter().position(|(text, _)| *text == x_text) {
            Some(at) => at,
            None => {
                values.push((x_text.clone(), x.as_f64()));
                values.len() - 1
            }
        };
        let first = &table.rows[group.rows[0]];
        let value = shown(metric, group.cells.get(&metric.id), digits).value;
        points.push(ParamPoint {
            at,
            value: y,
            label: format!(
                "{}: {}={x_text}, {} {value}",
                group_label(group, &first.matrix),
                param.label,
                metric.label
            ),
            key: Some(key_of(index)),
            colour: index,
            best: is_best(table, metric, index, best),
        });
    }
    if points.len() < 2 || values.len() < 2 {
        return None;
    }
    // Numbers left to right by size; other values in the table's order.
    let mut order: Vec<usize> = (0..values.len()).collect();
    if values.iter().all(|(_, number)| number.is_some()) {
        order.sort_by(|&a, &b| {
            values[a]
                .1
                .unwrap_or(0.0)
                .total_cmp(&values[b].1.unwrap_or(0.0))
        });
    }
    let mut place = vec![0; values.len()];
    for (new, &old) in order.iter().enumerate() {
        place[old] = new;
    }
    for point in &mut points {
        point.at = place[point.at];
    }
    Some(ParamChart {
        title: format!("{} by {}", metric.label, param.label),
        param: param.name.clone(),
        values: order.iter().map(|&old| values[old].0.clone()).collect(),
        points,
    })
}
