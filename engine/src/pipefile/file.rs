//! The pipeline file as a path: whether one can be read there, and the
//! name it gives a pipeline without `name:`.

use std::path::Path;

use super::declare::is_valid_name;
use crate::EngineError;

/// Why `file` cannot be read as a pipeline file, if it cannot: missing
/// (`missing_hint` says what to do, which depends on how it was named), a
/// directory (named as one, with the pipeline file inside it when there is
/// one), or not a regular file.
pub fn pipeline_file_problem(file: &Path, missing_hint: &str) -> Option<EngineError> {
    let shown = file.display();
    match std::fs::metadata(file) {
        Ok(metadata) if metadata.is_file() => None,
        Ok(metadata) if metadata.is_dir() => {
            let inside = ["pipe.yaml", "pipe.yml"]
                .iter()
                .map(|name| file.join(name))
                .find(|candidate| candidate.is_file());
            Some(EngineError::usage(
                format!("`{shown}` is a directory, not a pipeline file"),
                match inside {
                    Some(inside) => format!("did you mean `{}`?", inside.display()),
                    None => format!(
                        "name the YAML file, e.g. `{}`, or run pipe inside that directory (`-C {shown}`)",
                        file.join("pipe.yaml").display()
                    ),
                },
            ))
        }
        Ok(_) => Some(EngineError::usage(
            format!("pipeline file `{shown}` is not a regular file"),
            "name a YAML file",
        )),
        Err(_) => Some(EngineError::usage(
            format!("pipeline file `{shown}` does not exist"),
            missing_hint,
        )),
    }
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
