//! `pipe validate`: the pipeline loaded and checked, nothing run.

use std::path::Path;

use pipe_engine::{ExitCode, Result};

use crate::cli::PipelineArg;
use crate::output::err;
use crate::run_setup::load_checked;
use crate::views::validate_text;

pub(super) fn validate(path: Option<&Path>, pipeline: &PipelineArg) -> Result<ExitCode> {
    let (pipeline, _) = load_checked(path, pipeline)?;
    err!("{}", validate_text::valid(&pipeline));
    Ok(ExitCode::Ok)
}
