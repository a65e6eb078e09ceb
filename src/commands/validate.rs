//! `pipe validate`: the pipeline loaded and checked, nothing run.

use std::path::Path;

use pipe_engine::{ExitCode, Result};

use crate::cli::PipelineArg;
use crate::output::errln;
use crate::run_setup::load_checked;

pub(super) fn validate(path: Option<&Path>, pipeline: &PipelineArg) -> Result<ExitCode> {
    let (pipeline, _) = load_checked(path, pipeline)?;
    errln!(
        "`{}` is valid: {} stages",
        pipeline.file.display(),
        pipeline.stages.len()
    );
    Ok(ExitCode::Ok)
}
