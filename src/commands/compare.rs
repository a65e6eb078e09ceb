//! `pipe compare`: the flags as a request to the engine's compare use
//! case, and its table shown as text, Markdown, CSV, JSON or HTML.

use pipe_engine::{compare_runs, CompareRequest, ExitCode, Result, RunStatus, StatusFilter};

use crate::cli::{CompareArgs, StatusArg};
use crate::here;
use crate::output::{err, jsonln, out};
use crate::style::Style;
use crate::views::{compare_page, compare_view, notice_text};

pub fn compare_command(args: CompareArgs) -> Result<ExitCode> {
    let mut history = here::history()?;
    let request = CompareRequest {
        runs: args.runs,
        baseline: args.baseline,
        last: args.last,
        statuses: status_filter(&args.status),
        pipeline: args.pipeline,
        where_params: args.where_,
        directions: args.directions.rules(),
        // The page has every column, those of the text table ticked.
        all_columns: args.all || args.html,
        metrics: args.metrics,
        per_seed: args.per_seed,
        baseline_row: args.baseline_row,
        sort: args.sort,
        with_steps: args.html,
        with_plots: args.html,
    };
    let comparison = compare_runs(&mut history, &request, &mut |notice| {
        err!("{}", notice_text::line(&notice))
    })?;
    let table = &comparison.table;
    err!("{}", compare_view::warnings(table));
    if args.json {
        jsonln!(serde_json::to_string_pretty(table).unwrap_or_default());
    } else if args.md {
        let labels = compare_view::run_labels(&history.root, &comparison.runs);
        out!("{}", compare_view::markdown(table, &labels));
    } else if args.csv {
        out!("{}", compare_view::csv(table));
    } else if let Some(steps) = &comparison.steps {
        let plots = comparison.plots.as_deref().unwrap_or_default();
        out!(
            "{}",
            compare_page::html(table, &comparison.runs, steps, plots, args.all)?
        );
    } else {
        out!("{}", compare_view::text(table, Style::for_stdout()));
    }
    Ok(ExitCode::Ok)
}

fn status_filter(statuses: &[StatusArg]) -> StatusFilter {
    if statuses.contains(&StatusArg::Any) {
        return StatusFilter::Any;
    }
    if statuses.is_empty() {
        return StatusFilter::Default;
    }
    StatusFilter::These(
        statuses
            .iter()
            .map(|status| match status {
                StatusArg::Succeeded | StatusArg::Any => RunStatus::Succeeded,
                StatusArg::Failed => RunStatus::Failed,
                StatusArg::Interrupted => RunStatus::Interrupted,
                StatusArg::Running => RunStatus::Running,
            })
            .collect(),
    )
}
