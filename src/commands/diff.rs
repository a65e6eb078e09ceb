//! `pipe diff`: two runs side by side.

use pipe_engine::{diff_runs, DiffRequest, ExitCode, Result};

use crate::cli::DirectionArgs;
use crate::here;
use crate::output::{err, jsonln, out};
use crate::style::Style;
use crate::views::{diff_text, notice_text};

/// `pipe diff [A] [B]`: the flags as a request to `diff_runs`, and
/// its diff shown as text, Markdown or JSON.
/// How `pipe diff` shows what it found.
pub(super) struct Shape {
    pub(super) json: bool,
    pub(super) md: bool,
    /// Every changed metric, not only the key ones.
    pub(super) all: bool,
}

pub(super) fn diff(
    a: Option<String>,
    b: Option<String>,
    pipeline: Option<String>,
    directions: DirectionArgs,
    Shape { json, md, all }: Shape,
) -> Result<ExitCode> {
    let mut history = here::history()?;
    let request = DiffRequest {
        a,
        b,
        pipeline,
        directions: directions.rules(),
    };
    let diff = diff_runs(&mut history, &request, &mut |notice| {
        err!("{}", notice_text::line(&notice))
    })?;
    if json {
        jsonln!(serde_json::to_string_pretty(&diff).unwrap_or_default());
    } else if md {
        out!("{}", diff_text::diff_markdown(&diff, all));
    } else {
        out!("{}", diff_text::diff_text(&diff, all, Style::for_stdout()));
    }
    Ok(ExitCode::Ok)
}
