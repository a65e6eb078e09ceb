//! `pipe init --from-dvc [DIR]`: renders what `dvc_import::init_from_dvc`
//! did. Each thing not carried is one line on stderr at its place in
//! dvc.yaml, then a summary; what was written and what to run next go to
//! stdout.

use std::path::{Path, PathBuf};

use pipe_engine::{
    init_from_dvc as convert_and_write, ExitCode, FindingKind, FromDvc, Ignored, Location, Result,
    Written,
};

use crate::output::{errln, outln};

pub fn init_from_dvc(directory: Option<&Path>) -> Result<ExitCode> {
    // Relative to where pipe runs, so that every location reads as the
    // user would type it (`dvc.yaml:12:5`, `proj/dvc.yaml:12:5`).
    let dir: PathBuf = directory.map(Path::to_path_buf).unwrap_or_default();
    let shown = if dir.as_os_str().is_empty() {
        ".".to_string()
    } else {
        dir.display().to_string()
    };
    let written = match convert_and_write(&dir)? {
        FromDvc::WouldOverwrite(path) => {
            errln!(
                "error: `pipe init --from-dvc` would overwrite {}",
                path.display()
            );
            errln!("hint: move it away first (it is never overwritten), or compare it with what the conversion writes: `pipe init --from-dvc` in a copy of the project");
            return Ok(ExitCode::WouldLoseFiles);
        }
        FromDvc::Written(written) => *written,
    };
    let Written {
        pipe_yaml,
        conversion,
        gitignore,
        warnings,
        load_error,
    } = written;
    let mut not_carried = 0;
    let mut changed = 0;
    for finding in &conversion.findings {
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
        errln!("{place}: {label}: {}: {}", finding.what, finding.why);
    }
    if not_carried + changed > 0 {
        errln!(
            "{not_carried} thing(s) of dvc.yaml not carried, {changed} written otherwise (listed above; docs/coming-from-dvc.md says why)"
        );
    }
    for warning in &warnings {
        errln!("{warning}");
    }
    outln!(
        "created {} from dvc.yaml in {shown}: {} stage(s)",
        pipe_yaml.display(),
        conversion.stages
    );
    let ignored = match &gitignore {
        Ignored::Already => "already ignores what pipe writes".to_string(),
        Ignored::Created(lines) => format!("new: {}", lines.join(" ")),
        Ignored::Added(lines) => format!("added {}", lines.join(" ")),
    };
    outln!("  .gitignore: {ignored}");
    if let Some(error) = load_error {
        errln!("{error}");
        errln!("error: pipe.yaml was written, but pipe cannot load it: fix what is shown above in pipe.yaml (dvc.yaml is left as it was)");
        return Ok(error.exit_code());
    }
    let enter = match directory {
        Some(directory) => format!("  cd {}\n", directory.display()),
        None => String::new(),
    };
    outln!("next:\n{enter}  pipe run          # runs every stage once (dvc.lock is not read) and caches what they write\n  pipe status       # then: what a change would rerun\n  pipe dag          # the graph");
    Ok(ExitCode::Ok)
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
