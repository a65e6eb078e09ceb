//! The list of the worker's stages, in the order `pipe stages` shows them.

use crate::BuiltinStage;

/// The data stages, run by `pipe-stage`, in the order `pipe stages` lists them.
pub fn data_stages() -> Vec<&'static dyn BuiltinStage> {
    vec![
        &super::download::Download,
        &super::hf::HfDownload,
        &super::imdb::ImdbExtract,
        &super::csv::FromCsv,
        &super::split::Split,
        &super::tokenize::Tokenize,
        &super::report::HtmlReport,
    ]
}
