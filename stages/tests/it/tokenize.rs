//! `text/tokenize@1` through the real `pipe-stage` worker, checked against
//! ids from Python `tokenizers` (fixtures/tokenize, made by
//! scripts/fixtures/make_tokenizer_reference.py).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};
use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenize")
}

fn tokenizer_fixture() -> PathBuf {
    fixtures().join("tokenizer.json")
}

/// A byte-level BPE tokenizer (GPT-2's and RoBERTa's kind), its ids from
/// Python `tokenizers` on the same dataset
/// (scripts/fixtures/make_bytelevel_tokenizer.py).
fn bytelevel_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenize-bytelevel")
}

struct Run {
    success: bool,
    events: Vec<Value>,
    output: PathBuf,
    _dir: tempfile::TempDir,
}

impl Run {
    fn tokens(&self) -> PathBuf {
        self.output.join("tokens")
    }

    fn error(&self) -> (String, String) {
        let last = self.events.last().expect("an event");
        assert_eq!(last["event"], "error", "expected an error, got {last}");
        let text = |field: &str| last[field].as_str().unwrap_or("").to_string();
        (text("message"), text("hint"))
    }

    fn metrics(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.output.join("metrics.json")).unwrap()).unwrap()
    }
}

fn run_tokenize(params: Value, threads: usize) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let run = common::run_worker(
        env!("CARGO_BIN_EXE_pipe-stage"),
        dir.path(),
        "tokenize",
        "text/tokenize",
        params,
        None,
        threads,
    );
    Run {
        success: run.success,
        events: run.events,
        output: run.output_dir,
        _dir: dir,
    }
}

fn params(dataset: &Path, tokenizer: &Path, max_length: u64) -> Value {
    json!({"dataset": dataset, "tokenizer": tokenizer, "max_length": max_length})
}

struct Split {
    rows: Vec<Vec<u32>>,
    offsets: Vec<i64>,
    labels: Vec<i64>,
    metadata: BTreeMap<String, String>,
}

fn read_split(file: &Path) -> Split {
    let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let metadata: BTreeMap<String, String> =
        header.metadata().clone().unwrap().into_iter().collect();
    let tensors = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = tensors.names();
    names.sort();
    assert_eq!(names, ["input_ids", "labels", "offsets"]);

    let ids = tensors.tensor("input_ids").unwrap();
    assert_eq!(ids.dtype(), Dtype::U32);
    let ids: Vec<u32> = ids
        .data()
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let as_i64 = |name: &str| -> Vec<i64> {
        let tensor = tensors.tensor(name).unwrap();
        assert_eq!(tensor.dtype(), Dtype::I64, "{name}");
        assert_eq!(tensor.shape().len(), 1, "{name} is flat");
        tensor
            .data()
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let offsets = as_i64("offsets");
    let labels = as_i64("labels");
    assert_eq!(offsets.len(), labels.len() + 1);
    assert_eq!(offsets[0], 0);
    assert_eq!(*offsets.last().unwrap() as usize, ids.len());
    let rows = offsets
        .windows(2)
        .map(|pair| ids[pair[0] as usize..pair[1] as usize].to_vec())
        .collect();
    Split {
        rows,
        offsets,
        labels,
        metadata,
    }
}

fn reference() -> Value {
    reference_in(&fixtures())
}

fn reference_in(fixtures: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(fixtures.join("reference.json")).unwrap()).unwrap()
}

fn assert_matches_reference(run: &Run, max_length: u64, splits: &[&str]) {
    assert_matches_reference_in(&fixtures(), run, max_length, splits)
}

