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

static TORCH_RNG: Mutex<()> = Mutex::new(());

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
fn tokenizer_fixture() -> PathBuf {
    checkout().join("stages/tests/fixtures/tokenize/tokenizer.json")
}

/// The training worker: the one cargo built with these tests, or
/// PIPE_TRAIN_WORKER where the tests run from a copy on another machine
/// (scripts/gpu-check.sh).
fn worker() -> String {
    std::env::var("PIPE_TRAIN_WORKER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_pipe-stage-train").to_string())
}

/// Runs one training stage in `dir/NAME` (invocation, output, scratch)
/// through the worker binary, on two threads.
fn run_stage(dir: &Path, name: &str, uses: &str, params: Value, seed: Option<u64>) -> Run {
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
fn tokenize(dir: &Path, params: Value) -> PathBuf {
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
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

const FILLER: &[&str] = &[
    "the", "movie", "plot", "actors", "was", "really", "quite", "story", "film", "and", "but",
    "very", "scene", "music", "ending", "long", "cast", "director",
];

/// `rows` texts of 4 to 14 words; the label decides one word.
fn write_split(path: &Path, rows: usize, rng: &mut Rng) {
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

/// Every param of `train/classifier`, as the engine hands them over, with
/// `extra`'s in place of the defaults here.
fn train_params(tokens: &Path, model: &Path, extra: Value) -> Value {
    let mut params = json!({
        "tokens": tokens,
        "model": model,
        "num_labels": 2,
        "epochs": 6,
        "batch_size": 8,
        "lr": 2e-3,
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
fn first_best(values: &[f64]) -> u64 {
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
fn assert_close(actual: &Value, expected: f64) {
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

/// Trains the tiny BERT on the toy task at `precision` and checks that it
/// learns and that the checkpoint is fp32 whatever the precision.
fn learns_at(precision: &str) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 1);
    let run = train(
        dir.path(),
        "train",
        &tokens,
        &model,
        json!({"precision": precision, "gradient_clip_val": 1.0, "epochs": 6}),
    );
    assert!(run.success, "{}", run.error());
    let metrics = run.metrics();
    assert_eq!(metrics["precision"], precision);
    assert_eq!(metrics["skipped_steps"], 0);
    let train_loss = per_epoch(&metrics, "train_loss");
    assert!(
        train_loss[train_loss.len() - 1] < train_loss[0] * 0.5,
        "train loss {train_loss:?}"
    );
    assert!(metrics["val_acc"].as_f64().unwrap() > 0.9, "{metrics:#}");
    assert!(run.messages().iter().any(|m| m.contains(precision)));
    let dtypes = checkpoint_dtypes(&run);
    assert!(!dtypes.is_empty());
    assert!(
        dtypes.iter().all(|&d| d == safetensors::Dtype::F32),
        "{dtypes:?}"
    );
    // The fp32 checkpoint evaluates like any other.
    let test = eval(
        dir.path(),
        "eval",
        &run.output_dir.join("checkpoint"),
        &tokens,
        "test",
    );
    assert!(test.success, "{}", test.error());
}

#[test]
fn bf16_mixed_learns_on_the_cpu_and_saves_fp32() {
    learns_at("bf16-mixed");
}

#[test]
fn bf16_true_learns_on_the_cpu_and_saves_fp32() {
    learns_at("bf16-true");
}

/// On a CPU with no bf16 instruction libtorch emulates bf16, which trains
/// slower than fp32: the stage says so before its first epoch. The CPU is
/// stood in by a /proc/cpuinfo of one (PIPE_CPUINFO).
#[test]
fn bf16_on_a_cpu_without_bf16_instructions_trains_and_says_it_is_emulated() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 1);
    let cpuinfo = dir.path().join("cpuinfo");
    std::fs::write(
        &cpuinfo,
        "processor\t: 0\nmodel name\t: an AVX2 CPU\nflags\t\t: fpu sse2 avx avx2 fma\n",
    )
    .unwrap();
    let run_dir = dir.path().join("train");
    let params = train_params(
        &tokens,
        &model,
        json!({"precision": "bf16-mixed", "epochs": 1}),
    );
    let invocation = invocation(&run_dir, "train", "train/classifier", params, Some(123), 2);
    let run = pipe_test_support::worker::run_invocation_with_env(
        &worker(),
        &run_dir,
        &invocation,
        &[("PIPE_CPUINFO", cpuinfo.as_path())],
    );
    assert!(run.success, "{}", run.error());
    let messages = run.messages();
    let note = messages
        .iter()
        .find(|m| m.starts_with("note: this CPU has no bf16 instructions"))
        .unwrap_or_else(|| panic!("no note about emulated bf16 in {messages:#?}"));
    assert!(note.contains("32-true"), "{note}");
    assert!(note.contains("fp32's speed here"), "{note}");
}

#[test]
fn fp16_mixed_on_the_cpu_is_an_error_that_names_bf16_mixed() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 1);
    let run = train(
        dir.path(),
        "train",
        &tokens,
        &model,
        json!({"precision": "16-mixed"}),
    );
    let error = run.error();
    assert!(error.contains("16-mixed"), "{error}");
    assert!(error.contains("CPU"), "{error}");
    assert!(error.contains("bf16-mixed"), "{error}");
}

/// The guard really switches libtorch's autocast: a matmul of fp32 inputs
/// comes out bf16 under it, fp32 again once it is dropped, and nested
/// guards restore the outer state.
#[test]
fn autocast_guard_switches_cpu_matmuls_to_bf16_and_back() {
    use pipe_train::precision::AutocastGuard;
    use tch::{Kind, Tensor};

    let a = Tensor::ones([4, 4], (Kind::Float, Device::Cpu));
    assert!(!AutocastGuard::is_enabled(Device::Cpu));
    {
        let _outer = AutocastGuard::new(Device::Cpu, Kind::BFloat16).unwrap();
        assert!(AutocastGuard::is_enabled(Device::Cpu));
        assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
        // Ops autocast keeps in fp32 stay there.
        assert_eq!(a.softmax(-1, None::<Kind>).kind(), Kind::Float);
        {
            let _inner = AutocastGuard::new(Device::Cpu, Kind::BFloat16).unwrap();
            assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
        }
        assert!(AutocastGuard::is_enabled(Device::Cpu));
        assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
    }
    assert!(!AutocastGuard::is_enabled(Device::Cpu));
    assert_eq!(a.matmul(&a).kind(), Kind::Float);
    assert!(AutocastGuard::new(Device::Cpu, Kind::Float).is_err());
}

/// GradScaler's rules without a GPU: an overflow skips the step and halves
/// the scale, `growth_interval` good steps double it, and unscaling divides
/// the gradients and spots inf/NaN.
#[test]
fn the_loss_scaler_skips_on_overflow_backs_off_and_grows() {
    use pipe_train::precision::LossScaler;
    use tch::{Kind, Tensor};

    let defaults = LossScaler::default();
    assert_eq!(defaults.scale(), 65536.0);

    let mut scaler = LossScaler::new(8.0, 2.0, 0.5, 3);
    assert!(!scaler.update(true), "an overflowing step must be skipped");
    assert_eq!(scaler.scale(), 4.0);
    assert_eq!(scaler.skipped_steps(), 1);
    assert!(scaler.update(false));
    assert!(scaler.update(false));
    assert_eq!(scaler.scale(), 4.0);
    // An overflow in between restarts the count of good steps.
    assert!(!scaler.update(true));
    assert_eq!(scaler.scale(), 2.0);
    for _ in 0..2 {
        assert!(scaler.update(false));
        assert_eq!(scaler.scale(), 2.0);
    }
    assert!(scaler.update(false));
    assert_eq!(scaler.scale(), 4.0);
    assert_eq!(scaler.skipped_steps(), 2);

    let weight = Tensor::ones([3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let unused = Tensor::ones([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let loss = (&weight * 3.0).sum(Kind::Float);
    scaler.scale_loss(&loss).unwrap().backward();
    assert_eq!(Vec::<f32>::try_from(weight.grad()).unwrap(), [12.0; 3]);
    let params = [weight.shallow_clone(), unused.shallow_clone()];
    assert!(!scaler.unscale(&params).unwrap());
    assert_eq!(Vec::<f32>::try_from(weight.grad()).unwrap(), [3.0; 3]);

    let _ = weight.grad().zero_();
    let loss = (&weight * f64::INFINITY).sum(Kind::Float);
    scaler.scale_loss(&loss).unwrap().backward();
    assert!(scaler.unscale(&params).unwrap());
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

/// DDP's contract: 2 replicas on B/2 rows each, gradients summed, step the
/// same as one device on B rows. Only float rounding may differ (the sum of
/// two half-batch means is not bit-equal to one mean). The sharded
/// strategies promise the same.
fn strategy_matches_single(fixture: &str, strategy: &str, replicas: usize, accumulate: u64) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir_with(dir.path(), fixture, 4, without_dropout(fixture));
    let common = json!({"epochs": 3, "accumulate_grad_batches": accumulate, "gradient_clip_val": 1.0,
                        "warmup_ratio": 0.1});
    let mut single_params = common.clone();
    single_params["batch_size"] = json!(4 * replicas);
    let mut parallel_params = common;
    parallel_params["batch_size"] = json!(4);
    parallel_params["strategy"] = json!(strategy);
    parallel_params["devices"] = json!(replicas);
    let single = train(dir.path(), "single", &tokens, &model, single_params);
    let parallel = train(dir.path(), strategy, &tokens, &model, parallel_params);
    assert!(single.success, "{}", single.error());
    assert!(parallel.success, "{}", parallel.error());

    let (single_metrics, parallel_metrics) = (single.metrics(), parallel.metrics());
    assert_eq!(parallel_metrics["strategy"], strategy);
    assert_eq!(parallel_metrics["devices"], json!(vec!["cpu"; replicas]));
    assert_eq!(single_metrics["devices"], json!(["cpu"]));
    assert_eq!(
        parallel_metrics["optimizer_steps"], single_metrics["optimizer_steps"],
        "the same global batches, so the same steps"
    );
    let described = format!("{strategy} over {replicas} CPU replicas");
    assert!(
        parallel.messages().iter().any(|m| m.contains(&described)),
        "{:?}",
        parallel.messages()
    );
    for (a, b) in per_epoch(&single_metrics, "train_loss")
        .iter()
        .zip(per_epoch(&parallel_metrics, "train_loss"))
    {
        assert!((a - b).abs() < 1e-4, "train loss {a} vs {b}");
    }
    // The same steps, so the same lines of the step curve at the same
    // rates (the losses differ: a replica's are rank 0's share of each batch).
    let schedule = |run: &Run| -> Vec<(u64, u64, f64)> {
        step_lines(run).iter().map(|l| (l.0, l.1, l.3)).collect()
    };
    assert_eq!(schedule(&single), schedule(&parallel));
    assert!(!schedule(&single).is_empty());
    let difference = max_weight_difference(&single, &parallel);
    assert!(
        difference < 1e-5,
        "{strategy} weights differ from single by up to {difference}"
    );
    // And training did move the weights, so the comparison means something
    // (3 epochs: 0.84 at batch 12, above 0.9 at batch 8).
    assert!(
        single_metrics["val_acc"].as_f64().unwrap() > 0.8,
        "{single_metrics:#}"
    );
}

#[test]
fn ddp_on_two_and_three_cpu_processes_steps_as_single_on_the_whole_batch() {
    strategy_matches_single("tiny-bert", "ddp", 2, 1);
    strategy_matches_single("tiny-distilbert", "ddp", 3, 1);
}

#[test]
fn ddp_with_gradient_accumulation_matches_single_for_distilbert() {
    strategy_matches_single("tiny-distilbert", "ddp", 2, 2);
}

#[test]
fn deepspeed_stage_2_on_two_and_three_replicas_steps_as_single() {
    strategy_matches_single("tiny-bert", "deepspeed_stage_2", 2, 1);
    strategy_matches_single("tiny-distilbert", "deepspeed_stage_2", 3, 2);
}

#[test]
fn fsdp_shard_grad_op_on_two_and_three_replicas_steps_as_single() {
    strategy_matches_single("tiny-distilbert", "fsdp_shard_grad_op", 2, 2);
    strategy_matches_single("tiny-bert", "fsdp_shard_grad_op", 3, 1);
}

/// Full sharding: every unit gathered for its forward, gathered again and
/// recomputed for its backward, its gradients reduce-scattered at once
/// (and added up over micro-batches under accumulation).
#[test]
fn fsdp_on_two_and_three_replicas_steps_as_single() {
    strategy_matches_single("tiny-bert", "fsdp", 2, 1);
    strategy_matches_single("tiny-distilbert", "fsdp", 3, 2);
}

/// On one device fsdp's collectives are copies, and the rest is the
/// model's own arithmetic run unit by unit: each unit's forward without
/// autograd, then recomputed from its saved input and backpropagated with
/// the gradient from above. With dropout on, the recompute must draw the
/// first forward's masks; then the weights are single's, byte for byte,
/// gradient accumulation included. (Not with clipping: fsdp sums the
/// squares of the global norm per unit rather than per parameter, which
/// moves a last bit.)
#[test]
fn fsdp_on_one_device_trains_the_bytes_of_single_dropout_included() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-distilbert", 13);
    let run = |strategy: &str| {
        let run = train(
            dir.path(),
            strategy,
            &tokens,
            &model,
            json!({"epochs": 2, "batch_size": 8, "limit_train_samples": 96, "strategy": strategy,
                   "accumulate_grad_batches": 2}),
        );
        assert!(run.success, "{strategy}: {}", run.error());
        run
    };
    let (single, fsdp) = (run("single"), run("fsdp"));
    assert!(
        checkpoint_bytes(&single) == checkpoint_bytes(&fsdp),
        "fsdp on one device: not single's bytes (max difference {})",
        max_weight_difference(&single, &fsdp)
    );
    assert_eq!(fsdp.metrics()["strategy"], "fsdp");
}

/// With dropout on, fsdp's recomputed forwards must draw the masks of the
/// first forward: a unit backpropagated through other masks than those
/// that made its output gets another gradient, and the weights leave
/// ddp's (which draws the same masks in the same order, once): by 2e-2
/// here when the recompute draws fresh masks. With the right masks they
/// differ from ddp's by rounding only: the reduce-scatter of each unit
/// sums 3 replicas' gradients in another order than ddp's all-reduce of
/// one bucket, and AdamW turns the last-bit differences of near-zero
/// gradients (a unit of a layer that GELU has switched off) into steps of
/// up to lr: 1e-5 at most, measured; the test allows 1e-4. And the same
/// seed gives the same bytes.
#[test]
fn fsdp_with_dropout_trains_the_weights_of_ddp_and_the_same_bytes_twice() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    for (fixture, devices, precision, accumulate) in [
        ("tiny-bert", 3, "32-true", 1),
        ("tiny-distilbert", 2, "bf16-mixed", 2),
    ] {
        let model = model_dir(dir.path(), fixture, 12);
        let run = |strategy: &str, name: &str| {
            let run = train(
                dir.path(),
                &format!("{fixture}-{name}"),
                &tokens,
                &model,
                json!({"epochs": 2, "batch_size": 4, "devices": devices, "limit_train_samples": 120,
                       "precision": precision, "accumulate_grad_batches": accumulate,
                       "strategy": strategy}),
            );
            assert!(run.success, "{strategy} {fixture}: {}", run.error());
            run
        };
        let ddp = run("ddp", "ddp");
        let first = run("fsdp", "fsdp");
        let second = run("fsdp", "fsdp-again");
        assert!(
            checkpoint_bytes(&first) == checkpoint_bytes(&second),
            "fsdp on {fixture}: same seed, different bytes"
        );
        let difference = max_weight_difference(&first, &ddp);
        assert!(
            difference < 1e-4,
            "fsdp on {fixture} under {precision}: weights differ from ddp's by {difference}"
        );
    }
}

/// The bytes of a run's checkpoint.
pub(crate) fn checkpoint_bytes(run: &Run) -> Vec<u8> {
    std::fs::read(run.output_dir.join("checkpoint/model.safetensors")).unwrap()
}

/// With dropout on and no clipping, a sharded strategy is ddp's arithmetic
/// cut into shards: the reduce-scatter adds in the all-reduce's order and
/// AdamW is element-wise, so the weights are ddp's. Bit for bit here; in
/// general the last bit of a few elements may differ where a shard cuts a
/// parameter (the fused AdamW kernel rounds its vectorised body and its
/// scalar tail differently), so the check is a tolerance far below any
/// training effect, and the bytes are compared as well for this fixture.
#[test]
fn sharded_strategies_train_the_weights_of_ddp_with_dropout_and_the_same_seed() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 9);
    for precision in ["32-true", "bf16-true"] {
        let settings = json!({"epochs": 2, "batch_size": 4, "devices": 3, "limit_train_samples": 120,
                              "precision": precision});
        let run = |strategy: &str| {
            let mut params = settings.clone();
            params["strategy"] = json!(strategy);
            let run = train(
                dir.path(),
                &format!("{strategy}-{precision}"),
                &tokens,
                &model,
                params,
            );
            assert!(run.success, "{strategy} {precision}: {}", run.error());
            run
        };
        let ddp = run("ddp");
        for strategy in ["deepspeed_stage_2", "fsdp_shard_grad_op"] {
            let sharded = run(strategy);
            let difference = max_weight_difference(&sharded, &ddp);
            assert!(
                difference <= 1e-6,
                "{strategy} under {precision}: weights differ from ddp's by {difference}"
            );
            assert!(
                checkpoint_bytes(&sharded) == checkpoint_bytes(&ddp),
                "{strategy} under {precision}: not ddp's bytes (max difference {difference})"
            );
        }
    }
}

/// What a replica holds, from the metrics: between steps the sharded
/// strategies keep 1/N of ddp's optimizer state and gradients,
/// fsdp_shard_grad_op and fsdp 1/N of its parameters as well; and the most
/// parameter and gradient bytes alive at once during a step, where fsdp
/// holds its shards plus one unit's full parameters and gradients, and the
/// others everything. The model has 16 layers with a wide feed-forward, so
/// that its largest unit (the embeddings, of the 30,522-token vocabulary)
/// is under a fifth of it, as in BERT-base.
#[test]
fn sharded_strategies_hold_a_replicas_share_of_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let layers = json!({"n_layers": 16, "hidden_dim": 4096});
    let model = model_dir_with(dir.path(), "tiny-distilbert", 10, layers);
    // The bytes of the largest unit, as fsdp cuts the model.
    let largest_unit = {
        let config = ModelConfig::from_file(&model.join("config.json")).unwrap();
        let model = SequenceClassifier::new(config, 2, Device::Cpu).unwrap();
        let mut units = vec![0f64; model.unit_count()];
        for (name, tensor) in model.vs.variables() {
            units[model.unit_of(&name)] += (tensor.numel() * 4) as f64;
        }
        assert_eq!(units.len(), 18, "embeddings, 16 layers, head");
        assert!(units.iter().all(|&bytes| bytes > 0.0), "{units:?}");
        units.into_iter().fold(0.0, f64::max)
    };
    let memory = |strategy: &str, devices: usize| -> [f64; 4] {
        let run = train(
            dir.path(),
            &format!("{strategy}-{devices}"),
            &tokens,
            &model,
            json!({"epochs": 1, "batch_size": 4, "strategy": strategy, "devices": devices,
                   "limit_train_samples": 48}),
        );
        assert!(run.success, "{strategy}: {}", run.error());
        let metrics = run.metrics();
        let bytes = |name: &str| metrics["memory"][name].as_f64().unwrap();
        assert!(metrics["memory"]["peak_rss_bytes"].as_f64().unwrap() > 0.0);
        let figures = [
            bytes("params_bytes"),
            bytes("grads_bytes"),
            bytes("optimizer_bytes"),
            bytes("peak_params_grads_bytes"),
        ];
        eprintln!("{strategy} on {devices}: {figures:?}");
        figures
    };
    for devices in [2usize, 3] {
        let [params, grads, optimizer, peak] = memory("ddp", devices);
        assert!(
            optimizer > 2.0 * params * 0.99,
            "AdamW keeps two moments: {optimizer} vs {params}"
        );
        assert!(
            grads == params,
            "ddp keeps every gradient: {grads} vs {params}"
        );
        assert_eq!(peak, params + grads, "ddp holds everything at once");
        // A 1/N share, up to the padding of each bucket's last part and a
        // step counter per piece of a parameter.
        let share = |sharded: f64, whole: f64| {
            let ratio = sharded * devices as f64 / whole;
            assert!(
                (0.98..1.03).contains(&ratio),
                "{sharded} is not 1/{devices} of {whole} ({ratio})"
            );
        };
        let [z_params, z_grads, z_optimizer, z_peak] = memory("deepspeed_stage_2", devices);
        assert_eq!(z_params, params, "ZeRO-2 keeps the parameters whole");
        share(z_grads, grads);
        share(z_optimizer, optimizer);
        assert_eq!(
            z_peak,
            params + grads + z_grads,
            "after backward ZeRO-2 holds the full gradients and its shard"
        );
        let [g_params, g_grads, g_optimizer, g_peak] = memory("fsdp_shard_grad_op", devices);
        share(g_params, params);
        share(g_grads, grads);
        share(g_optimizer, optimizer);
        assert_eq!(
            g_peak,
            params + grads + g_params + g_grads,
            "after backward SHARD_GRAD_OP holds every full parameter and gradient, and its shards"
        );
        let [f_params, f_grads, f_optimizer, f_peak] = memory("fsdp", devices);
        share(f_params, params);
        share(f_grads, grads);
        share(f_optimizer, optimizer);
        assert_eq!(
            f_peak,
            f_params + f_grads + 2.0 * largest_unit,
            "fsdp holds its shards and, at most, one unit's parameters and gradients"
        );
        assert!(
            f_peak < 0.75 * peak,
            "fsdp's peak {f_peak} is not well below ddp's {peak}"
        );
    }
}

/// The keys of a metrics.json as the engine stores a run's metrics:
/// nested objects joined with `.` down to a scalar, an array or an empty
/// object (pipe_engine::key::flatten).
fn flattened_keys(value: &Value) -> Vec<String> {
    fn walk(prefix: &str, value: &Value, keys: &mut Vec<String>) {
        match value.as_object() {
            Some(map) if !map.is_empty() => {
                for (name, item) in map {
                    let path = if prefix.is_empty() {
                        name.clone()
                    } else {
                        format!("{prefix}.{name}")
                    };
                    walk(&path, item, keys);
                }
            }
            _ => keys.push(prefix.to_string()),
        }
    }
    let mut keys = Vec::new();
    walk("", value, &mut keys);
    keys
}

/// Whether `key` is one of the keys a `StageInfo.metrics` entry stands
/// for: a `<...>` segment matches any one segment.
fn declares(pattern: &str, key: &str) -> bool {
    let (patterns, segments): (Vec<&str>, Vec<&str>) =
        (pattern.split('.').collect(), key.split('.').collect());
    patterns.len() == segments.len()
        && patterns.iter().zip(&segments).all(|(pattern, segment)| {
            pattern == segment || (pattern.starts_with('<') && pattern.ends_with('>'))
        })
}

/// The metrics.json of `run` holds every metric its stage declares and
/// none it does not.
fn assert_metrics_as_declared(run: &Run, stage: &str) {
    let info = pipe_train::builtins::training_stages()
        .into_iter()
        .map(|stage| stage.info())
        .find(|info| info.name == stage)
        .unwrap();
    let written = flattened_keys(&run.metrics());
    let undeclared: Vec<&String> = written
        .iter()
        .filter(|key| !info.metrics.iter().any(|pattern| declares(pattern, key)))
        .collect();
    let unwritten: Vec<&String> = info
        .metrics
        .iter()
        .filter(|pattern| !written.iter().any(|key| declares(pattern, key)))
        .collect();
    assert!(
        undeclared.is_empty() && unwritten.is_empty(),
        "{stage}: written but not in StageInfo.metrics: {undeclared:?}; declared but not written: {unwritten:?}"
    );
}

/// `StageInfo.metrics` is what `pipe stages` shows and what a report or a
/// comparison can expect of a stage's metrics: a real run's file holds
/// exactly those keys.
#[test]
fn metrics_json_holds_exactly_the_metrics_each_stage_declares() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-distilbert", 3);
    let run = train(
        dir.path(),
        "train",
        &tokens,
        &model,
        json!({"epochs": 2, "batch_size": 4, "limit_train_samples": 16}),
    );
    assert!(run.success, "{}", run.error());
    assert_metrics_as_declared(&run, "train/classifier");
    let scored = eval(
        dir.path(),
        "eval",
        &run.output_dir.join("checkpoint"),
        &tokens,
        "val",
    );
    assert!(scored.success, "{}", scored.error());
    assert_metrics_as_declared(&scored, "eval/classifier");
}

