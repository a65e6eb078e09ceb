//! pipelines/speed-study.yaml at its CPU size through the real binary,
//! against the local IMDB mirror: every precision under every setup
//! (single, and ddp and the two sharded strategies on 2 CPU replicas
//! standing in for GPUs), each scored on
//! the same test split, ending in one report whose table reads like the
//! study's, and `pipe compare` reading the same run as one table.

use crate::imdb_mirror::{project_with_pipeline, Mirror};

const COMBINATIONS: [&str; 8] = [
    "precision=32-true,setup=single-cpu",
    "precision=32-true,setup=ddp2-cpu",
    "precision=32-true,setup=zero2-2-cpu",
    "precision=32-true,setup=fsdp2-cpu",
    "precision=bf16-mixed,setup=single-cpu",
    "precision=bf16-mixed,setup=ddp2-cpu",
    "precision=bf16-mixed,setup=zero2-2-cpu",
    "precision=bf16-mixed,setup=fsdp2-cpu",
];

#[test]
fn the_speed_study_runs_at_cpu_size_and_reads_as_one_table() {
    let mirror = Mirror::start();
    let project = project_with_pipeline("speed-study.yaml");
    // The CPU size of the pipeline's header comment, smaller still.
    let run = mirror.run(
        &project,
        "speed-study.yaml",
        &[
            "-S",
            "precisions=[32-true, bf16-mixed]",
            "-S",
            "setups=[single-cpu, ddp2-cpu, zero2-2-cpu, fsdp2-cpu]",
            "-S",
            "split.train=16",
            "-S",
            "split.val=4",
            "-S",
            "split.test=4",
            "-S",
            "tokenize.max_length=64",
            "-S",
            "train.epochs=1",
            "-S",
            "train.batch_size=4",
            "-S",
            "train.log_every_n_steps=1",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    for combination in COMBINATIONS {
        assert_eq!(run.status(&format!("train@{combination}")), "ran");
        assert_eq!(run.status(&format!("evaluate@{combination}")), "ran");
    }
    assert_eq!(run.status("report"), "ran");

    // The setups mean what the pipeline says: ddp on two replicas.
    let train = |combination: &str| -> serde_json::Value {
        serde_json::from_str(&project.read(&format!(
            ".pipe/out/speed-study/train@{combination}/metrics.json"
        )))
        .unwrap()
    };
    let ddp = train("precision=bf16-mixed,setup=ddp2-cpu");
    assert_eq!(ddp["strategy"], "ddp");
    assert_eq!(ddp["devices"], serde_json::json!(["cpu", "cpu"]));
    assert_eq!(ddp["precision"], "bf16-mixed");
    assert_eq!(
        train("precision=32-true,setup=single-cpu")["strategy"],
        "single"
    );
    // The sharded setups hold half of ddp's optimizer state per replica.
    let optimizer_bytes = |combination: &str| {
        train(combination)["memory"]["optimizer_bytes"]
            .as_f64()
            .unwrap()
    };
    let ddp_state = optimizer_bytes("precision=32-true,setup=ddp2-cpu");
    for setup in ["zero2-2-cpu", "fsdp2-cpu"] {
        let ratio = optimizer_bytes(&format!("precision=32-true,setup={setup}")) * 2.0 / ddp_state;
        assert!((0.98..1.03).contains(&ratio), "{setup}: {ratio}");
    }

    // The study's table: one row per combination, in the pipeline's order,
    // the baseline (fp32, one device) first with a speed-up of 1x.
    let report = project.read(".pipe/out/speed-study/report/report/report.md");
    let header = report
        .lines()
        .find(|line| line.starts_with("| precision | setup |"))
        .unwrap_or_else(|| panic!("no results table:\n{report}"));
    for column in [
        "train.train\\_seconds",
        "evaluate.accuracy",
        "train.throughput.mfu",
        "speed-up",
    ] {
        assert!(header.contains(column), "{header}");
    }
    let rows: Vec<&str> = report
        .lines()
        .filter(|line| line.starts_with("| 32-true |") || line.starts_with("| bf16-mixed |"))
        .collect();
    assert_eq!(rows.len(), 8, "{report}");
    assert!(rows[0].starts_with("| 32-true | single-cpu |"), "{report}");
    assert!(rows[0].trim_end().ends_with("| 1x |"), "{report}");
    assert!(rows[5].starts_with("| bf16-mixed | ddp2-cpu |"), "{report}");
    assert!(
        rows[7].starts_with("| bf16-mixed | fsdp2-cpu |"),
        "{report}"
    );
    assert!(
        project.exists(".pipe/out/speed-study/report/report/index.html"),
        "the HTML twin"
    );

    // `pipe compare` reads the run as the same four rows.
    let compare = project
        .command()
        .args(["compare", "--last", "1", "--json"])
        .output()
        .unwrap();
    assert!(
        compare.status.success(),
        "{}",
        String::from_utf8_lossy(&compare.stderr)
    );
    let table: serde_json::Value = serde_json::from_slice(&compare.stdout).unwrap();
    assert_eq!(table["rows"].as_array().unwrap().len(), 8, "{table:#}");
}
