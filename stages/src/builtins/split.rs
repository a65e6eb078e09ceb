//! `data/split@1`.

use crate::{BuiltinStage, Result, StageContext, StageError, StageInfo};

pub struct Split;

impl BuiltinStage for Split {
    fn info(&self) -> StageInfo {
        StageInfo {
            name: "data/split".into(),
            version: 1,
            implementation: 1,
            summary: "not implemented yet".into(),
            params: vec![],
            outputs: vec![],
            metrics: vec![],
        }
    }

    fn run(&self, _context: &StageContext) -> Result<()> {
        Err(StageError::Other("`data/split@1` is not implemented yet".into()))
    }
}
