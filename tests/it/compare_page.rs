//! `pipe compare --html` of one-epoch runs, rendered in a real headless
//! Chromium: each row's step curve overlaid (one line per row, read from
//! the cache by the digest each run recorded), tick labels that tell a
//! tiny spread apart, and text a reader can read.

use pipe_test_support::{chromium, TestProject};
use serde_json::Value;

/// One epoch, whose accuracy differs between runs in the fourth digit, and
/// a step curve per run in `steps.csv` (the same file every run: each
/// run's own version is in the cache).
const PIPELINE: &str = r#"
name: steps
params: { lr: 1 }
stages:
  train:
    run: >-
      printf 'step,epoch,loss,lr\n10,1,0.9,0.001\n20,1,0.${params.lr}5,0.0009\n30,1,0.${params.lr},0.0008\n40,1,0.${params.lr}2,0.0007\n' > steps.csv &&
      echo "{\"val_acc\": 0.5247${params.lr}, \"epochs\": {\"1\": {\"train_loss\": 0.${params.lr}, \"val_loss\": 0.8, \"val_acc\": 0.5247${params.lr}}}}" > m.json
    outs: { steps: steps.csv }
    metrics: m.json
"#;

fn stdout(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn the_html_page_overlays_each_rows_step_curve_with_readable_distinct_ticks() {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    for lr in ["2", "5", "8"] {
        project.run_ok(&["-S", &format!("lr={lr}")]);
    }
    // The workspace holds the last run's curve only: the others come from
    // the cache.
    assert!(project.read("steps.csv").contains("0.82"));
    let page = stdout(&project.pipe(&["compare", "--html"]));
    let file = project.path("compare.html");
    std::fs::write(&file, &page).unwrap();
    let rendered = chromium::render(
        &file,
        &chromium::artefact_dir().join("compare-steps.png"),
        (1100, 4000),
    );
    let figures = rendered.checked_figures();
    let plots: Vec<&str> = figures.iter().map(|figure| figure.plot.as_str()).collect();
    assert!(
        plots.contains(&"04-train-loss-per-step.svg")
            && plots.contains(&"05-train-lr-per-step.svg"),
        "{plots:?}"
    );
    let loss = figures
        .iter()
        .find(|figure| figure.plot == "04-train-loss-per-step.svg")
        .unwrap();
    // One line of four steps per row, each with its row in the legend.
    let lines: Vec<&str> = loss
        .svg
        .split("<polyline ")
        .skip(1)
        .filter(|line| line.contains("stroke-width=\"2\""))
        .filter(|line| {
            let points = line.split("points=\"").nth(1).unwrap_or("");
            points
                .split('"')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .count()
                == 4
        })
        .collect();
    assert_eq!(lines.len(), 3, "{}", loss.svg);
    let texts = loss.texts();
    for run in ["#1", "#2", "#3"] {
        assert!(texts.iter().any(|text| text == run), "{run}: {texts:?}");
    }
    // Each run's own curve, not the workspace's: run #1's losses go down
    // to 0.2, and the axis with them.
    let lowest_tick = loss
        .texts_with("text-anchor=\"end\"")
        .iter()
        .filter_map(|tick| tick.parse::<f64>().ok())
        .fold(f64::INFINITY, f64::min);
    assert!(lowest_tick <= 0.2, "{lowest_tick}: {texts:?}");

    for figure in &figures {
        assert!(
            figure.min_font >= 12.0,
            "{} has text of {} px",
            figure.plot,
            figure.min_font
        );
        assert!(figure.width >= 900, "{figure:?}");
        let ticks = figure.texts_with("text-anchor=\"end\"");
        let mut distinct = ticks.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), ticks.len(), "{}: {ticks:?}", figure.plot);
    }
    // The accuracies differ in the fifth digit: the chart says so.
    let accuracy = figures
        .iter()
        .find(|figure| figure.plot.ends_with("val-acc.svg"))
        .unwrap_or_else(|| panic!("{plots:?}"));
    assert!(
        accuracy
            .texts()
            .iter()
            .any(|text| text.starts_with("zoomed in: the values span only 0.52472–0.52478")),
        "{:?}",
        accuracy.texts()
    );
    // One epoch is one point per row: a dot, with its value written beside
    // it in the digits that tell the rows apart.
    for (key, value) in [("1", "0.52472"), ("2", "0.52475"), ("3", "0.52478")] {
        let line = series_of(&accuracy.svg, key);
        assert_eq!(line.len(), 1, "{}", accuracy.svg);
        assert!(
            line[0].contains("<circle") && line[0].contains(&format!(">\n{value}\n</text>")),
            "{}",
            line[0]
        );
    }
}

