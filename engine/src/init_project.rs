//! The use case behind `pipe init`: a starting pipeline in a project
//! directory, from a template compiled into the binary (so an installed
//! `pipe` needs no checkout, and the templates never drift from the
//! repository's quickstart and example), `.pipe/` made so that the
//! directory is the project root, and a `.gitignore` for what pipe keeps
//! out of git. Nothing that exists is overwritten.

use std::path::{Path, PathBuf};

use crate::gitignore::{write_new, Ignored};
use crate::project_files::paths::PIPE_DIR;
use crate::{EngineError, Result};

/// Which starting pipeline `pipe init` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectTemplate {
    /// The repository's quickstart: fine-tune a small model with the
    /// built-in stages.
    Quickstart,
    /// The command-stage example: shell commands with Python 3 only.
    Commands,
}

/// What `init_project` did.
#[derive(Debug)]
pub enum InitOutcome {
    /// These files of the template are there already (relative to the
    /// directory): nothing was written.
    WouldOverwrite(Vec<PathBuf>),
    /// The template's files, written (relative to the directory), and
    /// what became of `.gitignore`: an error there (a `.gitignore` pipe
    /// refuses to read) leaves the files written and the project usable.
    Created {
        files: Vec<PathBuf>,
        gitignore: Result<Ignored>,
    },
}

struct TemplateFile {
    path: &'static str,
    text: String,
}

struct Template {
    files: Vec<TemplateFile>,
    /// What the `.gitignore` must name: the outputs of the template's
    /// stages (the cache holds them).
    ignored: &'static [&'static str],
}

const QUICKSTART: &str = include_str!("../../pipelines/quickstart.yaml");
const FETCH_WHEEL_FILE: &str = include_str!("../../scripts/fetch_wheel_file.py");
const COMMANDS: &str = include_str!("../../examples/sentiment/pipe.yaml");
const COMMANDS_SCRIPTS: [(&str, &str); 4] = [
    (
        "scripts/prepare.py",
        include_str!("../../examples/sentiment/scripts/prepare.py"),
    ),
    (
        "scripts/features.py",
        include_str!("../../examples/sentiment/scripts/features.py"),
    ),
    (
        "scripts/train.py",
        include_str!("../../examples/sentiment/scripts/train.py"),
    ),
    (
        "scripts/evaluate.py",
        include_str!("../../examples/sentiment/scripts/evaluate.py"),
    ),
];

fn template(choice: ProjectTemplate) -> Template {
    match choice {
        // The repository's quickstart, run from the project root as
        // `pipe run` instead of from a checkout.
        ProjectTemplate::Quickstart => Template {
            files: vec![
                TemplateFile {
                    path: "pipe.yaml",
                    text: QUICKSTART.replace("./pipe run pipelines/quickstart.yaml", "pipe run"),
                },
                TemplateFile {
                    path: "scripts/fetch_wheel_file.py",
                    text: FETCH_WHEEL_FILE.to_string(),
                },
            ],
            ignored: &["data/"],
        },
        // The command-stage example, with its paths made the project's.
        ProjectTemplate::Commands => {
            let mut files = vec![TemplateFile {
                path: "pipe.yaml",
                text: COMMANDS
                    .replace("pipe run examples/sentiment/pipe.yaml", "pipe run")
                    .replace("examples/sentiment/", "")
                    .replace("name: sentiment-example", "name: sentiment"),
            }];
            files.extend(COMMANDS_SCRIPTS.iter().map(|(path, text)| TemplateFile {
                path,
                text: text.to_string(),
            }));
            Template {
                files,
                ignored: &["out/"],
            }
        }
    }
}

/// Writes `choice`'s files into `directory`, or none of them when any is
/// there already.
pub fn init(directory: &Path, choice: ProjectTemplate) -> Result<InitOutcome> {
    let template = template(choice);
    let existing: Vec<PathBuf> = template
        .files
        .iter()
        .map(|file| PathBuf::from(file.path))
        .filter(|path| std::fs::symlink_metadata(directory.join(path)).is_ok())
        .collect();
    if !existing.is_empty() {
        return Ok(InitOutcome::WouldOverwrite(existing));
    }
    // `.pipe/` marks the project root, so that the paths in the pipeline
    // are this directory's even inside another git repository.
    let state = directory.join(PIPE_DIR);
    std::fs::create_dir_all(&state).map_err(|e| EngineError::io(&state, e))?;
    for file in &template.files {
        let path = directory.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
        }
        write_new(&path, &file.text)?;
    }
    // pipe's own directory is ignored from inside, as every run makes
    // sure; the template's outputs by the lines a run adds for outputs,
    // written by the same rule (anchored, never over the user's lines).
    crate::gitignore::ignore_state_dir(&state);
    let gitignore = crate::gitignore::ignore_paths(directory, template.ignored);
    Ok(InitOutcome::Created {
        files: template
            .files
            .iter()
            .map(|file| PathBuf::from(file.path))
            .collect(),
        gitignore,
    })
}
