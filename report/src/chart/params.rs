//! [`ParamChart`]: a small scatter of one param against one metric, one
//! point per row, written as SVG by hand (it is a few circles and ticks,
//! and each point must carry its row's key and name).

use std::fmt::Write;

use plotters::style::RGBColor;

use pipe_protocol::format::format_significant;

use super::{colour, padded_range, shorten, themed, tick_digits, ticks_of, FONT};
use crate::text::escape_html;

const WIDTH: i32 = 360;
const HEIGHT: i32 = 260;
/// Room for the value axis's labels, and the param's values and name
/// under the axis. No title: the page's caption says what it shows.
const LEFT: i32 = 62;
const RIGHT: i32 = 12;
const TOP: i32 = 14;
const BOTTOM: i32 = 54;
/// Drawn three to a row of a page 1280 px wide (and as small as 340 px),
/// at 14 units the text stays about 12 px or more.
const TICK_FONT: f64 = 14.0;
const VALUE_TICKS: usize = 5;
const RADIUS: i32 = 5;
/// How far apart the centres of points that would cover each other are
/// set, side by side.
const DODGE: i32 = 2 * RADIUS + 2;

/// One point per row: a param's value along x (its values evenly spaced,
/// in order) against a metric: how a swept param moves a key metric, small
/// enough that a chart per param sits beside the next.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamChart {
    /// What it shows (`val_acc by lr`): the page's caption, not drawn.
    pub title: String,
    /// The param, named under the axis.
    pub param: String,
    /// The param's values, left to right.
    pub values: Vec<String>,
    pub points: Vec<ParamPoint>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ParamPoint {
    /// Where along x: an index in [`ParamChart::values`].
    pub at: usize,
    /// The metric's value.
    pub value: f64,
    /// Its row's name, and the value as shown: its tooltip.
    pub label: String,
    /// Its row's key ([`crate::Series::key`]): the page's controls hide it
    /// with the row's lines.
    pub key: Option<String>,
    /// The row's place in the table, which picks its colour as it does
    /// its line's in the other charts.
    pub colour: usize,
    /// The best value of the metric: ringed.
    pub best: bool,
}

impl ParamChart {
    /// The chart as SVG. Points with the same value at the same place are
    /// set side by side, so that every row's point shows.
    pub fn to_svg(&self) -> String {
        let points: Vec<&ParamPoint> = self
            .points
            .iter()
            .filter(|point| point.value.is_finite() && point.at < self.values.len())
            .collect();
        let (low, high) =
            padded_range(points.iter().map(|point| point.value)).unwrap_or((0.0, 1.0));
        let bottom = HEIGHT - BOTTOM;
        let plot_height = f64::from(bottom - TOP);
        let y_of =
            |value: f64| bottom - ((value - low) / (high - low) * plot_height).round() as i32;
        let band = f64::from(WIDTH - LEFT - RIGHT) / self.values.len().max(1) as f64;
        let x_of = |at: usize| LEFT + (band * (at as f64 + 0.5)).round() as i32;

        let mut svg = format!(
            "<svg width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" xmlns=\"http://www.w3.org/2000/svg\">\n\
             <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#FFFFFF\" stroke=\"none\"/>\n"
        );
        let ticks = ticks_of((low, high), VALUE_TICKS);
        let digits = tick_digits(&ticks);
        for tick in &ticks {
            let y = y_of(*tick);
            let _ = writeln!(
                svg,
                "<line x1=\"{LEFT}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#E4E4E4\" stroke-width=\"1\"/>",
                WIDTH - RIGHT
            );
            svg.push_str(&text(
                LEFT - 6,
                y,
                "end",
                TICK_FONT,
                &format_significant(*tick, digits),
            ));
        }
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"#000000\" stroke-width=\"1\" points=\"{LEFT},{TOP} {LEFT},{bottom} {},{bottom}\"/>",
            WIDTH - RIGHT
        );
        // A value's label gets the room of its band (about 8 units a
        // character at this size).
        let room = ((band / 8.0) as usize).max(3);
        for (at, value) in self.values.iter().enumerate() {
            svg.push_str(&text(
                x_of(at),
                bottom + 17,
                "middle",
                TICK_FONT,
                &shorten(value, room),
            ));
        }
        svg.push_str(&text(
            WIDTH / 2,
            HEIGHT - 12,
            "middle",
            TICK_FONT,
            &shorten(&self.param, 40),
        ));