/// A run whose step curve is no longer in the local cache is named on the
/// page, and the other rows are still drawn.
#[test]
fn a_step_curve_missing_from_the_cache_is_named_and_the_others_drawn() {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    for lr in ["2", "5"] {
        project.run_ok(&["-S", &format!("lr={lr}")]);
    }
    let show: serde_json::Value =
        serde_json::from_str(&stdout(&project.pipe(&["show", "1", "--json"]))).unwrap();
    let train = show["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|stage| stage["stage"] == "train")
        .unwrap_or_else(|| panic!("{show:#}"));
    let digest = train["outputs"]["steps.csv"]["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("{train:#}"));
    std::fs::remove_file(project.path(&format!(
        ".pipe/cache/objects/{}/{}",
        &digest[..2],
        &digest[2..]
    )))
    .unwrap();

    let page = stdout(&project.pipe(&["compare", "--html"]));
    assert!(
        page.contains("<p>Per-step curves that could not be read, so are not drawn: #1 train: "),
        "{page}"
    );
    let file = project.path("compare.html");
    std::fs::write(&file, &page).unwrap();
    let rendered = chromium::render(
        &file,
        &chromium::artefact_dir().join("compare-steps-missing.png"),
        (1100, 4000),
    );
    let figures = rendered.checked_figures();
    let loss = figures
        .iter()
        .find(|figure| figure.plot.ends_with("train-loss-per-step.svg"))
        .unwrap_or_else(|| panic!("{figures:?}"));
    let texts = loss.texts();
    assert!(texts.iter().any(|text| text == "#2"), "{texts:?}");
    assert!(!texts.iter().any(|text| text == "#1"), "{texts:?}");
}

/// Seeds 1 and 2 of one lr, and another lr: two rows of the table, the
/// first the mean of two seeds. `rows` is a metric but not a key one: the
/// terminal leaves it out without `--all`.
const SEEDS: &str = r#"
name: seeds
params: { lr: 1, seed: 1 }
stages:
  train:
    run: >-
      echo "{\"val_acc\": 0.5${params.lr}${params.seed}, \"rows\": 1${params.seed}, \"epochs\": {
        \"1\": {\"val_acc\": 0.5${params.seed}}, \"2\": {\"val_acc\": 0.6${params.seed}}, \"3\": {\"val_acc\": 0.7${params.lr}}}}" > m.json
    metrics: m.json
"#;

fn seeds_page(project: &TestProject) -> std::path::PathBuf {
    project.write("pipe.yaml", SEEDS);
    project.run_ok(&["-S", "seed=1"]);
    project.run_ok(&["-S", "seed=2"]);
    project.run_ok(&["-S", "lr=3"]);
    let file = project.path("compare.html");
    std::fs::write(&file, stdout(&project.pipe(&["compare", "--html"]))).unwrap();
    file
}

/// The `<g class="series" data-key="KEY"...>` elements of `svg` (their
/// opening tag and content).
fn series_of<'a>(svg: &'a str, key: &str) -> Vec<&'a str> {
    svg.split("<g class=\"series\"")
        .skip(1)
        .filter(|rest| rest.starts_with(&format!(" data-key=\"{key}\"")))
        .map(|rest| rest.split("</g>").next().unwrap())
        .collect()
}

/// The y of each point of the first `<TAG ...points="...">` in `svg` that
/// follows `after`.
fn ys(svg: &str, after: &str) -> Vec<f64> {
    let rest = svg
        .split(after)
        .nth(1)
        .unwrap_or_else(|| panic!("no {after} in {svg}"));
    let points = rest
        .split("points=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    points
        .split_whitespace()
        .map(|point| point.split(',').nth(1).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn a_row_of_seeds_is_drawn_as_its_mean_with_a_band_of_one_std() {
    let project = TestProject::new();
    let file = seeds_page(&project);
    let rendered = chromium::render(
        &file,
        &chromium::artefact_dir().join("compare-seeds.png"),
        (1100, 3000),
    );
    let figures = rendered.checked_figures();
    let accuracy = figures
        .iter()
        .find(|figure| figure.plot.ends_with("train-val-acc.svg"))
        .unwrap_or_else(|| panic!("{figures:?}"));
    let texts = accuracy.texts();
    assert!(
        texts
            .iter()
            .any(|text| text == "#1,#2 lr=1 (mean ± std of 2 seeds)"),
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|text| text == "#3 lr=3 seed=1"),
        "{texts:?}"
    );
    // Two lines, not one per seed.
    assert_eq!(accuracy.svg.matches("<g class=\"series\"").count(), 2);
    let mean = series_of(&accuracy.svg, "1");
    assert_eq!(mean.len(), 1, "{}", accuracy.svg);
    assert!(
        mean[0].contains("<polygon class=\"band\"") && mean[0].contains("fill-opacity=\"0.2\""),
        "{}",
        mean[0]
    );
    // The seeds differ at epochs 1 and 2 (0.51 and 0.52, 0.61 and 0.62),
    // not at 3 (0.71 both): the band is open around the line at the first
    // two and closed on it at the last.
    let line = ys(mean[0], "stroke-width=\"2\"");
    let band = ys(mean[0], "<polygon class=\"band\"");
    assert_eq!((line.len(), band.len()), (3, 6), "{}", mean[0]);
    for (index, y) in line.iter().enumerate() {
        let (upper, lower) = (band[index], band[5 - index]);
        if index < 2 {
            assert!(upper < *y && *y < lower, "{upper} {y} {lower}");
            assert!((y - upper - (lower - y)).abs() <= 1.0, "± the same std");
        } else {
            assert!((upper - y).abs() <= 1.0 && (lower - y).abs() <= 1.0);
        }
    }
    assert!(!series_of(&accuracy.svg, "2")[0].contains("band"));
}

/// A pipeline's own matrix over seeds, in one run: its rows are one line.
#[test]
fn a_matrix_over_seeds_is_one_line_with_a_band() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"
name: matrix-seeds
stages:
  train:
    matrix: { seed: [1, 2] }
    run: >-
      echo "{\"val_acc\": 0.5${matrix.seed}, \"epochs\": {
        \"1\": {\"val_acc\": 0.5${matrix.seed}}, \"2\": {\"val_acc\": 0.6${matrix.seed}}}}" > m-${matrix.seed}.json
    metrics: m-${matrix.seed}.json
"#,
    );
    project.run_ok(&[]);
    let page = stdout(&project.pipe(&["compare", "--html"]));
    assert!(page.contains("pipe compare: 1 row"), "{page}");
    assert!(
        page.contains(">\n#1 (mean ± std of 2 seeds)\n</text>"),
        "{page}"
    );
    assert_eq!(page.matches("<polygon class=\"band\"").count(), 1, "{page}");
}

/// The opening tag of each element `<TAG` of `dom` whose tag contains
/// `attribute`.
fn tags<'a>(dom: &'a str, tag: &str, attribute: &str) -> Vec<&'a str> {
    dom.split(&format!("<{tag} "))
        .skip(1)
        .map(|rest| rest.split('>').next().unwrap())
        .filter(|open| open.contains(attribute))
        .collect()
}

