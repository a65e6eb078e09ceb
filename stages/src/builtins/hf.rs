//! `hf/download@1`.

use crate::{BuiltinStage, Result, StageContext, StageError, StageInfo};

pub struct HfDownload;

impl BuiltinStage for HfDownload {
    fn info(&self) -> StageInfo {
        StageInfo {
            name: "hf/download".into(),
            version: 1,
            implementation: 1,
            summary: "not implemented yet".into(),
            params: vec![],
            outputs: vec![],
            metrics: vec![],
        }
    }

    fn run(&self, _context: &StageContext) -> Result<()> {
        Err(StageError::Other("`hf/download@1` is not implemented yet".into()))
    }
}
