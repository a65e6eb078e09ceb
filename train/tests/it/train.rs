//! `train/classifier@1` and `eval/classifier@1` through the real
//! `pipe-stage-train` worker, on a separable toy task (label 1 texts say
//! "great", label 0 texts "awful") tokenized by `text/tokenize@1` with the
//! MiniLM tokenizer fixture, and tiny random-initialised BERT/DistilBERT
//! models built from the configs in fixtures/model.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pipe_stages::classification::classification_report;
use pipe_test_support::worker::{invocation, read_jsonl, run_invocation, Run};
use pipe_train::model::{ModelConfig, SequenceClassifier};
use serde_json::{json, Value};
use tch::Device;

pub(crate) static TORCH_RNG: Mutex<()> = Mutex::new(());

/// The checkout whose fixtures the tests read: PIPE_CHECKOUT where this
/// binary runs from a copy on another machine (scripts/gpu-check.sh sets it
/// to the copy it runs from, wherever that is), else the one it was
/// compiled in.
pub(crate) fn checkout() -> PathBuf {
    match std::env::var_os("PIPE_CHECKOUT") {
        Some(root) if !root.is_empty() => PathBuf::from(root),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    }
}

pub(crate) fn fixtures() -> PathBuf {
    checkout().join("train/tests/fixtures")
}

/// The MiniLM tokenizer, a fixture of the tokenize stage's tests.
pub(crate) fn tokenizer_fixture() -> PathBuf {
    checkout().join("stages/tests/fixtures/tokenize/tokenizer.json")
}

/// The training worker: the one cargo built with these tests, or
/// PIPE_TRAIN_WORKER where the tests run from a copy on another machine
/// (scripts/gpu-check.sh).
pub(crate) fn worker() -> String {
    std::env::var("PIPE_TRAIN_WORKER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_pipe-stage-train").to_string())
}

/// Runs one training stage in `dir/NAME` (invocation, output, scratch)
/// through the worker binary, on two threads.
pub(crate) fn run_stage(
    dir: &Path,
    name: &str,
    uses: &str,
    params: Value,
    seed: Option<u64>,
) -> Run {
    run_stage_on(dir, name, uses, params, seed, &[])
}

/// [`run_stage`] with the GPUs the engine would give the stage (their
/// numbers in CUDA_VISIBLE_DEVICES; a number twice puts two replicas on one
/// GPU).
pub(crate) fn run_stage_on(
    dir: &Path,
    name: &str,
    uses: &str,
    params: Value,
    seed: Option<u64>,
    gpus: &[&str],
) -> Run {
    let run_dir = dir.join(name);
    let mut invocation = invocation(&run_dir, name, uses, params, seed, 2);
    invocation["devices"] = json!(gpus);
    run_invocation(&worker(), &run_dir, &invocation)
}

/// Runs `text/tokenize@1` in this process, with the code `pipe-stage` runs:
/// that binary belongs to another package, which cargo builds only for
/// that package's own tests. Its progress lines go to stdout.
pub(crate) fn tokenize(dir: &Path, params: Value) -> PathBuf {
    let stage = pipe_stages::builtins::data_stages()
        .into_iter()
        .find(|stage| stage.info().name == "text/tokenize")
        .expect("pipe-stage offers text/tokenize");
    let run_dir = dir.join("tokenize");
    let mut invocation: pipe_protocol::Invocation = serde_json::from_value(invocation(
        &run_dir,
        "tokenize",
        "text/tokenize",
        params,
        None,
        2,
    ))
    .unwrap();
    invocation.params = pipe_protocol::check_params(&stage.info(), &invocation.params)
        .unwrap_or_else(|problems| panic!("{problems:?}"));
    std::fs::create_dir_all(&invocation.output_dir).unwrap();
    let output_dir = invocation.output_dir.clone();
    if let Err(error) = stage.run(&pipe_stages::StageContext::new(invocation)) {
        panic!("tokenize: {error} ({})", error.hint().unwrap_or(""));
    }
    output_dir
}

/// A tiny xorshift so the toy data needs no dependency.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