/// The header cells of the page's table: (name, hidden).
fn header(dom: &str) -> Vec<(String, bool)> {
    dom.split("<th ")
        .skip(1)
        .map(|rest| {
            let (open, rest) = rest.split_once('>').unwrap();
            // A name may wrap after a dot or an underscore.
            let name = rest.split("</th>").next().unwrap().replace("<wbr>", "");
            (name, open.contains("hidden"))
        })
        .collect()
}

/// Whether each line of the row `key` is hidden, over every chart.
fn lines_hidden(dom: &str, key: &str) -> Vec<bool> {
    tags(dom, "g", &format!("class=\"series\" data-key=\"{key}\""))
        .iter()
        .map(|open| open.contains("display: none"))
        .collect()
}

/// The page is explored offline: its columns picked (those of the terminal
/// table ticked at first), its rows filtered, a row's lines hidden in
/// every chart; a view is an address (`#hide=1`), which the page opens in.
#[test]
fn the_page_picks_columns_filters_rows_and_hides_a_rows_lines_everywhere() {
    let project = TestProject::new();
    let file = seeds_page(&project);
    let shot = |name: &str| chromium::artefact_dir().join(name);

    let plain = chromium::render(&file, &shot("compare-explore.png"), (1100, 3000));
    plain.checked_figures();
    // Ticked at first: the columns the terminal shows without --all.
    let terminal: Value =
        serde_json::from_str(&stdout(&project.pipe(&["compare", "--json"]))).unwrap();
    let mut by_default: Vec<String> = terminal["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|column| column["name"].as_str().unwrap().to_string())
        .collect();
    by_default.sort();
    assert!(
        !by_default.contains(&"train.rows".to_string()),
        "{by_default:?}"
    );
    let header_cells = header(&plain.dom);
    let mut shown: Vec<String> = header_cells
        .iter()
        .filter(|(name, hidden)| !hidden && name != "lines" && name != "run")
        .map(|(name, _)| name.clone())
        .collect();
    shown.sort();
    assert_eq!(shown, by_default, "{header_cells:?}");
    assert!(
        header_cells.contains(&("train.rows".to_string(), true)),
        "every column is on the page: {header_cells:?}"
    );
    let rows_box = tags(&plain.dom, "input", "data-column=\"train.rows\"");
    assert_eq!(rows_box.len(), 1, "{}", plain.dom);
    assert!(!rows_box[0].contains("checked"), "{rows_box:?}");
    assert!(
        tags(&plain.dom, "input", "data-column=\"train.val_acc\"")[0].contains("checked"),
        "{}",
        plain.dom
    );
    assert!(plain
        .dom
        .contains("<input type=\"search\" class=\"row-filter\""));
    assert_eq!(lines_hidden(&plain.dom, "1"), [false]);
    // `--all` ticks every column.
    let all = project.path("all.html");
    std::fs::write(&all, stdout(&project.pipe(&["compare", "--html", "--all"]))).unwrap();
    let all = chromium::render(&all, &shot("compare-explore-all.png"), (1100, 3000));
    assert!(
        header(&all.dom).iter().all(|(_, hidden)| !hidden),
        "{:?}",
        header(&all.dom)
    );

    // Row 1's lines off: its mean line and band gone from the chart, its
    // legend entry and table row dimmed but kept, so that either can turn
    // it back on; row 2 untouched.
    let hidden = chromium::render_at(
        &file,
        "hide=1",
        &shot("compare-explore-hide.png"),
        (1100, 3000),
    );
    hidden.checked_figures();
    assert_eq!(lines_hidden(&hidden.dom, "1"), [true], "{}", hidden.dom);
    assert_eq!(lines_hidden(&hidden.dom, "2"), [false], "{}", hidden.dom);
    let row = tags(&hidden.dom, "tr", "data-key=\"1\"");
    assert!(
        row[0].contains("class=\"off\"") && !row[0].contains("hidden"),
        "{row:?}"
    );
    assert!(!tags(&hidden.dom, "input", "data-key=\"1\"")[0].contains("checked"));
    assert!(tags(&hidden.dom, "input", "data-key=\"2\"")[0].contains("checked"));
    assert!(
        tags(
            &hidden.dom,
            "g",
            "class=\"legend-entry off\" data-key=\"1\""
        )
        .len()
            == 1,
        "{}",
        hidden.dom
    );

    // A filter on a param as the legends write it: row 1 is filtered out,
    // with its lines.
    let filtered = chromium::render_at(
        &file,
        "filter=lr%3D3",
        &shot("compare-explore-filter.png"),
        (1100, 3000),
    );
    filtered.checked_figures();
    assert!(tags(&filtered.dom, "tr", "data-key=\"1\"")[0].contains("hidden"));
    assert!(!tags(&filtered.dom, "tr", "data-key=\"2\"")[0].contains("hidden"));
    assert_eq!(lines_hidden(&filtered.dom, "1"), [true]);
    assert_eq!(lines_hidden(&filtered.dom, "2"), [false]);
    assert!(
        filtered.dom.contains("class=\"row-filter\""),
        "{}",
        filtered.dom
    );
}
