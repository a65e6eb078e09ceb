//! The project the command runs in, and its run history: what every
//! command module starts from, so that none imports another.

use std::path::{Path, PathBuf};

use pipe_engine::{EngineError, History, Project, Pull, Result, RunId};

use crate::output::err;
use crate::views::notice_text;

/// The root of the project around the working directory.
pub fn root() -> Result<PathBuf> {
    let cwd = std::env::current_dir().map_err(|e| EngineError::io(".", e))?;
    Ok(Project::find_root(&cwd))
}

pub fn project() -> Result<Project> {
    Project::open(&root()?)
}

/// The history, or a usage error when the project has none to read.
pub fn history() -> Result<History> {
    History::require(&root()?)
}

/// Resolves a run reference, pulling the records of a git ref's commit
/// from `pull`, and says what was pulled.
pub fn resolve(history: &mut History, query: &str, pull: Pull<'_>) -> Result<RunId> {
    history.resolve_noting(query, pull, &mut |notice| {
        err!("{}", notice_text::line(&notice))
    })
}

/// `path` as seen from the working directory when it is under it (a
/// message names `pipe.yaml`, not `/home/me/project/pipe.yaml`).
pub fn relative_to_cwd(path: &Path) -> PathBuf {
    std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf())
}

/// Whether `path` is the working directory (a message then need not say
/// `cd` into it).
pub fn is_working_directory(path: &Path) -> bool {
    path.canonicalize().ok()
        == std::env::current_dir()
            .ok()
            .and_then(|cwd| cwd.canonicalize().ok())
}
