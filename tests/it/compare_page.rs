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
        plots
            .iter()
            .any(|plot| plot.ends_with("-train-loss-per-step.svg"))
            && plots
                .iter()
                .any(|plot| plot.ends_with("-train-lr-per-step.svg")),
        "{plots:?}"
    );
    let loss = figures
        .iter()
        .find(|figure| figure.plot.ends_with("-train-loss-per-step.svg"))
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
        // The curves take the page's width; the param's small chart
        // (val_acc by lr) a third of it.
        let small = figure.plot.ends_with("-by-lr.svg");
        assert!(figure.width >= if small { 300 } else { 900 }, "{figure:?}");
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

/// The header cells of the page's table: (name, hidden). A column headed
/// short (`val_acc`) is named in full by its `data-name`.
fn header(dom: &str) -> Vec<(String, bool)> {
    dom.split("<th ")
        .skip(1)
        .map(|rest| {
            let (open, rest) = rest.split_once('>').unwrap();
            let name = match open.split_once("data-name=\"") {
                Some((_, name)) => name.split('"').next().unwrap().to_string(),
                None => rest.split("</th>").next().unwrap().to_string(),
            };
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
    // Row 1's line in the curve chart, and its point in the chart of lr
    // against val_acc.
    assert_eq!(lines_hidden(&plain.dom, "1"), [false, false]);
    // `--all` ticks every column.
    let all = project.path("all.html");
    std::fs::write(&all, stdout(&project.pipe(&["compare", "--html", "--all"]))).unwrap();
    let all = chromium::render(&all, &shot("compare-explore-all.png"), (1100, 3000));
    assert!(
        header(&all.dom).iter().all(|(_, hidden)| !hidden),
        "{:?}",
        header(&all.dom)
    );

    // Row 1's lines off: its mean line and band gone from the chart (and
    // its point from the chart of lr), its legend entry and table row
    // dimmed but kept, so that either can turn it back on; row 2
    // untouched.
    let hidden = chromium::render_at(
        &file,
        "hide=1",
        &shot("compare-explore-hide.png"),
        (1100, 3000),
    );
    hidden.checked_figures();
    assert_eq!(
        lines_hidden(&hidden.dom, "1"),
        [true, true],
        "{}",
        hidden.dom
    );
    assert_eq!(
        lines_hidden(&hidden.dom, "2"),
        [false, false],
        "{}",
        hidden.dom
    );
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
    assert_eq!(lines_hidden(&filtered.dom, "1"), [true, true]);
    assert_eq!(lines_hidden(&filtered.dom, "2"), [false, false]);
    assert!(
        filtered.dom.contains("class=\"row-filter\""),
        "{}",
        filtered.dom
    );
}

/// A sweep of 4 learning rates by 2 depths: one run, 8 rows, three key
/// metrics. The best accuracy is lr 0.4 at depth 2, the lowest loss lr
/// 0.3 at depth 8; two rows share an accuracy at lr 0.2 (one place in
/// the chart of lr), two at depth 8 (one place in the chart of depth).
const SWEEP: &str = r#"
name: glance
key_metrics: [train.val_accuracy, train.val_loss, train.val_macro_f1]
params:
  train: { learning_rate: 0.1, max_depth: 2 }
stages:
  train:
    run: python3 train.py ${params.train.learning_rate} ${params.train.max_depth}
    deps: [train.py]
    metrics: m-${params.train.learning_rate}-${params.train.max_depth}.json
"#;

const TRAIN: &str = r#"import json, sys
lr, depth = sys.argv[1], sys.argv[2]
accuracy = {"0.1": {"2": 0.81, "8": 0.86}, "0.2": {"2": 0.84, "8": 0.84},
            "0.3": {"2": 0.88, "8": 0.86}, "0.4": {"2": 0.92, "8": 0.79}}[lr][depth]
loss = {"0.1": {"2": 0.52, "8": 0.44}, "0.2": {"2": 0.47, "8": 0.43},
        "0.3": {"2": 0.31, "8": 0.21}, "0.4": {"2": 0.26, "8": 0.61}}[lr][depth]
with open(f"m-{lr}-{depth}.json", "w") as out:
    json.dump({"val_accuracy": accuracy, "val_loss": loss,
               "val_macro_f1": round(accuracy - 0.0123, 4),
               "train_seconds": 12.5 + int(depth)}, out)
"#;

/// The `<tr>`s of the page's table body, each as its cells' opening tags
/// and contents, the row switch's cell first.
fn body_rows(dom: &str) -> Vec<Vec<(String, String)>> {
    let body = dom
        .split("<tbody>")
        .nth(1)
        .and_then(|rest| rest.split("</tbody>").next())
        .unwrap_or_else(|| panic!("no table body in {dom}"));
    body.split("<tr ")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let (open, rest) = cell.split_once('>').unwrap();
                    let content = rest.split("</td>").next().unwrap();
                    (open.to_string(), content.to_string())
                })
                .collect()
        })
        .collect()
}

