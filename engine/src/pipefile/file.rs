//! The pipeline file as a path: whether one can be read there, the name it
//! gives a pipeline without `name:`, and its remote read alone.

use std::path::Path;

use super::declare::is_valid_name;
use crate::pipeline::RemoteSpec;
use crate::{EngineError, Result, UsageError};

/// Why `file` cannot be read as a pipeline file, if it cannot: missing
/// (`missing_hint` says what to do, which depends on how it was named), a
/// directory (named as one, with the pipeline file inside it when there is
/// one), or not a regular file.
pub fn pipeline_file_problem(file: &Path, missing_hint: &'static str) -> Option<EngineError> {
    let file_buf = || file.to_path_buf();
    let problem = match std::fs::metadata(file) {
        Ok(metadata) if metadata.is_file() => return None,
        Ok(metadata) if metadata.is_dir() => UsageError::PipelineFileIsDirectory {
            file: file_buf(),
            inside: ["pipe.yaml", "pipe.yml"]
                .iter()
                .map(|name| file.join(name))
                .find(|candidate| candidate.is_file()),
        },
        Ok(_) => UsageError::PipelineFileNotRegular { file: file_buf() },
        Err(_) => UsageError::PipelineFileMissing {
            file: file_buf(),
            hint: missing_hint,
            with_extension: with_extension(file),
        },
    };
    Some(problem.into())
}

/// The `cache:` section of a pipeline file alone, for commands that need
/// its remote but not its stages (`pipe cache push -f FILE`).
pub fn pipeline_remote(file: &Path) -> Result<Option<RemoteSpec>> {
    if let Some(problem) = pipeline_file_problem(file, "check the path, or leave out -f") {
        return Err(problem);
    }
    Ok(crate::project_config::read_cache_section(file, false)?.remote)
}

/// `file` with `.yaml` or `.yml` added, when that is a file: what a
/// user who left the extension off meant.
pub fn with_extension(file: &Path) -> Option<std::path::PathBuf> {
    ["yaml", "yml"].iter().find_map(|extension| {
        let mut name = file.as_os_str().to_os_string();
        name.push(".");
        name.push(extension);
        let candidate = std::path::PathBuf::from(name);
        candidate.is_file().then_some(candidate)
    })
}

/// A file `my pipeline.yaml` without `name:` is the pipeline `my_pipeline`.
pub(crate) fn name_from_file_stem(stem: &str) -> String {
    let name: String = stem
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || matches!(ch, '_' | '.' | '-') {
                ch
            } else {
                '_'
            }
        })
        .collect();
    if is_valid_name(&name) {
        name
    } else {
        format!("_{name}")
    }
}
