//! `data/from-csv@1`.

use crate::{BuiltinStage, Result, StageContext, StageError, StageInfo};

pub struct FromCsv;

impl BuiltinStage for FromCsv {
    fn info(&self) -> StageInfo {
        StageInfo {
            name: "data/from-csv".into(),
            version: 1,
            implementation: 1,
            summary: "not implemented yet".into(),
            params: vec![],
            outputs: vec![],
            metrics: vec![],
        }
    }

    fn run(&self, _context: &StageContext) -> Result<()> {
        Err(StageError::Other("`data/from-csv@1` is not implemented yet".into()))
    }
}