pub(crate) const FILLER: &[&str] = &[
    "the", "movie", "plot", "actors", "was", "really", "quite", "story", "film", "and", "but",
    "very", "scene", "music", "ending", "long", "cast", "director",
];

/// `rows` texts of 4 to 14 words; the label decides one word.
pub(crate) fn write_split(path: &Path, rows: usize, rng: &mut Rng) {
    let mut text = String::new();
    for row in 0..rows {
        let label = row % 2;
        let words = 4 + rng.below(11);
        let at = rng.below(words);
        let sentence: Vec<&str> = (0..words)
            .map(|i| match (i == at, label) {
                (true, 1) => "great",
                (true, _) => "awful",
                _ => FILLER[rng.below(FILLER.len())],
            })
            .collect();
        text.push_str(&json!({"text": sentence.join(" "), "label": label}).to_string());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// The toy dataset tokenized at max_length 32: returns the tokens dir.
pub(crate) fn tokens(dir: &Path) -> PathBuf {
    let dataset = dir.join("dataset");
    std::fs::create_dir_all(&dataset).unwrap();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    write_split(&dataset.join("train.jsonl"), 192, &mut rng);
    write_split(&dataset.join("val.jsonl"), 32, &mut rng);
    write_split(&dataset.join("test.jsonl"), 40, &mut rng);
    let output = tokenize(
        dir,
        json!({
            "dataset": dataset,
            "tokenizer": tokenizer_fixture(),
            "max_length": 32,
        }),
    );
    output.join("tokens")
}

/// A model directory: the tiny fixture's config resized to the MiniLM
/// vocabulary (the tiny fixtures have 100 ids), without labels, and fresh
/// weights drawn from `seed`, plus the tokenizer.
pub(crate) fn model_dir(dir: &Path, fixture: &str, seed: i64) -> PathBuf {
    model_dir_with(dir, fixture, seed, json!({}))
}

/// As [`model_dir`], with some config.json fields replaced.
pub(crate) fn model_dir_with(dir: &Path, fixture: &str, seed: i64, overrides: Value) -> PathBuf {
    let text = std::fs::read_to_string(fixtures().join("model").join(fixture).join("config.json"))
        .unwrap();
    let mut config: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    config.insert("vocab_size".into(), json!(30522));
    config.remove("id2label");
    config.remove("label2id");
    for (key, value) in overrides.as_object().unwrap() {
        config.insert(key.clone(), value.clone());
    }
    let model_dir = dir.join(format!("model-{fixture}-{seed}"));
    std::fs::create_dir_all(&model_dir).unwrap();
    std::fs::write(
        model_dir.join("config.json"),
        serde_json::to_string_pretty(&config).unwrap(),
    )
    .unwrap();
    let model = {
        // libtorch's generator is global to the process and tests run on
        // threads: without the lock, two tests drawing weights at once
        // would interleave and the fixtures would depend on scheduling.
        let _guard = TORCH_RNG.lock().unwrap_or_else(|p| p.into_inner());
        tch::manual_seed(seed);
        SequenceClassifier::new(
            ModelConfig::from_json(Value::Object(config)).unwrap(),
            2,
            Device::Cpu,
        )
        .unwrap()
    };
    model.vs.save(model_dir.join("model.safetensors")).unwrap();
    std::fs::copy(tokenizer_fixture(), model_dir.join("tokenizer.json")).unwrap();
    model_dir
}

pub(crate) fn train(dir: &Path, name: &str, tokens: &Path, model: &Path, extra: Value) -> Run {
    let params = train_params(tokens, model, extra);
    run_stage(dir, name, "train/classifier", params, Some(123))
}

/// The learning rate [`train_params`] gives a run that names none.
pub(crate) const LR: f64 = 2e-3;

/// Every param of `train/classifier`, as the engine hands them over, with
/// `extra`'s in place of the defaults here.
pub(crate) fn train_params(tokens: &Path, model: &Path, extra: Value) -> Value {
    let mut params = json!({
        "tokens": tokens,
        "model": model,
        "num_labels": 2,
        "epochs": 6,
        "batch_size": 8,
        "lr": LR,
        "weight_decay": 0.01,
        "warmup_ratio": 0.0,
        "accumulate_grad_batches": 1,
        "gradient_clip_val": null,
        "seed": null,
        "limit_train_samples": null,
        "early_stopping_patience": null,
        "precision": "32-true",
        "strategy": "single",
        "devices": 1,
    });
    for (key, value) in extra.as_object().unwrap() {
        params[key] = value.clone();
    }
    params
}

pub(crate) fn eval(dir: &Path, name: &str, checkpoint: &Path, tokens: &Path, split: &str) -> Run {
    run_stage(
        dir,
        name,
        "eval/classifier",
        json!({"checkpoint": checkpoint, "tokens": tokens, "split": split, "batch_size": 8}),
        None,
    )
}

/// Per-epoch values of one metric, epoch 1 first.
pub(crate) fn per_epoch(metrics: &Value, field: &str) -> Vec<f64> {
    let epochs = metrics["epochs_run"].as_u64().unwrap();
    (1..=epochs)
        .map(|epoch| {
            metrics["epochs"][epoch.to_string()][field]
                .as_f64()
                .unwrap()
        })
        .collect()
}

/// The 1-based epoch of the first maximum, as the checkpoint rule keeps.
pub(crate) fn first_best(values: &[f64]) -> u64 {
    let mut best = 0;
    for (index, &value) in values.iter().enumerate() {
        if value > values[best] {
            best = index;
        }
    }
    best as u64 + 1
}

/// serde_json parses floats to within an ulp of what it wrote (exact
/// round trips need its `float_roundtrip` feature), so metrics read back
/// are compared to a tolerance far below any real difference.
pub(crate) fn assert_close(actual: &Value, expected: f64) {
    let actual = actual.as_f64().unwrap_or(f64::NAN);
    assert!((actual - expected).abs() < 1e-12, "{actual} != {expected}");
}

#[test]
fn bert_learns_the_toy_task_and_eval_on_the_checkpoint_reproduces_val() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 1);
    let run = train(
        dir.path(),
        "train",
        &tokens,
        &model,
        json!({"accumulate_grad_batches": 2, "warmup_ratio": 0.1, "gradient_clip_val": 1.0, "epochs": 8}),
    );
    assert!(run.success, "{}", run.error());
    let metrics = run.metrics();
    let train_loss = per_epoch(&metrics, "train_loss");
    let val_acc = per_epoch(&metrics, "val_acc");
    assert_eq!(train_loss.len(), 8);
    assert!(
        train_loss[train_loss.len() - 1] < train_loss[0] * 0.5,
        "train loss {train_loss:?}"
    );
    assert!(metrics["val_acc"].as_f64().unwrap() > 0.9, "{metrics:#}");
    assert_eq!(
        metrics["best_epoch"].as_u64().unwrap(),
        first_best(&val_acc)
    );
    assert_eq!(metrics["stopped_early"], false);
    assert!(metrics["peak_rss_mb"].as_f64().unwrap() > 0.0);
    assert!(per_epoch(&metrics, "tokens_per_s")[0] > 0.0);

    // Progress per step, a message per epoch.
    assert!(run.events.iter().any(|event| event["event"] == "progress"
        && event["phase"] == "train epoch 1/8"
        && event["unit"] == "steps"));
    // Each epoch's last progress event carries its mean loss and rate.
    let epoch_end = run
        .events
        .iter()
        .rfind(|event| event["event"] == "progress" && event["phase"] == "train epoch 1/8")
        .unwrap();
    let detail = epoch_end["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("loss ") && detail.ends_with("samples/s"),
        "{epoch_end}"
    );
    assert!(
        run.messages()
            .iter()
            .any(|m| m.starts_with("epoch 1/8: train loss")),
        "{:?}",
        run.messages()
    );

    let curves = std::fs::read_to_string(run.output_dir.join("curves")).unwrap();
    let lines: Vec<&str> = curves.lines().collect();
    assert_eq!(
        lines[0],
        "epoch,train_loss,train_acc,val_loss,val_acc,epoch_seconds,samples_per_s"
    );
    assert_eq!(lines.len(), 9);

    // A Hugging Face checkpoint.
    let checkpoint = run.output_dir.join("checkpoint");
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(checkpoint.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(
        config["architectures"],
        json!(["BertForSequenceClassification"])
    );
    assert_eq!(config["id2label"], json!({"0": "LABEL_0", "1": "LABEL_1"}));
    assert_eq!(config["label2id"], json!({"LABEL_0": 0, "LABEL_1": 1}));
    assert_eq!(config["num_labels"], 2);
    assert_eq!(config["vocab_size"], 30522);
    assert!(checkpoint.join("tokenizer.json").is_file());
    let bytes = std::fs::read(checkpoint.join("model.safetensors")).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(
        header.metadata().as_ref().and_then(|m| m.get("format")),
        Some(&"pt".to_string())
    );
    let (loaded, report) = SequenceClassifier::from_pretrained(&checkpoint, None, Device::Cpu)
        .expect("the checkpoint loads");
    assert!(report.missing.is_empty(), "{:?}", report.missing);
    assert!(report.unexpected.is_empty(), "{:?}", report.unexpected);
    assert_eq!(loaded.num_labels(), 2);

    // Eval on val with the same batches as validation gives the best
    // epoch's figures: the checkpoint is that epoch's weights.
    let best = metrics["best_epoch"].as_u64().unwrap() as usize;
    let on_val = eval(dir.path(), "eval-val", &checkpoint, &tokens, "val");
    assert!(on_val.success, "{}", on_val.error());
    let val_metrics = on_val.metrics();
    assert_close(&val_metrics["accuracy"], val_acc[best - 1]);
    let val_loss = per_epoch(&metrics, "val_loss")[best - 1];
    assert!((val_metrics["loss"].as_f64().unwrap() - val_loss).abs() < 1e-6);

    // Test split: a prediction per row in dataset order, scored as
    // classification_report scores them.
    let on_test = eval(dir.path(), "eval-test", &checkpoint, &tokens, "test");
    assert!(on_test.success, "{}", on_test.error());
    let predictions = read_jsonl(&on_test.output_dir.join("predictions"));
    assert_eq!(predictions.len(), 40);
    let mut labels = Vec::new();
    let mut predicted = Vec::new();
    for (row, line) in predictions.iter().enumerate() {
        assert_eq!(line["row"], row);
        assert_eq!(line["label"], row % 2, "labels alternate in the toy data");
        let probabilities: Vec<f64> = line["probabilities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_f64().unwrap())
            .collect();
        assert_eq!(probabilities.len(), 2);
        assert!((probabilities.iter().sum::<f64>() - 1.0).abs() < 1e-5);
        let argmax = usize::from(probabilities[1] > probabilities[0]);
        assert_eq!(line["prediction"], argmax);
        labels.push(line["label"].as_u64().unwrap() as usize);
        predicted.push(argmax);
    }
    let expected = classification_report(&labels, &predicted, 2).unwrap();
    let test_metrics = on_test.metrics();
    assert_eq!(test_metrics["rows"], 40);
    assert_close(&test_metrics["accuracy"], expected.accuracy);
    let binary = expected.binary.unwrap();
    assert_close(&test_metrics["precision"], binary.precision);
    assert_close(&test_metrics["recall"], binary.recall);
    assert_close(&test_metrics["f1"], binary.f1);
    assert_close(&test_metrics["macro"]["f1"], expected.macro_f1);
    assert_eq!(test_metrics["confusion"], json!(expected.confusion));
    assert!(
        expected.accuracy > 0.9,
        "test accuracy {}",
        expected.accuracy
    );
}

#[test]
fn distilbert_with_the_same_seed_writes_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-distilbert", 2);
    let settings = json!({"epochs": 6, "seed": 5, "limit_train_samples": 128});
    let first = train(dir.path(), "first", &tokens, &model, settings.clone());
    let second = train(dir.path(), "second", &tokens, &model, settings);
    let other = train(
        dir.path(),
        "other",
        &tokens,
        &model,
        json!({"epochs": 6, "seed": 6, "limit_train_samples": 128}),
    );
    for run in [&first, &second, &other] {
        assert!(run.success, "{}", run.error());
    }
    let weights =
        |run: &Run| std::fs::read(run.output_dir.join("checkpoint/model.safetensors")).unwrap();
    assert!(
        weights(&first) == weights(&second),
        "same seed, different bytes"
    );
    assert!(
        weights(&first) != weights(&other),
        "another seed, same bytes"
    );
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(first.output_dir.join("checkpoint/config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        config["architectures"],
        json!(["DistilBertForSequenceClassification"])
    );
    let metrics = first.metrics();
    assert_eq!(metrics["train_rows"], 128);
    assert!(metrics["val_acc"].as_f64().unwrap() > 0.9, "{metrics:#}");
}

#[test]
fn early_stopping_stops_after_patience_epochs_without_improvement() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 3);
    let run = train(
        dir.path(),
        "train",
        &tokens,
        &model,
        json!({"epochs": 30, "early_stopping_patience": 2, "limit_train_samples": 96}),
    );
    assert!(run.success, "{}", run.error());
    let metrics = run.metrics();
    let epochs_run = metrics["epochs_run"].as_u64().unwrap();
    assert_eq!(metrics["stopped_early"], true, "{metrics:#}");
    assert!(epochs_run < 30);
    assert_eq!(epochs_run, metrics["best_epoch"].as_u64().unwrap() + 2);
    assert!(run
        .messages()
        .iter()
        .any(|m| m.starts_with("early stopping")));
}