/// The index of the column `name` (its `data-name`) among the header's
/// cells, the row switches' first.
fn column_index(dom: &str, name: &str) -> usize {
    dom.split("<th ")
        .skip(1)
        .position(|th| th.contains(&format!("data-name=\"{name}\"")))
        .unwrap_or_else(|| panic!("no column {name} in {dom}"))
}

/// Marks every header and cell of the page's table that takes more than
/// one line (its box, less its padding and border, taller than one and a
/// half of its line height): `data-tall-cells` on the page, empty when
/// none does; and how many there are (`data-cells`).
const MEASURE_CELLS: &str = r#"
(function () {
  var tall = [], cells = document.querySelectorAll('table[data-explore] th, table[data-explore] td');
  cells.forEach(function (cell) {
    var style = getComputedStyle(cell);
    var inside = cell.getBoundingClientRect().height
      - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom)
      - parseFloat(style.borderTopWidth) - parseFloat(style.borderBottomWidth);
    if (inside > 1.5 * parseFloat(style.lineHeight)) {
      tall.push(cell.textContent.trim() + ' (' + inside.toFixed(1) + ' px)');
    }
  });
  document.documentElement.setAttribute('data-cells', String(cells.length));
  document.documentElement.setAttribute('data-tall-cells', tall.join(' | '));
})();
"#;

fn attribute<'a>(dom: &'a str, name: &str) -> &'a str {
    let start = dom
        .find(&format!("{name}=\""))
        .unwrap_or_else(|| panic!("no {name} in {dom}"))
        + name.len()
        + 2;
    &dom[start..start + dom[start..].find('"').unwrap()]
}

