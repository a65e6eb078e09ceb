//! Key metrics first: what a pipeline names under `key_metrics:` (and a
//! built-in stage declares, `StageRoles::key_metrics`) is what `compare`,
//! `diff` and `show` lead with, unchanged or not; everything else is
//! counted and shown on request (`--all`, `--metrics GLOB`).

use pipe_test_support::TestProject;
use serde_json::Value;

use crate::reports::text as stdout;

fn pipeline(score: f64, seconds: f64, rows: u32) -> String {
    format!(
        "key_metrics: [train.score, seconds]\nparams:\n  lr: {score}\nstages:\n  train:\n    run: >-\n      echo '{{\"score\": {score}, \"seconds\": {seconds}, \"rows\": {rows}, \"loss\": 0.5}}' > m.json\n    params: [lr]\n    metrics: m.json\n"
    )
}

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", &pipeline(0.5, 10.0, 100));
    project.run_ok(&[]);
    project.write("pipe.yaml", &pipeline(0.75, 10.0, 120));
    project.run_ok(&[]);
    project
}

#[test]
fn compare_shows_the_pipelines_key_metrics_and_counts_the_rest() {
    let project = project();
    let text = stdout(&project.pipe(&["compare"]));
    let header = text.lines().next().unwrap();
    // Named by the pipeline (`seconds` unchanged, still shown), and `loss`
    // by its name; `rows` differs but is not key.
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["run", "lr", "loss", "score", "seconds"],
        "{text}"
    );
    assert!(
        text.contains("1 more metric differs (--all shows it): train.rows"),
        "{text}"
    );
    assert!(
        text.lines().all(|line| line.chars().count() <= 100),
        "{text}"
    );

    let picked = stdout(&project.pipe(&["compare", "--metrics", "r*"]));
    assert_eq!(
        picked
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["run", "lr", "rows"],
        "{picked}"
    );
    let every = stdout(&project.pipe(&["compare", "--all"]));
    assert!(every.lines().next().unwrap().contains("rows"), "{every}");
}

#[test]
fn diff_leads_with_key_metrics_changed_or_not_and_lists_the_rest_on_request() {
    let project = project();
    let text = stdout(&project.pipe(&["diff"]));
    let key: Vec<&str> = text
        .lines()
        .skip_while(|line| *line != "key metrics")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .collect();
    assert_eq!(key.len(), 4, "{text}");
    let line = |name: &str| {
        key.iter()
            .find(|line| line.contains(&format!("train: {name} ")))
            .unwrap_or_else(|| panic!("{name}: {text}"))
    };
    assert!(line("loss").contains("unchanged"), "{text}");
    assert!(line("score").contains("0.5 -> 0.75"), "{text}");
    assert!(line("seconds").contains("unchanged"), "{text}");
    assert_eq!(
        key[3], "  1 other metric changed (--all lists it)",
        "{text}"
    );
    assert!(!key.iter().any(|line| line.contains("rows")), "{text}");
    let all = stdout(&project.pipe(&["diff", "--all"]));
    assert!(
        all.contains("other metrics\n  train: rows  100 -> 120"),
        "{all}"
    );

    let markdown = stdout(&project.pipe(&["diff", "--md"]));
    assert!(markdown.contains("## Key metrics"), "{markdown}");
    assert!(
        markdown.contains("1 other metric changed (pipe diff --all lists them)."),
        "{markdown}"
    );
}

#[test]
fn show_lists_the_key_metrics_first() {
    let project = project();
    let text = stdout(&project.pipe(&["show", "last"]));
    let key: Vec<&str> = text
        .lines()
        .skip_while(|line| *line != "key metrics")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .collect();
    let names: Vec<&str> = key
        .iter()
        .map(|line| line.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(names, ["loss", "score", "seconds"], "{text}");
}

#[test]
fn key_metrics_that_are_not_a_list_of_names_are_refused_where_written() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "key_metrics: { score: higher }\nstages:\n  a:\n    run: echo\n",
    );
    let output = project.pipe(&["validate"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`key_metrics` must be a list of metric names")
            && stderr.contains("pipe.yaml:1:14"),
        "{stderr}"
    );
}

#[test]
fn the_built_in_training_and_evaluation_stages_declare_their_key_metrics() {
    let project = TestProject::new();
    for (stage, keys) in [
        ("train/classifier", ["val_acc", "val_loss", "train_seconds"]),
        ("eval/classifier", ["accuracy", "f1", "loss"]),
    ] {
        let output = project.pipe(&["stages", stage, "--json"]);
        assert!(output.status.success(), "{stage}");
        let infos: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            infos[0]["roles"]["key_metrics"],
            serde_json::json!(keys),
            "{stage}"
        );
    }
}
