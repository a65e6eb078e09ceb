//! What can go wrong with a model: its config, its weights, its input.

use std::path::PathBuf;

use pipe_stages::StageError;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {message}")]
    Config { path: String, message: String },
    #[error("model_type `{model_type}` is not supported")]
    UnknownModelType { model_type: String },
    #[error("{}: {message}", path.display())]
    Weights { path: PathBuf, message: String },
    #[error("I/O error on `{}`: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("bad model input: {0}")]
    Input(String),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
}

impl From<ModelError> for StageError {
    fn from(error: ModelError) -> Self {
        let hint = match &error {
            ModelError::UnknownModelType { .. } => {
                "supported model types are `bert` and `distilbert` (config.json `model_type`)"
            }
            ModelError::Config { .. } | ModelError::Weights { .. } => {
                "use a Hugging Face BERT or DistilBERT checkpoint: config.json and \
                 model.safetensors from the same model"
            }
            ModelError::Input(_) => "this is a bug in the stage that built the batch",
            ModelError::Io { .. } | ModelError::Torch(_) => "",
        };
        match error {
            ModelError::Io { path, source } => StageError::io(path, source),
            ModelError::Torch(error) => StageError::Other(format!("libtorch: {error}")),
            other => StageError::input(other.to_string(), hint),
        }
    }
}
