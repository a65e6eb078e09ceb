//! A reader that goes away (`pipe runs | head -1`) ends pipe quietly with
//! exit code 141, as a shell reports for `git log | head`; a stdout that
//! cannot be written for another reason (a full disk, or no stdout at all:
//! `pipe runs >&-`) is an error with exit code 3.
//! Never a panic.

use std::process::{Output, Stdio};

use pipe_test_support::TestProject;

/// Two recorded runs, so that every report has something to print.
fn project_with_history() -> TestProject {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { n: 3 }\nstages:\n  count:\n    run: seq 1 ${params.n} > numbers.txt\n    outs: [numbers.txt]\n",
    );
    project.run_ok(&[]);
    project.run_ok(&["-S", "n=5"]);
    project
}

/// Runs pipe with a stdout whose reader has already gone.
fn with_reader_gone(project: &TestProject, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    project
        .std_command()
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run pipe")
}

const DATA_COMMANDS: &[&[&str]] = &[
    &["runs"],
    &["runs", "--json"],
    &["show"],
    &["show", "--json"],
    &["diff"],
    &["diff", "--json"],
    &["diff", "--md"],
    &["dag"],
    &["dag", "--format", "dot"],
    &["status"],
    &["status", "--json"],
    &["why", "count"],
    &["cache", "verify", "--json"],
    &["completions", "bash"],
];

#[test]
fn every_data_command_ends_quietly_with_141_when_its_reader_is_gone() {
    let project = project_with_history();
    for args in DATA_COMMANDS {
        let output = with_reader_gone(&project, args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(141),
            "pipe {}: {:?}\n{stderr}",
            args.join(" "),
            output.status
        );
        assert!(
            stderr.is_empty(),
            "pipe {} says nothing: {stderr}",
            args.join(" ")
        );
    }
}

#[test]
fn a_run_whose_json_reader_is_gone_stops_its_stages_and_is_recorded_interrupted() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  slow:\n    run: sleep 20; echo done > slow.txt\n    outs: [slow.txt]\n",
    );
    let output = with_reader_gone(&project, &["run", "--json"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!project.exists("slow.txt"));
    let runs = project.pipe(&["runs", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&runs.stdout).expect("runs json");
    assert_eq!(runs[0]["status"], "interrupted", "{runs}");
}

#[test]
fn a_stdout_that_cannot_be_written_is_an_error_not_a_panic() {
    let project = project_with_history();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let output = project
        .std_command()
        .args(["runs"])
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .expect("run pipe");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("error: cannot write to stdout: No space left on device"),
        "{stderr}"
    );
}

/// Runs pipe with no stdout at all, as `pipe runs >&-` does.
fn with_stdout_closed(project: &TestProject, args: &[&str]) -> Output {
    use std::os::unix::process::CommandExt;
    let mut command = project.std_command();
    command.args(args).stderr(Stdio::piped());
    // SAFETY: close(2) is async-signal-safe; the child closes its own
    // inherited descriptor 1 just before exec.
    unsafe {
        command.pre_exec(|| {
            libc::close(libc::STDOUT_FILENO);
            Ok(())
        });
    }
    command.output().expect("run pipe")
}

#[test]
fn every_data_command_fails_with_3_when_it_has_no_stdout() {
    let project = project_with_history();
    let also: &[&[&str]] = &[&["compare"], &["--version"], &["runs", "--help"]];
    for args in DATA_COMMANDS.iter().chain(also) {
        let output = with_stdout_closed(&project, args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(3),
            "pipe {}: {:?}\n{stderr}",
            args.join(" "),
            output.status
        );
        assert!(
            stderr.contains("error: cannot write to stdout: Bad file descriptor"),
            "pipe {}: {stderr}",
            args.join(" ")
        );
    }
    // A command that writes nothing on stdout has nothing to lose.
    let output = with_stdout_closed(&project, &["validate"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
