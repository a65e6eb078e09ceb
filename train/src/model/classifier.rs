//! A sequence classifier: one of the architectures, its weights and its
//! forward.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tch::{nn::VarStore, Device, Tensor};

use super::bert::BertForSequenceClassification;
use super::config::{Architecture, ModelConfig};
use super::distilbert::DistilBertForSequenceClassification;
use super::error::ModelError;
use super::layers::DropoutMasks;
use super::weights::{load_safetensors, LoadReport};

#[derive(Debug)]
pub(super) enum Net {
    Bert(BertForSequenceClassification),
    DistilBert(DistilBertForSequenceClassification),
}

/// A BERT or DistilBERT sequence classifier and the var store that owns its
/// parameters.
#[derive(Debug)]
pub struct SequenceClassifier {
    pub vs: VarStore,
    pub config: ModelConfig,
    pub(super) num_labels: i64,
    pub(super) net: Net,
    pub(super) masks: Arc<DropoutMasks>,
    /// Set when the caller has checked every id it will pass against the
    /// vocabulary on the host (see [`SequenceClassifier::vouch_for_ids`]).
    pub(super) ids_vouched: AtomicBool,
}

impl SequenceClassifier {
    /// A freshly initialised model (seed with `tch::manual_seed` first for
    /// reproducible weights), in float32 on `device`.
    pub fn new(config: ModelConfig, num_labels: i64, device: Device) -> Result<Self, ModelError> {
        if num_labels < 1 {
            return Err(ModelError::Input(format!(
                "a classifier needs at least one label, got {num_labels}"
            )));
        }
        let vs = VarStore::new(device);
        let root = vs.root();
        let masks = Arc::new(DropoutMasks::default());
        let net = match config.architecture {
            Architecture::Bert => Net::Bert(BertForSequenceClassification::new(
                &root, &config, num_labels, &masks,
            )),
            Architecture::DistilBert => Net::DistilBert(DistilBertForSequenceClassification::new(
                &root, &config, num_labels, &masks,
            )),
        };
        Ok(SequenceClassifier {
            vs,
            config,
            num_labels,
            net,
            masks,
            ids_vouched: AtomicBool::new(false),
        })
    }

    /// `dir/config.json` and `dir/model.safetensors`, as `transformers`'
    /// `from_pretrained` reads them. The encoder must be complete; the head
    /// (and BERT's pooler, which sentence-embedding checkpoints may lack)
    /// keeps its fresh initialisation when the file has none, as in
    /// `transformers`. `num_labels` overrides the config's `id2label`.
    pub fn from_pretrained(
        dir: &Path,
        num_labels: Option<i64>,
        device: Device,
    ) -> Result<(Self, LoadReport), ModelError> {
        let config = ModelConfig::from_file(&dir.join("config.json"))?;
        let num_labels = num_labels.unwrap_or_else(|| config.num_labels());
        let model = Self::new(config, num_labels, device)?;
        let weights = dir.join("model.safetensors");
        let report = model.load_weights(&weights)?;
        let prefix = model.config.architecture.model_type();
        let pooler = format!("{prefix}.pooler.");
        let encoder_missing: Vec<&String> = report
            .missing
            .iter()
            .filter(|name| name.starts_with(&format!("{prefix}.")) && !name.starts_with(&pooler))
            .collect();
        if !encoder_missing.is_empty() {
            return Err(ModelError::Weights {
                path: weights,
                message: format!(
                    "{} encoder tensors are missing, e.g. `{}`: is this a {prefix} checkpoint?",
                    encoder_missing.len(),
                    encoder_missing[0]
                ),
            });
        }
        Ok((model, report))
    }

    /// Loads what `path` has for this model (see [`load_safetensors`]).
    pub fn load_weights(&self, path: &Path) -> Result<LoadReport, ModelError> {
        load_safetensors(&self.vs, self.config.architecture.model_type(), path)
    }

