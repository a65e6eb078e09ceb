//! Metric values in human units through the real binary: `pipe diff`
//! (text, Markdown, JSON), `pipe show` and `pipe compare` read a metric's
//! unit from its name, and only result metrics get a verdict unless the
//! pipeline declares a direction.

use pipe_test_support::TestProject;
use serde_json::Value;

use crate::reports::text as stdout;

/// A training stage that reports a result, memory, a duration, a
/// throughput and a step time, as quickstart's training does.
fn pipeline(accuracy: f64, rss: u64, seconds: f64, flops: u64, step_ms: f64) -> String {
    format!(
        "name: units\nstages:\n  train:\n    run: >-\n      echo '{{\"accuracy\": {accuracy}, \
         \"memory\": {{\"peak_rss_bytes\": {rss}}}, \"epoch_seconds\": {seconds}, \
         \"throughput\": {{\"flops_per_s\": {flops}}}, \"step_ms\": {step_ms}}}' > m.json\n    \
         metrics: m.json\n"
    )
}

fn two_runs() -> TestProject {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        &pipeline(0.8, 1_572_143_628, 64.69, 110_941_664_811, 12.5),
    );
    project.run_ok(&[]);
    project.write(
        "pipe.yaml",
        &pipeline(0.85, 1_595_101_151, 75.44, 95_132_996_973, 14.0),
    );
    project.run_ok(&[]);
    project
}

/// The line of `metric` in `pipe diff`'s text, wherever the diff puts it.
fn line_of<'a>(text: &'a str, metric: &str) -> &'a str {
    let label = format!("train: {metric} ");
    text.lines()
        .find(|line| line.trim_start().starts_with(&label))
        .unwrap_or_else(|| panic!("no line for {metric} in:\n{text}"))
}

