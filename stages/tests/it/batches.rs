//! The training input pipeline (`pipe_stages::batches`) on files written by
//! the real `text/tokenize@1` worker, so a change to the file format on
//! either side breaks a test here.

use crate::common;

use std::path::{Path, PathBuf};

use pipe_stages::batches::{
    limit, pad_id, padding_ratio, shard, to_row_order, BucketSampler, Collator, EvalSampler,
};
use pipe_stages::token_file::TokenizedSplit;
use pipe_stages::StageError;
use safetensors::{Dtype, SafeTensors};
use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenize")
}

/// Runs text/tokenize@1 in the worker and returns its `tokens` directory
/// (inside the returned temporary directory).
fn tokenize(dataset: &Path, max_length: u64) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let params = json!({
        "dataset": dataset,
        "tokenizer": fixtures().join("tokenizer.json"),
        "max_length": max_length,
    });
    let run = common::run_worker(
        env!("CARGO_BIN_EXE_pipe-stage"),
        dir.path(),
        "tokenize",
        "text/tokenize",
        params,
        None,
        2,
    );
    assert!(run.success, "tokenize failed: {:?}", run.events.last());
    let tokens = dir.path().join("out/tokens");
    (dir, tokens)
}

fn jsonl_labels(file: &Path) -> Vec<i64> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["label"]
                .as_i64()
                .unwrap()
        })
        .collect()
}

/// The rows of a tokenize file read directly with the safetensors crate,
/// independently of `TokenizedSplit`.
fn raw_rows(file: &Path) -> Vec<Vec<u32>> {
    let bytes = std::fs::read(file).unwrap();
    let tensors = SafeTensors::deserialize(&bytes).unwrap();
    let ids: Vec<u32> = tensors
        .tensor("input_ids")
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let offsets: Vec<usize> = tensors
        .tensor("offsets")
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as usize)
        .collect();
    offsets
        .windows(2)
        .map(|pair| ids[pair[0]..pair[1]].to_vec())
        .collect()
}

#[test]
fn reads_the_tokenize_output_and_pads_every_row_correctly() {
    let (_dir, tokens) = tokenize(&fixtures().join("dataset"), 128);
    let pad = pad_id(&tokens.join("tokenizer.json")).unwrap();
    assert_eq!(pad, 0, "BERT's [PAD]");
    let collator = Collator::new(pad);

    for name in ["train", "val", "test"] {
        let file = tokens.join(format!("{name}.safetensors"));
        let split = TokenizedSplit::open(&file).unwrap();
        let labels = jsonl_labels(&fixtures().join(format!("dataset/{name}.jsonl")));
        let rows = raw_rows(&file);
        assert_eq!(split.len(), labels.len(), "{name}");
        assert_eq!(split.labels(), labels, "{name}");
        assert_eq!(split.metadata()["split"], name);
        for (row, ids) in rows.iter().enumerate() {
            assert_eq!(split.sequence(row), ids.as_slice(), "{name} row {row}");
            assert_eq!(split.sequence(row).first(), Some(&101), "[CLS] first");
        }
        assert_eq!(
            split.lengths(),
            rows.iter().map(Vec::len).collect::<Vec<_>>()
        );

        let sampler = EvalSampler::new(&split.lengths(), 3).unwrap();
        let mut order = Vec::new();
        for rows_of_batch in sampler.batches() {
            let batch = collator.collate(&split, rows_of_batch).unwrap();
            let longest = rows_of_batch.iter().map(|&r| rows[r].len()).max().unwrap();
            assert_eq!((batch.rows, batch.seq_len), (rows_of_batch.len(), longest));
            for (k, &row) in rows_of_batch.iter().enumerate() {
                let ids = &batch.input_ids[k * longest..(k + 1) * longest];
                let mask = &batch.attention_mask[k * longest..(k + 1) * longest];
                let real = rows[row].len();
                let expected: Vec<i64> = rows[row].iter().map(|&id| i64::from(id)).collect();
                assert_eq!(&ids[..real], expected.as_slice());
                assert!(ids[real..].iter().all(|&id| id == i64::from(pad)));
                assert!(mask[..real].iter().all(|&m| m == 1));
                assert!(mask[real..].iter().all(|&m| m == 0));
                assert_eq!(batch.labels[k], labels[row]);
            }
            order.extend_from_slice(&batch.indices);
        }
        let back = to_row_order(&order, order.clone()).unwrap();
        assert_eq!(
            back.into_iter().map(|(row, _)| row).collect::<Vec<_>>(),
            (0..split.len()).collect::<Vec<_>>()
        );
    }
}