/// The page of a sweep of 8 rows picks the winner at a glance, at a
/// laptop's 1280 x 800: the best value of each key metric marked, changes
/// coloured by verdict, no cell of the table on two lines, a first click
/// on a metric's header puts its best row first, and each swept param is
/// drawn against each key metric with every row's point in view, two
/// rows of one value included.
#[test]
fn the_page_of_a_sweep_marks_the_best_sorts_best_first_and_draws_params_against_metrics() {
    let project = TestProject::new();
    project.write("pipe.yaml", SWEEP);
    project.write("train.py", TRAIN);
    project.run_ok(&[
        "-m",
        "-S",
        "train.learning_rate=0.1,0.2,0.3,0.4",
        "-S",
        "train.max_depth=2,8",
    ]);
    let file = project.path("compare.html");
    std::fs::write(&file, stdout(&project.pipe(&["compare", "--html"]))).unwrap();
    let shot = |name: &str| chromium::artefact_dir().join(name);
    let rendered = chromium::render_with_script(
        &file,
        MEASURE_CELLS,
        &shot("compare-sweep-1280.png"),
        (1280, 800),
    );
    let figures = rendered.checked_figures();
    let dom = &rendered.dom;

    // Eight rows, every cell on one line.
    let rows = body_rows(dom);
    assert_eq!(rows.len(), 8, "{dom}");
    assert!(attribute(dom, "data-cells").parse::<usize>().unwrap() > 8 * 5);
    assert_eq!(attribute(dom, "data-tall-cells"), "", "cells on two lines");
    // Headers are short, their full names their tooltips.
    assert!(
        dom.contains(">val_accuracy</th>")
            && dom.contains("title=\"train.val_accuracy: best (highest) first\""),
        "{dom}"
    );

    // The best of each key metric, and only it, is marked.
    let label = |row: &[(String, String)]| row[1].1.clone();
    for (metric, best) in [
        ("train.val_accuracy", "learning_rate=0.4,max_depth=2"),
        ("train.val_macro_f1", "learning_rate=0.4,max_depth=2"),
        ("train.val_loss", "learning_rate=0.3,max_depth=8"),
    ] {
        let column = column_index(dom, metric);
        let marked: Vec<String> = rows
            .iter()
            .filter(|row| row[column].0.contains("best"))
            .map(|row| label(row))
            .collect();
        assert_eq!(marked.len(), 1, "{metric}: {marked:?}");
        assert!(marked[0].contains(best), "{metric}: {marked:?}");
    }
    // A time has no direction: nothing is best, nothing coloured.
    let seconds = column_index(dom, "train.train_seconds");
    assert!(rows.iter().all(|row| !row[seconds].0.contains("best")));
    // Changes against the baseline (lr 0.1, depth 2) coloured by verdict.
    let accuracy = column_index(dom, "train.val_accuracy");
    let change_of = |metric_column: usize, row_label: &str| {
        let row = rows
            .iter()
            .find(|row| label(row).contains(row_label))
            .unwrap();
        row[metric_column].1.clone()
    };
    assert!(
        change_of(accuracy, "learning_rate=0.4,max_depth=2")
            .contains("<span class=\"change better\">▲ +0.11"),
        "{dom}"
    );
    assert!(
        change_of(accuracy, "learning_rate=0.4,max_depth=8")
            .contains("<span class=\"change worse\">▼ -0.02"),
        "{dom}"
    );

    // Params against key metrics: for each of the 3 key metrics, a chart
    // of lr and one of depth, each with a point per row.
    let sweep: Vec<&chromium::Figure> = figures
        .iter()
        .filter(|figure| figure.svg.contains("class=\"point"))
        .collect();
    assert_eq!(sweep.len(), 6, "{figures:?}");
    for figure in &sweep {
        assert_eq!(figure.svg.matches("<circle ").count(), 8, "{}", figure.svg);
        assert!(figure.min_font >= 12.0, "{figure:?}");
    }
    let chart = |name: &str| {
        sweep
            .iter()
            .find(|figure| figure.plot.ends_with(name))
            .unwrap_or_else(|| panic!("no {name}: {figures:?}"))
    };
    // At lr 0.2 both depths have 0.84, at depth 8 lrs 0.1 and 0.3 have
    // 0.86: each pair at one height, side by side, both in view.
    for (plot, first, second) in [
        (
            "val-accuracy-by-train.learning-rate.svg",
            "learning_rate=0.2,max_depth=2",
            "learning_rate=0.2,max_depth=8",
        ),
        (
            "val-accuracy-by-train.max-depth.svg",
            "learning_rate=0.1,max_depth=8",
            "learning_rate=0.3,max_depth=8",
        ),
    ] {
        let svg = &chart(plot).svg;
        let (a, b) = (circle_at(svg, first), circle_at(svg, second));
        assert_eq!(a.1, b.1, "{plot}: one value, one height");
        assert!((a.0 - b.0).abs() >= 10.0, "{plot}: {a:?} and {b:?} overlap");
    }
    let best_points = chart("val-accuracy-by-train.learning-rate.svg")
        .svg
        .matches("class=\"point best\"")
        .count();
    assert_eq!(best_points, 1);

    // A first click on a metric's header: its best row first.
    for (metric, best) in [
        ("train.val_accuracy", "learning_rate=0.4,max_depth=2"),
        ("train.val_loss", "learning_rate=0.3,max_depth=8"),
    ] {
        let clicked = chromium::render_with_script(
            &file,
            &format!("document.querySelector('th[data-name=\"{metric}\"]').click();"),
            &shot(&format!("compare-sweep-sorted-{metric}.png")),
            (1280, 800),
        );
        clicked.checked_figures();
        let rows = body_rows(&clicked.dom);
        assert!(
            label(&rows[0]).contains(best),
            "{metric}: {:?}",
            label(&rows[0])
        );
    }
}

/// The (cx, cy) of the point whose tooltip names `row`.
fn circle_at(svg: &str, row: &str) -> (f64, f64) {
    let circle = svg
        .split("<circle ")
        .skip(1)
        .find(|circle| circle.split("</circle>").next().unwrap().contains(row))
        .unwrap_or_else(|| panic!("no point of {row} in {svg}"));
    let number = |name: &str| -> f64 {
        let start = circle.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        circle[start..start + circle[start..].find('"').unwrap()]
            .parse()
            .unwrap()
    };
    (number("cx"), number("cy"))
}
