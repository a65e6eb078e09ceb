//! Reads `pipe.config.yaml`, the project's settings file, and the
//! `cache:` section of a pipeline file alone: the sources the settings
//! resolvers (`executor`, `remote`, `link`) read below the flags and the
//! environment.

use std::path::Path;

use super::cache_section::{self, FileSettings};
use crate::project_files::collect::Diagnostics;
use crate::project_files::source::Sources;
use crate::project_files::yaml;
use crate::project_files::PROJECT_CONFIG_FILE;
use crate::{Diagnostic, EngineError, Result, UsageError};

/// Reads `pipe.config.yaml` at `root`, if there is one: the settings every
/// pipeline of the project shares (a pipeline's own `cache:` overrides it).
pub(crate) fn load_project_config(root: &Path) -> Result<FileSettings> {
    read_cache_section(&root.join(PROJECT_CONFIG_FILE), true)
}

/// The settings `path` holds: its `cache:` section, and, in the project's
/// settings file (`config_file`), its `executor:`; nothing when there is
/// no such file.
pub(crate) fn read_cache_section(path: &Path, config_file: bool) -> Result<FileSettings> {
    let text = match yaml::read_bounded_text(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(FileSettings::default())
        }
        Err(error) => return Err(EngineError::io(path, error)),
    };
    if text.len() as u64 > yaml::MAX_FILE_BYTES {
        return Err(UsageError::SettingsFileTooLarge {
            file: path.to_path_buf(),
            limit: yaml::MAX_FILE_BYTES,
        }
        .into());
    }
    let mut sources = Sources::default();
    let mut diagnostics = Diagnostics::default();
    let file = sources.add(Some(path.to_path_buf()), text);
    let Some(root_node) = yaml::parse(&sources, file).map_err(EngineError::Spec)? else {
        return Ok(FileSettings::default());
    };
    let mut section = FileSettings::default();
    match root_node.as_map() {
        Some(entries) => {
            for entry in entries {
                if entry.key == "cache" {
                    let executor = section.executor.take();
                    section = cache_section::parse(&entry.value, &sources, &mut diagnostics);
                    section.executor = executor;
                } else if entry.key == "executor" && config_file {
                    section.executor =
                        super::executor_section::parse(&entry.value, &sources, &mut diagnostics);
                } else if config_file {
                    diagnostics.push(
                        Diagnostic::new(
                            "unknown-key",
                            format!("unknown key `{}` in {PROJECT_CONFIG_FILE}", entry.key),
                        )
                        .at(sources.location(entry.key_span))
                        .with_hint(
                            "the project config holds `cache:` (link, remote) and `executor:`",
                        ),
                    );
                }
            }
        }
        None if root_node.is_null() => {}
        None => diagnostics.push(
            Diagnostic::new(
                "bad-type",
                format!(
                    "`{}` must be a mapping, found {}",
                    path.display(),
                    root_node.describe()
                ),
            )
            .at(sources.location(root_node.span))
            .with_hint("write e.g. `cache: { remote: s3://bucket/prefix }`"),
        ),
    }
    let diagnostics = diagnostics.into_vec();
    if !diagnostics.is_empty() {
        return Err(EngineError::Spec(diagnostics));
    }
    Ok(section)
}
