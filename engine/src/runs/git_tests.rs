//! The git state, checked against what git itself says, in repositories
//! made by the git binary, and against `.git` files no git wrote.

use std::path::Path;
use std::process::Command;

use super::{git_commit_of, GitProbe, GitState};

/// The commit and dirty flag of the git work tree at `root`, if any,
/// waiting for both: what a run's probe gives it when the run ends.
fn git_state(root: &Path) -> Option<GitState> {
    GitProbe::start(root).map(|probe| probe.finish())
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A repository with two commits of `a.txt` and `sub/b.txt` on `main`.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("a.txt"), "one\n").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/b.txt"), "b\n").unwrap();
    git(root, &["add", "."]);
    git(root, &["commit", "-q", "-m", "first"]);
    std::fs::write(root.join("a.txt"), "two\n").unwrap();
    git(root, &["commit", "-q", "-am", "second"]);
    dir
}

fn head(dir: &Path) -> String {
    git(dir, &["rev-parse", "HEAD"])
}

#[test]
fn outside_a_repository_there_is_no_git_state() {
    let dir = tempfile::tempdir().unwrap();
    // A directory of its own under /tmp: no repository above it either,
    // unless the machine's /tmp is inside one.
    if Command::new("git")
        .arg("-C")
        .arg(dir.path())
        .args(["rev-parse", "--git-dir"])
        .output()
        .is_ok_and(|output| output.status.success())
    {
        return;
    }
    assert_eq!(git_state(dir.path()), None);
    assert_eq!(git_commit_of(dir.path(), "HEAD"), None);
}

#[test]
fn a_repository_without_a_commit_has_no_git_state() {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q"]);
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    git(dir.path(), &["add", "a.txt"]);
    assert_eq!(git_state(dir.path()), None);
}

#[test]
fn the_commit_is_heads_and_a_clean_tree_is_not_dirty() {
    let dir = repository();
    let state = git_state(dir.path()).unwrap();
    assert_eq!(state.commit, head(dir.path()));
    assert_eq!(state.dirty, Some(false));
    // From a subdirectory of the work tree, as a project inside a
    // repository finds it.
    assert_eq!(git_state(&dir.path().join("sub")).unwrap(), state);
}

#[test]
fn an_edited_tracked_file_is_dirty_staged_or_not_and_committing_it_is_clean() {
    let dir = repository();
    let root = dir.path();
    std::fs::write(root.join("sub/b.txt"), "changed\n").unwrap();
    assert_eq!(git_state(root).unwrap().dirty, Some(true));
    // Staged: the index differs from HEAD, the work tree from nothing.
    git(root, &["add", "sub/b.txt"]);
    assert_eq!(git_state(root).unwrap().dirty, Some(true));
    git(root, &["commit", "-q", "-m", "third"]);
    let state = git_state(root).unwrap();
    assert_eq!(state.dirty, Some(false));
    assert_eq!(state.commit, head(root));
    // HEAD moved back, the index kept: its cached tree is whole but not
    // HEAD's, so the change counts as staged.
    git(root, &["reset", "-q", "--soft", "HEAD~1"]);
    assert_eq!(git_state(root).unwrap().dirty, Some(true));
}

#[test]
fn a_deleted_tracked_file_is_dirty_and_an_untracked_one_is_not() {
    let dir = repository();
    let root = dir.path();
    std::fs::write(root.join("new.txt"), "untracked\n").unwrap();
    std::fs::create_dir(root.join("outs")).unwrap();
    std::fs::write(root.join("outs/result.txt"), "output\n").unwrap();
    assert_eq!(git_state(root).unwrap().dirty, Some(false));
    std::fs::remove_file(root.join("a.txt")).unwrap();
    assert_eq!(git_state(root).unwrap().dirty, Some(true));
}

#[test]
fn refs_are_read_when_packed_and_head_when_detached() {
    let dir = repository();
    let root = dir.path();
    let second = head(root);
    let first = git(root, &["rev-parse", "HEAD~1"]);
    git(root, &["tag", "-a", "-m", "release", "v1", &first]);
    git(root, &["update-ref", "refs/remotes/origin/main", &first]);
    git(root, &["pack-refs", "--all", "--prune"]);
    assert!(!root.join(".git/refs/heads/main").exists());
    assert_eq!(git_state(root).unwrap().commit, second);
    assert_eq!(
        git_commit_of(root, "main").as_deref(),
        Some(second.as_str())
    );
    assert_eq!(
        git_commit_of(root, "origin/main").as_deref(),
        Some(first.as_str())
    );
    // An annotated tag names its commit, not the tag object.
    assert_eq!(git_commit_of(root, "v1").as_deref(), Some(first.as_str()));
    assert_eq!(
        git_commit_of(root, "HEAD~1").as_deref(),
        Some(first.as_str())
    );
    assert_eq!(
        git_commit_of(root, &first[..10]).as_deref(),
        Some(first.as_str())
    );
    assert_eq!(git_commit_of(root, "no-such-branch"), None);
    assert_eq!(git_commit_of(root, "--all"), None);

    git(root, &["checkout", "-q", "--detach", "HEAD~1"]);
    let state = git_state(root).unwrap();
    assert_eq!(state.commit, first);
    assert_eq!(state.dirty, Some(false));
}

