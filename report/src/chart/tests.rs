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
    // Its value is written beside it: a dot alone says where, not how much.
    let group = series_groups(&one)[0];
    assert!(
        group.contains("<circle") && group.contains("fill=\"currentColor\">\n0.5\n</text>"),
        "{one}"
    );
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

/// The y tick labels of a line chart: the texts right-aligned at the
/// y axis.
fn y_tick_labels(svg: &str) -> Vec<String> {
    svg.split("<text ")
        .skip(1)
        .filter(|text| text.contains("text-anchor=\"end\""))
        .filter_map(|text| Some(text.split_once(">\n")?.1.split_once("\n</text>")?.0))
        .map(String::from)
        .collect()
}

#[test]
fn a_tiny_spread_gets_distinct_ticks_and_a_note_saying_it_is_tiny() {
    let svg = line_chart(vec![Series::new(
        "val",
        vec![(1.0, 0.52472), (2.0, 0.52478), (3.0, 0.52481)],
    )])
    .to_svg()
    .unwrap();
    let ticks = y_tick_labels(&svg);
    assert!(ticks.len() >= 3, "{ticks:?}\n{svg}");
    let mut distinct = ticks.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), ticks.len(), "{ticks:?}");
    assert!(
        svg.contains("zoomed in: the values span only 0.52472–0.52481"),
        "{svg}"
    );
    // A spread of a few percent needs no note.
    let wide = line_chart(vec![Series::new("val", vec![(1.0, 0.5), (2.0, 0.6)])])
        .to_svg()
        .unwrap();
    assert!(!wide.contains("zoomed in"), "{wide}");
}

#[test]
fn ink_follows_the_colour_scheme() {
    let svg = line_chart(vec![Series::new("val", vec![(1.0, 0.5), (2.0, 0.6)])])
        .to_svg()
        .unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("class=\"pipe-chart\""),
        "{svg}"
    );
    assert!(svg.contains("prefers-color-scheme: dark"), "{svg}");
    assert!(!svg.contains("#000000"), "black is themed: {svg}");
    assert_eq!(svg.matches("class=\"bg\"").count(), 1, "{svg}");
}

#[test]
fn a_legend_too_wide_for_one_row_wraps_and_the_chart_grows() {
    let few: Vec<Series> = (1..=2)
        .map(|run| Series::new(format!("#{run}"), vec![(1.0, 0.5), (2.0, 0.6)]))
        .collect();
    let many: Vec<Series> = (1..=8)
        .map(|run| {
            Series::new(
                format!("#{run} (precision=bf16-mixed)"),
                vec![(1.0, 0.5), (2.0, 0.6)],
            )
        })
        .collect();
    let height = |svg: &str| {
        let start = svg.find("height=\"").unwrap() + 8;
        svg[start..start + svg[start..].find('"').unwrap()]
            .parse::<u32>()
            .unwrap()
    };
    let few = line_chart(few).to_svg().unwrap();
    let many = line_chart(many).to_svg().unwrap();
    assert_eq!(height(&few), HEIGHT);
    let rows = legend_layout(&["#1 (precision=bf16-mixed)"; 8])
        .iter()
        .map(|(_, _, row)| *row)
        .max()
        .unwrap()
        + 1;
    assert!(rows > 1, "{rows}");
    assert_eq!(height(&many), HEIGHT + (rows - 1) * LEGEND_HEIGHT);
    for (_, x, _) in legend_layout(&["#1 (precision=bf16-mixed)"; 8]) {
        assert!(x + 24 + 25 * 8 < WIDTH as i32, "{x}");
    }
}

/// The `<g class="series">` elements of a chart, in order.
fn series_groups(svg: &str) -> Vec<&str> {
    svg.split("<g class=\"series\"")
        .skip(1)
        .map(|rest| rest.split("</g>").next().unwrap())
        .collect()
}