    /// Seeds dropout: on the CPU our masks (see [`DropoutMasks`]); on a GPU
    /// libtorch's generator of the model's device, which libtorch's own
    /// dropout draws from. `tch::manual_seed` would seed every GPU alike,
    /// giving ddp replicas on different GPUs the same masks.
    pub fn seed_dropout(&self, seed: u64) -> Result<(), ModelError> {
        self.masks.reseed(seed);
        if let Device::Cuda(index) = self.vs.device() {
            seed_cuda_device(index, seed)?;
        }
        Ok(())
    }

    /// Model FLOPs of one training step (forward and backward, taken as
    /// three forwards) on `rows` sequences padded to `seq_len`, counting
    /// the matrix multiplications only, as the PaLM paper's MFU does:
    /// per layer and position the Q, K, V and output projections (4 H^2
    /// multiply-adds) and the feed-forward pair (2 H I), the attention
    /// scores and the weighted sum (2 seq H); per sequence the head.
    /// Embeddings, LayerNorm and softmax are not counted. The last layer
    /// computes the first position alone (the head reads nothing else):
    /// every position's keys and values (2 H^2 each), and for the first
    /// its query, attention, output projection and feed-forward; what it
    /// does not compute is not counted.
    pub fn train_flops(&self, rows: usize, seq_len: usize) -> f64 {
        let config = &self.config;
        let (hidden, inner) = (config.hidden_size as f64, config.intermediate_size as f64);
        let (layers, seq) = (config.num_hidden_layers as f64, seq_len as f64);
        let whole_layer = seq * (4.0 * hidden * hidden + 2.0 * hidden * inner + 2.0 * seq * hidden);
        let last_layer = seq * 2.0 * hidden * hidden
            + 2.0 * hidden * hidden
            + 2.0 * hidden * inner
            + 2.0 * seq * hidden;
        // BERT's pooler or DistilBERT's pre-classifier, then the classifier.
        let head = hidden * hidden + hidden * self.num_labels as f64;
        let per_sequence = (layers - 1.0).max(0.0) * whole_layer + last_layer + head;
        3.0 * 2.0 * rows as f64 * per_sequence
    }

    /// The caller promises that every id it passes to `forward_t` from now
    /// on is within the vocabulary (checked on the host, as the training
    /// and eval stages do for a whole split at once), so `forward_t` skips
    /// its own check on the device.
    pub fn vouch_for_ids(&self) {
        self.ids_vouched.store(true, Ordering::Relaxed);
    }

    pub fn num_labels(&self) -> i64 {
        self.num_labels
    }

    /// Logits, (batch, num_labels), in the parameters' dtype.
    ///
    /// `input_ids` is (batch, seq) int64; `attention_mask` (batch, seq),
    /// nonzero for real tokens, or None when no row is padded; token types
    /// default to segment 0 (DistilBERT has none and rejects them). `train`
    /// turns dropout on.
    pub fn forward_t(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        token_type_ids: Option<&Tensor>,
        train: bool,
    ) -> Result<Tensor, ModelError> {
        let input = self.prepare(input_ids, attention_mask, token_type_ids)?;
        Ok(match &self.net {
            Net::Bert(net) => net.forward_t(
                &input.ids,
                input.token_types.as_ref(),
                input.mask.as_ref(),
                train,
            ),
            Net::DistilBert(net) => net.forward_t(&input.ids, input.mask.as_ref(), train),
        })
    }
}

extern "C" {
    fn pipe_seed_cuda_device(
        index: std::ffi::c_int,
        seed: u64,
        error: *mut std::ffi::c_char,
        error_size: usize,
    ) -> std::ffi::c_int;
}

fn seed_cuda_device(index: usize, seed: u64) -> Result<(), ModelError> {
    // SAFETY: the shim seeds one device's generator under its lock and
    // reports C++ exceptions through the buffer.
    crate::ffi::call_shim(|error, size| unsafe {
        pipe_seed_cuda_device(index as std::ffi::c_int, seed, error, size)
    })
    .map_err(|message| ModelError::Input(format!("seeding cuda:{index}: {message}")))
}
