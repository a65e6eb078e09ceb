//! `pipe init --from-dvc [DIR]`: the conversion written by
//! `pipe_engine::init_from_dvc`, and what it did said
//! (`views/from_dvc_text.rs`): each thing not carried on stderr at its
//! place in dvc.yaml, then a summary; what was written and what to run
//! next on stdout.

use std::path::{Path, PathBuf};

use pipe_engine::{init_from_dvc as convert_and_write, ExitCode, FromDvc, Result};

use crate::output::{err, out};
use crate::views::from_dvc_text;

pub fn init_from_dvc(directory: Option<&Path>) -> Result<ExitCode> {
    // Relative to where pipe runs, so that every location reads as the
    // user would type it (`dvc.yaml:12:5`, `proj/dvc.yaml:12:5`).
    let dir: PathBuf = directory.map(Path::to_path_buf).unwrap_or_default();
    let written = match convert_and_write(&dir)? {
        FromDvc::WouldOverwrite(path) => {
            err!("{}", from_dvc_text::would_overwrite(&path));
            return Ok(ExitCode::WouldLoseFiles);
        }
        FromDvc::Written(written) => written,
    };
    err!("{}", from_dvc_text::findings(&written));
    out!("{}", from_dvc_text::written(&dir, &written));
    if let Some(error) = &written.load_error {
        err!("{}", from_dvc_text::unloadable(error));
        return Ok(error.exit_code());
    }
    out!("{}", from_dvc_text::next(directory));
    Ok(ExitCode::Ok)
}
