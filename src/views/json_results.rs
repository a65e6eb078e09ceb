//! The `--json` lines that end `pipe cache push|pull|status` and a run
//! with a remote: what the command did, as types that fix each line's
//! fields and their order (docs/remote-cache.md shows them), written by
//! `jsonln!` exactly.

use pipe_cache::remote::{Presence, TransferReport};
use pipe_cache::RemoteError;
use pipe_engine::{PushReport, RemoteSummary, RunId, RunInRemote};
use serde::Serialize;

/// `{"event": "pushed", ...}`.
#[derive(Serialize)]
pub struct Pushed<'a> {
    event: &'static str,
    remote: &'a str,
    results: usize,
    results_pushed: u64,
    results_already_present: u64,
    results_not_pushed: u64,
    objects_pushed: u64,
    objects_present: u64,
    bytes_pushed: u64,
    records_pushed: usize,
    missing_locally: usize,
    unavailable: &'a Option<RemoteError>,
    push_refused: &'a Option<RemoteError>,
}

impl<'a> Pushed<'a> {
    pub fn of(report: &'a PushReport) -> Pushed<'a> {
        let transfers = &report.transfers;
        Pushed {
            event: "pushed",
            remote: &report.url,
            results: report.results,
            results_pushed: transfers.results_pushed,
            results_already_present: transfers.results_already_present,
            results_not_pushed: transfers.results_not_pushed,
            objects_pushed: transfers.objects_pushed,
            objects_present: transfers.objects_present,
            bytes_pushed: transfers.bytes_pushed,
            records_pushed: report.records_pushed,
            missing_locally: report.missing_locally,
            unavailable: &transfers.unavailable,
            push_refused: &transfers.push_refused,
        }
    }
}

/// `{"event": "pulled", ...}` of a pull of run records.
#[derive(Serialize)]
pub struct PulledRecords<'a> {
    event: &'static str,
    remote: &'a str,
    records: usize,
    records_new: usize,
    unavailable: &'a Option<RemoteError>,
}

impl<'a> PulledRecords<'a> {
    pub fn of(url: &'a str, listed: usize, new: usize, transfers: &'a TransferReport) -> Self {
        PulledRecords {
            event: "pulled",
            remote: url,
            records: listed,
            records_new: new,
            unavailable: &transfers.unavailable,
        }
    }
}

/// `{"event": "pulled", ...}` of a pull of runs' results.
#[derive(Serialize)]
pub struct PulledResults<'a> {
    event: &'static str,
    remote: &'a str,
    results_pulled: usize,
    objects_pulled: u64,
    bytes_pulled: u64,
    already_here: usize,
    not_in_remote: usize,
    corrupt: usize,
    unavailable: &'a Option<RemoteError>,
}

/// What a pull of results counted, beside its transfers.
pub struct PullCounts {
    pub pulled: usize,
    pub already_here: usize,
    pub not_in_remote: usize,
    pub corrupt: usize,
}

impl<'a> PulledResults<'a> {
    pub fn of(url: &'a str, counts: &PullCounts, transfers: &'a TransferReport) -> Self {
        PulledResults {
            event: "pulled",
            remote: url,
            results_pulled: counts.pulled,
            objects_pulled: transfers.objects_pulled,
            bytes_pulled: transfers.bytes_pulled,
            already_here: counts.already_here,
            not_in_remote: counts.not_in_remote,
            corrupt: counts.corrupt,
            unavailable: &transfers.unavailable,
        }
    }
}

/// `pipe cache status --json`: one run, here and in the remote.
#[derive(Serialize)]
pub struct RunStatusInRemote<'a> {
    run: RunId,
    remote: &'a str,
    record_pushed: bool,
    stages: Vec<StageStatusInRemote<'a>>,
}

#[derive(Serialize)]
struct StageStatusInRemote<'a> {
    stage: &'a str,
    key: String,
    local: bool,
    remote: &'static str,
}

/// How a stage's presence in the remote is written, in text and JSON.
pub fn presence_text(presence: &Presence) -> &'static str {
    match presence {
        Presence::Complete => "yes",
        Presence::Incomplete => "incomplete",
        Presence::Absent => "no",
    }
}

impl<'a> RunStatusInRemote<'a> {
    pub fn of(found: &'a RunInRemote) -> Self {
        RunStatusInRemote {
            run: found.id,
            remote: &found.url,
            record_pushed: found.record_pushed,
            stages: found
                .stages
                .iter()
                .map(|stage| StageStatusInRemote {
                    stage: &stage.stage,
                    key: stage.key.to_hex(),
                    local: stage.local,
                    remote: presence_text(&stage.remote),
                })
                .collect(),
        }
    }
}

/// `{"event": "remote", ...}`: what a run moved to and from the remote.
#[derive(Serialize)]
pub struct RunRemote<'a> {
    event: &'static str,
    url: &'a str,
    read_only: bool,
    anonymous: bool,
    results_pulled: u64,
    objects_pulled: u64,
    bytes_pulled: u64,
    results_pushed: u64,
    results_already_present: u64,
    objects_pushed: u64,
    objects_present: u64,
    bytes_pushed: u64,
    results_not_pushed: u64,
    corrupt_found: u64,
    unavailable: &'a Option<RemoteError>,
    push_refused: &'a Option<RemoteError>,
    push_seconds: f64,
    record_pushed: bool,
}

impl<'a> RunRemote<'a> {
    pub fn of(summary: &'a RemoteSummary) -> Self {
        let transfers = &summary.transfers;
        RunRemote {
            event: "remote",
            url: &summary.url,
            read_only: summary.read_only,
            anonymous: summary.anonymous,
            results_pulled: transfers.results_pulled,
            objects_pulled: transfers.objects_pulled,
            bytes_pulled: transfers.bytes_pulled,
            results_pushed: transfers.results_pushed,
            results_already_present: transfers.results_already_present,
            objects_pushed: transfers.objects_pushed,
            objects_present: transfers.objects_present,
            bytes_pushed: transfers.bytes_pushed,
            results_not_pushed: transfers.results_not_pushed,
            corrupt_found: transfers.corrupt_found,
            unavailable: &transfers.unavailable,
            push_refused: &transfers.push_refused,
            push_seconds: transfers.push_seconds,
            record_pushed: summary.record.is_ok(),
        }
    }
}
