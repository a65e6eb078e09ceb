//! Plots as SVG text, drawn with plotters' SVG backend from plain data.
//!
//! Text is written as SVG `<text>` in the viewer's sans-serif font and
//! sized by plotters' estimate (no font files are read), so a chart is the
//! same bytes on every machine.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::text::format_number;
use crate::{ReportError, Result};

const WIDTH: u32 = 720;
const HEIGHT: u32 = 360;
const FONT: &str = "sans-serif";

/// A line series of more points than this is drawn without markers.
const MAX_MARKED_POINTS: usize = 100;

/// Series colours, in order (a colour-blind-safe palette); the n-th series
/// of every chart gets the same one.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];

fn colour(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// One named line of a [`LineChart`], or one group member of a
/// [`BarChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
        }
    }
}

/// Lines over a shared x axis (epochs, steps), one per series; the points
/// of a short series are marked, so that a one-point series still shows.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

/// Horizontal bars, one group per category and one bar per series in it
/// (`time in this run` and `compute time` of each stage).
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub value_label: String,
    pub categories: Vec<String>,
    /// (series name, one value per category).
    pub series: Vec<(String, Vec<f64>)>,
}

/// A square grid of counts coloured by size, rows and columns labelled
/// (a confusion matrix: true label by row, predicted by column).
#[derive(Debug, Clone, PartialEq)]
pub struct HeatMap {
    pub title: String,
    pub row_label: String,
    pub column_label: String,
    pub labels: Vec<String>,
    pub cells: Vec<Vec<f64>>,
}

fn plot_error(title: &str) -> impl Fn(String) -> ReportError + '_ {
    move |message| ReportError::Plot {
        title: title.to_string(),
        message,
    }
}

/// Draws into an SVG string of the standard size.
fn draw_svg(
    title: &str,
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), String>,
) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| e.to_string())
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(|e| e.to_string()))
            .map_err(plot_error(title))?;
    }
    Ok(svg)
}

/// A label cut to `max` characters, for axes; tables show the full text.
fn shorten(label: &str, max: usize) -> String {
    let first_line = label.lines().next().unwrap_or("");
    if first_line.chars().count() <= max && first_line.len() == label.len() {
        return label.to_string();
    }
    let cut: String = first_line.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// `[low, high]` padded by 5 % (or by one unit when the data is a single
/// value), so no point sits on the frame.
fn padded_range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (low, high) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !low.is_finite() || !high.is_finite() {
        return None;
    }
    let spread = high - low;
    if spread <= f64::EPSILON * high.abs().max(1.0) {
        let pad = (high.abs() * 0.1).max(0.5);
        return Some((low - pad, high + pad));
    }
    Some((low - spread * 0.05, high + spread * 0.05))
}

impl LineChart {
    /// The chart as SVG. Non-finite points (a NaN loss) are left out; a
    /// chart without any finite point says so instead of drawing axes.
    pub fn to_svg(&self) -> Result<String> {
        let finite: Vec<Vec<(f64, f64)>> = self
            .series
            .iter()
            .map(|series| {
                series
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .collect()
            })
            .collect();
        let x_range = padded_range(finite.iter().flatten().map(|p| p.0));
        let y_range = padded_range(finite.iter().flatten().map(|p| p.1));
        draw_svg(&self.title, HEIGHT, |root| {
            let (Some((x0, x1)), Some((y0, y1))) = (x_range, y_range) else {
                return no_data(root, &self.title);
            };
            let mut chart = ChartBuilder::on(root)
                .caption(shorten(&self.title, 80), (FONT, 18))
                .margin(12)
                .margin_bottom(LEGEND_HEIGHT)
                .x_label_area_size(40)
                .y_label_area_size(64)
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|e| e.to_string())?;
            // Epochs and steps are whole numbers: no label between them.
            let whole_x = finite.iter().flatten().all(|(x, _)| x.fract() == 0.0);
            let x_format = |v: &f64| {
                if whole_x && v.fract() != 0.0 {
                    String::new()
                } else {
                    format_number(*v)
                }
            };
            let y_format = |v: &f64| format_number(*v);
            chart
                .configure_mesh()
                .light_line_style(TRANSPARENT)
                .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
                .x_desc(shorten(&self.x_label, 60))
                .y_desc(shorten(&self.y_label, 40))
                .x_label_formatter(&x_format)
                .y_label_formatter(&y_format)
                .label_style((FONT, 12))
                .axis_desc_style((FONT, 13))
                .draw()
                .map_err(|e| e.to_string())?;
            for (index, points) in finite.iter().enumerate() {
                let line = colour(index);
                chart
                    .draw_series(LineSeries::new(
                        points.iter().copied(),
                        line.stroke_width(2),
                    ))
                    .map_err(|e| e.to_string())?;
                // Markers show where the data is when points are few (one
                // epoch is one point, which a line alone would not show);
                // on a long series they would only bloat the file.
                if points.len() <= MAX_MARKED_POINTS {
                    chart
                        .draw_series(
                            points
                                .iter()
                                .map(|&point| Circle::new(point, 3, line.filled())),
                        )
                        .map_err(|e| e.to_string())?;
                }
            }
            let names: Vec<&str> = self.series.iter().map(|s| s.name.as_str()).collect();
            legend_below(root, &names, LegendMark::Line)
        })
    }
}

