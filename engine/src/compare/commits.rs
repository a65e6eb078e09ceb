//! Which commit a run ran at, said with the refs that point at it: what
//! `pipe diff` and `pipe compare` add when runs differ in code.

use serde::Serialize;

use crate::runs::RunRecord;

/// The commit a run ran at, and the refs that point at it.
#[derive(Debug, Clone, Serialize)]
pub struct RunCommit {
    pub commit: Option<String>,
    pub dirty: Option<bool>,
    pub refs: Vec<String>,
}

impl RunCommit {
    pub(crate) fn of(root: &std::path::Path, run: &RunRecord) -> RunCommit {
        RunCommit {
            refs: run
                .git_commit
                .as_deref()
                .map(|commit| crate::runs::refs_at(root, commit))
                .unwrap_or_default(),
            commit: run.git_commit.clone(),
            dirty: run.git_dirty,
        }
    }

    /// `a1b2c3d4 (main, v1.2)`, `+` after the commit when tracked files
    /// differed from it.
    pub fn describe(&self) -> String {
        let commit = match &self.commit {
            Some(commit) => format!(
                "{}{}",
                &commit[..commit.len().min(8)],
                if self.dirty == Some(true) { "+" } else { "" }
            ),
            None => "no commit".to_string(),
        };
        if self.refs.is_empty() {
            commit
        } else {
            format!("{commit} ({})", self.refs.join(", "))
        }
    }
}

/// The commits of `a` and `b`, when they differ.
pub fn commits_of(
    root: &std::path::Path,
    a: &RunRecord,
    b: &RunRecord,
) -> Option<(RunCommit, RunCommit)> {
    let differ =
        a.git_commit != b.git_commit || (a.git_dirty == Some(true)) != (b.git_dirty == Some(true));
    differ.then(|| (RunCommit::of(root, a), RunCommit::of(root, b)))
}

/// How a run is named where two are set side by side (a diff's title and
/// columns, a PR comment): as a reviewer knows it, `main @ 1a2b3c4 (#2)`:
/// its name if it has one, the branch it ran on (else a branch or tag at
/// its commit), the commit, then its number here.
pub fn side_label(root: &std::path::Path, run: &RunRecord) -> String {
    match run_place(root, run) {
        Some(place) => format!("{place} (#{})", run.id),
        None => format!("run #{}", run.id),
    }
}

/// `baseline: main @ 1a2b3c4`: a run's name, branch and commit, without
/// its number; `None` when it has none of them.
pub fn run_place(root: &std::path::Path, run: &RunRecord) -> Option<String> {
    let short = run
        .git_commit
        .as_deref()
        .map(|commit| &commit[..commit.len().min(7)]);
    let place = run.branch.clone().or_else(|| {
        let refs = run
            .git_commit
            .as_deref()
            .map(|commit| crate::runs::refs_at(root, commit))
            .unwrap_or_default();
        // A local branch before a remote's, before a tag.
        refs.iter()
            .find(|name| !name.contains('/'))
            .or_else(|| refs.first())
            .cloned()
    });
    let label = match (place, short) {
        (Some(place), Some(short)) => Some(format!("{place} @ {short}")),
        (None, Some(short)) => Some(short.to_string()),
        (Some(place), None) => Some(place),
        (None, None) => None,
    };
    match (&run.name, label) {
        (Some(name), Some(label)) => Some(format!("{name}: {label}")),
        (Some(name), None) => Some(name.clone()),
        (None, label) => label,
    }
}
