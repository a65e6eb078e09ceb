//! What `pipe cache verify` and `pipe cache gc` say: what was checked or
//! removed (stdout), and for verify the hints on stderr. Lines end in
//! `\n`.

use std::fmt::Write as _;

use pipe_cache::remote::TmpSwept;
use pipe_cache::GcReport;
use pipe_engine::{ResumeSwept, VerifyOutcome};
use pipe_protocol::format::format_bytes;

/// What `pipe cache verify` checked, and each corrupt entry.
pub fn verified(outcome: &VerifyOutcome) -> String {
    let (report, linked_files) = (&outcome.report, &outcome.linked_files);
    let mut text = String::new();
    let _ = writeln!(
        text,
        "checked {} objects ({}) and {} actions",
        report.objects_checked,
        format_bytes(report.bytes_checked as f64),
        report.actions_checked
    );
    for object in &report.corrupt_objects {
        let _ = match linked_files.get(&object.name) {
            Some(files) => writeln!(
                text,
                "corrupt object {} (changed through {})",
                object.name,
                files
                    .iter()
                    .map(|file| format!("`{file}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => writeln!(text, "corrupt object {}", object.name),
        };
    }
    for action in &report.corrupt_actions {
        let _ = writeln!(text, "corrupt action {action}");
    }
    text
}

/// What to do about the corrupt entries verify found (or what `--repair`
/// removed); empty when it found none.
pub fn verify_hints(outcome: &VerifyOutcome, repair: bool) -> String {
    let report = &outcome.report;
    let mut text = String::new();
    if report.corrupt.is_empty() && report.corrupt_actions.is_empty() {
        return text;
    }
    if !outcome.linked_files.is_empty() {
        let _ = writeln!(text, "hint: those project files are hard links or symlinks into the cache and were written to; `--link reflink,copy` (the default) restores private copies");
    }
    if repair {
        let _ = writeln!(
            text,
            "removed {} corrupt objects and {} action results; `pipe run` reruns the stages that needed them",
            report.objects_removed, report.actions_removed
        );
    } else {
        let _ = writeln!(text, "hint: `pipe run` ignores corrupt entries (it reruns the stage); `pipe cache verify --repair` removes them");
    }
    text
}

/// What `pipe cache gc` removed and kept here.
pub fn collected(local: &GcReport, resume: &ResumeSwept) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "removed {} objects ({}) and {} actions; kept {} objects and {} actions",
        local.objects_removed,
        format_bytes(local.bytes_removed as f64),
        local.actions_removed,
        local.objects_kept,
        local.actions_kept
    );
    if resume.dirs > 0 {
        let _ = writeln!(
            text,
            "removed {} resume state{} ({}) of interrupted stages the pipeline no longer has",
            resume.dirs,
            if resume.dirs == 1 { "" } else { "s" },
            format_bytes(resume.bytes as f64)
        );
    }
    text
}

/// What `pipe cache gc` swept from the remote's `tmp/`.
pub fn swept(url: &str, swept: &TmpSwept) -> String {
    format!(
        "{url}: removed {} temporary files ({}) that killed pushes left in tmp/\n",
        swept.files,
        format_bytes(swept.bytes as f64)
    )
}