/// A few hundred reviews of very different lengths, made from the fixture's
/// texts, so that bucketing has something to do.
fn varied_dataset(dir: &Path, rows: usize) -> PathBuf {
    let texts: Vec<String> = std::fs::read_to_string(fixtures().join("dataset/train.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let mut rng = pipe_stages::rng::SplitMix64::new(2024);
    let lines: Vec<String> = (0..rows)
        .map(|_| {
            // Mostly one or two sentences, now and then a long review.
            let pieces = if rng.below(10) == 0 {
                5 + rng.below(15)
            } else {
                1 + rng.below(2)
            };
            let text: Vec<&str> = (0..pieces)
                .map(|_| texts[rng.below(texts.len() as u64) as usize].as_str())
                .collect();
            json!({"text": text.join(" "), "label": rng.below(2)}).to_string()
        })
        .collect();
    let file = dir.join("reviews.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    file
}

#[test]
fn bucketed_epochs_on_real_files_cover_every_row_and_pad_less() {
    let data = tempfile::tempdir().unwrap();
    let (_dir, tokens) = tokenize(&varied_dataset(data.path(), 800), 256);
    let split = TokenizedSplit::open(&tokens.join("reviews.safetensors")).unwrap();
    assert_eq!(split.len(), 800);
    let lengths = split.lengths();

    let rows = limit(split.len(), 600, 123);
    let sampler = BucketSampler::subset(rows.clone(), &lengths, 16, 123)
        .unwrap()
        .chunk_batches(10);
    let random = BucketSampler::subset(rows.clone(), &lengths, 16, 123)
        .unwrap()
        .chunk_batches(1);
    for epoch in 0..3 {
        let batches = sampler.epoch(epoch);
        let mut seen = batches.concat();
        seen.sort_unstable();
        assert_eq!(seen, rows, "epoch {epoch}");
        assert!(
            padding_ratio(&batches, &lengths) < padding_ratio(&random.epoch(epoch), &lengths),
            "epoch {epoch}"
        );
    }
    assert_eq!(sampler.epoch(1), sampler.epoch(1));
    assert_ne!(sampler.epoch(1), sampler.epoch(2));

    // Data-parallel: each batch in equal parts with one shape.
    let collator = Collator::new(0);
    for batch in sampler.epoch(0) {
        let shards = collator.collate_shards(&split, &batch, 2).unwrap();
        let whole = collator.collate(&split, &batch).unwrap();
        assert_eq!(shards.len(), 2);
        for (part, rows) in shards.iter().zip(shard(&batch, 2).unwrap()) {
            assert_eq!((part.rows, part.seq_len), (batch.len() / 2, whole.seq_len));
            assert_eq!(part.indices, rows);
        }
        let halves: Vec<i64> = shards.iter().flat_map(|s| s.input_ids.clone()).collect();
        assert_eq!(halves, whole.input_ids);
    }
}

fn open_error(file: &Path) -> (String, String) {
    match TokenizedSplit::open(file) {
        Err(StageError::Input { message, hint }) => (message, hint),
        other => panic!("expected an input error, got {other:?}"),
    }
}

/// Overwrites `offsets[index]` of a tokenize file in place.
fn set_offset(file: &Path, index: usize, value: i64) {
    let mut bytes = std::fs::read(file).unwrap();
    let (header_len, header) = SafeTensors::read_metadata(&bytes).unwrap();
    let (start, _) = header.info("offsets").unwrap().data_offsets;
    let at = 8 + header_len + start + index * 8;
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
    std::fs::write(file, bytes).unwrap();
}

#[test]
fn corrupt_files_give_clean_errors_that_name_the_file() {
    let (_dir, tokens) = tokenize(&fixtures().join("dataset"), 128);
    let original = std::fs::read(tokens.join("train.safetensors")).unwrap();
    let file = tokens.join("broken.safetensors");
    let name = file.display().to_string();

    std::fs::write(&file, &original).unwrap();
    set_offset(&file, 3, 1);
    let (message, hint) = open_error(&file);
    assert!(message.contains(&name), "{message}");
    assert!(
        message.contains("`offsets` decreases at row 2"),
        "{message}"
    );
    assert!(hint.contains("text/tokenize@1"), "{hint}");

    std::fs::write(&file, &original).unwrap();
    set_offset(&file, 24, 1_000_000);
    let (message, _) = open_error(&file);
    assert!(message.contains("`offsets` ends at 1000000"), "{message}");

    std::fs::write(&file, &original).unwrap();
    set_offset(&file, 0, -1);
    let (message, _) = open_error(&file);
    assert!(message.contains("starts at -1"), "{message}");

    std::fs::write(&file, &original[..original.len() - 10]).unwrap();
    let (message, _) = open_error(&file);
    assert!(message.contains(&name) && message.contains("not a readable safetensors file"));

    let (message, _) = open_error(&tokens.join("missing.safetensors"));
    assert!(message.contains("missing.safetensors"), "{message}");

    // A safetensors file of another kind: labels as I32, no offsets.
    let labels = [0u8; 8];
    let view = safetensors::tensor::TensorView::new(Dtype::I32, vec![2], &labels).unwrap();
    let bytes = safetensors::serialize([("labels", view)], None).unwrap();
    std::fs::write(&file, bytes).unwrap();
    let (message, _) = open_error(&file);
    assert!(message.contains("has no tensor `input_ids`"), "{message}");
}
