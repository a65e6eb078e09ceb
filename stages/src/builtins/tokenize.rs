//! `text/tokenize@1`: a JSONL dataset to ragged token ids (safetensors),
//! with a Hugging Face `tokenizer.json`.
//!
//! Each split becomes `NAME.safetensors` in the format that
//! [`crate::token_file`] writes and reads (ragged ids, offsets, labels),
//! beside a copy of the tokenizer.json. Rows are not padded, so training
//! can pad per batch instead of to `max_length`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use pipe_protocol::{OutputKind, ParamKind, ParamSpec};
use rayon::prelude::*;
use serde::Deserialize;
use serde_json::{json, Value};
use tokenizers::{PostProcessor, Tokenizer, TruncationParams};

use crate::records::{self, Line, MAX_RECORD_BYTES};
use crate::token_file::{self, TOKENIZER_FILE};
use crate::{BuiltinStage, Result, StageContext, StageError, StageInfo, StageInfoBuilder};

pub struct Tokenize;

/// The stage's params, one field per `ParamSpec` of its `info()`.
#[derive(Deserialize)]
struct TokenizeParams {
    dataset: PathBuf,
    /// A tokenizer.json, or a directory holding one.
    tokenizer: PathBuf,
    max_length: u64,
    text_field: String,
    label_field: String,
    batch_size: u64,
}

const OUTPUT: &str = "tokens";
const PHASE: &str = "tokenize";
const UNIT: &str = "texts";

impl BuiltinStage for Tokenize {
    fn info(&self) -> StageInfo {
        StageInfoBuilder::new(
            "text/tokenize",
            1,
            "Tokenize a JSONL dataset with a Hugging Face tokenizer.json into ragged ids (safetensors)",
        )
        .params([
            ParamSpec::new(
                "dataset",
                ParamKind::Path,
                None,
                "a .jsonl file, or a directory whose *.jsonl files (train.jsonl, val.jsonl, ...) are the splits",
            ),
            ParamSpec::new(
                "tokenizer",
                ParamKind::Path,
                None,
                "a Hugging Face tokenizer.json, or a directory (a downloaded model) that holds one",
            ),
            ParamSpec::new(
                "max_length",
                ParamKind::Integer,
                Some(json!(512)),
                "longest sequence in tokens, special tokens ([CLS], [SEP]) included; longer texts are truncated",
            )
            .at_least(1.0),
            ParamSpec::new("text_field", ParamKind::String, Some(json!("text")), "the JSONL field holding the text"),
            ParamSpec::new(
                "label_field",
                ParamKind::String,
                Some(json!("label")),
                "the JSONL field holding the integer class id",
            ),
            ParamSpec::new(
                "batch_size",
                ParamKind::Integer,
                Some(json!(1024)),
                "texts per parallel work item (tuning only: results do not depend on it)",
            )
            .at_least(1.0),
        ])
        .output(
            OUTPUT,
            OutputKind::Dir,
            "NAME.safetensors per split (input_ids U32, offsets I64, labels I64) and the tokenizer.json used",
        )
        .metrics(
            ["rows", "tokens", "length_mean", "length_median", "length_p95", "length_max", "truncated"]
                .iter()
                .map(|name| format!("<split>.{name}")),
        )
        .makes_data()
        .build()
    }

