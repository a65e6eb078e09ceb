//! `text/tokenize@1`.

use crate::{BuiltinStage, Result, StageContext, StageError, StageInfo};

pub struct Tokenize;

impl BuiltinStage for Tokenize {
    fn info(&self) -> StageInfo {
        StageInfo {
            name: "text/tokenize".into(),
            version: 1,
            implementation: 1,
            summary: "not implemented yet".into(),
            params: vec![],
            outputs: vec![],
            metrics: vec![],
        }
    }

    fn run(&self, _context: &StageContext) -> Result<()> {
        Err(StageError::Other("`text/tokenize@1` is not implemented yet".into()))
    }
}
