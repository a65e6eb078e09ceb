//! What a clone can do to `pipe run` by what it holds where pipe reads a
//! project's own YAML files (the pipeline file, a params file a stage
//! reads, `pipe.config.yaml`): a FIFO (git checks one out as nothing, but
//! a shared folder or an archive holds one) or a link to a device (git
//! checks a link out as a link). Each is refused at once, naming the
//! file, as `.git`'s files and `.gitignore` are (`hostile_git`): never a
//! wait for a writer, never memory without end. Each `pipe run` runs under
//! the memory limit and the watchdog of `untrusted_files`, so a
//! regression fails the test instead of hanging it.

use std::path::Path;

use pipe_test_support::TestProject;

use crate::untrusted_files::pipe;

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
}

fn link_to_dev_zero(path: &Path) {
    let _ = std::fs::remove_file(path);
    std::os::unix::fs::symlink("/dev/zero", path).unwrap();
}

/// A project whose one stage reads a param of `params.yaml`.
fn project() -> TestProject {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  make:\n    run: echo made > made.txt\n    params: [lr]\n    outs: [made.txt]\n",
    );
    project.write("params.yaml", "lr: 0.1\n");
    project
}

/// `pipe run` refuses the project at once, naming `file` and saying what
/// it is, in bounded memory; nothing runs.
fn assert_refused(project: &TestProject, file: &str, what: &str) {
    let finished = pipe(project, &[], &["run"]);
    let stderr = finished.stderr();
    assert_ne!(finished.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(file) && stderr.contains(what),
        "{file} {what}: {stderr}"
    );
    assert!(!project.exists("made.txt"), "{stderr}");
    assert!(finished.peak_rss < 1 << 30, "{} bytes", finished.peak_rss);
}

#[test]
fn a_pipeline_file_that_is_a_fifo_or_a_link_to_a_device_is_refused_without_waiting() {
    let project = project();
    mkfifo(&project.path("pipe.yaml"));
    assert_refused(&project, "pipe.yaml", "not a regular file");
    link_to_dev_zero(&project.path("pipe.yaml"));
    assert_refused(&project, "pipe.yaml", "not a regular file");
}

#[test]
fn a_params_file_that_is_a_fifo_or_a_link_to_a_device_is_refused_without_waiting() {
    let project = project();
    mkfifo(&project.path("params.yaml"));
    assert_refused(&project, "params.yaml", "a FIFO");
    link_to_dev_zero(&project.path("params.yaml"));
    assert_refused(&project, "params.yaml", "a device");
}

#[test]
fn a_settings_file_that_is_a_fifo_or_a_link_to_a_device_is_refused_without_waiting() {
    let project = project();
    mkfifo(&project.path("pipe.config.yaml"));
    assert_refused(&project, "pipe.config.yaml", "a FIFO");
    link_to_dev_zero(&project.path("pipe.config.yaml"));
    assert_refused(&project, "pipe.config.yaml", "a device");
}