/// Room under a chart's axes for its legend, which lies there rather
/// than over the data.
const LEGEND_HEIGHT: u32 = 28;

enum LegendMark {
    Line,
    Box,
}

/// One row of series names with their colours, along the bottom edge.
fn legend_below(
    root: &DrawingArea<SVGBackend, Shift>,
    names: &[&str],
    mark: LegendMark,
) -> Result<(), String> {
    let (_, height) = root.dim_in_pixel();
    let y = height as i32 - LEGEND_HEIGHT as i32 / 2;
    let style = (FONT, 12)
        .into_font()
        .into_text_style(root)
        .pos(Pos::new(HPos::Left, VPos::Center));
    let mut x = 64;
    for (index, name) in names.iter().enumerate() {
        let ink = colour(index);
        match mark {
            LegendMark::Line => root.draw(&PathElement::new(
                vec![(x, y), (x + 18, y)],
                ink.stroke_width(2),
            )),
            LegendMark::Box => root.draw(&Rectangle::new(
                [(x + 3, y - 6), (x + 15, y + 6)],
                ink.filled(),
            )),
        }
        .map_err(|e| e.to_string())?;
        let label = shorten(name, 40);
        let advance = label.chars().count() as i32 * 7 + 44;
        root.draw(&Text::new(label, (x + 24, y), style.clone()))
            .map_err(|e| e.to_string())?;
        x += advance;
    }
    Ok(())
}

fn no_data(root: &DrawingArea<SVGBackend, Shift>, title: &str) -> Result<(), String> {
    let centre = Pos::new(HPos::Center, VPos::Center);
    let (width, height) = root.dim_in_pixel();
    root.draw(&Text::new(
        shorten(title, 80),
        (width as i32 / 2, 24),
        (FONT, 18).into_font().into_text_style(root).pos(centre),
    ))
    .map_err(|e| e.to_string())?;
    root.draw(&Rectangle::new(
        [(12, 44), (width as i32 - 12, height as i32 - 12)],
        RGBColor(0xcc, 0xcc, 0xcc).stroke_width(1),
    ))
    .map_err(|e| e.to_string())?;
    root.draw(&Text::new(
        "no data",
        (width as i32 / 2, height as i32 / 2),
        (FONT, 14).into_font().into_text_style(root).pos(centre),
    ))
    .map_err(|e| e.to_string())
}

