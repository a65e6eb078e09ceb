//! `pipe init [DIR] [--template T]`: the template chosen, written by
//! `pipe_engine::init_project` into DIR (the working directory without
//! one), and what it did said (`views/init_text.rs`).

use std::path::{Path, PathBuf};

use pipe_engine::{init_project, EngineError, ExitCode, InitOutcome, ProjectTemplate, Result};

use crate::cli::TemplateArg;
use crate::here;
use crate::output::{err, out};
use crate::views::init_text;

pub fn init(directory: Option<&Path>, choice: TemplateArg) -> Result<ExitCode> {
    let directory: PathBuf = match directory {
        Some(directory) => directory.to_path_buf(),
        None => std::env::current_dir().map_err(|e| EngineError::io(".", e))?,
    };
    let template = match choice {
        TemplateArg::Quickstart => ProjectTemplate::Quickstart,
        TemplateArg::Commands => ProjectTemplate::Commands,
    };
    match init_project(&directory, template)? {
        InitOutcome::WouldOverwrite(existing) => {
            err!("{}", init_text::would_overwrite(&directory, &existing));
            Ok(ExitCode::WouldLoseFiles)
        }
        InitOutcome::Created { files, gitignore } => {
            if let Err(error) = &gitignore {
                err!("{}", init_text::gitignore_warning(error));
            }
            let enter = !here::is_working_directory(&directory);
            out!(
                "{}",
                init_text::created(&directory, &files, &gitignore, template, enter)
            );
            Ok(ExitCode::Ok)
        }
    }
}
