//! `pipe runs`: the recorded runs listed.

use pipe_engine::{ExitCode, History, Result};

use crate::here;
use crate::output::{err, jsonln, out};
use crate::views::runs_table;

pub(super) fn runs(limit: usize, json: bool) -> Result<ExitCode> {
    let Some(history) = History::open_existing(&here::root()?)? else {
        if json {
            jsonln!("[]");
        } else {
            err!("{}", runs_table::no_runs());
        }
        return Ok(ExitCode::Ok);
    };
    let listing = history.listing(limit)?;
    if json {
        jsonln!(serde_json::to_string_pretty(&listing.runs).unwrap_or_default());
    } else {
        out!("{}", runs_table::runs_table(&listing));
    }
    Ok(ExitCode::Ok)
}
