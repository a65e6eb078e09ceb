//! The registry of built-in stages.

mod csv;
mod download;
#[cfg(feature = "torch")]
mod eval;
mod hf;
mod imdb;
mod split;
mod tokenize;
#[cfg(feature = "torch")]
mod train;

use crate::BuiltinStage;

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

/// The libtorch stages, run by `pipe-stage-train`.
#[cfg(feature = "torch")]
pub fn training_stages() -> Vec<&'static dyn BuiltinStage> {
    vec![&train::TrainClassifier, &eval::EvalClassifier]
}