/// A run whose validation accuracy falls after its best epoch (a learning
/// rate too high for the tiny model): the checkpoint must be the best
/// epoch's, not the last one's. The curve is deterministic on a given CPU
/// build of libtorch; if another machine's kernels round differently and
/// the later dip disappears, the first assertion says so.
#[test]
fn the_checkpoint_is_the_best_epoch_not_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 4);
    let run = train(
        dir.path(),
        "train",
        &tokens,
        &model,
        json!({"epochs": 5, "lr": 5e-3, "limit_train_samples": 64}),
    );
    assert!(run.success, "{}", run.error());
    let metrics = run.metrics();
    let val_acc = per_epoch(&metrics, "val_acc");
    let best = metrics["best_epoch"].as_u64().unwrap();
    assert_eq!(best, first_best(&val_acc));
    assert!(
        (best as usize) < val_acc.len() && val_acc[val_acc.len() - 1] < val_acc[best as usize - 1],
        "this run was meant to end on a worse epoch than its best: val_acc {val_acc:?}"
    );
    assert_close(&metrics["val_acc"], val_acc[best as usize - 1]);
    let on_val = eval(
        dir.path(),
        "eval",
        &run.output_dir.join("checkpoint"),
        &tokens,
        "val",
    );
    assert!(on_val.success, "{}", on_val.error());
    assert_close(&on_val.metrics()["accuracy"], val_acc[best as usize - 1]);
    let val_loss = per_epoch(&metrics, "val_loss")[best as usize - 1];
    assert!((on_val.metrics()["loss"].as_f64().unwrap() - val_loss).abs() < 1e-6);
}

