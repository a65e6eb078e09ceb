//! Hugging Face `config.json` for the encoders we support, normalised to one
//! shape so that the layers do not care which family named a field what.

use std::path::Path;

use serde_json::{Map, Value};

use super::error::ModelError;

/// The encoder families this module implements, by HF `model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    Bert,
    DistilBert,
}

impl Architecture {
    /// The HF `model_type` string, also the prefix of the encoder's tensors
    /// in `*ForSequenceClassification` checkpoints (`bert.`, `distilbert.`).
    pub fn model_type(self) -> &'static str {
        match self {
            Architecture::Bert => "bert",
            Architecture::DistilBert => "distilbert",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// The exact erf form, HF's `gelu`.
    Gelu,
    /// The tanh approximation, HF's `gelu_new` / `gelu_pytorch_tanh`.
    GeluTanh,
    Relu,
}

impl Activation {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "gelu" => Some(Activation::Gelu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Some(Activation::GeluTanh),
            "relu" => Some(Activation::Relu),
            _ => None,
        }
    }

    pub fn apply(self, xs: &tch::Tensor) -> tch::Tensor {
        match self {
            Activation::Gelu => xs.gelu("none"),
            Activation::GeluTanh => xs.gelu("tanh"),
            Activation::Relu => xs.relu(),
        }
    }
}

/// One encoder's hyper-parameters. Field names follow BERT's config; the
/// DistilBERT names (`dim`, `n_layers`, ...) are mapped onto them on load.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub architecture: Architecture,
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub num_hidden_layers: i64,
    pub num_attention_heads: i64,
    pub intermediate_size: i64,
    pub hidden_act: Activation,
    pub max_position_embeddings: i64,
    /// BERT's segment embeddings; 0 for DistilBERT, which has none.
    pub type_vocab_size: i64,
    pub layer_norm_eps: f64,
    pub hidden_dropout_prob: f64,
    pub attention_probs_dropout_prob: f64,
    /// Dropout before the classifier: BERT's `classifier_dropout` (falling
    /// back to `hidden_dropout_prob` as HF does), DistilBERT's
    /// `seq_classif_dropout`.
    pub classifier_dropout: f64,
    pub initializer_range: f64,
    /// Labels by class index, from `id2label`; `LABEL_0`.. when absent.
    pub id2label: Vec<String>,
    /// Everything else in the file, kept so that a saved checkpoint writes
    /// back what it read.
    pub raw: Map<String, Value>,
}

