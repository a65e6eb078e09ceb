//! Plots as SVG text, drawn with plotters' SVG backend from plain data.
//!
//! Text is written as SVG `<text>` in the viewer's sans-serif font and
//! sized by plotters' estimate (no font files are read), so a chart is the
//! same bytes on every machine.
//!
//! Ink follows the reader's colour scheme: text, axes and grid are drawn in
//! `currentColor` and the background by a class, under a small style sheet
//! in each SVG that has a light and a `prefers-color-scheme: dark` colour
//! ([`themed`]); so a chart inline in a page and the same chart as a file
//! behind a Markdown image both turn dark with the browser.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use pipe_protocol::format::{digits_to_tell_apart, format_significant};

use crate::text::format_number;
use crate::{ReportError, Result};

const WIDTH: u32 = 720;
const HEIGHT: u32 = 360;
const FONT: &str = "sans-serif";

/// Font sizes as plotters takes them; its SVG backend writes `size / 1.24`
/// as the `font-size`, so 16 is about 13 units of the viewBox: 13 px and
/// more once the page lays the chart out at its content width (a page
/// narrower than the viewBox shrinks it, as it shrinks any picture).
const TICK_FONT: u32 = 16;
const AXIS_FONT: u32 = 17;
const TITLE_FONT: u32 = 22;
const NOTE_FONT: u32 = 16;

/// Tick labels asked of plotters on a value axis (it picks round values,
/// at most this many).
const VALUE_TICKS: usize = 8;
/// Tick labels asked for along a line chart's x axis.
const X_TICKS: usize = 10;

/// Under this spread relative to the values, a line chart says that its
/// value axis is zoomed in (see [`zoom_note`]).
const ZOOM_NOTE_BELOW: f64 = 0.01;

/// Stand-ins drawn by plotters and turned into themed ink by [`themed`]:
/// plain black for text and axes, this light grey for the grid.
const GRID: RGBColor = RGBColor(0xe4, 0xe4, 0xe4);
/// The grey of secondary labels (a heat map's class names).
const MUTED: RGBColor = RGBColor(0x44, 0x44, 0x44);
/// Text on a heat map's cells, which keep their own colours in the dark:
/// never themed.
const CELL_INK: RGBColor = RGBColor(0x11, 0x11, 0x11);

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

/// One named line of a [`LineChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Per point, the (lower, upper) edge of a band shaded around the line:
    /// the spread of the repeats a line is the mean of (± one std over
    /// seeds), drawn with the line rather than as a chart of its own so
    /// that the line and its spread share axes, colour and legend entry.
    pub band: Option<Vec<(f64, f64)>>,
    /// What the page calls this line (its `data-key`), so that a control
    /// can hide it: the compare table row it draws. Lines of one key are
    /// one row's in every chart of the page.
    pub key: Option<String>,
    /// How its points are drawn.
    pub shape: Shape,
}

/// How a [`Series`]' points are drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Shape {
    /// Joined by straight lines (a curve).
    #[default]
    Line,
    /// Each point a dot, nothing joining them (a scatter plot).
    Points,
    /// Each value held until the next point's x (a staircase).
    Steps,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            band: None,
            key: None,
            shape: Shape::Line,
        }
    }

    pub fn with_shape(mut self, shape: Shape) -> Series {
        self.shape = shape;
        self
    }

    /// With a band: one (lower, upper) per point, in the points' order.
    pub fn with_band(mut self, band: Vec<(f64, f64)>) -> Series {
        self.band = Some(band);
        self
    }

    pub fn with_key(mut self, key: impl Into<String>) -> Series {
        self.key = Some(key.into());
        self
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
    Ok(themed(&svg))
}

/// The chart's style sheet: the ink and background of each colour scheme.
/// Scoped to `svg.pipe-chart`, since inline in a page a `<style>` applies
/// to the whole document.
const CHART_STYLE: &str = "<style>svg.pipe-chart{color:#222}svg.pipe-chart .bg{fill:#fff}\
@media (prefers-color-scheme: dark){svg.pipe-chart{color:#ddd}svg.pipe-chart .bg{fill:#1e1e1e}}</style>";

