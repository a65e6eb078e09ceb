//! `pipe runs`: the recorded runs listed.

use pipe_engine::{ExitCode, History, Result};

use crate::here;
use crate::output::{errln, jsonln, out, outln};

pub(super) fn runs(limit: usize, json: bool) -> Result<ExitCode> {
    let Some(history) = History::open_existing(&here::root()?)? else {
        return no_runs(json);
    };
    let listing = history.listing(limit)?;
    if json {
        jsonln!(serde_json::to_string_pretty(&listing.runs).unwrap_or_default());
    } else {
        out!("{}", crate::views::runs_table::runs_table(&listing));
    }
    Ok(ExitCode::Ok)
}

pub(super) fn no_runs(json: bool) -> Result<ExitCode> {
    if json {
        outln!("[]");
    } else {
        errln!("no runs recorded yet; `pipe run` records one");
    }
    Ok(ExitCode::Ok)
}