/// Every run reports its throughput: rates, model FLOPs, MFU against a
/// measured CPU peak, and where a step's time went.
#[test]
fn every_training_run_reports_throughput_flops_mfu_and_phases() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 11);
    for strategy in ["single", "deepspeed_stage_2", "fsdp"] {
        let devices = if strategy == "single" { 1 } else { 2 };
        let run = train(
            dir.path(),
            strategy,
            &tokens,
            &model,
            json!({"epochs": 1, "batch_size": 4, "strategy": strategy, "devices": devices,
                   "limit_train_samples": 64}),
        );
        assert!(run.success, "{}", run.error());
        let metrics = run.metrics();
        let throughput = &metrics["throughput"];
        let number = |value: &Value| value.as_f64().unwrap_or_else(|| panic!("{throughput:#}"));
        assert!(number(&throughput["samples_per_s"]) > 0.0);
        assert!(number(&throughput["padded_tokens_per_s"]) >= number(&throughput["tokens_per_s"]));
        assert!(number(&throughput["tokens_per_s"]) > number(&throughput["samples_per_s"]));
        // tiny-bert: 2 layers of hidden 32 and feed-forward 37 tokens long at
        // most: a step of 8 rows is tens of MFLOPs, not zero and not GFLOPs.
        let per_step = number(&throughput["flops_per_step"]);
        assert!((1e5..1e9).contains(&per_step), "{throughput:#}");
        let mfu = number(&throughput["mfu"]);
        assert!(mfu > 0.0 && mfu < 1.0, "{throughput:#}");
        assert!(throughput["peak_source"]
            .as_str()
            .unwrap()
            .starts_with("measured"));
        for phase in ["forward_ms", "backward_ms", "optimizer_ms"] {
            assert!(number(&throughput[phase]) > 0.0, "{phase}: {throughput:#}");
        }
        assert_eq!(
            throughput["timed_steps"], metrics["optimizer_steps"],
            "every CPU step is timed"
        );
        if strategy != "single" {
            assert!(number(&throughput["collective_ms"]) > 0.0, "{throughput:#}");
        }
    }
}

