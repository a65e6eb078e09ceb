//! `pipe cache verify` and `pipe cache gc`.

use pipe_engine::cache_admin::{self, GcOutcome, GcRequest};
use pipe_engine::{ExitCode, Result};
use pipe_protocol::format::format_bytes;

use crate::cli::PipelineArg;
use crate::here;
use crate::output::{errln, jsonln, outln};
use crate::remote_flags;
use crate::run_setup::{default_pipeline_file, load};

pub(super) fn verify(json: bool, repair: bool) -> Result<ExitCode> {
    let project = here::project()?;
    let outcome = cache_admin::verify(&project, repair)?;
    let (report, linked_files) = (&outcome.report, &outcome.linked_files);
    if json {
        jsonln!(serde_json::to_string_pretty(&outcome).unwrap_or_default());
    } else {
        outln!(
            "checked {} objects ({}) and {} actions",
            report.objects_checked,
            format_bytes(report.bytes_checked as f64),
            report.actions_checked
        );
        for object in &report.corrupt_objects {
            match linked_files.get(&object.name) {
                Some(files) => outln!(
                    "corrupt object {} (changed through {})",
                    object.name,
                    files
                        .iter()
                        .map(|file| format!("`{file}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => outln!("corrupt object {}", object.name),
            }
        }
        for action in &report.corrupt_actions {
            outln!("corrupt action {action}");
        }
    }
    if report.corrupt.is_empty() && report.corrupt_actions.is_empty() {
        return Ok(ExitCode::Ok);
    }
    if !linked_files.is_empty() {
        errln!("hint: those project files are hard links or symlinks into the cache and were written to; `--link reflink,copy` (the default) restores private copies");
    }
    if repair {
        errln!(
            "removed {} corrupt objects and {} action results; `pipe run` reruns the stages that needed them",
            report.objects_removed, report.actions_removed
        );
        Ok(ExitCode::Ok)
    } else {
        errln!("hint: `pipe run` ignores corrupt entries (it reruns the stage); `pipe cache verify --repair` removes them");
        Ok(ExitCode::CorruptCache)
    }
}

/// `pipe cache gc`: the pipeline file given or found here, loaded, and
/// the flags as a request to `cache_admin::gc`; what it removed here and
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
    } = cache_admin::gc(&project, &request)?;
    outln!(
        "removed {} objects ({}) and {} actions; kept {} objects and {} actions",
        local.objects_removed,
        format_bytes(local.bytes_removed as f64),
        local.actions_removed,
        local.objects_kept,
        local.actions_kept
    );
    if resume.dirs > 0 {
        outln!(
            "removed {} resume state{} ({}) of interrupted stages the pipeline no longer has",
            resume.dirs,
            if resume.dirs == 1 { "" } else { "s" },
            format_bytes(resume.bytes as f64)
        );
    }
    if let Some((url, swept)) = remote? {
        outln!(
            "{url}: removed {} temporary files ({}) that killed pushes left in tmp/",
            swept.files,
            format_bytes(swept.bytes as f64)
        );
    }
    Ok(ExitCode::Ok)
}
