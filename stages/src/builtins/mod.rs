//! The registry of the data stages.

mod csv;
mod download;
mod hf;
mod imdb;
mod report;
mod split;
mod tokenize;

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
        &report::HtmlReport,
    ]
}
