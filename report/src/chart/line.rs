//! [`LineChart`]: title, axes and grid by plotters; the series and their
//! legend written here as SVG, one `<g>` per series carrying its
//! [`Series::key`], because plotters writes bare shapes that a page could
//! not tell apart to hide one row's line in every chart.

use std::fmt::Write;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use pipe_protocol::format::{digits_to_tell_apart, format_significant};

use super::{
    colour, draw_svg, legend_height, legend_layout, no_data, padded_range, shorten, tick_digits,
    ticks_of, zoom_note, LineChart, Series, Shape, AXIS_FONT, FONT, GRID, HEIGHT, LEGEND_HEIGHT,
    NOTE_FONT, TICK_FONT, TITLE_FONT, VALUE_TICKS, X_TICKS,
};
use crate::text::escape_html;
use crate::Result;

/// A line series of more points than this is drawn without markers.
const MAX_MARKED_POINTS: usize = 100;

/// How opaque a band's shading is: the line over it stays the mark.
const BAND_OPACITY: f64 = 0.2;

/// The least vertical distance between the value labels of one-point
/// series, so that close values do not print over each other.
const LABEL_SPACING: i32 = 16;

/// One series' finite points (a NaN loss left out, with its band entry),
/// in data and in pixel coordinates.
#[derive(Default)]
struct Drawn {
    points: Vec<(f64, f64)>,
    band: Option<Vec<(f64, f64)>>,
    pixels: Vec<(i32, i32)>,
    /// Per pixel point, its band's (upper, lower) pixel y.
    band_pixels: Vec<(i32, i32)>,
}

impl Drawn {
    fn of(series: &Series) -> Drawn {
        let mut drawn = Drawn::default();
        let mut band = Vec::new();
        for (index, &(x, y)) in series.points.iter().enumerate() {
            if !(x.is_finite() && y.is_finite()) {
                continue;
            }
            drawn.points.push((x, y));
            let edge = series.band.as_ref().and_then(|band| band.get(index));
            if let Some(&(low, high)) =
                edge.filter(|(low, high)| low.is_finite() && high.is_finite())
            {
                band.push((low, high));
            } else {
                band.push((y, y));
            }
        }
        drawn.band = series.band.as_ref().map(|_| band);
        drawn
    }

    /// Every y the axis must hold: the points and their band.
    fn extent(&self) -> impl Iterator<Item = f64> + '_ {
        let band = self
            .band
            .iter()
            .flatten()
            .flat_map(|&(low, high)| [low, high]);
        self.points.iter().map(|p| p.1).chain(band)
    }
}