    fn run(&self, context: &StageContext) -> Result<()> {
        let TokenizeParams {
            dataset,
            tokenizer: tokenizer_param,
            max_length,
            text_field,
            label_field,
            batch_size,
        } = context.params()?;
        if batch_size == 0 {
            return Err(StageError::param(
                "batch_size",
                "must be at least 1",
                "leave it out to use 1024",
            ));
        }

        let tokenizer_path = tokenizer_file(&tokenizer_param)?;
        let tokenizer_bytes =
            std::fs::read(&tokenizer_path).map_err(|e| StageError::io(&tokenizer_path, e))?;
        let tokenizer = load_tokenizer(&tokenizer_path, &tokenizer_bytes, max_length)?;
        let tokenizer_blake3 = blake3::hash(&tokenizer_bytes).to_hex().to_string();

        let split_files = split_files(&dataset)?;
        let mut splits = Vec::with_capacity(split_files.len());
        for (name, path) in split_files {
            let rows = read_split(&path, &text_field, &label_field)?;
            splits.push((name, path, rows));
        }
        let total: u64 = splits
            .iter()
            .map(|(_, _, rows)| rows.texts.len() as u64)
            .sum();

        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(context.threads())
            .thread_name(|index| format!("tokenize-{index}"))
            .build()
            .map_err(|e| {
                StageError::Other(format!(
                    "cannot start {} tokenizer threads: {e}",
                    context.threads()
                ))
            })?;

        let out_dir = context.output(OUTPUT);
        std::fs::create_dir_all(&out_dir).map_err(|e| StageError::io(&out_dir, e))?;
        let done = AtomicU64::new(0);
        context.progress(PHASE, 0, Some(total), UNIT);
        let mut metrics = serde_json::Map::new();
        for (name, path, rows) in &splits {
            let encoded = pool.install(|| {
                encode_split(&tokenizer, &rows.texts, batch_size as usize, |count| {
                    let so_far = done.fetch_add(count, Ordering::Relaxed) + count;
                    context.progress(PHASE, so_far, Some(total), UNIT);
                })
            });
            let encoded = encoded.map_err(|(row, error)| {
                StageError::input(
                    format!("`{}` line {}: the tokenizer failed: {error}", path.display(), rows.lines[row]),
                    "check that the text is valid and that the tokenizer.json belongs to a working tokenizer",
                )
            })?;
            let stats = LengthStats::of(&encoded.offsets, encoded.truncated);
            let mut metadata = BTreeMap::new();
            metadata.insert("stage", "text/tokenize@1".to_string());
            metadata.insert("split", name.clone());
            metadata.insert("max_length", max_length.to_string());
            metadata.insert("tokenizer_blake3", tokenizer_blake3.clone());
            metadata.insert("rows", rows.texts.len().to_string());
            metadata.insert("tokens", encoded.input_ids.len().to_string());
            metadata.insert("truncated", encoded.truncated.to_string());
            let file = token_file::split_file(&out_dir, name);
            token_file::write(
                &file,
                &metadata,
                &encoded.input_ids,
                &encoded.offsets,
                &rows.labels,
            )?;
            metrics.insert(name.clone(), stats.to_json());
        }
        context.progress_done(PHASE, total, UNIT);

        let copy = out_dir.join(TOKENIZER_FILE);
        std::fs::write(&copy, &tokenizer_bytes).map_err(|e| StageError::io(&copy, e))?;
        context.write_metrics(&Value::Object(metrics))?;
        Ok(())
    }
}

/// `path` itself, or the `tokenizer.json` inside it.
fn tokenizer_file(path: &Path) -> Result<PathBuf> {
    let metadata = std::fs::metadata(path).map_err(|e| {
        StageError::input(
            format!("tokenizer `{}`: {e}", path.display()),
            "set `tokenizer` to a tokenizer.json file or to a model directory that contains one (the output of hf/download)",
        )
    })?;
    if !metadata.is_dir() {
        return Ok(path.to_path_buf());
    }
    let inside = path.join(TOKENIZER_FILE);
    if inside.is_file() {
        return Ok(inside);
    }
    Err(StageError::input(
        format!("tokenizer directory `{}` has no {TOKENIZER_FILE}", path.display()),
        "point `tokenizer` at the tokenizer.json itself, or download the model's tokenizer.json into that directory; \
         vocab.txt and tokenizer_config.json alone are not enough",
    ))
}

