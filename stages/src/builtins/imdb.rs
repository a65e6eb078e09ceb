//! `imdb/extract@1`.

use crate::{BuiltinStage, Result, StageContext, StageError, StageInfo};

pub struct ImdbExtract;

impl BuiltinStage for ImdbExtract {
    fn info(&self) -> StageInfo {
        StageInfo {
            name: "imdb/extract".into(),
            version: 1,
            implementation: 1,
            summary: "not implemented yet".into(),
            params: vec![],
            outputs: vec![],
            metrics: vec![],
        }
    }

    fn run(&self, _context: &StageContext) -> Result<()> {
        Err(StageError::Other("`imdb/extract@1` is not implemented yet".into()))
    }
}