impl LineChart {
    /// The chart as SVG. Non-finite points (a NaN loss) are left out; a
    /// chart without any finite point says so instead of drawing axes.
    pub fn to_svg(&self) -> Result<String> {
        let mut drawn: Vec<Drawn> = self.series.iter().map(Drawn::of).collect();
        let x_range = padded_range(drawn.iter().flat_map(|d| d.points.iter().map(|p| p.0)));
        let y_range = padded_range(drawn.iter().flat_map(Drawn::extent));
        let note = zoom_note(drawn.iter().flat_map(|d| d.points.iter().map(|p| p.1)));
        let names: Vec<&str> = self.series.iter().map(|s| s.name.as_str()).collect();
        let legend = legend_height(&names);
        let height = HEIGHT + legend - LEGEND_HEIGHT;
        let mut any = false;
        let svg = draw_svg(&self.title, height, |root| {
            let (Some((x0, x1)), Some((y0, y1))) = (x_range, y_range) else {
                return no_data(root, &self.title);
            };
            any = true;
            // Title (and note) drawn by hand: the note goes between the
            // title and the plot, where plotters' caption has no room.
            let centre = Pos::new(HPos::Center, VPos::Center);
            let (width, _) = root.dim_in_pixel();
            root.draw(&Text::new(
                shorten(&self.title, 64),
                (width as i32 / 2, 22),
                (FONT, TITLE_FONT)
                    .into_font()
                    .into_text_style(root)
                    .pos(centre),
            ))
            .map_err(|e| e.to_string())?;
            if let Some(note) = &note {
                root.draw(&Text::new(
                    note.clone(),
                    (width as i32 / 2, 46),
                    (FONT, NOTE_FONT)
                        .into_font()
                        .style(FontStyle::Italic)
                        .into_text_style(root)
                        .pos(centre),
                ))
                .map_err(|e| e.to_string())?;
            }
            let mut chart = ChartBuilder::on(root)
                .margin(12)
                .margin_top(if note.is_some() { 60 } else { 40 })
                .margin_bottom(legend)
                .x_label_area_size(48)
                .y_label_area_size(84)
                .build_cartesian_2d(x0..x1, y0..y1)
                .map_err(|e| e.to_string())?;
            // Epochs and steps are whole numbers: no label between them.
            let whole_x = drawn
                .iter()
                .flat_map(|d| &d.points)
                .all(|(x, _)| x.fract() == 0.0);
            let x_digits = tick_digits(&ticks_of((x0, x1), X_TICKS));
            let x_format = |v: &f64| {
                if whole_x && v.fract() != 0.0 {
                    String::new()
                } else {
                    format_significant(*v, x_digits)
                }
            };
            let y_digits = tick_digits(&ticks_of((y0, y1), VALUE_TICKS));
            let y_format = |v: &f64| format_significant(*v, y_digits);
            chart
                .configure_mesh()
                .x_labels(X_TICKS)
                .y_labels(VALUE_TICKS)
                .light_line_style(TRANSPARENT)
                .bold_line_style(GRID)
                .x_desc(shorten(&self.x_label, 60))
                .y_desc(shorten(&self.y_label, 40))
                .x_label_formatter(&x_format)
                .y_label_formatter(&y_format)
                .label_style((FONT, TICK_FONT))
                .axis_desc_style((FONT, AXIS_FONT))
                .draw()
                .map_err(|e| e.to_string())?;
            for series in &mut drawn {
                series.pixels = series
                    .points
                    .iter()
                    .map(|point| chart.backend_coord(point))
                    .collect();
                series.band_pixels = series
                    .band
                    .iter()
                    .flatten()
                    .zip(&series.points)
                    .map(|(&(low, high), &(x, _))| {
                        (
                            chart.backend_coord(&(x, high)).1,
                            chart.backend_coord(&(x, low)).1,
                        )
                    })
                    .collect();
            }
            Ok(())
        })?;
        if !any {
            return Ok(svg);
        }
        let mut marks = series_svg(&self.series, &drawn);
        marks.push_str(&legend_svg(&self.series, height));
        let end = svg.rfind("</svg>").unwrap_or(svg.len());
        Ok(format!("{}{marks}{}", &svg[..end], &svg[end..]))
    }
}

/// `#1F77B4`: a series colour as plotters writes colours.
fn hex(index: usize) -> String {
    let RGBColor(red, green, blue) = colour(index);
    format!("#{red:02X}{green:02X}{blue:02X}")
}

/// The font size plotters writes for `size` (its SVG backend divides by
/// 1.24), so that hand-written text matches the axes'.
fn font_size(size: u32) -> f64 {
    f64::from(size) / 1.24
}

fn points_attribute(pixels: impl Iterator<Item = (i32, i32)>) -> String {
    pixels.fold(String::new(), |mut text, (x, y)| {
        let _ = write!(text, "{x},{y} ");
        text
    })
}

/// ` data-key="3"` for a series with a key.
fn key_attribute(series: &Series) -> String {
    series
        .key
        .as_ref()
        .map(|key| format!(" data-key=\"{}\"", escape_html(key)))
        .unwrap_or_default()
}

/// A `<text>` as plotters writes a tick label: content on its own line.
fn text_svg(x: i32, y: i32, anchor: &str, fill: &str, content: &str) -> String {
    format!(
        "<text x=\"{x}\" y=\"{y}\" dy=\"0.5ex\" text-anchor=\"{anchor}\" font-family=\"{FONT}\" \
         font-size=\"{}\" fill=\"{fill}\">\n{}\n</text>\n",
        font_size(TICK_FONT),
        escape_html(content)
    )
}