impl BarChart {
    /// The chart as SVG; its height grows with the number of bars.
    pub fn to_svg(&self) -> Result<String> {
        for (name, values) in &self.series {
            if values.len() != self.categories.len() {
                return Err(ReportError::Data(format!(
                    "bar chart `{}`: series `{name}` has {} values for {} categories",
                    self.title,
                    values.len(),
                    self.categories.len()
                )));
            }
        }
        let groups = self.categories.len().max(1);
        let per_group = self.series.len().max(1);
        let bar_pixels = 16;
        let plot_height = (groups * (per_group * bar_pixels + 12)) as u32;
        let height = (plot_height + 110 + LEGEND_HEIGHT).max(160);
        let max = self
            .series
            .iter()
            .flat_map(|(_, values)| values.iter().copied())
            .filter(|v| v.is_finite())
            .fold(0.0_f64, f64::max);
        let x_max = if max > 0.0 { max * 1.08 } else { 1.0 };
        let labels: Vec<String> = self.categories.iter().map(|c| shorten(c, 28)).collect();
        let label_width = labels
            .iter()
            .map(|label| label.chars().count() as u32 * 7 + 16)
            .max()
            .unwrap_or(40)
            .clamp(40, 220);
        draw_svg(&self.title, height, |root| {
            let mut chart = ChartBuilder::on(root)
                .caption(shorten(&self.title, 80), (FONT, 18))
                .margin(12)
                .margin_bottom(LEGEND_HEIGHT)
                .x_label_area_size(40)
                .y_label_area_size(label_width)
                .build_cartesian_2d(0.0..x_max, groups as f64..0.0)
                .map_err(|e| e.to_string())?;
            let x_format = |v: &f64| format_number(*v);
            chart
                .configure_mesh()
                .disable_y_mesh()
                .y_labels(0)
                .light_line_style(TRANSPARENT)
                .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
                .x_desc(shorten(&self.value_label, 60))
                .x_label_formatter(&x_format)
                .label_style((FONT, 12))
                .axis_desc_style((FONT, 13))
                .draw()
                .map_err(|e| e.to_string())?;
            let band = 0.8 / per_group as f64;
            for (index, (_, values)) in self.series.iter().enumerate() {
                let fill = colour(index);
                chart
                    .draw_series(values.iter().enumerate().map(|(group, value)| {
                        let top = group as f64 + 0.1 + band * index as f64;
                        let value = if value.is_finite() {
                            value.max(0.0)
                        } else {
                            0.0
                        };
                        Rectangle::new([(0.0, top), (value, top + band)], fill.filled())
                    }))
                    .map_err(|e| e.to_string())?;
            }
            let label_style = (FONT, 12)
                .into_font()
                .into_text_style(root)
                .pos(Pos::new(HPos::Right, VPos::Center));
            for (group, label) in labels.iter().enumerate() {
                let (x, y) = chart.backend_coord(&(0.0, group as f64 + 0.5));
                root.draw(&Text::new(label.clone(), (x - 6, y), label_style.clone()))
                    .map_err(|e| e.to_string())?;
            }
            let names: Vec<&str> = self.series.iter().map(|(name, _)| name.as_str()).collect();
            legend_below(root, &names, LegendMark::Box)
        })
    }
}