        let placed = dodged(&points, &|point| (x_of(point.at), y_of(point.value)), band);
        for (point, (x, y)) in points.iter().zip(placed) {
            let key = point
                .key
                .as_ref()
                .map(|key| format!(" data-key=\"{}\"", escape_html(key)))
                .unwrap_or_default();
            let RGBColor(red, green, blue) = colour(point.colour);
            let ring = if point.best {
                " stroke=\"#000000\" stroke-width=\"2\""
            } else {
                " stroke=\"none\""
            };
            let _ = writeln!(
                svg,
                "<g class=\"series\"{key}><circle class=\"point{}\" cx=\"{x}\" cy=\"{y}\" r=\"{RADIUS}\" fill=\"#{red:02X}{green:02X}{blue:02X}\"{ring}><title>{}</title></circle></g>",
                if point.best { " best" } else { "" },
                escape_html(&point.label)
            );
        }
        svg.push_str("</svg>\n");
        themed(&svg)
    }
}

/// Where each point is drawn: at its value, and beside the others it
/// would cover (their centres closer than a diameter at one place), as a
/// row centred on the place, no wider than the place's band.
fn dodged(
    points: &[&ParamPoint],
    at: &dyn Fn(&ParamPoint) -> (i32, i32),
    band: f64,
) -> Vec<(i32, i32)> {
    let mut placed: Vec<(i32, i32)> = points.iter().map(|point| at(point)).collect();
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by_key(|&index| (placed[index].0, placed[index].1, index));
    let mut start = 0;
    while start < order.len() {
        // A cluster: points at one x, each within a diameter of the last.
        let mut end = start + 1;
        while end < order.len()
            && placed[order[end]].0 == placed[order[start]].0
            && placed[order[end]].1 - placed[order[end - 1]].1 < 2 * RADIUS
        {
            end += 1;
        }
        let count = (end - start) as i32;
        if count > 1 {
            let spacing = DODGE.min(((band - f64::from(2 * RADIUS)) / f64::from(count - 1)) as i32);
            let spacing = spacing.max(2);
            for (slot, &index) in order[start..end].iter().enumerate() {
                placed[index].0 += (2 * slot as i32 - (count - 1)) * spacing / 2;
            }
        }
        start = end;
    }
    placed
}

/// A `<text>` as the other charts write theirs: content on its own line.
fn text(x: i32, y: i32, anchor: &str, size: f64, content: &str) -> String {
    format!(
        "<text x=\"{x}\" y=\"{y}\" dy=\"0.5ex\" text-anchor=\"{anchor}\" font-family=\"{FONT}\" \
         font-size=\"{size}\" fill=\"#000000\">\n{}\n</text>\n",
        escape_html(content)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(at: usize, value: f64, key: &str) -> ParamPoint {
        ParamPoint {
            at,
            value,
            label: format!("#{key}"),
            key: Some(key.to_string()),
            colour: 0,
            best: key == "3",
        }
    }

    fn circles(svg: &str) -> Vec<(i32, i32)> {
        svg.split("<circle ")
            .skip(1)
            .map(|rest| {
                let number = |name: &str| -> i32 {
                    let start = rest.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                    rest[start..start + rest[start..].find('"').unwrap()]
                        .parse()
                        .unwrap()
                };
                (number("cx"), number("cy"))
            })
            .collect()
    }

    #[test]
    fn points_with_one_value_at_one_place_are_set_side_by_side() {
        let chart = ParamChart {
            title: "acc by lr".into(),
            param: "lr".into(),
            values: vec!["0.1".into(), "0.2".into()],
            points: vec![
                point(0, 0.8, "1"),
                point(0, 0.8, "2"),
                point(1, 0.9, "3"),
                point(1, 0.7, "4"),
            ],
        };
        let svg = chart.to_svg();
        let at = circles(&svg);
        assert_eq!(at.len(), 4, "{svg}");
        assert_eq!(at[0].1, at[1].1, "one value, one height");
        assert!((at[0].0 - at[1].0).abs() >= 2 * RADIUS, "{at:?}");
        assert_eq!(at[2].0, at[3].0, "apart in value: one x");
        assert!(at[2].1 < at[3].1, "the higher value above");
        assert!(svg.contains("data-key=\"2\""), "{svg}");
        assert!(svg.contains("class=\"point best\""), "{svg}");
        assert!(svg.contains("<title>#1</title>"), "{svg}");
        assert!(svg.starts_with("<svg") && svg.contains("class=\"pipe-chart\""));
    }
}