/// The run's tensors hold the ids of `fixtures`' reference.json, made by
/// Python `tokenizers` with `fixtures`' tokenizer.json.
fn assert_matches_reference_in(fixtures: &Path, run: &Run, max_length: u64, splits: &[&str]) {
    let reference = reference_in(fixtures);
    let tokenizer_blake3 = blake3::hash(&std::fs::read(fixtures.join("tokenizer.json")).unwrap())
        .to_hex()
        .to_string();
    let metrics = run.metrics();
    for &name in splits {
        let expected = &reference["max_length"][max_length.to_string()][name];
        let split = read_split(&run.tokens().join(format!("{name}.safetensors")));
        let expected_rows: Vec<Vec<u32>> = serde_json::from_value(expected["ids"].clone()).unwrap();
        let expected_labels: Vec<i64> = serde_json::from_value(expected["labels"].clone()).unwrap();
        assert_eq!(split.rows.len(), expected_rows.len(), "{name}: rows");
        for (row, (got, want)) in split.rows.iter().zip(&expected_rows).enumerate() {
            assert_eq!(got, want, "{name} row {row} at max_length {max_length}");
        }
        let mut expected_offsets = vec![0i64];
        for row in &expected_rows {
            expected_offsets.push(expected_offsets.last().unwrap() + row.len() as i64);
        }
        assert_eq!(split.offsets, expected_offsets, "{name}: offsets");
        assert_eq!(split.labels, expected_labels, "{name}: labels");

        let truncated = expected["truncated"].as_u64().unwrap();
        let tokens: usize = expected_rows.iter().map(Vec::len).sum();
        assert_eq!(split.metadata["max_length"], max_length.to_string());
        assert_eq!(split.metadata["tokenizer_blake3"], tokenizer_blake3);
        assert_eq!(split.metadata["rows"], expected_rows.len().to_string());
        assert_eq!(split.metadata["tokens"], tokens.to_string());
        assert_eq!(split.metadata["truncated"], truncated.to_string());
        assert_eq!(metrics[name]["rows"], expected_rows.len());
        assert_eq!(metrics[name]["tokens"], tokens);
        assert_eq!(metrics[name]["truncated"], truncated);
        let longest = expected_rows.iter().map(Vec::len).max().unwrap();
        assert_eq!(metrics[name]["length_max"], longest);
    }
}

#[test]
fn ids_offsets_and_labels_equal_python_tokenizers_at_128_and_512() {
    let dataset = fixtures().join("dataset");
    for max_length in [128, 512] {
        let run = run_tokenize(params(&dataset, &tokenizer_fixture(), max_length), 2);
        assert!(run.success, "{:?}", run.events);
        assert_matches_reference(&run, max_length, &["train", "val", "test"]);
        let mut files: Vec<String> = std::fs::read_dir(run.tokens())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(
            files,
            [
                "test.safetensors",
                "tokenizer.json",
                "train.safetensors",
                "val.safetensors"
            ]
        );
        assert_eq!(
            std::fs::read(run.tokens().join("tokenizer.json")).unwrap(),
            std::fs::read(tokenizer_fixture()).unwrap(),
            "the tokenizer is copied beside the tensors as it is"
        );
    }
}

/// The byte-level pre-tokenizer splits by a regular expression with a
/// lookahead (`\s+(?!\S)`): the regex engine `tokenizers` is built with
/// (fancy-regex, docs/ARCHITECTURE.md) must split as Python's does.
#[test]
fn a_byte_level_tokenizer_whose_regex_looks_ahead_gives_python_tokenizers_ids() {
    let dataset = fixtures().join("dataset");
    let tokenizer = bytelevel_fixtures().join("tokenizer.json");
    for max_length in [128, 512] {
        let run = run_tokenize(params(&dataset, &tokenizer, max_length), 2);
        assert!(run.success, "{:?}", run.events);
        assert_matches_reference_in(
            &bytelevel_fixtures(),
            &run,
            max_length,
            &["train", "val", "test"],
        );
    }
}

#[test]
fn reference_exercises_truncation_at_both_lengths() {
    // Guards the fixture itself: without truncated rows the count checks
    // above would prove nothing.
    let reference = reference();
    for max_length in ["128", "512"] {
        let truncated: u64 = ["train", "val", "test"]
            .iter()
            .map(|s| {
                reference["max_length"][max_length][s]["truncated"]
                    .as_u64()
                    .unwrap()
            })
            .sum();
        assert!(
            truncated >= 3,
            "max_length {max_length}: only {truncated} truncated rows"
        );
    }
}

#[test]
fn one_file_dataset_and_tokenizer_directory() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    std::fs::create_dir(&model).unwrap();
    std::fs::copy(tokenizer_fixture(), model.join("tokenizer.json")).unwrap();
    let run = run_tokenize(
        params(&fixtures().join("dataset/val.jsonl"), &model, 128),
        1,
    );
    assert!(run.success, "{:?}", run.events);
    assert_matches_reference(&run, 128, &["val"]);
    assert!(!run.tokens().join("train.safetensors").exists());
}

