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

/// Every built-in stage, in the order `pipe stages` lists them.
pub fn all() -> Vec<&'static dyn BuiltinStage> {
    #[allow(unused_mut)] // only the torch feature adds stages
    let mut stages: Vec<&'static dyn BuiltinStage> = vec![
        &download::Download,
        &hf::HfDownload,
        &imdb::ImdbExtract,
        &csv::FromCsv,
        &split::Split,
        &tokenize::Tokenize,
    ];
    #[cfg(feature = "torch")]
    stages.extend([
        &train::TrainClassifier as &'static dyn BuiltinStage,
        &eval::EvalClassifier,
    ]);
    stages
}

/// The stage `name@version`, if this worker has it.
pub fn find(name: &str, version: u32) -> Option<&'static dyn BuiltinStage> {
    all().into_iter().find(|stage| {
        let info = stage.info();
        info.name == name && info.version == version
    })
}
