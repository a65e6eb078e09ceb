//! What `pipe checkout` and `pipe apply` say: what was restored or
//! written, and each refusal with what to do. Lines end in `\n`; the
//! commands choose the stream (stderr for refusals and checkout's
//! outcome, stdout for what apply changed).

use crate::views::count_text::counted;
use std::fmt::Write as _;
use std::path::Path;

use pipe_engine::{Applied, CheckoutReport, Freshness, ParamOverride, RunId};

/// `pipe checkout`'s outcome.
pub fn restored(id: RunId, restored: usize, unchanged: usize) -> String {
    format!("restored {restored} outputs of run #{id} ({unchanged} already in place)\n")
}

/// A checkout that changed nothing, said with what to do; empty for one
/// that was done.
pub fn not_restored(root: &Path, id: RunId, report: &CheckoutReport) -> String {
    let mut text = String::new();
    match report {
        CheckoutReport::Refused(problems) => {
            for problem in problems {
                let _ = writeln!(text, "error: {problem}");
            }
            let _ = writeln!(
                text,
                "hint: run #{id}'s record names what the pipeline does not write; nothing was changed (a record from another commit: check that commit out first, or pass its pipeline with -f)"
            );
        }
        CheckoutReport::Missing(problems) => {
            for problem in problems {
                let _ = writeln!(text, "error: cannot restore {problem}");
            }
            let _ = writeln!(text, "hint: nothing was changed; `pipe cache pull {id}` fetches the results from a remote, or rerun the pipeline at that commit to recreate them");
        }
        CheckoutReport::WouldLoseFiles(lost) => {
            let _ = writeln!(
                text,
                "error: bringing back run #{id} would overwrite or delete {} that the cache does not hold:",
                counted(lost.len(), "file", "files")
            );
            for file in lost {
                let _ = writeln!(text, "  {}", shown(root, file).display());
            }
            let _ = writeln!(text, "hint: move or commit them elsewhere first, or rerun with `--force` to overwrite them");
        }
        CheckoutReport::Done { .. } => {}
    }
    text
}

/// `pipe apply` of a sweep without a `--row` that names a combination:
/// each combination as the command that brings it back.
pub fn choose_row(id: RunId, given: Option<&str>, rows: &[Vec<ParamOverride>]) -> String {
    let mut text = String::new();
    match given {
        Some(row) => {
            let _ = writeln!(
                text,
                "error: `--row {row}` names no combination of sweep run #{id}; nothing was changed"
            );
        }
        None => {
            let _ = writeln!(text, "error: run #{id} is a sweep; name the combination to bring back with `--row`; nothing was changed");
        }
    }
    let _ = writeln!(
        text,
        "its combinations (`pipe compare {id}` shows their metrics):"
    );
    for row in rows {
        let pairs: Vec<String> = row
            .iter()
            .map(|setting| {
                let key = setting.path.keys().last().map_or("", String::as_str);
                format!("{key}={}", setting.values_shown())
            })
            .collect();
        let _ = writeln!(text, "  pipe apply {id} --row {}", pairs.join(","));
    }
    text
}

/// Params of the run that cannot be written where the project sets them.
pub fn unwritable(params: &[String]) -> String {
    let mut text = String::new();
    for param in params {
        let _ = writeln!(text, "error: cannot apply {param}");
    }
    text.push_str("hint: nothing was changed\n");
    text
}

/// Files apply would rewrite that hold edits git has not committed.
pub fn uncommitted_edits(root: &Path, id: RunId, files: &[std::path::PathBuf]) -> String {
    let mut text = String::new();
    for file in files {
        let _ = writeln!(
            text,
            "error: {} has edits git has not committed, which applying run #{id} would overwrite",
            shown(root, file).display()
        );
    }
    let _ = writeln!(text, "hint: nothing was changed; commit or stash them first (`git stash`), or rerun with `--force`");
    text
}

/// What `pipe apply` changed: each value written, the outputs restored,
/// and whether every stage is fresh after.
pub fn applied(root: &Path, id: RunId, applied: &Applied) -> String {
    let mut text = String::new();
    if applied.edits.is_empty() {
        let _ = writeln!(text, "params: the project's files already hold run #{id}'s");
    }
    for edit in &applied.edits {
        let _ = writeln!(
            text,
            "{}:{}: {} {} -> {}",
            shown(root, &edit.file).display(),
            edit.line,
            edit.param,
            edit.before,
            edit.after
        );
    }
    let _ = writeln!(
        text,
        "outputs: restored {} of run #{id} ({} already in place)",
        applied.restored, applied.unchanged
    );
    if applied.not_fresh.is_empty() {
        let _ = match applied.reports_made {
            Some(made) => writeln!(
                text,
                "status: all {} stages fresh (the sweep's report showed every combination: run #{made} made this one's)",
                applied.stages
            ),
            None => writeln!(text, "status: all {} stages fresh", applied.stages),
        };
        return text;
    }
    let _ = writeln!(
        text,
        "status: {} of {} stages not fresh:",
        applied.not_fresh.len(),
        applied.stages
    );
    for (stage, freshness) in &applied.not_fresh {
        let state = match freshness {
            Freshness::Fresh => "fresh",
            Freshness::Restorable => "restorable",
            Freshness::Stale => "stale",
            Freshness::Running => "running",
        };
        let _ = writeln!(text, "  {stage}  {state}");
    }
    let _ = writeln!(text, "hint: `pipe status` says why; run #{id} did not run every stage, or the pipeline changed since");
    text
}

fn shown<'p>(root: &Path, file: &'p Path) -> &'p Path {
    file.strip_prefix(root).unwrap_or(file)
}