#[test]
fn missing_splits_bad_params_and_non_checkpoints_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-distilbert", 5);
    // A copy of the tokens with only a train split lacks val.
    let only_train = dir.path().join("only-train");
    std::fs::create_dir_all(&only_train).unwrap();
    for file in ["train.safetensors", "tokenizer.json"] {
        std::fs::copy(tokens.join(file), only_train.join(file)).unwrap();
    }
    let run = train(dir.path(), "no-val", &only_train, &model, json!({}));
    assert!(!run.success);
    let error = run.error();
    assert!(
        error.contains("no split `val`") && error.contains("train"),
        "{error}"
    );

    let run = train(
        dir.path(),
        "one-label",
        &tokens,
        &model,
        json!({"num_labels": 1}),
    );
    assert!(!run.success);
    assert!(
        run.error()
            .contains("param `num_labels` must be at least 2, not 1"),
        "{}",
        run.error()
    );

    let run = eval(dir.path(), "eval-missing", &model, &tokens, "dev");
    assert!(!run.success);
    let error = run.error();
    assert!(
        error.contains("no split `dev`") && error.contains("test, train, val"),
        "{error}"
    );

    let run = eval(
        dir.path(),
        "eval-not-a-checkpoint",
        &tokens,
        &tokens,
        "test",
    );
    assert!(!run.success);
    assert!(
        run.error().contains("is not a checkpoint"),
        "{}",
        run.error()
    );
}

