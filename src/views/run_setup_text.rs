//! What a run's setup and its end say on stderr (`src/run_setup.rs`):
//! which pipeline file was taken when none was named, the run whose
//! settings `--run` loads, where the report pages are, and what the
//! remote did.

use std::path::Path;

use pipe_engine::{ParamOverride, RemoteSummary, RunId};
use pipe_protocol::format::{format_bytes, format_seconds};

use crate::views::count_text::counted;

/// What `pipe_engine::pipeline_file_problem` adds to a pipeline file it
/// refuses.
pub const PIPELINE_FILE_HINT: &str =
    "check the path; pipeline files are YAML, e.g. `pipelines/quickstart.yaml`";

/// No `pipe.yaml` here or above: the last run's file is taken (`shown`,
/// as seen from the working directory).
pub fn last_run_file_line(shown: &Path, run: RunId) -> String {
    format!(
        "no pipe.yaml here: using {}, the pipeline file of the last run (#{run})\n",
        shown.display()
    )
}

/// `--run RUN`: the file and the settings loaded, as the command line
/// that would load them again.
pub fn as_run_line(run: RunId, shown: &Path, sweep: bool, overrides: &[ParamOverride]) -> String {
    let settings: String = overrides
        .iter()
        .map(|setting| format!(" -S {setting}"))
        .collect();
    let multirun = if sweep { " -m" } else { "" };
    format!("as run #{run}: {}{multirun}{settings}\n", shown.display())
}

/// One report page in place at a run's end: a path to open.
pub fn report_location_line(stage: &str, page: &str) -> String {
    format!("{stage}: {page}\n")
}

/// What a run says about its remote at its end: a line of what moved,
/// then a warning when the remote could not be written, each ending its
/// line; empty when there is nothing to say.
pub fn remote_summary_text(summary: &RemoteSummary) -> String {
    let transfers = &summary.transfers;
    let results = |count: u64| counted(count as usize, "result", "results");
    let mut parts = Vec::new();
    if transfers.results_pulled > 0 {
        parts.push(format!(
            "pulled {} ({})",
            results(transfers.results_pulled),
            format_bytes(transfers.bytes_pulled as f64)
        ));
    }
    if transfers.results_pushed > 0 {
        parts.push(format!(
            "pushed {} ({}) in {}",
            results(transfers.results_pushed),
            format_bytes(transfers.bytes_pushed as f64),
            format_seconds(transfers.push_seconds)
        ));
    }
    if transfers.results_already_present > 0 {
        // An earlier push of the same key (this project's, a forced rerun,
        // or another job's): the remote keeps the result it has.
        let keys = if transfers.results_already_present == 1 {
            "key"
        } else {
            "keys"
        };
        parts.push(format!(
            "{} already in the remote under the same {keys}, kept as it is",
            results(transfers.results_already_present),
        ));
    }
    if summary.anonymous && transfers.unavailable.is_some() {
        parts.push("no credentials: nothing pushed".to_string());
    } else if summary.anonymous {
        parts.push("no credentials, read anonymously: nothing pushed".to_string());
    } else if summary.read_only {
        parts.push("read-only: nothing pushed".to_string());
    } else if summary.record.is_ok() && !parts.is_empty() {
        parts.push("run record pushed".to_string());
    }
    let mut text = String::new();
    if !parts.is_empty() {
        text += &format!("remote {}: {}\n", summary.url, parts.join(", "));
    }
    if let Some(reason) = transfers
        .unavailable
        .as_ref()
        .or(transfers.push_refused.as_ref())
    {
        text += &format!("warning: {reason}\n");
        if transfers.results_not_pushed > 0 {
            text += &format!(
                "warning: {} not pushed; `pipe cache push` sends them when the remote is back\n",
                results(transfers.results_not_pushed)
            );
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipe_cache::remote::TransferReport;

    fn summary(transfers: TransferReport) -> RemoteSummary {
        RemoteSummary {
            url: "s3://team/cache".into(),
            read_only: false,
            anonymous: false,
            transfers,
            record: Ok(()),
        }
    }

    #[test]
    fn a_run_that_moved_results_says_what_and_that_its_record_went_with_them() {
        let said = remote_summary_text(&summary(TransferReport {
            results_pulled: 1,
            bytes_pulled: 2048,
            results_already_present: 2,
            ..TransferReport::default()
        }));
        assert_eq!(
            said,
            "remote s3://team/cache: pulled 1 result (2 KiB), 2 results already in the \
             remote under the same keys, kept as it is, run record pushed\n"
        );
    }

    #[test]
    fn a_run_that_moved_nothing_says_nothing_of_its_remote() {
        assert_eq!(remote_summary_text(&summary(TransferReport::default())), "");
    }

    #[test]
    fn the_settings_of_a_run_read_as_the_command_line_that_loads_them() {
        let overrides = [
            ParamOverride::parse("train.lr=0.01").unwrap(),
            ParamOverride::parse("seed=3").unwrap(),
        ];
        assert_eq!(
            as_run_line(RunId(12), Path::new("pipe.yaml"), true, &overrides),
            "as run #12: pipe.yaml -m -S train.lr=0.01 -S seed=3\n"
        );
    }
}