/// Each series as one `<g>`: its band, its line, its markers, and for a
/// series of a single point (a one-epoch run) that point's value written
/// beside it, since a dot alone says where but not how much.
fn series_svg(series: &[Series], drawn: &[Drawn]) -> String {
    let labels = single_point_labels(drawn);
    let dodges = single_point_dodges(drawn);
    let mut svg = String::new();
    for (index, (series, drawn)) in series.iter().zip(drawn).enumerate() {
        let ink = hex(index);
        let (dodge, spread) = dodges[index];
        let _ = writeln!(svg, "<g class=\"series\"{}>", key_attribute(series));
        let banded = drawn.band.is_some() && !drawn.band_pixels.is_empty();
        if banded && drawn.pixels.len() > 1 {
            let upper = drawn.pixels.iter().zip(&drawn.band_pixels);
            let outline = upper
                .clone()
                .map(|(&(x, _), &(high, _))| (x, high))
                .chain(upper.rev().map(|(&(x, _), &(_, low))| (x, low)));
            let _ = writeln!(
                svg,
                "<polygon class=\"band\" points=\"{}\" fill=\"{ink}\" fill-opacity=\"{BAND_OPACITY}\" stroke=\"none\"/>",
                points_attribute(outline)
            );
        } else if banded {
            // One point's band is an error bar: a polygon would be a line
            // of no width.
            let ((x, _), (high, low)) = (drawn.pixels[0], drawn.band_pixels[0]);
            let x = x + dodge;
            let _ = writeln!(
                svg,
                "<polyline class=\"band\" fill=\"none\" stroke=\"{ink}\" stroke-width=\"1.5\" points=\"{}\"/>",
                points_attribute(
                    [(x - 5, high), (x + 5, high), (x, high), (x, low), (x - 5, low), (x + 5, low)]
                        .into_iter()
                )
            );
        }
        if drawn.pixels.len() > 1 && series.shape != Shape::Points {
            let _ = writeln!(
                svg,
                "<polyline fill=\"none\" stroke=\"{ink}\" stroke-width=\"2\" points=\"{}\"/>",
                points_attribute(joined(&drawn.pixels, series.shape))
            );
        }
        if drawn.pixels.len() <= MAX_MARKED_POINTS || series.shape == Shape::Points {
            let radius = if drawn.pixels.len() == 1 { 4 } else { 3 };
            for (x, y) in &drawn.pixels {
                let _ = writeln!(
                    svg,
                    "<circle cx=\"{}\" cy=\"{y}\" r=\"{radius}\" fill=\"{ink}\" stroke=\"none\"/>",
                    x + dodge
                );
            }
        }
        if let Some((text, (x, y))) = labels.get(index).and_then(Option::as_ref) {
            let anchor = if *x > super::WIDTH as i32 - 160 {
                "end"
            } else {
                "start"
            };
            let x = if anchor == "end" {
                x - 10 - spread
            } else {
                x + 10 + spread
            };
            svg.push_str(&text_svg(x, *y, anchor, "currentColor", text));
        }
        svg.push_str("</g>\n");
    }
    svg
}

/// The corners a series' line passes through: its points, or for a
/// staircase each value held flat until the next point's x.
fn joined(pixels: &[(i32, i32)], shape: Shape) -> impl Iterator<Item = (i32, i32)> + '_ {
    let steps = shape == Shape::Steps;
    pixels.iter().enumerate().flat_map(move |(index, &(x, y))| {
        let corner = (index > 0 && steps).then(|| (x, pixels[index - 1].1));
        corner.into_iter().chain([(x, y)])
    })
}

/// How far apart, side by side, the dots of one-point series that would
/// cover each other are set: a little more than a dot's width.
const DODGE: i32 = 10;