#[test]
fn truncation_counts_rows_longer_than_max_length() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.jsonl");
    // With [CLS] and [SEP], max_length 4 leaves room for two words.
    let rows = [
        "",
        "one",
        "one two",
        "one two three",
        "one two three four five six",
        "hello world",
    ];
    let lines: Vec<String> = rows
        .iter()
        .enumerate()
        .map(|(i, text)| json!({"text": text, "label": i}).to_string())
        .collect();
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let run = run_tokenize(params(&data, &tokenizer_fixture(), 4), 2);
    assert!(run.success, "{:?}", run.events);
    let split = read_split(&run.tokens().join("data.safetensors"));
    let lengths: Vec<usize> = split.rows.iter().map(Vec::len).collect();
    assert_eq!(lengths, [2, 3, 4, 4, 4, 4]);
    for row in &split.rows[1..] {
        assert_eq!(row[0], 101, "[CLS] first");
        assert_eq!(*row.last().unwrap(), 102, "[SEP] kept last when truncating");
    }
    assert_eq!(split.labels, [0, 1, 2, 3, 4, 5]);
    assert_eq!(split.metadata["truncated"], "2");
    let metrics = run.metrics();
    assert_eq!(metrics["data"]["truncated"], 2);
    assert_eq!(metrics["data"]["rows"], 6);
    assert_eq!(metrics["data"]["tokens"], 21);
    assert_eq!(metrics["data"]["length_max"], 4);
    assert_eq!(metrics["data"]["length_median"], 4.0);
    assert_eq!(metrics["data"]["length_p95"], 4);
    assert_eq!(metrics["data"]["length_mean"], 3.5);
}

#[test]
fn empty_split_gives_empty_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("test.jsonl"), "").unwrap();
    std::fs::write(
        data.join("train.jsonl"),
        "{\"text\": \"good\", \"label\": 1}\n\n",
    )
    .unwrap();
    std::fs::write(data.join("notes.txt"), "not a split").unwrap();
    let run = run_tokenize(params(&data, &tokenizer_fixture(), 16), 2);
    assert!(run.success, "{:?}", run.events);
    let empty = read_split(&run.tokens().join("test.safetensors"));
    assert!(empty.rows.is_empty());
    assert_eq!(empty.offsets, [0]);
    assert_eq!(empty.metadata["rows"], "0");
    let train = read_split(&run.tokens().join("train.safetensors"));
    assert_eq!(train.rows, [vec![101, 2204, 102]]);
    let metrics = run.metrics();
    assert_eq!(
        metrics["test"],
        json!({"rows": 0, "tokens": 0, "length_mean": 0.0, "length_median": 0.0,
        "length_p95": 0, "length_max": 0, "truncated": 0})
    );
    assert_eq!(metrics["train"]["rows"], 1);
    assert!(!run.tokens().join("notes.safetensors").exists());
    let progress = run
        .events
        .iter()
        .rev()
        .find(|event| event["event"] == "progress")
        .unwrap();
    assert_eq!(progress["done"], 1);
    assert_eq!(progress["total"], 1);
    assert_eq!(progress["unit"], "texts");
}

#[test]
fn two_runs_write_identical_bytes_whatever_the_threads_and_batch_size() {
    let dataset = fixtures().join("dataset");
    let first = run_tokenize(params(&dataset, &tokenizer_fixture(), 128), 2);
    let mut small_batches = params(&dataset, &tokenizer_fixture(), 128);
    small_batches["batch_size"] = json!(3);
    let second = run_tokenize(small_batches, 1);
    assert!(first.success && second.success);
    for file in [
        "train.safetensors",
        "val.safetensors",
        "test.safetensors",
        "tokenizer.json",
    ] {
        assert_eq!(
            std::fs::read(first.tokens().join(file)).unwrap(),
            std::fs::read(second.tokens().join(file)).unwrap(),
            "{file} differs between runs"
        );
    }
    assert_eq!(
        std::fs::read(first.output.join("metrics.json")).unwrap(),
        std::fs::read(second.output.join("metrics.json")).unwrap()
    );
}

