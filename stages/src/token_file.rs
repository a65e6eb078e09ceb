//! The token file: one split of `text/tokenize@1`'s output, and the
//! layout of that output directory. This module owns the format; the
//! tokenize stage writes it with [`write`], the training stages read it
//! with [`TokenizedSplit::open`] (or [`open_split`], by split name).
//!
//! A split is `NAME.safetensors` holding `labels` (I64, n), `offsets` (I64,
//! n + 1 entries, from 0: row i is `input_ids[offsets[i]..offsets[i + 1]]`)
//! and `input_ids` (U32, every row's ids back to back), with
//! `format = pipe-tokens/1` in its `__metadata__`. The directory holds one
//! such file per split and the `tokenizer.json` the ids come from.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};
use serde_json::{json, Value};

use crate::{Result, StageError};

/// The `format` in a token file's metadata.
pub const FORMAT: &str = "pipe-tokens/1";

/// The tokenizer the ids come from, copied beside the splits.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Where split `name` lives in a tokenize output directory.
pub fn split_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.safetensors"))
}

/// `tokens/NAME.safetensors`, with a helpful error when the split is absent.
pub fn open_split(tokens: &Path, name: &str) -> Result<TokenizedSplit> {
    let file = split_file(tokens, name);
    if !file.is_file() {
        let mut present: Vec<String> = std::fs::read_dir(tokens)
            .map_err(|e| StageError::io(tokens, e))?
            .filter_map(|entry| {
                let path = entry.ok()?.path();
                (path.extension()? == "safetensors")
                    .then(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))?
            })
            .collect();
        present.sort();
        return Err(StageError::input(
            format!(
                "`{}` has no split `{name}` (it has: {})",
                tokens.display(),
                if present.is_empty() {
                    "none".to_string()
                } else {
                    present.join(", ")
                }
            ),
            "point `tokens` at the output of text/tokenize@1 run on a dataset with that split \
             (data/split writes train, val and test)",
        ));
    }
    TokenizedSplit::open(&file)
}

const OPEN_HINT: &str = "the file must be a NAME.safetensors written by text/tokenize@1 \
     (input_ids U32, offsets I64 n+1, labels I64 n); run the tokenize stage again to rewrite it";

/// One split written by `text/tokenize@1`, held in memory.
///
/// The file is read and decoded once rather than memory-mapped: the ids are
/// stored little-endian at offsets that a `&[u32]` view cannot be trusted to
/// be aligned to, mapping would need `unsafe`, and even IMDB's 25,000
/// training reviews at 512 tokens are well under 100 MB.
#[derive(Debug, Clone)]
pub struct TokenizedSplit {
    path: PathBuf,
    input_ids: Vec<u32>,
    /// n + 1 entries: row i is `input_ids[offsets[i]..offsets[i + 1]]`.
    offsets: Vec<usize>,
    labels: Vec<i64>,
    metadata: BTreeMap<String, String>,
}

impl TokenizedSplit {
    /// Reads and checks a tokenize output file. Every way the file can be
    /// wrong is a [`StageError::Input`] that names the file, so a corrupt
    /// or foreign file fails here, before any training step.
    pub fn open(path: &Path) -> Result<TokenizedSplit> {
        let bytes = std::fs::read(path).map_err(|e| {
            StageError::input(
                format!("tokenized split `{}`: {e}", path.display()),
                "point the stage at a NAME.safetensors in the output of text/tokenize@1",
            )
        })?;
        let bad = |what: String| {
            StageError::input(
                format!("tokenized split `{}`: {what}", path.display()),
                OPEN_HINT,
            )
        };
        let (_, header) = SafeTensors::read_metadata(&bytes)
            .map_err(|e| bad(format!("not a readable safetensors file: {e}")))?;
        let metadata: BTreeMap<String, String> = header
            .metadata()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        // Files written by other tools (a Python script) may carry no
        // metadata at all and are welcome; a different format is not.
        if let Some(format) = metadata.get("format") {
            if format != FORMAT {
                return Err(bad(format!(
                    "its format is `{format}`, this version reads `{FORMAT}`"
                )));
            }
        }
        let tensors = SafeTensors::deserialize(&bytes)
            .map_err(|e| bad(format!("not a readable safetensors file: {e}")))?;
        let flat = |name: &str, dtype: Dtype| -> Result<&[u8]> {
            let tensor = tensors
                .tensor(name)
                .map_err(|_| bad(format!("has no tensor `{name}`")))?;
            if tensor.dtype() != dtype {
                return Err(bad(format!(
                    "tensor `{name}` is {:?}, expected {dtype:?}",
                    tensor.dtype()
                )));
            }
            if tensor.shape().len() != 1 {
                return Err(bad(format!(
                    "tensor `{name}` has shape {:?}, expected one dimension",
                    tensor.shape()
                )));
            }
            Ok(tensor.data())
        };
        let input_ids: Vec<u32> = flat("input_ids", Dtype::U32)?
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let le_i64 =
            |b: &[u8]| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        let offsets: Vec<i64> = flat("offsets", Dtype::I64)?
            .chunks_exact(8)
            .map(le_i64)
            .collect();
        let labels: Vec<i64> = flat("labels", Dtype::I64)?
            .chunks_exact(8)
            .map(le_i64)
            .collect();
        TokenizedSplit::from_parts(path.to_path_buf(), input_ids, &offsets, labels, metadata)
            .map_err(bad)
    }