#[test]
fn ddp_with_dropout_and_the_same_seed_writes_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 6);
    let settings = json!({"epochs": 2, "batch_size": 4, "strategy": "ddp", "devices": 3,
                          "limit_train_samples": 100});
    let first = train(dir.path(), "first", &tokens, &model, settings.clone());
    let second = train(dir.path(), "second", &tokens, &model, settings);
    assert!(first.success, "{}", first.error());
    assert!(second.success, "{}", second.error());
    let weights =
        |run: &Run| std::fs::read(run.output_dir.join("checkpoint/model.safetensors")).unwrap();
    assert!(
        weights(&first) == weights(&second),
        "same seed, different bytes"
    );
    // 100 rows in global batches of 12: the last batch of 4 is cut to 3,
    // a multiple of the replicas, so each sees one row of it.
    let metrics = first.metrics();
    assert_eq!(metrics["devices"], json!(["cpu", "cpu", "cpu"]));
    assert_eq!(metrics["optimizer_steps"], 2 * 9);
}

#[test]
fn device_counts_that_do_not_fit_the_strategy_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 7);
    let run = train(
        dir.path(),
        "single-two",
        &tokens,
        &model,
        json!({"devices": 2}),
    );
    assert!(!run.success);
    let error = run.error();
    assert!(error.contains("devices"), "{error}");
    assert!(error.contains("strategy: ddp"), "{error}");

    // Lightning's ZeRO-3 is not a strategy here; its equivalent, fsdp, is
    // among those the error lists.
    let run = train(
        dir.path(),
        "zero-3",
        &tokens,
        &model,
        json!({"strategy": "deepspeed_stage_3", "devices": 2}),
    );
    assert!(!run.success);
    let error = run.error();
    assert!(error.contains("deepspeed_stage_3"), "{error}");
    assert!(
        error.contains("deepspeed_stage_2, fsdp_shard_grad_op, fsdp,"),
        "{error}"
    );

    let run = train(
        dir.path(),
        "ddp-zero",
        &tokens,
        &model,
        json!({"strategy": "ddp", "devices": 0}),
    );
    assert!(!run.success);
    assert!(run.error().contains("at least 1"), "{}", run.error());
}

