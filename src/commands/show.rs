//! `pipe show [RUN] [--json] [--open[=OUTPUT]]`: one run, with whether
//! the workspace holds each of its outputs; `--open` brings its report
//! (or an output) out of the cache into a view of that run and opens it.

use std::path::Path;

use pipe_engine::{
    open_output, show_run, ExitCode, InProgress, OutputInWorkspace, Pull, Result, RunId, RunRecord,
};

use crate::here;
use crate::output::{errln, jsonln, out, outln};

/// A run record as `show --json` prints it: the record, the runs whose
/// results it restored when it ran nothing, whether the workspace holds
/// each of its outputs, and what it is doing while it is going.
#[derive(serde::Serialize)]
struct ShownRun<'a> {
    #[serde(flatten)]
    record: &'a RunRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    restored_from: Option<Vec<RunId>>,
    outputs_in_workspace: &'a [OutputInWorkspace],
    #[serde(skip_serializing_if = "Option::is_none")]
    in_progress: Option<&'a InProgress>,
}

pub fn show(run: &str, json: bool, open: Option<&str>) -> Result<ExitCode> {
    let mut history = here::history()?;
    let id = here::resolve(&mut history, run, Pull::IfConfigured)?;
    if let Some(wanted) = open {
        let record = history.db.resolved_run(id)?;
        let wanted = Some(wanted).filter(|wanted| !wanted.is_empty());
        let opened = open_output(&here::project()?, &record, wanted)?;
        let path = here::relative_to_cwd(&opened.path);
        if json {
            let shown = serde_json::json!({
                "run": opened.run,
                "output": opened.output,
                "path": path,
            });
            jsonln!(serde_json::to_string_pretty(&shown).unwrap_or_default());
        } else {
            outln!("{}", path.display());
            errln!(
                "run #{}'s `{}`, read-only copies from the cache (the workspace is not touched)",
                opened.run,
                opened.output
            );
        }
        open_in_browser(&opened.path);
        return Ok(ExitCode::Ok);
    }
    let shown = show_run(&history, id)?;
    if json {
        let record = ShownRun {
            record: &shown.record,
            restored_from: shown.restored.only_restored(),
            outputs_in_workspace: &shown.outputs,
            in_progress: shown.in_progress.as_ref(),
        };
        jsonln!(serde_json::to_string_pretty(&record).unwrap_or_default());
    } else {
        out!("{}", crate::views::show_text::show_text(&shown));
    }
    Ok(ExitCode::Ok)
}

/// Opens `path` where a person can see it: with `$BROWSER` when it is
/// set, else with the desktop's opener when there is a display. Nothing
/// without either (a terminal over SSH, CI, tests): the path printed is
/// the answer. Not waited for: a browser may stay open.
fn open_in_browser(path: &Path) {
    let browser = std::env::var("BROWSER")
        .ok()
        .and_then(|list| list.split(':').next().map(str::to_string))
        .filter(|command| !command.trim().is_empty());
    let mut command = match browser {
        // `$BROWSER` is a command line of the user's: the shell reads it,
        // and the path is its argument, never part of its text.
        Some(browser) => {
            let mut command = std::process::Command::new("sh");
            command
                .arg("-c")
                .arg(format!("{browser} \"$1\""))
                .arg("sh")
                .arg(path);
            command
        }
        None if has_display() => {
            let mut command = std::process::Command::new(if cfg!(target_os = "macos") {
                "open"
            } else {
                "xdg-open"
            });
            command.arg(path);
            command
        }
        None => return,
    };
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if let Err(error) = command.spawn() {
        errln!("warning: could not open it: {error}");
    }
}

fn has_display() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}
