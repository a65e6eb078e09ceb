//! Transformer encoders with a sequence-classification head on libtorch
//! (tch), loading and naming weights as Hugging Face `transformers` does.
//!
//! Every parameter lives in one `VarStore` under its HF name
//! (`bert.encoder.layer.0.attention.self.query.weight`, `classifier.bias`),
//! so an optimizer takes `vs.trainable_variables()` and a checkpoint is the
//! store dumped as it is.

mod bert;
mod classifier;
mod config;
mod distilbert;
mod error;
mod layers;
mod units;
mod weights;

pub use bert::BertForSequenceClassification;
pub use classifier::SequenceClassifier;
pub use config::{Activation, Architecture, ModelConfig};
pub use distilbert::DistilBertForSequenceClassification;
pub use error::ModelError;
pub use layers::DropoutMasks;
pub use units::{DropoutState, ModelInput};
pub use weights::{load_safetensors, LoadReport};
