//! `pipe compare --html` of one-epoch runs, rendered in a real headless
//! Chromium: each row's step curve overlaid (one line per row, read from
//! the cache by the digest each run recorded), tick labels that tell a
//! tiny spread apart, and text a reader can read.

use pipe_test_support::{chromium, TestProject};

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