#[test]
fn missing_tokenizer_is_named_with_a_hint() {
    let missing = fixtures().join("no-such-tokenizer.json");
    let run = run_tokenize(params(&fixtures().join("dataset"), &missing, 128), 1);
    assert!(!run.success);
    let (message, hint) = run.error();
    assert!(message.contains("no-such-tokenizer.json"), "{message}");
    assert!(hint.contains("tokenizer.json"), "{hint}");
}

#[test]
fn tokenizer_directory_without_tokenizer_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("vocab.txt"), "[PAD]\n").unwrap();
    let run = run_tokenize(params(&fixtures().join("dataset"), dir.path(), 128), 1);
    let (message, hint) = run.error();
    assert!(message.contains("has no tokenizer.json"), "{message}");
    assert!(hint.contains("vocab.txt"), "{hint}");
}

#[test]
fn invalid_tokenizer_json_names_the_file_and_the_parse_error() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("tokenizer.json");
    let text = std::fs::read_to_string(tokenizer_fixture()).unwrap();
    std::fs::write(&broken, &text[..1000]).unwrap();
    let run = run_tokenize(params(&fixtures().join("dataset"), &broken, 128), 1);
    let (message, hint) = run.error();
    assert!(
        message.contains(&format!("cannot load tokenizer `{}`", broken.display())),
        "{message}"
    );
    assert!(
        message.contains("EOF"),
        "the parse error is shown: {message}"
    );
    assert!(hint.contains("re-download"), "{hint}");
}

fn one_line_dataset(line: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reviews.jsonl");
    std::fs::write(
        &file,
        format!("{{\"text\": \"fine\", \"label\": 0}}\n{line}\n"),
    )
    .unwrap();
    (dir, file)
}

#[test]
fn row_without_the_text_field_names_file_line_and_fields() {
    let (_dir, file) = one_line_dataset(r#"{"review": "great", "label": 1}"#);
    let run = run_tokenize(params(&file, &tokenizer_fixture(), 128), 1);
    let (message, hint) = run.error();
    assert!(
        message.contains(&format!("`{}` line 2", file.display())),
        "{message}"
    );
    assert!(message.contains("no field `text`"), "{message}");
    assert!(
        hint.contains("`review`") && hint.contains("text_field"),
        "{hint}"
    );

    let mut with_field = params(&file, &tokenizer_fixture(), 128);
    with_field["text_field"] = json!("review");
    let run = run_tokenize(with_field, 1);
    let (message, _) = run.error();
    assert!(
        message.contains("line 1") && message.contains("no field `review`"),
        "{message}"
    );
}

#[test]
fn non_integer_labels_are_refused() {
    for label in [r#""positive""#, "1.5", "null"] {
        let (_dir, file) = one_line_dataset(&format!(r#"{{"text": "great", "label": {label}}}"#));
        let run = run_tokenize(params(&file, &tokenizer_fixture(), 128), 1);
        let (message, hint) = run.error();
        assert!(
            message.contains("line 2") && message.contains("not a whole number"),
            "{message}"
        );
        assert!(message.contains(label), "{message}");
        assert!(hint.contains("integer class ids"), "{hint}");
    }
}

#[test]
fn malformed_json_line_and_non_text_text_are_refused() {
    let (_dir, file) = one_line_dataset(r#"{"text": "unterminated"#);
    let (message, _) = run_tokenize(params(&file, &tokenizer_fixture(), 128), 1).error();
    assert!(
        message.contains("line 2") && message.contains("not a JSON object"),
        "{message}"
    );

    let (_dir, file) = one_line_dataset(r#"{"text": 42, "label": 0}"#);
    let (message, _) = run_tokenize(params(&file, &tokenizer_fixture(), 128), 1).error();
    assert!(
        message.contains("line 2") && message.contains("not text"),
        "{message}"
    );
}

#[test]
fn max_length_must_leave_room_for_text() {
    let run = run_tokenize(
        params(&fixtures().join("dataset"), &tokenizer_fixture(), 2),
        1,
    );
    let (message, hint) = run.error();
    assert!(
        message.contains("max_length") && message.contains("2 special tokens"),
        "{message}"
    );
    assert!(hint.contains("at least 3"), "{hint}");
}

#[test]
fn dataset_directory_without_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_tokenize(params(dir.path(), &tokenizer_fixture(), 128), 1);
    let (message, _) = run.error();
    assert!(message.contains("has no .jsonl file"), "{message}");
}
