//! A pipeline file's name alone (`name:`, else its file name), for
//! commands that choose runs by pipeline (`pipe diff --pipeline FILE`)
//! without loading its stages.

use std::path::Path;

use super::file::name_from_file_stem;
use crate::project_files::source::Sources;
use crate::project_files::yaml;
use crate::{EngineError, Result, UsageError};

/// The name of the pipeline in `file`, as `load` gives it.
pub fn pipeline_name(file: &Path) -> Result<String> {
    let text = yaml::read_bounded_text(file).map_err(|error| EngineError::io(file, error))?;
    if text.len() as u64 > yaml::MAX_FILE_BYTES {
        return Err(UsageError::PipelineFileTooLarge {
            file: file.to_path_buf(),
            limit: yaml::MAX_FILE_BYTES,
        }
        .into());
    }
    let mut sources = Sources::default();
    let id = sources.add(Some(file.to_path_buf()), text);
    let root = yaml::parse(&sources, id).map_err(EngineError::Spec)?;
    let declared = root
        .as_ref()
        .and_then(|root| root.get("name"))
        .and_then(|node| node.as_scalar())
        .map(|scalar| scalar.text.clone())
        .filter(|name| !name.is_empty());
    Ok(declared.unwrap_or_else(|| {
        file.file_stem().map_or_else(
            || "pipeline".to_string(),
            |stem| name_from_file_stem(&stem.to_string_lossy()),
        )
    }))
}