/// Loads the tokenizer and replaces whatever padding and truncation its file
/// has built in (MiniLM's pads and truncates to 128) with truncation to
/// `max_length` only, as Python's `no_padding(); enable_truncation(max_length)`.
fn load_tokenizer(path: &Path, bytes: &[u8], max_length: u64) -> Result<Tokenizer> {
    let mut tokenizer = Tokenizer::from_bytes(bytes).map_err(|e| {
        StageError::input(
            format!("cannot load tokenizer `{}`: {e}", path.display()),
            "it must be a Hugging Face fast-tokenizer file (tokenizer.json, written by `save_pretrained` or \
             `Tokenizer.save`); re-download it if it is truncated",
        )
    })?;
    let special_tokens = tokenizer
        .get_post_processor()
        .map_or(0, |p| p.added_tokens(false)) as u64;
    if max_length <= special_tokens {
        return Err(StageError::param(
            "max_length",
            format!("is {max_length}, but this tokenizer adds {special_tokens} special tokens to every text"),
            format!("use at least {}; 128 or 512 are usual", special_tokens + 1),
        ));
    }
    check_special_tokens(path, &tokenizer)?;
    let truncation = TruncationParams {
        max_length: max_length as usize,
        ..TruncationParams::default()
    };
    tokenizer.with_padding(None);
    tokenizer.with_truncation(Some(truncation)).map_err(|e| {
        StageError::param(
            "max_length",
            format!("the tokenizer refuses it: {e}"),
            "use 128 or 512",
        )
    })?;
    Ok(tokenizer)
}

/// Refuses a tokenizer whose post-processor adds a special token ([CLS],
/// [SEP]) with an id outside its vocabulary: every row would carry an id the
/// model has no embedding for, and training would fail far from the cause.
fn check_special_tokens(path: &Path, tokenizer: &Tokenizer) -> Result<()> {
    let Some(processor) = tokenizer.get_post_processor() else {
        return Ok(());
    };
    let vocab_size = tokenizer.get_vocab_size(true) as u64;
    let processor = serde_json::to_value(processor).unwrap_or(Value::Null);
    let mut special = Vec::new();
    collect_special_tokens(&processor, &mut special);
    if let Some((token, id)) = special.into_iter().find(|(_, id)| *id >= vocab_size) {
        return Err(StageError::input(
            format!(
                "tokenizer `{}`: special token `{}` has id {id}, but the vocabulary has {vocab_size} tokens \
                 (ids 0 to {})",
                path.display(),
                pipe_protocol::excerpt(&token),
                vocab_size.saturating_sub(1)
            ),
            "the tokenizer.json's `post_processor` and its `model.vocab` disagree: give the special token the id \
             it has in the vocabulary, or download the tokenizer again",
        ));
    }
    Ok(())
}

/// (token, id) of every special token in a serialized post-processor:
/// `cls`/`sep` pairs (BERT, RoBERTa) and the `special_tokens` of a template,
/// inside a `Sequence` too.
fn collect_special_tokens(value: &Value, found: &mut Vec<(String, u64)>) {
    match value {
        Value::Object(object) => {
            for key in ["cls", "sep"] {
                if let Some([Value::String(token), Value::Number(id)]) =
                    object.get(key).and_then(Value::as_array).map(Vec::as_slice)
                {
                    found.push((token.clone(), id.as_u64().unwrap_or(u64::MAX)));
                }
            }
            if let (Some(ids), Some(tokens)) = (
                object.get("ids").and_then(Value::as_array),
                object.get("tokens").and_then(Value::as_array),
            ) {
                for (id, token) in ids.iter().zip(tokens) {
                    found.push((
                        token.as_str().unwrap_or_default().to_string(),
                        id.as_u64().unwrap_or(u64::MAX),
                    ));
                }
            }
            for nested in object.values() {
                collect_special_tokens(nested, found);
            }
        }
        Value::Array(items) => {
            for item in items {
                collect_special_tokens(item, found);
            }
        }
        _ => {}
    }
}