/// `svg` with its ink themed: the first white fill (the background, drawn
/// first) gets the class `bg`; black text and lines become `currentColor`,
/// the grid and the muted labels `currentColor` at a lower opacity.
fn themed(svg: &str) -> String {
    let svg = svg.replacen("fill=\"#FFFFFF\"", "class=\"bg\" fill=\"#FFFFFF\"", 1);
    let svg = svg
        .replace("fill=\"#000000\"", "fill=\"currentColor\"")
        .replace("stroke=\"#000000\"", "stroke=\"currentColor\"")
        .replace(
            "stroke=\"#E4E4E4\"",
            "stroke=\"currentColor\" stroke-opacity=\"0.18\"",
        )
        .replace(
            "stroke=\"#CCCCCC\"",
            "stroke=\"currentColor\" stroke-opacity=\"0.3\"",
        )
        .replace(
            "fill=\"#444444\"",
            "fill=\"currentColor\" fill-opacity=\"0.8\"",
        );
    match svg.find('>') {
        Some(end) if svg.starts_with("<svg") => format!(
            "{} class=\"pipe-chart\">\n{CHART_STYLE}{}",
            &svg[..end],
            &svg[end + 1..]
        ),
        _ => svg,
    }
}

/// Labels for ticks at `ticks`, with the fewest significant digits (at
/// least four) that print every tick differently: ticks 0.52472 and
/// 0.52474 are not both `0.5247`.
fn tick_digits(ticks: &[f64]) -> usize {
    digits_to_tell_apart(ticks)
}

/// The ticks plotters puts on `range` when asked for at most `count`.
fn ticks_of(range: (f64, f64), count: usize) -> Vec<f64> {
    use plotters::coord::ranged1d::Ranged;
    use plotters::coord::types::RangedCoordf64;
    RangedCoordf64::from(range.0..range.1).key_points(count)
}

