//! pipelines/imdb.yaml end to end through the real binary, against a real
//! HTTP server on 127.0.0.1 serving a small aclImdb-shaped archive and a
//! fake Hugging Face hub holding a tiny DistilBERT: download (md5-checked)
//! -> extract -> split -> model download -> tokenize -> train per
//! precision -> evaluate each checkpoint.

use crate::imdb_mirror::{project_with_pipeline, Mirror};

#[test]
fn the_imdb_pipeline_runs_against_local_mirrors() {
    let mirror = Mirror::start();
    let server = &mirror.server;
    let project = project_with_pipeline("imdb.yaml");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "-S",
            "split.train=16",
            "-S",
            "split.val=4",
            "-S",
            "split.test=4",
            "-S",
            "train.epochs=2",
        ];
        args.extend_from_slice(extra);
        mirror.run(&project, "imdb.yaml", &args)
    };

    let first = run(&[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(
        first.ran(),
        [
            "download",
            "evaluate@precision=32-true",
            "evaluate@precision=bf16-mixed",
            "extract",
            "model",
            "report",
            "split",
            "tokenize",
            "train@precision=32-true",
            "train@precision=bf16-mixed",
        ]
    );
    let dataset = project.read(".pipe/out/imdb/extract/dataset");
    assert_eq!(dataset.lines().count(), 24);
    assert!(dataset.contains("\"rating\":") && dataset.contains("<br /><br />"));
    for split in ["train", "val", "test"] {
        let safetensors = project.path(&format!(
            ".pipe/out/imdb/tokenize/tokens/{split}.safetensors"
        ));
        assert!(safetensors.is_file(), "{split} tokens");
    }
    // Each precision trained its own checkpoint, and each was scored on
    // the 4 test rows.
    for precision in ["32-true", "bf16-mixed"] {
        let train: serde_json::Value = serde_json::from_str(&project.read(&format!(
            ".pipe/out/imdb/train@precision={precision}/metrics.json"
        )))
        .unwrap();
        assert_eq!(train["precision"], precision);
        assert_eq!(train["epochs_run"], 2);
        assert_eq!(train["train_rows"], 16);
        let checkpoint = project.path(&format!(
            ".pipe/out/imdb/train@precision={precision}/checkpoint/config.json"
        ));
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(checkpoint).unwrap()).unwrap();
        assert_eq!(
            config["architectures"],
            serde_json::json!(["DistilBertForSequenceClassification"])
        );
        let predictions = project.read(&format!(
            ".pipe/out/imdb/evaluate@precision={precision}/predictions"
        ));
        assert_eq!(predictions.lines().count(), 4);
    }
    let requests = server.requests().len();

    let second = run(&[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    // Nothing, the report included: its results did not change.
    assert!(second.ran().is_empty(), "{:?}", second.stages);
    assert_eq!(
        server.requests().len(),
        requests,
        "a cached run downloads nothing"
    );

    // Data-parallel training through the binary: 2 CPU replicas (no GPUs
    // given), each on half of every batch of 2 x 4 rows. Only the training
    // and scoring stages rerun; the rest is fresh.
    let ddp = run(&[
        "-S",
        "train.strategy=ddp",
        "-S",
        "train.devices=2",
        "-S",
        "train.batch_size=4",
        "-S",
        "train.precisions=[32-true]",
    ]);
    assert_eq!(ddp.code, 0, "{}", ddp.stderr);
    assert_eq!(
        ddp.ran(),
        [
            "evaluate@precision=32-true",
            "report",
            "train@precision=32-true"
        ]
    );
    let train: serde_json::Value =
        serde_json::from_str(&project.read(".pipe/out/imdb/train@precision=32-true/metrics.json"))
            .unwrap();
    assert_eq!(train["strategy"], "ddp");
    assert_eq!(train["devices"], serde_json::json!(["cpu", "cpu"]));
    // 16 rows in global batches of 8, two epochs.
    assert_eq!(train["optimizer_steps"], 4);

    // A wrong checksum: a clean error naming it, nothing downstream runs, nothing cached.
    let wrong = run(&["-S", "imdb.md5=ffffffffffffffffffffffffffffffff"]);
    assert_eq!(wrong.code, 1);
    assert_eq!(wrong.status("download"), "failed");
    assert_eq!(wrong.status("tokenize"), "skipped");
    assert_eq!(wrong.status("evaluate@precision=bf16-mixed"), "skipped");
    assert!(wrong.stderr.contains("checksum"), "{}", wrong.stderr);
    assert!(
        !project.exists(".pipe/out/imdb/download"),
        "a mismatching file never becomes an output"
    );
}

#[test]
fn imdb_training_gpus_and_devices_must_agree() {
    let project = project_with_pipeline("imdb.yaml");
    let output = project
        .command()
        .args(["validate", "pipelines/imdb.yaml", "-S", "train.gpus=2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("asks for 2 GPU(s) in `resources.gpus` but runs on `devices: 1`"),
        "{stderr}"
    );
}