#[test]
fn a_band_is_shaded_around_its_line_and_keys_mark_a_series_and_its_legend_entry() {
    let mean = Series::new(
        "lr=0.1 (mean ± std of 2 seeds)",
        vec![(1.0, 0.5), (2.0, 0.6), (3.0, 0.7)],
    )
    .with_band(vec![(0.4, 0.6), (0.55, 0.65), (0.69, 0.71)])
    .with_key("2");
    let plain = Series::new("#3", vec![(1.0, 0.3), (2.0, 0.2), (3.0, 0.1)]);
    let svg = line_chart(vec![plain, mean]).to_svg().unwrap();
    let groups = series_groups(&svg);
    assert_eq!(groups.len(), 2, "{svg}");
    assert!(
        !groups[0].contains("data-key") && !groups[0].contains("band"),
        "{}",
        groups[0]
    );
    assert!(groups[1].starts_with(" data-key=\"2\">"), "{}", groups[1]);
    // The band: a closed shape, three points along the top and three back
    // along the bottom, shaded in the line's colour.
    let band = groups[1]
        .split("<polygon class=\"band\" points=\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no band: {}", groups[1]));
    let (points, rest) = band.split_once('"').unwrap();
    let ys: Vec<i32> = points
        .split_whitespace()
        .map(|point| point.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    assert_eq!(ys.len(), 6, "{points}");
    // SVG y grows downwards: the upper edge has the smaller y.
    for (upper, lower) in ys[..3].iter().zip(ys[3..].iter().rev()) {
        assert!(upper < lower, "{points}");
    }
    assert!(
        rest.contains("fill=\"#FF7F0E\" fill-opacity=\"0.2\""),
        "{rest}"
    );
    // The band widens the axis: the lowest edge, 0.4, is on the chart.
    let lowest_tick = y_tick_labels(&svg)
        .iter()
        .filter_map(|tick| tick.parse::<f64>().ok())
        .fold(f64::INFINITY, f64::min);
    assert!(lowest_tick <= 0.1, "{lowest_tick}");
    assert!(
        svg.contains("<g class=\"legend-entry\" data-key=\"2\">\n<rect"),
        "the legend shows the band: {svg}"
    );
    assert!(
        svg.contains(">\nlr=0.1 (mean ± std of 2 seeds)\n</text>"),
        "{svg}"
    );

    // A band around a single point is an error bar, and its label says ±.
    let one = Series::new("mean", vec![(1.0, 0.5)]).with_band(vec![(0.4, 0.6)]);
    let svg = line_chart(vec![one]).to_svg().unwrap();
    let group = series_groups(&svg)[0];
    assert!(group.contains("<polyline class=\"band\""), "{group}");
    assert!(group.contains(">\n0.5 ± 0.1\n</text>"), "{group}");
}

#[test]
fn the_values_of_single_points_are_told_apart_and_do_not_overlap() {
    let svg = line_chart(
        (0..3)
            .map(|run| {
                Series::new(
                    format!("#{run}"),
                    vec![(1.0, 0.52472 + 0.00001 * run as f64)],
                )
            })
            .collect(),
    )
    .to_svg()
    .unwrap();
    let labels: Vec<(i32, String)> = series_groups(&svg)
        .iter()
        .map(|group| {
            let text = group.split("<text ").nth(1).unwrap();
            let y = text
                .split("y=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            let value = text
                .split(">\n")
                .nth(1)
                .unwrap()
                .split('\n')
                .next()
                .unwrap();
            (y.parse().unwrap(), value.to_string())
        })
        .collect();
    let values: Vec<&str> = labels.iter().map(|(_, value)| value.as_str()).collect();
    assert_eq!(values, ["0.52472", "0.52473", "0.52474"], "{svg}");
    let mut ys: Vec<i32> = labels.iter().map(|(y, _)| *y).collect();
    ys.sort_unstable();
    for pair in ys.windows(2) {
        assert!(pair[1] - pair[0] >= 16, "{ys:?}");
    }
    // The same value at one place prints over itself: it reads once.
    let same = line_chart(
        (0..3)
            .map(|run| Series::new(format!("#{run}"), vec![(1.0, 0.8)]))
            .collect(),
    )
    .to_svg()
    .unwrap();
    let mut places: Vec<&str> = series_groups(&same)
        .iter()
        .map(|group| {
            group
                .split("<text ")
                .nth(1)
                .unwrap()
                .split(" dy=")
                .next()
                .unwrap()
        })
        .collect();
    places.dedup();
    assert_eq!(places.len(), 1, "{same}");
    // And every row's dot shows: side by side, at one height.
    let dots: Vec<(i32, i32)> = series_groups(&same)
        .iter()
        .map(|group| {
            let number = |name: &str| -> i32 {
                let circle = group.split("<circle ").nth(1).unwrap();
                let start = circle.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                circle[start..start + circle[start..].find('"').unwrap()]
                    .parse()
                    .unwrap()
            };
            (number("cx"), number("cy"))
        })
        .collect();
    assert!(dots.iter().all(|dot| dot.1 == dots[0].1), "{dots:?}");
    for pair in dots.windows(2) {
        assert!(pair[1].0 - pair[0].0 >= 8, "{dots:?}");
    }
}
