//! What `pipe init` says: the files it would overwrite (stderr), or what
//! it wrote and what to run next (stdout). Lines end in `\n`.

use crate::views::count_text::counted;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use pipe_engine::{EngineError, Ignored, ProjectTemplate};

/// The refusal: the template's files that are there already.
pub fn would_overwrite(directory: &Path, existing: &[PathBuf]) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "error: `pipe init` would overwrite {} in {}:",
        counted(existing.len(), "file", "files"),
        directory.display()
    );
    for path in existing {
        let _ = writeln!(text, "  {}", path.display());
    }
    text.push_str("hint: run it in an empty directory (`pipe init DIR` creates one), or move these away first\n");
    text
}

/// The project written: its files, what became of `.gitignore`, and the
/// commands to try next (after a `cd` into it when `enter`).
pub fn created(
    directory: &Path,
    files: &[PathBuf],
    gitignore: &Result<Ignored, EngineError>,
    template: ProjectTemplate,
    enter: bool,
) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "created a pipe project in {}:", directory.display());
    for file in files {
        let _ = writeln!(text, "  {}", file.display());
    }
    let gitignore = match gitignore {
        Ok(Ignored::Created(_)) => "new",
        Ok(Ignored::Added(_)) => "lines added",
        Ok(Ignored::Already) => "already ignores what pipe writes",
        Err(_) => "left as it is: see the warning",
    };
    let _ = writeln!(text, "  .gitignore ({gitignore})");
    text.push_str("next:\n");
    if enter {
        let _ = writeln!(text, "  cd {}", directory.display());
    }
    let _ = writeln!(text, "  {}", next_steps(template));
    text
}

/// A `.gitignore` pipe would not read or write (a link to a device, not
/// UTF-8, too large): the project is there, its outputs not yet ignored.
pub fn gitignore_warning(error: &EngineError) -> String {
    format!("warning: {error}: the stages' outputs are not kept out of git; pipe run tries again, or add their paths to .gitignore yourself\n")
}

/// The commands that show what the template does, each with why.
fn next_steps(template: ProjectTemplate) -> &'static str {
    match template {
        ProjectTemplate::Quickstart => "pipe run          # fetch the data and the model, fine-tune, evaluate (a few minutes on a CPU; needs the training worker, docs/libtorch.md)\n  pipe show         # what ran, the metrics, where the report is\n  pipe run -S train.lr=3e-4 && pipe diff   # change a param, see what reran and what moved",
        ProjectTemplate::Commands => "pipe run          # four shell-command stages with Python 3, in seconds\n  pipe run -S train.smoothing=0.1 && pipe diff   # only training and evaluation rerun, accuracy moves\n  pipe dag          # the graph",
    }
}