/// The `steps` CSV as (step, epoch, loss, lr, samples_per_s) lines.
fn step_lines(run: &Run) -> Vec<(u64, u64, f64, f64, f64)> {
    let text = std::fs::read_to_string(run.output_dir.join("steps")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("step,epoch,loss,lr,samples_per_s"));
    lines
        .map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            assert_eq!(fields.len(), 5, "{line}");
            (
                fields[0].parse().unwrap(),
                fields[1].parse().unwrap(),
                fields[2].parse().unwrap(),
                fields[3].parse().unwrap(),
                fields[4].parse().unwrap(),
            )
        })
        .collect()
}

/// 56 rows in batches of 8: 7 optimizer steps an epoch, 14 in two. A line
/// every 3 steps counted across epochs, plus each epoch's last step; the
/// rate of each line's step is the warmup (ceil(0.25 x 14) = 4 steps from
/// 0) then the linear decay to 0 at step 14; each line's loss is the mean
/// over the steps since the line before.
#[test]
fn the_steps_curve_has_a_line_every_n_steps_and_at_each_epochs_end() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 8);
    let peak = 2e-3;
    let run = train(
        dir.path(),
        "train",
        &tokens,
        &model,
        json!({"epochs": 2, "limit_train_samples": 56, "warmup_ratio": 0.25,
               "log_every_n_steps": 3}),
    );
    assert!(run.success, "{}", run.error());
    let metrics = run.metrics();
    assert_eq!(metrics["optimizer_steps"], 14);
    let lines = step_lines(&run);
    let steps: Vec<(u64, u64)> = lines.iter().map(|l| (l.0, l.1)).collect();
    assert_eq!(steps, [(3, 1), (6, 1), (7, 1), (9, 2), (12, 2), (14, 2)]);
    // The rate of 1-based step n: (n-1)/4 of the peak while warming up,
    // then (14-(n-1))/10 of it.
    let expected_lr = [
        2.0 / 4.0,
        9.0 / 10.0,
        8.0 / 10.0,
        6.0 / 10.0,
        3.0 / 10.0,
        1.0 / 10.0,
    ];
    for (line, fraction) in lines.iter().zip(expected_lr) {
        let expected = peak * fraction;
        assert!(
            (line.3 - expected).abs() < expected * 1e-12,
            "step {}: lr {} != {expected}",
            line.0,
            line.3
        );
        assert!(
            line.2.is_finite() && line.2 > 0.0,
            "step {}: loss {}",
            line.0,
            line.2
        );
        assert!(line.4 > 0.0, "step {}: samples/s {}", line.0, line.4);
    }
    // Steps of 8 rows each: an epoch's train loss is its lines' losses
    // weighted by the steps each covers: 1-3, 4-6, 7 in epoch 1; 8-9,
    // 10-12, 13-14 in epoch 2 (the count of 3 runs across epochs).
    let train_loss = per_epoch(&metrics, "train_loss");
    for (epoch, window, weights) in [
        (0, &lines[0..3], [3.0, 3.0, 1.0]),
        (1, &lines[3..6], [2.0, 3.0, 2.0]),
    ] {
        let weighted: f64 = window
            .iter()
            .zip(weights)
            .map(|(line, weight)| line.2 * weight)
            .sum::<f64>()
            / 7.0;
        assert!(
            (weighted - train_loss[epoch]).abs() < 1e-5,
            "epoch {}: lines give {weighted}, curves {}",
            epoch + 1,
            train_loss[epoch]
        );
    }

    // The facts a report needs.
    let train_seconds = metrics["train_seconds"].as_f64().unwrap();
    let epoch_seconds: f64 = per_epoch(&metrics, "epoch_seconds").iter().sum();
    // Metrics hold seconds to the millisecond: each of the three figures
    // may be off by half of one.
    assert!(epoch_seconds > 0.0, "{metrics:#}");
    assert!(train_seconds + 0.0015 >= epoch_seconds, "{metrics:#}");
    let samples_per_s = metrics["samples_per_s"].as_f64().unwrap();
    let (slowest, fastest) = (
        112.0 / (epoch_seconds + 0.001),
        112.0 / (epoch_seconds - 0.001),
    );
    assert!(
        samples_per_s + 0.001 >= slowest
            && (epoch_seconds <= 0.001 || samples_per_s - 0.001 <= fastest),
        "samples_per_s {samples_per_s}, 112 rows in {epoch_seconds} s"
    );
    let hardware = &metrics["hardware"];
    assert!(hardware["cpus"].as_u64().unwrap_or(0) >= 1, "{hardware}");
    assert_eq!(hardware["gpus"], json!([]));
    let libtorch = hardware["libtorch"].as_str().unwrap_or_default();
    assert!(
        libtorch.starts_with(|c: char| c.is_ascii_digit()) && libtorch.contains('.'),
        "{hardware}"
    );
    if std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|text| text.contains("model name")) {
        assert!(
            !hardware["cpu"].as_str().unwrap_or_default().is_empty(),
            "{hardware}"
        );
    }

    // One epoch shorter than the default 50 steps still has its line.
    let short = train(
        dir.path(),
        "short",
        &tokens,
        &model,
        json!({"epochs": 1, "limit_train_samples": 56}),
    );
    assert!(short.success, "{}", short.error());
    let lines = step_lines(&short);
    assert_eq!(
        lines.iter().map(|l| (l.0, l.1)).collect::<Vec<_>>(),
        [(7, 1)]
    );
    let train_loss = per_epoch(&short.metrics(), "train_loss")[0];
    assert!(
        (lines[0].2 - train_loss).abs() < 1e-5,
        "{} vs {train_loss}",
        lines[0].2
    );
    // Without warmup the last step's rate is 1/7 of the peak.
    assert!(
        (lines[0].3 - peak / 7.0).abs() < peak * 1e-12,
        "{}",
        lines[0].3
    );

    let zero = train(
        dir.path(),
        "zero",
        &tokens,
        &model,
        json!({"log_every_n_steps": 0}),
    );
    assert!(!zero.success);
    assert!(
        zero.error().contains("log_every_n_steps") && zero.error().contains("at least 1"),
        "{}",
        zero.error()
    );
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
