//! The `checkpoint` output, a Hugging Face checkpoint: the best epoch's
//! weights (`model.safetensors`, streamed by `weights_file` when an epoch
//! improves), its config.json and tokenizer files; and the host copies of
//! tensors a resume state is made of.

use std::path::{Path, PathBuf};

use safetensors::{Dtype, View};
use serde_json::{json, Map, Value};
use tch::{Device, Kind, Tensor};

use pipe_stages::token_file::TOKENIZER_FILE;
use pipe_stages::{Result, StageError};

use super::super::classifier::torch;
use super::weights_file::dtype_of;
use crate::model::{Architecture, SequenceClassifier};

/// Tokenizer files of a model directory that `AutoTokenizer` reads besides
/// tokenizer.json; copied into the checkpoint when the model has them.
const TOKENIZER_EXTRAS: &[&str] = &[
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
];

/// One tensor's bytes, copied off the device: a deep copy that later
/// optimizer steps cannot touch.
pub(super) struct SavedTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &SavedTensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn kind_of(dtype: Dtype) -> Option<Kind> {
    [
        Kind::Float,
        Kind::BFloat16,
        Kind::Half,
        Kind::Double,
        Kind::Int64,
        Kind::Uint8,
    ]
    .into_iter()
    .find(|kind| dtype_of(*kind) == Some(dtype))
}

impl SavedTensor {
    /// A host copy of `tensor`, in its own kind.
    pub(super) fn of(tensor: &Tensor) -> Result<SavedTensor> {
        let tensor = tensor
            .f_detach()
            .and_then(|t| t.f_to_device(Device::Cpu))
            .and_then(|t| t.f_contiguous())
            .map_err(torch)?;
        let dtype = dtype_of(tensor.kind()).ok_or_else(|| {
            StageError::Other(format!(
                "internal: a tensor of kind {:?}, which is never saved",
                tensor.kind()
            ))
        })?;
        let numel = tensor.numel();
        let mut data = vec![0u8; numel * tensor.kind().elt_size_in_bytes()];
        tensor.f_copy_data_u8(&mut data, numel).map_err(torch)?;
        let shape = tensor.size().iter().map(|&d| d as usize).collect();
        Ok(SavedTensor { dtype, shape, data })
    }

    /// Bytes read back from a file, which the caller has checked hold
    /// `shape` elements of `dtype`.
    pub(super) fn from_parts(dtype: Dtype, shape: Vec<usize>, data: Vec<u8>) -> SavedTensor {
        SavedTensor { dtype, shape, data }
    }

    pub(super) fn dtype(&self) -> Dtype {
        self.dtype
    }

    pub(super) fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub(super) fn data(&self) -> &[u8] {
        &self.data
    }

    /// The libtorch kind of its dtype, where it is one saved here.
    pub(super) fn kind(&self) -> Option<Kind> {
        kind_of(self.dtype)
    }

    /// A CPU tensor of these bytes.
    pub(super) fn to_tensor(&self) -> Result<Tensor> {
        let kind = self.kind().ok_or_else(|| {
            StageError::Other(format!("internal: no tensor of dtype {:?}", self.dtype))
        })?;
        let shape: Vec<i64> = self.shape.iter().map(|&d| d as i64).collect();
        Tensor::f_from_data_size(&self.data, &shape, kind).map_err(torch)
    }
}

/// The model's config.json with the head's labels and architecture, as
/// `save_pretrained` of a `*ForSequenceClassification` writes it.
pub(super) fn checkpoint_config(model: &SequenceClassifier) -> Value {
    let mut config = model.config.raw.clone();
    let num_labels = model.num_labels();
    let existing = config
        .get("id2label")
        .and_then(Value::as_object)
        .filter(|labels| labels.len() as i64 == num_labels)
        .cloned();
    let id2label = existing.unwrap_or_else(|| {
        (0..num_labels)
            .map(|i| (i.to_string(), json!(format!("LABEL_{i}"))))
            .collect()
    });
    let label2id: Map<String, Value> = id2label
        .iter()
        .filter_map(|(id, label)| {
            Some((label.as_str()?.to_string(), json!(id.parse::<i64>().ok()?)))
        })
        .collect();
    let architecture = match model.config.architecture {
        Architecture::Bert => "BertForSequenceClassification",
        Architecture::DistilBert => "DistilBertForSequenceClassification",
    };
    config.insert("id2label".into(), Value::Object(id2label));
    config.insert("label2id".into(), Value::Object(label2id));
    config.insert("num_labels".into(), json!(num_labels));
    config.insert("architectures".into(), json!([architecture]));
    Value::Object(config)
}

/// The checkpoint's files beside its weights, which the best epoch
/// already wrote into `dir`.
pub(super) fn write_checkpoint_files(
    dir: &Path,
    model: &SequenceClassifier,
    model_dir: &Path,
    tokens: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| StageError::io(dir, e))?;
    let config = dir.join("config.json");
    let text = serde_json::to_string_pretty(&checkpoint_config(model))
        .map_err(|e| StageError::Other(e.to_string()))?;
    std::fs::write(&config, text + "\n").map_err(|e| StageError::io(&config, e))?;
    // The tokenizer that made the ids, not whatever the model directory has.
    let mut copies: Vec<(PathBuf, PathBuf)> =
        vec![(tokens.join(TOKENIZER_FILE), dir.join(TOKENIZER_FILE))];
    for name in TOKENIZER_EXTRAS {
        let source = model_dir.join(name);
        if source.is_file() {
            copies.push((source, dir.join(name)));
        }
    }
    for (source, target) in copies {
        std::fs::copy(&source, &target).map_err(|e| StageError::io(&source, e))?;
    }
    Ok(())
}