/// Per series, how far its one point is moved sideways from its place, and
/// how far the farthest dot at that place is (its label goes beyond): one
/// value at one place (two runs of one accuracy) would otherwise be one
/// dot, and every row's dot must show.
fn single_point_dodges(drawn: &[Drawn]) -> Vec<(i32, i32)> {
    let mut dodges = vec![(0, 0); drawn.len()];
    let mut singles: Vec<(usize, (i32, i32))> = drawn
        .iter()
        .enumerate()
        .filter(|(_, d)| d.pixels.len() == 1)
        .map(|(index, d)| (index, d.pixels[0]))
        .collect();
    singles.sort_by_key(|&(index, (x, y))| (x, y, index));
    let mut start = 0;
    while start < singles.len() {
        let mut end = start + 1;
        while end < singles.len()
            && singles[end].1 .0 == singles[start].1 .0
            && singles[end].1 .1 - singles[end - 1].1 .1 < DODGE
        {
            end += 1;
        }
        let count = (end - start) as i32;
        let spread = (count - 1) * DODGE / 2;
        for (slot, &(index, _)) in singles[start..end].iter().enumerate() {
            dodges[index] = (slot as i32 * DODGE - spread, spread);
        }
        start = end;
    }
    dodges
}

/// Per series, the value label of a series of one point and where it
/// goes: beside its point, pushed down from the label above it when they
/// would overlap. The values get the digits that tell them apart.
fn single_point_labels(drawn: &[Drawn]) -> Vec<Option<(String, (i32, i32))>> {
    let singles: Vec<f64> = drawn
        .iter()
        .filter(|d| d.points.len() == 1)
        .map(|d| d.points[0].1)
        .collect();
    let digits = digits_to_tell_apart(&singles);
    let mut labels: Vec<Option<(String, (i32, i32))>> = drawn
        .iter()
        .map(|d| {
            let [(_, y)] = d.points[..] else {
                return None;
            };
            let mut text = format_significant(y, digits);
            if let Some(&(low, high)) = d.band.as_ref().and_then(|band| band.first()) {
                if high > low {
                    let _ = write!(text, " ± {}", format_significant((high - low) / 2.0, 2));
                }
            }
            Some((text, d.pixels[0]))
        })
        .collect();
    let mut order: Vec<usize> = (0..labels.len())
        .filter(|&index| labels[index].is_some())
        .collect();
    order.sort_by_key(|&index| labels[index].as_ref().map(|(_, (_, y))| *y));
    // Equal values at one place print once, over each other, so that the
    // value still shows while any of their lines does.
    let mut previous: Option<(String, (i32, i32), i32)> = None;
    let mut lowest = i32::MIN;
    for index in order {
        if let Some((text, at)) = labels[index].as_mut() {
            let y = match &previous {
                Some((same, place, y)) if same == text && *place == *at => *y,
                _ => at.1.max(lowest.saturating_add(LABEL_SPACING)),
            };
            previous = Some((text.clone(), *at, y));
            at.1 = y;
            lowest = y;
        }
    }
    labels
}

/// The legend along the bottom edge, each entry a `<g>` with its series'
/// key, so that a page can make the entry the switch of that series: a
/// line in the series' colour, on a shaded box when the series has a band.
fn legend_svg(series: &[Series], height: u32) -> String {
    let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
    let top = (height - legend_height(&names)) as i32 + LEGEND_HEIGHT as i32 / 2;
    let mut svg = String::new();
    for (index, (label, x, row)) in legend_layout(&names).into_iter().enumerate() {
        let y = top + (row * LEGEND_HEIGHT) as i32;
        let ink = hex(index);
        let _ = writeln!(
            svg,
            "<g class=\"legend-entry\"{}>",
            key_attribute(&series[index])
        );
        if series[index].band.is_some() {
            let _ = writeln!(
                svg,
                "<rect x=\"{x}\" y=\"{}\" width=\"18\" height=\"12\" fill=\"{ink}\" fill-opacity=\"{BAND_OPACITY}\" stroke=\"none\"/>",
                y - 6
            );
        }
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{ink}\" stroke-width=\"2\" points=\"{x},{y} {},{y} \"/>",
            x + 18
        );
        svg.push_str(&text_svg(x + 24, y, "start", "currentColor", &label));
        svg.push_str("</g>\n");
    }
    svg
}
