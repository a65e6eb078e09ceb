//! The registry of the data stages, and the param helpers every
//! built-in stage (`pipe-train`'s too) declares its params with.

mod csv;
mod download;
mod hf;
mod imdb;
mod split;
mod tokenize;

use pipe_protocol::{ParamKind, ParamSpec};
use serde_json::Value;

use crate::BuiltinStage;

/// A param of a built-in stage: `default` None is required,
/// `Some(Value::Null)` optional (see `ParamSpec`).
pub fn param(name: &str, kind: ParamKind, default: Option<Value>, doc: &str) -> ParamSpec {
    ParamSpec {
        name: name.into(),
        kind,
        default,
        doc: doc.into(),
        choices: vec![],
        pipeline_param: None,
        minimum: None,
        maximum: None,
    }
}

/// An optional `seed` param that falls back to the pipeline's `seed` param.
/// The engine fills that fallback into `with:` before hashing, so a stage
/// never reads a seed its key does not cover.
pub fn seed_param(doc: &str) -> ParamSpec {
    ParamSpec {
        pipeline_param: Some("seed".into()),
        ..param("seed", ParamKind::Integer, Some(Value::Null), doc).at_least(0.0)
    }
}

/// The data stages, run by `pipe-stage`, in the order `pipe stages` lists them.
pub fn data_stages() -> Vec<&'static dyn BuiltinStage> {
    vec![
        &download::Download,
        &hf::HfDownload,
        &imdb::ImdbExtract,
        &csv::FromCsv,
        &split::Split,
        &tokenize::Tokenize,
    ]
}