/// The dtype of every tensor in a checkpoint's model.safetensors.
pub(crate) fn checkpoint_dtypes(run: &Run) -> Vec<safetensors::Dtype> {
    let bytes = std::fs::read(run.output_dir.join("checkpoint/model.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    file.tensors()
        .into_iter()
        .map(|(_, view)| view.dtype())
        .collect()
}

/// Every tensor of a checkpoint as f32 values, by name.
pub(crate) fn checkpoint_values(run: &Run) -> Vec<(String, Vec<f32>)> {
    let bytes = std::fs::read(run.output_dir.join("checkpoint/model.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Vec<f32>)> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
            let values = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            (name, values)
        })
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    tensors
}

/// The largest absolute difference between two checkpoints' weights, but
/// for the attention key biases.
pub(crate) fn max_weight_difference(a: &Run, b: &Run) -> f32 {
    let (a, b) = (checkpoint_values(a), checkpoint_values(b));
    assert_eq!(a.len(), b.len());
    let mut worst = 0f32;
    for ((name_a, values_a), (name_b, values_b)) in a.iter().zip(&b) {
        assert_eq!(name_a, name_b);
        // A key bias adds the same amount to every score of a query's row,
        // which softmax ignores: its true gradient is exactly zero, so what
        // libtorch computes is rounding noise, and AdamW (which divides by
        // the gradient's own scale) turns noise of either sign into steps
        // of +-lr. Two correct runs differ there by about lr; nowhere else.
        if name_a.ends_with("key.bias") || name_a.ends_with("k_lin.bias") {
            continue;
        }
        for (x, y) in values_a.iter().zip(values_b) {
            worst = worst.max((x - y).abs());
        }
    }
    worst
}

/// No dropout, so that a replica's shard sees the same function as the
/// whole batch does on one device.
pub(crate) fn without_dropout(fixture: &str) -> Value {
    match fixture {
        "tiny-bert" => json!({"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}),
        _ => json!({"dropout": 0.0, "attention_dropout": 0.0, "seq_classif_dropout": 0.0}),
    }
}

/// Token ids are checked against the model's vocabulary on the host, once
/// per split, before any training: the model then skips its check on the
/// device, where each one is a sync with the GPU.
#[test]
fn token_ids_outside_the_models_vocabulary_are_a_clear_error_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir_with(dir.path(), "tiny-bert", 12, json!({"vocab_size": 1000}));
    let run = train(
        dir.path(),
        "small-vocabulary",
        &tokens,
        &model,
        json!({"epochs": 1}),
    );
    assert!(!run.success);
    let error = run.error();
    assert!(
        error.contains("outside the model's vocabulary of 1000"),
        "{error}"
    );
    assert!(
        error.contains("tokenize with the model's own tokenizer"),
        "{error}"
    );
    assert!(!run.output_dir.join("checkpoint").exists());
}

/// TF32 is an explicit opt-in for fp32 matmuls on a GPU: asked for where
/// it cannot apply, it is refused rather than ignored, so that a run's
/// config says what it ran.
#[test]
fn tf32_is_refused_on_the_cpu_and_with_other_precisions() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 13);
    let run = train(
        dir.path(),
        "tf32-cpu",
        &tokens,
        &model,
        json!({"tf32": true, "epochs": 1}),
    );
    assert!(!run.success);
    assert!(
        run.error().contains("the CPU, which has no TF32"),
        "{}",
        run.error()
    );
    let run = train(
        dir.path(),
        "tf32-bf16",
        &tokens,
        &model,
        json!({"tf32": true, "precision": "bf16-mixed", "epochs": 1}),
    );
    assert!(!run.success);
    assert!(
        run.error().contains("set `precision: 32-true`"),
        "{}",
        run.error()
    );
}
