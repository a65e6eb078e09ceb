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

use crate::hostile_git::mkfifo;
use crate::untrusted_files::pipe;

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

/// `file` as a FIFO, then as a link to `/dev/zero`: each refused as
/// `assert_refused` says, with `fifo` and `device` in its words.
fn assert_fifo_and_device_refused(file: &str, fifo: &str, device: &str) {
    let project = project();
    mkfifo(&project.path(file));
    assert_refused(&project, file, fifo);
    link_to_dev_zero(&project.path(file));
    assert_refused(&project, file, device);
}

#[test]
fn a_pipeline_file_that_is_a_fifo_or_a_link_to_a_device_is_refused_without_waiting() {
    assert_fifo_and_device_refused("pipe.yaml", "not a regular file", "not a regular file");
}

#[test]
fn a_params_file_that_is_a_fifo_or_a_link_to_a_device_is_refused_without_waiting() {
    assert_fifo_and_device_refused("params.yaml", "a FIFO", "a device");
}

#[test]
fn a_settings_file_that_is_a_fifo_or_a_link_to_a_device_is_refused_without_waiting() {
    assert_fifo_and_device_refused("pipe.config.yaml", "a FIFO", "a device");
}