    /// A split from its three arrays, checked as [`open`](Self::open) checks
    /// a file (for data made in memory: tests, benchmarks, other readers).
    pub fn from_arrays(
        input_ids: Vec<u32>,
        offsets: &[i64],
        labels: Vec<i64>,
    ) -> Result<TokenizedSplit> {
        let path = PathBuf::from("<memory>");
        TokenizedSplit::from_parts(path, input_ids, offsets, labels, BTreeMap::new())
            .map_err(|what| StageError::input(format!("tokenized split: {what}"), OPEN_HINT))
    }

    fn from_parts(
        path: PathBuf,
        input_ids: Vec<u32>,
        offsets: &[i64],
        labels: Vec<i64>,
        metadata: BTreeMap<String, String>,
    ) -> std::result::Result<TokenizedSplit, String> {
        if offsets.len() != labels.len() + 1 {
            return Err(format!(
                "`offsets` has {} entries for {} labels; it needs one more than the labels",
                offsets.len(),
                labels.len()
            ));
        }
        if offsets[0] != 0 {
            return Err(format!("`offsets` starts at {}, not 0", offsets[0]));
        }
        // Checked here once so that `sequence` can slice without checks and
        // a bad file can never panic in the middle of an epoch.
        if let Some(row) = offsets.windows(2).position(|pair| pair[1] < pair[0]) {
            return Err(format!(
                "`offsets` decreases at row {row} ({} then {})",
                offsets[row],
                offsets[row + 1]
            ));
        }
        let last = offsets[offsets.len() - 1];
        if last != input_ids.len() as i64 {
            return Err(format!(
                "`offsets` ends at {last}, but `input_ids` holds {} ids",
                input_ids.len()
            ));
        }
        Ok(TokenizedSplit {
            path,
            input_ids,
            offsets: offsets.iter().map(|&offset| offset as usize).collect(),
            labels,
            metadata,
        })
    }

    /// The file it was read from (`<memory>` for [`from_arrays`](Self::from_arrays)).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The safetensors `__metadata__` (empty when the file has none).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Row `row`'s ids. Panics when `row >= len()`, as slice indexing does.
    pub fn sequence(&self, row: usize) -> &[u32] {
        &self.input_ids[self.offsets[row]..self.offsets[row + 1]]
    }

    /// Row `row`'s ids, or `None` past the end.
    pub fn get(&self, row: usize) -> Option<&[u32]> {
        (row < self.len()).then(|| self.sequence(row))
    }

    /// Row `row`'s label. Panics when `row >= len()`.
    pub fn label(&self, row: usize) -> i64 {
        self.labels[row]
    }

    pub fn labels(&self) -> &[i64] {
        &self.labels
    }

    /// Every row's length in tokens, in row order: what the samplers take.
    pub fn lengths(&self) -> Vec<usize> {
        self.offsets
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .collect()
    }

    /// All ids in the split (the sum of `lengths()`).
    pub fn tokens(&self) -> usize {
        self.input_ids.len()
    }
}

/// Writes one split: `metadata` (the format is added here) and the three
/// tensors, `offsets` with one more entry than `labels`. The `safetensors`
/// crate's writer takes the
/// `__metadata__` as a `HashMap` and writes it in random order, so two runs
/// would differ byte for byte; the header is simple enough to write here,
/// with sorted keys. Tensors come I64 first so every tensor stays aligned.
pub fn write(
    path: &Path,
    metadata: &BTreeMap<&str, String>,
    input_ids: &[u32],
    offsets: &[i64],
    labels: &[i64],
) -> Result<()> {
    let rows = labels.len();
    let labels_bytes = rows * 8;
    let offsets_bytes = (rows + 1) * 8;
    let ids_bytes = input_ids.len() * 4;
    let mut header = serde_json::Map::new();
    let mut metadata = metadata.clone();
    metadata.insert("format", FORMAT.to_string());
    header.insert("__metadata__".into(), json!(metadata));
    header.insert(
        "labels".into(),
        json!({"dtype": "I64", "shape": [rows], "data_offsets": [0, labels_bytes]}),
    );
    let offsets_end = labels_bytes + offsets_bytes;
    header.insert(
        "offsets".into(),
        json!({"dtype": "I64", "shape": [rows + 1], "data_offsets": [labels_bytes, offsets_end]}),
    );
    header.insert(
        "input_ids".into(),
        json!({"dtype": "U32", "shape": [input_ids.len()], "data_offsets": [offsets_end, offsets_end + ids_bytes]}),
    );
    let mut header =
        serde_json::to_vec(&Value::Object(header)).map_err(|e| StageError::Other(e.to_string()))?;
    header.resize(header.len().next_multiple_of(8), b' ');

    let io = |e| StageError::io(path, e);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io)?);
    out.write_all(&(header.len() as u64).to_le_bytes())
        .map_err(io)?;
    out.write_all(&header).map_err(io)?;
    for label in labels {
        out.write_all(&label.to_le_bytes()).map_err(io)?;
    }
    for offset in offsets {
        out.write_all(&offset.to_le_bytes()).map_err(io)?;
    }
    for id in input_ids {
        out.write_all(&id.to_le_bytes()).map_err(io)?;
    }
    out.flush().map_err(io)?;
    Ok(())
}
