//! The registry of built-in stages.

mod csv;
mod download;
mod hf;
mod imdb;
mod split;
mod tokenize;

use crate::BuiltinStage;

/// Every built-in stage, in the order `pipe stages` lists them.
pub fn all() -> Vec<&'static dyn BuiltinStage> {
    vec![
        &download::Download,
        &hf::HfDownload,
        &imdb::ImdbExtract,
        &csv::FromCsv,
        &split::Split,
        &tokenize::Tokenize,
    ]
}

/// The stage `name@version`, if this worker has it.
pub fn find(name: &str, version: u32) -> Option<&'static dyn BuiltinStage> {
    all().into_iter().find(|stage| {
        let info = stage.info();
        info.name == name && info.version == version
    })
}