#[test]
fn a_linked_worktree_and_a_separate_git_dir_are_read_through_their_git_file() {
    let dir = repository();
    let root = dir.path();
    let first = git(root, &["rev-parse", "HEAD~1"]);
    let linked = tempfile::tempdir().unwrap();
    let worktree = linked.path().join("wt");
    git(
        root,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            worktree.to_str().unwrap(),
            &first,
        ],
    );
    assert!(worktree.join(".git").is_file());
    let state = git_state(&worktree).unwrap();
    assert_eq!(state.commit, first);
    assert_eq!(state.dirty, Some(false));
    // Each work tree has its own index: an edit in one leaves the other clean.
    std::fs::write(worktree.join("a.txt"), "edited\n").unwrap();
    assert_eq!(git_state(&worktree).unwrap().dirty, Some(true));
    assert_eq!(git_state(root).unwrap().dirty, Some(false));

    // As a submodule is laid out: a `.git` file naming the repository.
    let separate = tempfile::tempdir().unwrap();
    let clone = separate.path().join("clone");
    std::fs::create_dir(separate.path().join("modules")).unwrap();
    let git_dir = separate.path().join("modules/clone");
    git(
        separate.path(),
        &[
            "clone",
            "-q",
            "--separate-git-dir",
            git_dir.to_str().unwrap(),
            root.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    assert!(clone.join(".git").is_file());
    let state = git_state(&clone).unwrap();
    assert_eq!(state.commit, head(root));
    assert_eq!(state.dirty, Some(false));
}

#[test]
fn the_commit_is_known_before_the_dirty_flag_is_asked_for() {
    let dir = repository();
    let probe = GitProbe::start(dir.path()).unwrap();
    assert_eq!(probe.commit(), head(dir.path()));
    // Dropped without a look at the work tree, as a run that records
    // nothing drops it.
    drop(probe);
    let probe = GitProbe::start(dir.path()).unwrap();
    probe.check_dirty();
    probe.check_dirty();
    std::fs::write(dir.path().join("a.txt"), "edited after the check began\n").unwrap();
    let state = probe.finish();
    assert_eq!(state.commit, head(dir.path()));
    assert!(state.dirty.is_some());
    // Asked again, the same answer without another look.
    assert_eq!(probe.finish(), state);
    // Never started: finish works it out.
    let unstarted = GitProbe::start(dir.path()).unwrap();
    assert_eq!(unstarted.finish().dirty, Some(true));
}

#[test]
fn sha256_and_reftable_repositories_name_their_commit() {
    for format in [["--object-format=sha256"], ["--ref-format=reftable"]] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut init = vec!["init", "-q", "-b", "main"];
        init.extend(format);
        git(root, &init);
        std::fs::write(root.join("a.txt"), "a\n").unwrap();
        git(root, &["add", "a.txt"]);
        git(root, &["commit", "-q", "-m", "one"]);
        let state = git_state(root).unwrap();
        assert_eq!(state.commit, head(root), "{format:?}");
        assert_eq!(state.dirty, Some(false), "{format:?}");
    }
}

#[test]
fn a_head_no_git_wrote_gives_no_commit_rather_than_a_wrong_one() {
    let dir = repository();
    let root = dir.path();
    let head_file = root.join(".git/HEAD");
    let commit = head(root);
    let hostile: [&[u8]; 6] = [
        b"ref: refs/heads/../../../../etc/passwd\n",
        b"ref: /etc/hostname\n",
        b"0123456789abcdef\n",
        b"ZZZZ56789abcdef0123456789abcdef012345678\n",
        b"\xff\xfe not text\n",
        b"",
    ];
    for contents in hostile {
        std::fs::write(&head_file, contents).unwrap();
        assert_eq!(GitProbe::start(root).map(|p| p.commit().to_string()), None);
    }
    // A HEAD far longer than any ref is not read to its end.
    let mut long = commit.into_bytes();
    long.resize(1 << 20, b'a');
    std::fs::write(&head_file, &long).unwrap();
    assert_eq!(GitProbe::start(root).map(|p| p.commit().to_string()), None);
    // A symbolic ref chain that loops ends.
    std::fs::write(&head_file, "ref: refs/heads/a\n").unwrap();
    std::fs::write(root.join(".git/refs/heads/a"), "ref: refs/heads/b\n").unwrap();
    std::fs::write(root.join(".git/refs/heads/b"), "ref: refs/heads/a\n").unwrap();
    assert_eq!(GitProbe::start(root).map(|p| p.commit().to_string()), None);
}
