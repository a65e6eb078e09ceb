//! `pipe why`: what changed in a stage's key.

use std::path::Path;

use pipe_engine::{why_stages, ExitCode, Result};

use crate::cli::PipelineArg;
use crate::output::{jsonln, out};
use crate::run_setup::load_checked;
use crate::views::why_text;

/// `pipe why [FILE] STAGE`.
pub(super) fn why(targets: &[String], arg: PipelineArg, json: bool) -> Result<ExitCode> {
    let (file, stage) = match targets {
        [file, stage] => (Some(Path::new(file.as_str())), stage.as_str()),
        [stage, ..] => (None, stage.as_str()),
        // clap asks for the stage; an empty list is said, not a panic.
        [] => return Err(pipe_engine::UsageError::NoStageNamed.into()),
    };
    let (pipeline, dag) = load_checked(file, &arg)?;
    for why in why_stages(&pipeline, &dag, stage)? {
        if json {
            jsonln!(serde_json::to_string_pretty(&why).unwrap_or_default());
        } else {
            out!("{}", why_text::why_text(&why));
        }
    }
    Ok(ExitCode::Ok)
}
