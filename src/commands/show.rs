//! `pipe show [RUN] [--json] [--open[=OUTPUT]]`: one run, with whether
//! the workspace holds each of its outputs; `--open` brings its report
//! (or an output) out of the cache into a view of that run and opens it.

use pipe_engine::{open_output, show_run, ExitCode, History, Pull, Result, RunId};

use crate::browser;
use crate::here;
use crate::output::{err, jsonln, out};
use crate::views::{show_json, show_text};

pub fn show(run: &str, json: bool, open: Option<&str>) -> Result<ExitCode> {
    let mut history = here::history()?;
    let id = here::resolve(&mut history, run, Pull::IfConfigured)?;
    if let Some(wanted) = open {
        return show_open(&history, id, wanted, json);
    }
    let shown = show_run(&history, id)?;
    if json {
        jsonln!(show_json::shown_run(&shown));
    } else {
        out!("{}", show_text::show_text(&shown));
    }
    Ok(ExitCode::Ok)
}

/// `pipe show RUN --open[=OUTPUT]`: the output brought out of the cache,
/// its path said, and opened.
fn show_open(history: &History, id: RunId, wanted: &str, json: bool) -> Result<ExitCode> {
    let record = history.db.resolved_run(id)?;
    let wanted = Some(wanted).filter(|wanted| !wanted.is_empty());
    let opened = open_output(&here::project()?, &record, wanted)?;
    let path = here::relative_to_cwd(&opened.path);
    if json {
        jsonln!(show_json::opened(opened.run, &opened.output, &path));
    } else {
        out!("{}", show_text::opened(&path));
        err!(
            "{}",
            show_text::opened_from_cache(opened.run, &opened.output)
        );
    }
    if let Err(error) = browser::open(&opened.path) {
        err!("{}", show_text::not_opened(&error));
    }
    Ok(ExitCode::Ok)
}
