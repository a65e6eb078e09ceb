//! What a hostile `.git` can do to `pipe run` by what it leaves where pipe
//! reads the commit (HEAD, a ref, `packed-refs`, the `.git` file of a
//! linked work tree): at worst the run's commit is unknown. A FIFO is
//! refused without waiting for a writer, a link to a device is refused,
//! and no file is read past its limit. Each `pipe run` runs under the
//! memory limit and the watchdog of `untrusted_files`, so a regression
//! fails the test instead of hanging it.

use std::path::Path;

use pipe_test_support::{git, TestProject};

use crate::untrusted_files::{pipe, Finished};

pub(crate) fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
}

/// A project in a git repository with one commit.
fn repository() -> TestProject {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  make:\n    run: echo made > made.txt\n    outs: [made.txt]\n",
    );
    project.write(".gitignore", ".pipe/\nmade.txt\n");
    git(project.root(), &["init", "-q"]);
    git(project.root(), &["add", "-A"]);
    git(project.root(), &["commit", "-qm", "first"]);
    project
}

/// `pipe run` finishes, runs the stage and records no commit.
fn assert_runs_with_the_commit_unknown(project: &TestProject) -> Finished {
    let finished = pipe(project, &[], &["run", "--json"]);
    let run = finished.run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.status("make"), "ran", "{}", run.stderr);
    let record = project.show_settled("last");
    assert!(record["git_commit"].is_null(), "{record}");
    finished
}

#[test]
fn a_ref_that_is_a_fifo_leaves_the_commit_unknown_without_waiting() {
    let project = repository();
    let branch = git(project.root(), &["symbolic-ref", "HEAD"]);
    mkfifo(&project.path(&format!(".git/{branch}")));
    assert_runs_with_the_commit_unknown(&project);
}

#[test]
fn a_head_that_is_a_fifo_leaves_the_commit_unknown_without_waiting() {
    let project = repository();
    mkfifo(&project.path(".git/HEAD"));
    assert_runs_with_the_commit_unknown(&project);
}

#[test]
fn a_git_file_naming_a_directory_whose_head_is_a_fifo_never_blocks() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  make:\n    run: echo made > made.txt\n    outs: [made.txt]\n",
    );
    std::fs::create_dir_all(project.path("elsewhere")).unwrap();
    mkfifo(&project.path("elsewhere/HEAD"));
    project.write(".git", "gitdir: elsewhere\n");
    assert_runs_with_the_commit_unknown(&project);
}

#[test]
fn packed_refs_linked_to_dev_zero_are_refused_not_read_without_end() {
    let project = repository();
    git(project.root(), &["pack-refs", "--all", "--prune"]);
    let packed = project.path(".git/packed-refs");
    assert!(packed.is_file());
    std::fs::remove_file(&packed).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &packed).unwrap();
    let finished = assert_runs_with_the_commit_unknown(&project);
    assert!(finished.peak_rss < 1 << 30, "{} bytes", finished.peak_rss);
}

#[test]
fn a_gitignore_linked_to_dev_zero_costs_a_warning_not_memory_without_end() {
    // git checks a link out as a link: a clone can hold this.
    let project = repository();
    std::fs::remove_file(project.path(".gitignore")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", project.path(".gitignore")).unwrap();
    let finished = pipe(&project, &[], &["run", "--json"]);
    let run = finished.run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.status("make"), "ran", "{}", run.stderr);
    assert!(
        run.stderr
            .contains("cannot keep the stages' outputs out of git"),
        "{}",
        run.stderr
    );
    assert!(finished.peak_rss < 1 << 30, "{} bytes", finished.peak_rss);
}
