//! What `pipe cache push|pull|status` say (`pipe_engine::cache_sync`'s
//! reports): the counts of what moved and the warnings on stderr, a
//! run's place here and in the remote on stdout. Lines end in `\n`.

use crate::views::count_text::counted;
use std::fmt::Write as _;

use pipe_cache::remote::TransferReport;
use pipe_cache::ActionKey;
use pipe_engine::{PushReport, RunId, RunInRemote};
use pipe_protocol::format::format_bytes;

use crate::views::json_results::{presence_text, PullCounts};

/// Run records a push left in place, each with why.
pub fn records_not_pushed(report: &PushReport) -> String {
    let mut text = String::new();
    for (id, reason) in &report.records_not_pushed {
        let _ = writeln!(
            text,
            "warning: the record of run #{id} was not pushed: {reason}"
        );
    }
    text
}

/// What a push moved, and the results the local cache no longer held.
pub fn pushed(report: &PushReport) -> String {
    let transfers = &report.transfers;
    let mut text = format!(
        "{}: {} ({} pushed, {} already there; {} objects, {} sent), {}\n",
        report.url,
        counted(report.results, "result", "results"),
        transfers.results_pushed,
        transfers.results_already_present,
        transfers.objects_pushed,
        format_bytes(transfers.bytes_pushed as f64),
        counted(report.records_pushed, "run record", "run records"),
    );
    if report.missing_locally > 0 {
        let _ = writeln!(
            text,
            "warning: {} of these runs no longer in the local cache (removed since, by `pipe cache gc` or by hand) and not pushed",
            counted(report.missing_locally, "result", "results")
        );
    }
    text
}

/// A pull of the remote's run records.
pub fn records_pulled(url: &str, listed: usize, new: usize) -> String {
    let listed = counted(listed, "run record", "run records");
    format!("{url}: {listed}, {new} new here\n")
}

/// Results the remote holds damaged, each with what is wrong.
pub fn corrupt(corrupt: &[(ActionKey, String)]) -> String {
    let mut text = String::new();
    for (key, reason) in corrupt {
        let _ = writeln!(
            text,
            "warning: result {} in the remote is corrupt: {reason}",
            key.short()
        );
    }
    text
}

/// What a pull of results moved; for one run pulled whole, how to put
/// its outputs in the workspace.
pub fn results_pulled(
    url: &str,
    runs: &[RunId],
    counts: &PullCounts,
    transfers: &TransferReport,
) -> String {
    let PullCounts {
        pulled,
        already_here,
        not_in_remote,
        corrupt,
    } = counts;
    let mut text = format!(
        "{url}: {pulled} results pulled ({} objects, {}), {already_here} already here, {not_in_remote} not in the remote, {corrupt} corrupt\n",
        transfers.objects_pulled,
        format_bytes(transfers.bytes_pulled as f64),
    );
    if let [id] = runs {
        if transfers.unavailable.is_none() && not_in_remote + corrupt == 0 {
            let _ = writeln!(
                text,
                "`pipe checkout {id}` puts run #{id}'s outputs in the workspace"
            );
        }
    }
    text
}

/// `pipe cache status`: each stage's result here and in the remote, and
/// whether the run's record is there.
pub fn run_in_remote(found: &RunInRemote) -> String {
    let mut text = format!("run #{} in {}\n", found.id, found.url);
    for stage in &found.stages {
        let _ = writeln!(
            text,
            "  {:<30} {}  local: {:<3}  remote: {}",
            stage.stage,
            stage.key.short(),
            if stage.local { "yes" } else { "no" },
            presence_text(&stage.remote)
        );
    }
    let record = if found.record_pushed {
        "in the remote"
    } else {
        "not pushed"
    };
    let _ = writeln!(text, "  record: {record}");
    text
}

/// A remote that could not be reached, or refused a push.
pub fn unavailable(reason: &impl std::fmt::Display) -> String {
    format!("error: {reason}\n")
}