/// Every split of the dataset as (name, file): a file is one split named
/// after it, a directory holds one split per `*.jsonl`, in name order.
fn split_files(dataset: &Path) -> Result<Vec<(String, PathBuf)>> {
    let metadata = std::fs::metadata(dataset).map_err(|e| {
        StageError::input(
            format!("dataset `{}`: {e}", dataset.display()),
            "set `dataset` to a .jsonl file or to a directory of them (the output of data/split)",
        )
    })?;
    let files = if metadata.is_dir() {
        let entries = std::fs::read_dir(dataset).map_err(|e| StageError::io(dataset, e))?;
        let mut files = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| StageError::io(dataset, e))?.path();
            if path.extension().is_some_and(|ext| ext == "jsonl") && path.is_file() {
                files.push(path);
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(StageError::input(
                format!("dataset directory `{}` has no .jsonl file", dataset.display()),
                "each split must be a NAME.jsonl file with one {\"text\": ..., \"label\": ...} object per line",
            ));
        }
        files
    } else {
        vec![dataset.to_path_buf()]
    };
    Ok(files
        .into_iter()
        .map(|path| {
            let name = path
                .file_stem()
                .map_or_else(|| "data".into(), |stem| stem.to_string_lossy().into_owned());
            (name, path)
        })
        .collect())
}

struct Rows {
    texts: Vec<String>,
    labels: Vec<i64>,
    /// The 1-based line of each row in its file, for messages.
    lines: Vec<u64>,
}

fn read_split(path: &Path, text_field: &str, label_field: &str) -> Result<Rows> {
    let file = File::open(path).map_err(|e| StageError::io(path, e))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut rows = Rows {
        texts: Vec::new(),
        labels: Vec::new(),
        lines: Vec::new(),
    };
    let mut bytes = Vec::new();
    let mut number = 0u64;
    loop {
        number += 1;
        let not_utf8 = |e: &dyn std::fmt::Display| {
            StageError::input(
                format!("`{}` line {number}: {e}", path.display()),
                "the dataset must be UTF-8 JSONL, one object per line",
            )
        };
        match records::read_line(&mut reader, &mut bytes, MAX_RECORD_BYTES)
            .map_err(|e| StageError::io(path, e))?
        {
            Line::End => break,
            Line::Read(_) => {}
            Line::TooLong => return Err(records::line_too_long(path, number)),
        }
        let line = std::str::from_utf8(&bytes).map_err(|e| not_utf8(&e))?;
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("`{}` line {number}", path.display());
        let object: serde_json::Map<String, Value> = serde_json::from_str(line).map_err(|e| {
            StageError::input(
                format!("{}: not a JSON object: {e}", at()),
                "each line must be one JSON object such as {\"text\": \"...\", \"label\": 0}",
            )
        })?;
        let fields = || {
            let mut shown: Vec<String> = object
                .keys()
                .take(20)
                .map(|key| format!("`{}`", pipe_protocol::excerpt(key)))
                .collect();
            if object.len() > shown.len() {
                shown.push(format!("and {} more", object.len() - shown.len()));
            }
            shown.join(", ")
        };
        let text = match object.get(text_field) {
            Some(Value::String(text)) => text.clone(),
            Some(other) => {
                return Err(StageError::input(
                    format!(
                        "{}: field `{text_field}` is not text: `{}`",
                        at(),
                        preview(other)
                    ),
                    format!("`{text_field}` must be a string in every row"),
                ))
            }
            None => {
                return Err(StageError::input(
                    format!("{}: the row has no field `{text_field}`", at()),
                    format!(
                        "its fields are {}; set `text_field` to the one holding the text",
                        fields()
                    ),
                ))
            }
        };
        let label = match object.get(label_field) {
            Some(value) => value.as_i64().ok_or_else(|| {
                StageError::input(
                    format!("{}: label `{label_field}` is `{}`, not a whole number", at(), preview(value)),
                    "labels must be integer class ids (0, 1, ...); data/from-csv and imdb/extract map names to ids",
                )
            })?,
            None => {
                return Err(StageError::input(
                    format!("{}: the row has no field `{label_field}`", at()),
                    format!("its fields are {}; set `label_field` to the one holding the class id", fields()),
                ))
            }
        };
        rows.texts.push(text);
        rows.labels.push(label);
        rows.lines.push(number);
    }
    Ok(rows)
}

