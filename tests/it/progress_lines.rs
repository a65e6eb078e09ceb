//! Progress where no bar can be drawn: a long stage writes its progress to
//! its log while it runs (so `tail -f` shows it moving), and a run whose
//! stderr is not a terminal (a CI log) prints it as lines.

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::time::{Duration, Instant};

use pipe_test_support::http::{Reply, Server};
use pipe_test_support::TestProject;
use serde_json::Value;

/// A download that stops halfway and stays there: its stage is still
/// running while the test looks at the log and at pipe's stderr.
#[test]
fn a_running_stage_writes_its_progress_to_its_log_and_to_a_ci_log() {
    const SIZE: usize = 2 * 1024 * 1024;
    let server = Server::start(|_, _| {
        Reply::whole(&vec![b'x'; SIZE])
            .cut_after(SIZE / 2)
            .stall(Duration::from_secs(300))
    });
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        &format!(
            "stages:\n  get:\n    uses: data/download@1\n    with: {{ url: \"{}\", sha256: \"{}\", retries: 0 }}\n",
            server.url("/big.bin"),
            "0".repeat(64)
        ),
    );
    let mut child = project
        .std_command()
        .args(["run", "--json"])
        .env("PIPE_PROGRESS_INTERVAL", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut events = BufReader::new(child.stdout.take().unwrap()).lines();
    let log = loop {
        let line = events
            .next()
            .expect("pipe ended before the stage ran")
            .unwrap();
        let event: Value = serde_json::from_str(&line).unwrap();
        if event["event"] == "stage_running" {
            break project.root().join(event["log"].as_str().unwrap());
        }
    };
    // The half is in the log while the stage still waits for the rest.
    let deadline = Instant::now() + Duration::from_secs(120);
    let written = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("of 2 MiB") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no progress in the log of a running stage: {text:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        child.try_wait().unwrap().is_none(),
        "the stage ended: {written}"
    );
    let line = written
        .lines()
        .find(|line| line.contains("of 2 MiB"))
        .unwrap();
    assert!(
        line.starts_with("download  ") && line.contains(" of 2 MiB ("),
        "{line}"
    );

    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(!status.success());
    let stderr = stderr_reader.join().unwrap();
    assert!(
        stderr
            .lines()
            .any(|line| line.starts_with("  get: ") && line.contains("of 2 MiB (")),
        "no progress line on a stderr that is not a terminal:\n{stderr}"
    );
}

/// A `run:` stage's own lines reach the user while it runs: in a CI log as
/// `  get: downloading chunk 2/3`, one per progress interval, and as
/// `stage_output` events under `--json`; the log keeps them all.
#[test]
fn a_command_stages_own_lines_reach_a_ci_log_and_the_json_events_while_it_runs() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  get:\n    run: for i in 1 2 3; do echo \"downloading chunk $i/3\"; sleep 0.7; done; echo done > out.txt\n    outs: [out.txt]\n",
    );
    let output = project
        .std_command()
        .env("PIPE_PROGRESS_INTERVAL", "0")
        .args(["run"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let shown: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("  get: downloading chunk "))
        .collect();
    assert!(shown.len() >= 2, "{stderr}");

    project.write(
        "pipe.yaml",
        "stages:\n  get:\n    run: for i in 1 2 3; do echo \"fetching part $i\"; sleep 0.7; done; echo again > out.txt\n    outs: [out.txt]\n",
    );
    let json = project.pipe(&["run", "--json"]);
    assert!(json.status.success());
    let lines: Vec<String> = String::from_utf8_lossy(&json.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["event"] == "stage_output" && event["stage"] == "get")
        .map(|event| event["line"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(lines.len() >= 2, "{lines:?}");
    assert!(
        lines.iter().all(|line| line.starts_with("fetching part ")),
        "{lines:?}"
    );

    // Off a terminal and within the default interval (30 s), nothing but
    // the stage's own line.
    project.write(
        "pipe.yaml",
        "stages:\n  get:\n    run: echo quick; echo once > out.txt\n    outs: [out.txt]\n",
    );
    let quiet = project.pipe(&["run"]);
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("get: quick"));
}
