//! `pipe cache verify` and `pipe cache gc`.

use pipe_engine::{collect_garbage, verify_cache, ExitCode, GcOutcome, GcRequest, Result};

use crate::cli::PipelineArg;
use crate::here;
use crate::output::{err, jsonln, out};
use crate::remote_flags;
use crate::run_setup::{default_pipeline_file, load};
use crate::views::cache_text;

pub(super) fn verify(json: bool, repair: bool) -> Result<ExitCode> {
    let project = here::project()?;
    let outcome = verify_cache(&project, repair)?;
    if json {
        jsonln!(serde_json::to_string_pretty(&outcome).unwrap_or_default());
    } else {
        out!("{}", cache_text::verified(&outcome));
    }
    err!("{}", cache_text::verify_hints(&outcome, repair));
    let report = &outcome.report;
    let clean = report.corrupt.is_empty() && report.corrupt_actions.is_empty();
    if clean || repair {
        Ok(ExitCode::Ok)
    } else {
        Ok(ExitCode::CorruptCache)
    }
}

/// `pipe cache gc`: the pipeline file given or found here, loaded, and
/// the flags as a request to `collect_garbage`; what it removed here and
/// in the remote said.
pub(super) fn gc(
    arg: &PipelineArg,
    keep_runs: usize,
    grace_secs: u64,
    remote: &crate::cli::RemoteArgs,
) -> Result<ExitCode> {
    let project = here::project()?;
    let pipeline_file = match &arg.file {
        Some(file) => Some(file.clone()),
        None => default_pipeline_file().ok(),
    };
    let loaded = match pipeline_file {
        Some(file) => Some(load(Some(&file), arg)?),
        None => None,
    };
    let request = GcRequest {
        pipeline: loaded.as_ref().map(|(pipeline, dag)| (pipeline, dag)),
        keep_runs,
        grace: std::time::Duration::from_secs(grace_secs),
        remote: remote_flags::choice(arg.file.as_deref(), remote, None),
    };
    let GcOutcome {
        local,
        resume,
        remote,
    } = collect_garbage(&project, &request)?;
    out!("{}", cache_text::collected(&local, &resume));
    if let Some((url, swept)) = remote? {
        out!("{}", cache_text::swept(&url, &swept));
    }
    Ok(ExitCode::Ok)
}