impl HeatMap {
    /// The grid as SVG, each cell labelled with its value. Laid out in
    /// pixels rather than on chart axes: square cells, labels beside them.
    pub fn to_svg(&self) -> Result<String> {
        let size = self.labels.len();
        if size == 0 || self.cells.len() != size || self.cells.iter().any(|row| row.len() != size) {
            return Err(ReportError::Data(format!(
                "heat map `{}`: expected {size} rows of {size} cells, one per label",
                self.title
            )));
        }
        let max = self
            .cells
            .iter()
            .flatten()
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0_f64, f64::max);
        let cell = (360 / size as i32).clamp(24, 72);
        let grid = cell * size as i32;
        let (left, top) = (120, 56);
        let width = (left + grid + 40).max(420);
        let height = top + grid + 64;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (width as u32, height as u32))
                .into_drawing_area();
            let draw = || -> Result<(), String> {
                root.fill(&WHITE).map_err(|e| e.to_string())?;
                let centre = Pos::new(HPos::Center, VPos::Center);
                let right = Pos::new(HPos::Right, VPos::Center);
                let text =
                    |content: String, at: (i32, i32), size: u32, pos: Pos, ink: &RGBColor| {
                        root.draw(&Text::new(
                            content,
                            at,
                            (FONT, size).into_font().color(ink).pos(pos),
                        ))
                        .map_err(|e| e.to_string())
                    };
                text(
                    shorten(&self.title, 60),
                    (width / 2, 22),
                    18,
                    centre,
                    &BLACK,
                )?;
                let low = RGBColor(0xf7, 0xfb, 0xff);
                let high = RGBColor(0x08, 0x30, 0x6b);
                let mix = |a: u8, b: u8, share: f64| {
                    (f64::from(a) + (f64::from(b) - f64::from(a)) * share).round() as u8
                };
                for (row, values) in self.cells.iter().enumerate() {
                    for (column, &value) in values.iter().enumerate() {
                        let share = if max > 0.0 && value.is_finite() {
                            (value / max).clamp(0.0, 1.0)
                        } else {
                            0.0
                        };
                        let fill = RGBColor(
                            mix(low.0, high.0, share),
                            mix(low.1, high.1, share),
                            mix(low.2, high.2, share),
                        );
                        let x = left + column as i32 * cell;
                        let y = top + row as i32 * cell;
                        root.draw(&Rectangle::new(
                            [(x, y), (x + cell, y + cell)],
                            fill.filled(),
                        ))
                        .map_err(|e| e.to_string())?;
                        let ink = if share > 0.5 { WHITE } else { BLACK };
                        text(
                            format_number(value),
                            (x + cell / 2, y + cell / 2),
                            13,
                            centre,
                            &ink,
                        )?;
                    }
                }
                root.draw(&Rectangle::new(
                    [(left, top), (left + grid, top + grid)],
                    RGBColor(0x99, 0x99, 0x99).stroke_width(1),
                ))
                .map_err(|e| e.to_string())?;
                let grey = RGBColor(0x44, 0x44, 0x44);
                for (index, label) in self.labels.iter().enumerate() {
                    let middle = index as i32 * cell + cell / 2;
                    let label = shorten(label, 14);
                    text(
                        label.clone(),
                        (left + middle, top + grid + 14),
                        12,
                        centre,
                        &grey,
                    )?;
                    text(label, (left - 8, top + middle), 12, right, &grey)?;
                }
                text(
                    shorten(&self.column_label, 40),
                    (left + grid / 2, top + grid + 40),
                    13,
                    centre,
                    &BLACK,
                )?;
                text(
                    shorten(&self.row_label, 16),
                    (left - 8, top - 12),
                    13,
                    right,
                    &BLACK,
                )?;
                root.present().map_err(|e| e.to_string())
            };
            draw().map_err(plot_error(&self.title))?;
        }
        Ok(svg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_chart(series: Vec<Series>) -> LineChart {
        LineChart {
            title: "loss".into(),
            x_label: "epoch".into(),
            y_label: "loss".into(),
            series,
        }
    }

    #[test]
    fn a_line_chart_draws_one_line_and_legend_entry_per_series() {
        let svg = line_chart(vec![
            Series::new("train <loss>", vec![(1.0, 0.7), (2.0, 0.5), (3.0, 0.4)]),
            Series::new("val", vec![(1.0, 0.8), (2.0, 0.6), (3.0, f64::NAN)]),
        ])
        .to_svg()
        .unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.matches("<polyline").count() >= 2, "{svg}");
        assert!(svg.contains("train &lt;loss&gt;"), "names are escaped");
        assert!(!svg.contains("NaN"));
        // Drawn twice from the same data: the same bytes.
        let again = line_chart(vec![
            Series::new("train <loss>", vec![(1.0, 0.7), (2.0, 0.5), (3.0, 0.4)]),
            Series::new("val", vec![(1.0, 0.8), (2.0, 0.6), (3.0, f64::NAN)]),
        ])
        .to_svg()
        .unwrap();
        assert_eq!(svg, again);
    }

    #[test]
    fn a_single_point_still_shows_and_no_points_say_so() {
        let one = line_chart(vec![Series::new("val", vec![(1.0, 0.5)])])
            .to_svg()
            .unwrap();
        assert!(one.contains("<circle"), "{one}");
        let long: Vec<(f64, f64)> = (0..500)
            .map(|step| (step as f64, 1.0 / (1.0 + step as f64)))
            .collect();
        let long = line_chart(vec![Series::new("loss", long)])
            .to_svg()
            .unwrap();
        assert!(
            !long.contains("<circle") && long.contains("<polyline"),
            "{long}"
        );
        let none = line_chart(vec![Series::new("val", vec![(1.0, f64::NAN)])])
            .to_svg()
            .unwrap();
        assert!(none.contains("no data"), "{none}");
    }

    #[test]
    fn bars_need_one_value_per_category() {
        let chart = BarChart {
            title: "time".into(),
            value_label: "seconds".into(),
            categories: vec!["a".into(), "b".into()],
            series: vec![("run".into(), vec![1.0])],
        };
        let error = chart.to_svg().unwrap_err().to_string();
        assert!(error.contains("1 values for 2 categories"), "{error}");
        let chart = BarChart {
            series: vec![
                ("run".into(), vec![1.0, 2.5]),
                ("compute".into(), vec![0.0, 2.0]),
            ],
            ..chart
        };
        let svg = chart.to_svg().unwrap();
        assert!(svg.matches("<rect").count() >= 4, "{svg}");
    }

    #[test]
    fn a_heat_map_labels_every_cell() {
        let svg = HeatMap {
            title: "confusion".into(),
            row_label: "true".into(),
            column_label: "predicted".into(),
            labels: vec!["0".into(), "1".into()],
            cells: vec![vec![40.0, 10.0], vec![5.0, 45.0]],
        }
        .to_svg()
        .unwrap();
        for count in ["40", "10", "5", "45"] {
            assert!(
                svg.contains(&format!(">\n{count}\n</text>")),
                "{count}: {svg}"
            );
        }
        let ragged = HeatMap {
            title: "confusion".into(),
            row_label: "true".into(),
            column_label: "predicted".into(),
            labels: vec!["0".into(), "1".into()],
            cells: vec![vec![40.0, 10.0]],
        };
        assert!(ragged.to_svg().is_err());
    }
}
