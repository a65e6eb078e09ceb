//! What a built-in stage is to its worker.

use pipe_protocol::StageInfo;

use crate::context::StageContext;
use crate::error::Result;

pub trait BuiltinStage: Sync {
    fn info(&self) -> StageInfo;
    /// Runs the stage. Params have already been checked against `info()`
    /// and have their defaults filled in.
    fn run(&self, context: &StageContext) -> Result<()>;
}
