//! The use case behind `pipe init --from-dvc`: the conversion written as
//! `pipe.yaml` beside `dvc.yaml` (never over an existing one), `.pipe/`
//! made so that the directory is the project root, the file loaded with
//! pipe's own loader, and `.gitignore` given lines for `.pipe/` and the
//! outputs pipe's cache holds (not those declared `cache: false`, which
//! the user commits).

use std::path::{Path, PathBuf};

use crate::gitignore::{self, write_new, Ignored};
use crate::pipefile::{load, ProjectWorkers};
use crate::{Diagnostic, EngineError, Result};

use super::convert::{convert, Conversion};

/// What `init_from_dvc` did.
#[derive(Debug)]
pub enum FromDvc {
    /// `pipe.yaml` is there already: nothing was written.
    WouldOverwrite(PathBuf),
    Written(Box<Written>),
}

/// A written conversion.
#[derive(Debug)]
pub struct Written {
    pub pipe_yaml: PathBuf,
    pub conversion: Conversion,
    /// What became of `.gitignore`; an error there leaves `pipe.yaml`
    /// written.
    pub gitignore: Result<Ignored>,
    /// Warnings pipe's loader has about the file.
    pub warnings: Vec<Diagnostic>,
    /// Why pipe's loader refuses the file, if it does: something the
    /// conversion could not see (a missing input is not one: the loader
    /// does not look for inputs).
    pub load_error: Option<EngineError>,
}

/// Converts the `dvc.yaml` in `dir` and writes `pipe.yaml` there.
pub fn init_from_dvc(dir: &Path) -> Result<FromDvc> {
    let pipe_yaml = dir.join("pipe.yaml");
    if std::fs::symlink_metadata(&pipe_yaml).is_ok() {
        return Ok(FromDvc::WouldOverwrite(pipe_yaml));
    }
    let conversion = convert(dir)?;
    let state = dir.join(crate::project_files::paths::PIPE_DIR);
    std::fs::create_dir_all(&state).map_err(|e| EngineError::io(&state, e))?;
    gitignore::ignore_state_dir(&state);
    write_new(&pipe_yaml, &conversion.text)?;
    let (ignored, warnings, load_error) = match load(&pipe_yaml, &[], &ProjectWorkers) {
        Ok(loaded) => {
            let outputs: Vec<String> = loaded
                .pipeline
                .cached_command_outputs()
                .map(|out| out.path.to_string())
                .collect();
            (outputs, loaded.warnings, None)
        }
        Err(error) => (Vec::new(), Vec::new(), Some(error)),
    };
    // `.pipe/` is ignored from inside (`ignore_state_dir` above).
    let lines: Vec<&str> = ignored.iter().map(String::as_str).collect();
    let gitignore = gitignore::ignore_paths(dir, &lines);
    Ok(FromDvc::Written(Box::new(Written {
        pipe_yaml,
        conversion,
        gitignore,
        warnings,
        load_error,
    })))
}
