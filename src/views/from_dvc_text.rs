//! What `pipe init --from-dvc` says of the conversion
//! (`pipe_engine::init_from_dvc`): each thing of dvc.yaml not carried at
//! its place, then a summary, the loader's warnings and a refusal to load
//! (stderr); what was written and what to run next (stdout). Lines end
//! in `\n`.

use crate::views::count_text::counted;
use std::fmt::Write as _;
use std::path::Path;

use pipe_engine::{EngineError, FindingKind, Ignored, Location, Written};

/// The refusal: `pipe.yaml` is there already.
pub fn would_overwrite(pipe_yaml: &Path) -> String {
    format!(
        "error: `pipe init --from-dvc` would overwrite {}\nhint: move it away first (it is never overwritten), or compare it with what the conversion writes: `pipe init --from-dvc` in a copy of the project\n",
        pipe_yaml.display()
    )
}

/// Each finding at its place in dvc.yaml, a count of them when there are
/// any, and the warnings pipe's loader has about the file written.
pub fn findings(written: &Written) -> String {
    let mut text = String::new();
    let (mut not_carried, mut changed) = (0, 0);
    for finding in &written.conversion.findings {
        let label = match finding.kind {
            FindingKind::NotCarried => {
                not_carried += 1;
                "not carried"
            }
            FindingKind::Changed => {
                changed += 1;
                "written otherwise"
            }
        };
        let place = finding
            .location
            .as_ref()
            .map_or_else(|| "dvc.yaml".to_string(), place);
        let _ = writeln!(text, "{place}: {label}: {}: {}", finding.what, finding.why);
    }
    if not_carried + changed > 0 {
        let _ = writeln!(
            text,
            "{} of dvc.yaml not carried, {changed} written otherwise (listed above; docs/coming-from-dvc.md says why)",
            counted(not_carried, "thing", "things")
        );
    }
    for warning in &written.warnings {
        let _ = writeln!(text, "{warning}");
    }
    if let Err(error) = &written.gitignore {
        text.push_str(&crate::views::init_text::gitignore_warning(error));
    }
    text
}

/// `pipe.yaml` written in `dir` (as the user gave it: empty for the
/// working directory), with its stages, and what became of `.gitignore`.
pub fn written(dir: &Path, written: &Written) -> String {
    let shown = if dir.as_os_str().is_empty() {
        ".".to_string()
    } else {
        dir.display().to_string()
    };
    let ignored = match &written.gitignore {
        Ok(Ignored::Already) => "already ignores what pipe writes".to_string(),
        Ok(Ignored::Created(lines)) => format!("new: {}", lines.join(" ")),
        Ok(Ignored::Added(lines)) => format!("added {}", lines.join(" ")),
        Err(_) => "left as it is (the warning above says why)".to_string(),
    };
    format!(
        "created {} from dvc.yaml in {shown}: {}\n  .gitignore: {ignored}\n",
        written.pipe_yaml.display(),
        counted(written.conversion.stages, "stage", "stages")
    )
}

/// Why pipe's loader refuses the file written, and that dvc.yaml is as
/// it was.
pub fn unloadable(error: &EngineError) -> String {
    format!("{error}\nerror: pipe.yaml was written, but pipe cannot load it: fix what is shown above in pipe.yaml (dvc.yaml is left as it was)\n")
}

/// The commands to try next, after a `cd` into the directory when one
/// was named.
pub fn next(directory: Option<&Path>) -> String {
    let enter = match directory {
        Some(directory) => format!("  cd {}\n", directory.display()),
        None => String::new(),
    };
    format!("next:\n{enter}  pipe run          # runs every stage once (dvc.lock is not read) and caches what they write\n  pipe status       # then: what a change would rerun\n  pipe dag          # the graph\n")
}

/// `dvc.yaml:12:5`, with the path as the user gave it.
fn place(location: &Location) -> String {
    format!(
        "{}:{}:{}",
        location.file.display(),
        location.line,
        location.col
    )
}