fn preview(value: &Value) -> String {
    pipe_protocol::excerpt(&value.to_string())
}

struct Encoded {
    input_ids: Vec<u32>,
    /// n + 1 entries, starting at 0.
    offsets: Vec<i64>,
    truncated: u64,
}

/// One work item's result: its rows' ids back to back, each row's length,
/// and how many of its rows were cut to `max_length`.
struct Chunk {
    ids: Vec<u32>,
    lengths: Vec<u32>,
    truncated: u64,
}

/// Encodes `texts` on the current rayon pool, `batch_size` texts per work
/// item, keeping their order. On failure returns the failing row's index.
fn encode_split(
    tokenizer: &Tokenizer,
    texts: &[String],
    batch_size: usize,
    on_progress: impl Fn(u64) + Sync,
) -> std::result::Result<Encoded, (usize, String)> {
    let chunks: Vec<Chunk> = texts
        .par_chunks(batch_size)
        .enumerate()
        .map(|(index, chunk)| {
            let mut result = Chunk {
                ids: Vec::new(),
                lengths: Vec::with_capacity(chunk.len()),
                truncated: 0,
            };
            for (offset, text) in chunk.iter().enumerate() {
                // Offsets are not needed, and computing none is the fastest.
                let encoding = tokenizer
                    .encode_fast(text.as_str(), true)
                    .map_err(|e| (index * batch_size + offset, e.to_string()))?;
                result.ids.extend_from_slice(encoding.get_ids());
                result.lengths.push(encoding.get_ids().len() as u32);
                if !encoding.get_overflowing().is_empty() {
                    result.truncated += 1;
                }
            }
            on_progress(chunk.len() as u64);
            Ok(result)
        })
        .collect::<std::result::Result<_, _>>()?;

    let total_ids = chunks.iter().map(|chunk| chunk.ids.len()).sum();
    let mut encoded = Encoded {
        input_ids: Vec::with_capacity(total_ids),
        offsets: Vec::with_capacity(texts.len() + 1),
        truncated: 0,
    };
    encoded.offsets.push(0);
    let mut end = 0i64;
    for chunk in chunks {
        encoded.input_ids.extend_from_slice(&chunk.ids);
        for length in chunk.lengths {
            end += i64::from(length);
            encoded.offsets.push(end);
        }
        encoded.truncated += chunk.truncated;
    }
    Ok(encoded)
}

struct LengthStats {
    rows: usize,
    tokens: u64,
    mean: f64,
    median: f64,
    p95: u64,
    max: u64,
    truncated: u64,
}

impl LengthStats {
    /// Lengths from row offsets. An empty split has every figure 0.
    fn of(offsets: &[i64], truncated: u64) -> LengthStats {
        let mut lengths: Vec<u64> = offsets
            .windows(2)
            .map(|pair| (pair[1] - pair[0]) as u64)
            .collect();
        lengths.sort_unstable();
        let rows = lengths.len();
        let tokens: u64 = lengths.iter().sum();
        let (mean, median, p95, max) = if rows == 0 {
            (0.0, 0.0, 0, 0)
        } else {
            let median = if rows % 2 == 1 {
                lengths[rows / 2] as f64
            } else {
                (lengths[rows / 2 - 1] + lengths[rows / 2]) as f64 / 2.0
            };
            // Nearest rank: the smallest length that 95% of rows do not exceed.
            let p95 = lengths[(rows * 95).div_ceil(100) - 1];
            (tokens as f64 / rows as f64, median, p95, lengths[rows - 1])
        };
        LengthStats {
            rows,
            tokens,
            mean,
            median,
            p95,
            max,
            truncated,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "rows": self.rows,
            "tokens": self.tokens,
            "length_mean": (self.mean * 1000.0).round() / 1000.0,
            "length_median": self.median,
            "length_p95": self.p95,
            "length_max": self.max,
            "truncated": self.truncated,
        })
    }
}