/// A note for a value axis zoomed onto a spread tiny beside the values
/// (`0.5247` to `0.5249`): drawn to its full height, a 0.04 % difference
/// looks like a large one. The axis keeps the zoom, which shows the
/// curve's shape (starting it at zero would flatten every curve into one
/// line), and the chart says how small the differences are.
fn zoom_note(values: impl Iterator<Item = f64>) -> Option<String> {
    let (low, high) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !low.is_finite() || !high.is_finite() || high <= low {
        return None;
    }
    let scale = low.abs().max(high.abs());
    let relative = (high - low) / scale;
    if relative >= ZOOM_NOTE_BELOW {
        return None;
    }
    // Enough digits to show the spread itself to two digits.
    let digits = ((1.0 / relative).log10().ceil() as usize + 2).min(17);
    Some(format!(
        "zoomed in: the values span only {}–{}, a spread of {} % of their size",
        format_significant(low, digits),
        format_significant(high, digits),
        format_significant(relative * 100.0, 2)
    ))
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

/// Room under a chart's axes for one row of its legend, which lies there
/// rather than over the data; a legend too wide for one row wraps onto
/// more, and the chart grows by as many rows.
const LEGEND_HEIGHT: u32 = 32;

/// Where the legend's entries start, under the value axis's labels.
const LEGEND_LEFT: i32 = 84;

/// Each legend entry's label, left edge and row: entries run left to
/// right and wrap before the right margin.
fn legend_layout(names: &[&str]) -> Vec<(String, i32, u32)> {
    let right = WIDTH as i32 - 12;
    let (mut x, mut row) = (LEGEND_LEFT, 0);
    names
        .iter()
        .map(|name| {
            let label = shorten(name, 40);
            let advance = label.chars().count() as i32 * 8 + 48;
            if x > LEGEND_LEFT && x + advance - 24 > right {
                (x, row) = (LEGEND_LEFT, row + 1);
            }
            let at = (label, x, row);
            x += advance;
            at
        })
        .collect()
}

/// The height of the legend of `names`: one [`LEGEND_HEIGHT`] per row.
fn legend_height(names: &[&str]) -> u32 {
    let rows = legend_layout(names).last().map_or(0, |(_, _, row)| row + 1);
    LEGEND_HEIGHT * rows.max(1)
}

/// The series names with their colours, along the bottom edge (a bar
/// chart's: a line chart draws its own, see `line`).
fn legend_below(root: &DrawingArea<SVGBackend, Shift>, names: &[&str]) -> Result<(), String> {
    let (_, height) = root.dim_in_pixel();
    let top = (height - legend_height(names)) as i32 + LEGEND_HEIGHT as i32 / 2;
    let style = (FONT, TICK_FONT)
        .into_font()
        .into_text_style(root)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (index, (label, x, row)) in legend_layout(names).into_iter().enumerate() {
        let y = top + (row * LEGEND_HEIGHT) as i32;
        let ink = colour(index);
        root.draw(&Rectangle::new(
            [(x + 3, y - 6), (x + 15, y + 6)],
            ink.filled(),
        ))
        .map_err(|e| e.to_string())?;
        root.draw(&Text::new(label, (x + 24, y), style.clone()))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn no_data(root: &DrawingArea<SVGBackend, Shift>, title: &str) -> Result<(), String> {
    let centre = Pos::new(HPos::Center, VPos::Center);
    let (width, height) = root.dim_in_pixel();
    root.draw(&Text::new(
        shorten(title, 64),
        (width as i32 / 2, 24),
        (FONT, TITLE_FONT)
            .into_font()
            .into_text_style(root)
            .pos(centre),
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
        (FONT, AXIS_FONT)
            .into_font()
            .into_text_style(root)
            .pos(centre),
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
        let bar_pixels = 20;
        let plot_height = (groups * (per_group * bar_pixels + 12)) as u32;
        let names: Vec<&str> = self.series.iter().map(|(name, _)| name.as_str()).collect();
        let legend = legend_height(&names);
        let height = (plot_height + 120 + legend).max(180);
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
            .map(|label| label.chars().count() as u32 * 8 + 16)
            .max()
            .unwrap_or(40)
            .clamp(40, 250);
        draw_svg(&self.title, height, |root| {
            let mut chart = ChartBuilder::on(root)
                .caption(shorten(&self.title, 64), (FONT, TITLE_FONT))
                .margin(12)
                .margin_bottom(legend)
                .x_label_area_size(48)
                .y_label_area_size(label_width)
                .build_cartesian_2d(0.0..x_max, groups as f64..0.0)
                .map_err(|e| e.to_string())?;
            let x_digits = tick_digits(&ticks_of((0.0, x_max), VALUE_TICKS));
            let x_format = |v: &f64| format_significant(*v, x_digits);
            chart
                .configure_mesh()
                .disable_y_mesh()
                .y_labels(0)
                .x_labels(VALUE_TICKS)
                .light_line_style(TRANSPARENT)
                .bold_line_style(GRID)
                .x_desc(shorten(&self.value_label, 60))
                .x_label_formatter(&x_format)
                .label_style((FONT, TICK_FONT))
                .axis_desc_style((FONT, AXIS_FONT))
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
            let label_style = (FONT, TICK_FONT)
                .into_font()
                .into_text_style(root)
                .pos(Pos::new(HPos::Right, VPos::Center));
            for (group, label) in labels.iter().enumerate() {
                let (x, y) = chart.backend_coord(&(0.0, group as f64 + 0.5));
                root.draw(&Text::new(label.clone(), (x - 6, y), label_style.clone()))
                    .map_err(|e| e.to_string())?;
            }
            legend_below(root, &names)
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
        let cell = (400 / size as i32).clamp(32, 96);
        let grid = cell * size as i32;
        let (left, top) = (150, 64);
        let width = (left + grid + 40).max(480);
        let height = top + grid + 72;
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
                    shorten(&self.title, 40),
                    (width / 2, 24),
                    TITLE_FONT,
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
                        let ink = if share > 0.5 { WHITE } else { CELL_INK };
                        text(
                            format_number(value),
                            (x + cell / 2, y + cell / 2),
                            AXIS_FONT,
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
                for (index, label) in self.labels.iter().enumerate() {
                    let middle = index as i32 * cell + cell / 2;
                    let label = shorten(label, 14);
                    text(
                        label.clone(),
                        (left + middle, top + grid + 16),
                        TICK_FONT,
                        centre,
                        &MUTED,
                    )?;
                    text(label, (left - 8, top + middle), TICK_FONT, right, &MUTED)?;
                }
                text(
                    shorten(&self.column_label, 40),
                    (left + grid / 2, top + grid + 46),
                    AXIS_FONT,
                    centre,
                    &BLACK,
                )?;
                text(
                    shorten(&self.row_label, 16),
                    (left - 8, top - 14),
                    AXIS_FONT,
                    right,
                    &BLACK,
                )?;
                root.present().map_err(|e| e.to_string())
            };
            draw().map_err(plot_error(&self.title))?;
        }
        // A square grid: the page draws it narrower than the line charts.
        Ok(themed(&svg).replacen("class=\"pipe-chart\"", "class=\"pipe-chart heat-map\"", 1))
    }
}

mod line;
pub mod params;

#[cfg(test)]
mod tests;
