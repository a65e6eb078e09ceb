//! The git state a run is recorded at.

use std::path::Path;

#[derive(Debug, Clone)]
pub struct GitState {
    pub commit: String,
    pub dirty: bool,
}

/// The commit and dirty flag of the git work tree at `root`, if any.
pub fn git_state(root: &Path) -> Option<GitState> {
    let commit = git(root, &["rev-parse", "--verify", "-q", "HEAD"])?;
    let status = git(root, &["status", "--porcelain", "--untracked-files=no"]).unwrap_or_default();
    Some(GitState {
        commit,
        dirty: !status.is_empty(),
    })
}

/// Resolves a git ref to a commit id in the repository at `root`.
pub fn git_commit_of(root: &Path, reference: &str) -> Option<String> {
    if reference.starts_with('-') {
        return None;
    }
    git(
        root,
        &[
            "rev-parse",
            "--verify",
            "-q",
            &format!("{reference}^{{commit}}"),
        ],
    )
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}