impl ModelConfig {
    pub fn from_file(path: &Path) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let value: Value = serde_json::from_str(&text).map_err(|error| ModelError::Config {
            path: path.display().to_string(),
            message: format!("not valid JSON: {error}"),
        })?;
        Self::from_json(value).map_err(|error| match error {
            ModelError::Config { message, .. } => ModelError::Config {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    /// Parses a config object. Errors carry an empty path; `from_file` fills
    /// it in.
    pub fn from_json(value: Value) -> Result<Self, ModelError> {
        let Value::Object(raw) = value else {
            return Err(config_error("the top level is not a JSON object"));
        };
        let fields = Fields(&raw);
        let model_type = fields.str("model_type")?;
        let architecture = match model_type {
            "bert" => Architecture::Bert,
            "distilbert" => Architecture::DistilBert,
            other => {
                return Err(ModelError::UnknownModelType {
                    model_type: other.to_string(),
                })
            }
        };
        let mut config = match architecture {
            Architecture::Bert => {
                let hidden_dropout_prob = fields.f64_or("hidden_dropout_prob", 0.1)?;
                let position_embedding_type =
                    fields.str_or("position_embedding_type", "absolute")?;
                if position_embedding_type != "absolute" {
                    return Err(config_error(format!(
                        "position_embedding_type `{position_embedding_type}` is not supported \
                         (only `absolute`)"
                    )));
                }
                ModelConfig {
                    architecture,
                    vocab_size: fields.i64("vocab_size")?,
                    hidden_size: fields.i64("hidden_size")?,
                    num_hidden_layers: fields.i64("num_hidden_layers")?,
                    num_attention_heads: fields.i64("num_attention_heads")?,
                    intermediate_size: fields.i64("intermediate_size")?,
                    hidden_act: fields.activation("hidden_act", "gelu")?,
                    max_position_embeddings: fields.i64_or("max_position_embeddings", 512)?,
                    type_vocab_size: fields.i64_or("type_vocab_size", 2)?,
                    layer_norm_eps: fields.f64_or("layer_norm_eps", 1e-12)?,
                    hidden_dropout_prob,
                    attention_probs_dropout_prob: fields
                        .f64_or("attention_probs_dropout_prob", 0.1)?,
                    classifier_dropout: fields.f64_or("classifier_dropout", hidden_dropout_prob)?,
                    initializer_range: fields.f64_or("initializer_range", 0.02)?,
                    id2label: Vec::new(),
                    raw: Map::new(),
                }
            }
            Architecture::DistilBert => ModelConfig {
                architecture,
                vocab_size: fields.i64("vocab_size")?,
                hidden_size: fields.i64_or("dim", 768)?,
                num_hidden_layers: fields.i64_or("n_layers", 6)?,
                num_attention_heads: fields.i64_or("n_heads", 12)?,
                intermediate_size: fields.i64_or("hidden_dim", 3072)?,
                hidden_act: fields.activation("activation", "gelu")?,
                max_position_embeddings: fields.i64_or("max_position_embeddings", 512)?,
                type_vocab_size: 0,
                // Fixed in HF's DistilBERT code, not a config field.
                layer_norm_eps: 1e-12,
                hidden_dropout_prob: fields.f64_or("dropout", 0.1)?,
                attention_probs_dropout_prob: fields.f64_or("attention_dropout", 0.1)?,
                classifier_dropout: fields.f64_or("seq_classif_dropout", 0.2)?,
                initializer_range: fields.f64_or("initializer_range", 0.02)?,
                id2label: Vec::new(),
                raw: Map::new(),
            },
        };
        config.id2label = fields.id2label()?;
        if config.hidden_size % config.num_attention_heads != 0 {
            return Err(config_error(format!(
                "hidden size {} is not a multiple of the {} attention heads",
                config.hidden_size, config.num_attention_heads
            )));
        }
        for (name, value) in [
            ("vocab_size", config.vocab_size),
            ("hidden_size", config.hidden_size),
            ("num_hidden_layers", config.num_hidden_layers),
            ("num_attention_heads", config.num_attention_heads),
            ("intermediate_size", config.intermediate_size),
            ("max_position_embeddings", config.max_position_embeddings),
        ] {
            if value <= 0 {
                return Err(config_error(format!(
                    "{name} must be positive, got {value}"
                )));
            }
        }
        config.raw = raw;
        Ok(config)
    }

    pub fn head_dim(&self) -> i64 {
        self.hidden_size / self.num_attention_heads
    }

    /// The number of classes the head has unless the caller asks for another.
    pub fn num_labels(&self) -> i64 {
        if self.id2label.is_empty() {
            2
        } else {
            self.id2label.len() as i64
        }
    }
}

fn config_error(message: impl Into<String>) -> ModelError {
    ModelError::Config {
        path: String::new(),
        message: message.into(),
    }
}

struct Fields<'a>(&'a Map<String, Value>);

impl Fields<'_> {
    fn get(&self, name: &str) -> Option<&Value> {
        // HF writes `null` for "use the default" (classifier_dropout does).
        self.0.get(name).filter(|value| !value.is_null())
    }

    fn str(&self, name: &str) -> Result<&str, ModelError> {
        match self.get(name) {
            Some(Value::String(text)) => Ok(text),
            Some(other) => Err(config_error(format!("`{name}` is {other}, not a string"))),
            None => Err(config_error(format!("`{name}` is missing"))),
        }
    }

    fn str_or<'b>(&'b self, name: &str, default: &'b str) -> Result<&'b str, ModelError> {
        match self.get(name) {
            None => Ok(default),
            Some(_) => self.str(name),
        }
    }

    fn i64(&self, name: &str) -> Result<i64, ModelError> {
        match self.get(name) {
            Some(value) => value
                .as_i64()
                .ok_or_else(|| config_error(format!("`{name}` is {value}, not an integer"))),
            None => Err(config_error(format!("`{name}` is missing"))),
        }
    }

    fn i64_or(&self, name: &str, default: i64) -> Result<i64, ModelError> {
        match self.get(name) {
            None => Ok(default),
            Some(_) => self.i64(name),
        }
    }

    fn f64_or(&self, name: &str, default: f64) -> Result<f64, ModelError> {
        match self.get(name) {
            None => Ok(default),
            Some(value) => value
                .as_f64()
                .ok_or_else(|| config_error(format!("`{name}` is {value}, not a number"))),
        }
    }

    fn activation(&self, name: &str, default: &str) -> Result<Activation, ModelError> {
        let text = self.str_or(name, default)?;
        Activation::parse(text).ok_or_else(|| {
            config_error(format!(
                "activation `{text}` in `{name}` is not supported (gelu, gelu_new, relu)"
            ))
        })
    }

    fn id2label(&self) -> Result<Vec<String>, ModelError> {
        let Some(value) = self.get("id2label") else {
            return Ok(match self.get("num_labels").and_then(Value::as_i64) {
                Some(count) if count > 0 => (0..count).map(|i| format!("LABEL_{i}")).collect(),
                _ => Vec::new(),
            });
        };
        let Value::Object(entries) = value else {
            return Err(config_error("`id2label` is not an object"));
        };
        let mut labels = vec![None; entries.len()];
        for (key, label) in entries {
            let index: usize = key
                .parse()
                .ok()
                .filter(|&index| index < entries.len())
                .ok_or_else(|| {
                    config_error(format!(
                        "`id2label` key `{key}` is not an index below {}",
                        entries.len()
                    ))
                })?;
            let Value::String(label) = label else {
                return Err(config_error(format!("`id2label.{key}` is not a string")));
            };
            labels[index] = Some(label.clone());
        }
        // Keys are distinct and all below len, so every slot is filled.
        Ok(labels.into_iter().flatten().collect())
    }
}