fn squeezed(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn diff_prints_bytes_durations_and_flops_in_human_units_and_judges_only_results() {
    let project = two_runs();
    let text = stdout(&project.pipe(&["diff", "--all"]));
    let line = |metric: &str| squeezed(line_of(&text, metric));

    assert_eq!(
        line("memory.peak_rss_bytes"),
        "train: memory.peak_rss_bytes 1.46 GiB -> 1.49 GiB +21.9 MiB (+1.5%) ▲"
    );
    assert_eq!(
        line("epoch_seconds"),
        "train: epoch_seconds 1 min 5 s -> 1 min 15 s +10.8 s (+17%) ▲"
    );
    assert_eq!(
        line("throughput.flops_per_s"),
        "train: throughput.flops_per_s 111 GFLOP/s -> 95.1 GFLOP/s -15.8 GFLOP/s (-14%) ▼"
    );
    // A step time is neither better nor worse by its name alone; an
    // accuracy is.
    assert_eq!(
        line("step_ms"),
        "train: step_ms 12.5 ms -> 14 ms +1.5 ms (+12%) ▲"
    );
    assert_eq!(
        line("accuracy"),
        "train: accuracy 0.8 -> 0.85 +0.05 (+6.2%) ▲ better"
    );

    let markdown = stdout(&project.pipe(&["diff", "--md", "--all"]));
    assert!(
        markdown.contains(
            "| train | memory.peak\\_rss\\_bytes | 1.46 GiB | 1.49 GiB | +21.9 MiB | +1.5% | ▲ |"
        ),
        "{markdown}"
    );
    assert!(
        markdown.contains("| train | step\\_ms | 12.5 ms | 14 ms | +1.5 ms | +12% | ▲ |"),
        "{markdown}"
    );
    assert!(
        markdown.contains("| train | accuracy | 0.8 | 0.85 | +0.05 | +6.2% | ▲ better |"),
        "{markdown}"
    );

    // JSON keeps the raw numbers; no direction is made up.
    let json: Value = serde_json::from_str(&stdout(&project.pipe(&["diff", "--json"]))).unwrap();
    let metric = |name: &str| {
        json["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|metric| metric["metric"] == name)
            .unwrap_or_else(|| panic!("no {name} in {json:#}"))
            .clone()
    };
    let rss = metric("memory.peak_rss_bytes");
    assert_eq!(rss["a"], 1_572_143_628u64);
    assert_eq!(rss["delta"], 22_957_523.0);
    assert_eq!(rss["direction"], "unknown");
    assert_eq!(rss["verdict"], "changed");
    assert_eq!(metric("step_ms")["verdict"], "changed");
    assert_eq!(metric("accuracy")["verdict"], "better");
}

#[test]
fn a_declared_direction_judges_a_timing_and_show_and_compare_read_units() {
    let project = two_runs();
    let text = stdout(&project.pipe(&["diff", "--lower", "step_ms"]));
    assert!(
        squeezed(line_of(&text, "step_ms")).ends_with("+1.5 ms (+12%) ▲ worse"),
        "{text}"
    );

    // `pipe show` keeps the recorded number beside the readable one.
    let shown = stdout(&project.pipe(&["show"]));
    assert!(
        shown.contains("  train: memory.peak_rss_bytes = 1.49 GiB (1595101151)"),
        "{shown}"
    );
    assert!(
        shown.contains("  train: throughput.flops_per_s = 95.1 GFLOP/s (95132996973)"),
        "{shown}"
    );

    let compare = stdout(&project.pipe(&["compare", "--md", "--all-columns"]));
    assert!(
        compare.contains("1.49 GiB ▲ +21.9 MiB (+1.5%) |"),
        "{compare}"
    );
    assert!(
        compare.contains("95.1 GFLOP/s ▼ -15.8 GFLOP/s (-14%) |"),
        "{compare}"
    );
    let csv = stdout(&project.pipe(&["compare", "--csv", "--all-columns"]));
    assert!(csv.contains("1595101151"), "{csv}");
}

/// A run record's names are input like any other: a metric named with a
/// `|`, a backtick and a newline cannot break `diff --md`'s table, which a
/// pull-request comment shows. Every row keeps its eight cells.
#[test]
fn diff_markdown_escapes_names_and_values_a_record_carries() {
    let project = TestProject::new();
    let pipeline = |value: u32| {
        format!(
            "name: hostile\nparams: {{v: {value}}}\nstages:\n  train:\n    run: >-\n      \
             printf '{{\"a|b`c\\\\nd_loss\": %s}}' ${{params.v}} > m.json\n    metrics: m.json\n"
        )
    };
    project.write("pipe.yaml", &pipeline(1));
    project.run_ok(&[]);
    project.write("pipe.yaml", &pipeline(2));
    project.run_ok(&[]);
    let markdown = stdout(&project.pipe(&["diff", "--md", "--all"]));
    let row = markdown
        .lines()
        .find(|line| line.starts_with("| train |") && line.contains("loss"))
        .unwrap_or_else(|| panic!("{markdown}"));
    let unescaped_bars = row
        .match_indices('|')
        .filter(|(at, _)| !row[..*at].ends_with('\\'))
        .count();
    assert_eq!(unescaped_bars, 8, "{row}");
    assert!(row.contains("a\\|b\\`c<br>d\\_loss"), "{row}");
    assert!(!markdown.contains("\nd_loss"), "{markdown}");

    // The same name in `compare --md`'s header: one cell, escaped alike.
    let compare = stdout(&project.pipe(&["compare", "--md", "--all"]));
    let header = compare
        .lines()
        .find(|line| line.starts_with("| run |"))
        .unwrap_or_else(|| panic!("{compare}"));
    assert!(header.contains("a\\|b\\`c<br>d\\_loss"), "{header}");
    let cells = |line: &str| {
        line.match_indices('|')
            .filter(|(at, _)| !line[..*at].ends_with('\\'))
            .count()
    };
    for line in compare.lines().filter(|line| line.starts_with('|')) {
        assert_eq!(cells(line), cells(header), "{compare}");
    }
}
