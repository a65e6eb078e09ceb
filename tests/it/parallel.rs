//! Scheduling: parallelism, interruption, crashes and concurrent runs.

use std::time::{Duration, Instant};

use pipe_test_support::{RunResult, TestProject};

fn wait_for(mut condition: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn interval(text: &str) -> (f64, f64) {
    let mut parts = text
        .split_whitespace()
        .map(|part| part.parse::<f64>().expect("timestamp"));
    (parts.next().expect("start"), parts.next().expect("end"))
}

#[test]
fn independent_stages_overlap_in_time() {
    let project = TestProject::new();
    let stage = |name: &str| {
        format!("  {name}:\n    run: start=$(date +%s.%N); sleep 0.5; echo \"$start $(date +%s.%N)\" > {name}.txt\n    outs: [{name}.txt]\n")
    };
    project.write(
        "pipe.yaml",
        &format!("stages:\n{}{}", stage("left"), stage("right")),
    );
    project.run_ok(&["-j", "2"]);
    let (left_start, left_end) = interval(&project.read("left.txt"));
    let (right_start, right_end) = interval(&project.read("right.txt"));
    assert!(
        left_start < right_end && right_start < left_end,
        "the two stages ran one after the other"
    );

    // With one slot they must not overlap.
    let serial = project.run_ok(&["-j", "1", "--force-all"]);
    assert_eq!(serial.ran().len(), 2);
    let (left_start, left_end) = interval(&project.read("left.txt"));
    let (right_start, right_end) = interval(&project.read("right.txt"));
    assert!(
        left_end <= right_start || right_end <= left_start,
        "-j 1 ran two stages at once"
    );
}

#[test]
fn gpus_are_handed_out_by_index() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  a:\n    run: echo \"$CUDA_VISIBLE_DEVICES\" > a.txt\n    resources: { gpus: 2 }\n    outs: [a.txt]\n  b:\n    run: echo \"$CUDA_VISIBLE_DEVICES\" > b.txt\n    resources: { gpus: 1 }\n    outs: [b.txt]\n",
    );
    let output = project
        .command()
        .args(["run", "--json", "-j", "1"])
        .env("PIPE_GPUS", "0,1,2")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(project.read("a.txt").trim().split(',').count(), 2);
    assert_eq!(project.read("b.txt").trim().split(',').count(), 1);

    let too_many = project
        .command()
        .args(["run", "--force-all"])
        .env("PIPE_GPUS", "0")
        .output()
        .unwrap();
    assert_eq!(too_many.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&too_many.stderr).contains("needs 2 GPU(s) but 1 are available")
    );
}

const SLOW: &str = r#"
stages:
  quick:
    run: echo done > quick.txt
    outs: [quick.txt]
  slow:
    run: echo $$ > slow.pid; sleep 30; echo late > slow.txt
    deps: [quick.txt]
    outs: [slow.txt]
"#;

fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn kill_dash_nine_then_rerun_resumes_from_finished_stages() {
    let project = TestProject::new();
    project.write("pipe.yaml", SLOW);
    let mut child = project
        .std_command()
        .args(["run"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        || project.exists("slow.pid") && !project.read("slow.pid").trim().is_empty(),
        "the slow stage to start",
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let orphan: i32 = project.read("slow.pid").trim().parse().unwrap();
    // SAFETY: kill the orphaned stage's process group as a user would.
    unsafe { libc::kill(-orphan, libc::SIGKILL) };

    project.write("pipe.yaml", &SLOW.replace("sleep 30", "sleep 0"));
    let rerun = project.run_ok(&[]);
    assert_eq!(
        rerun.status("quick"),
        "fresh",
        "the finished stage is not rerun"
    );
    assert_eq!(rerun.status("slow"), "ran");
    assert_eq!(project.pipe(&["cache", "verify"]).status.code(), Some(0));
    let runs = String::from_utf8_lossy(&project.pipe(&["runs"]).stdout).to_string();
    assert!(
        runs.contains("interrupted"),
        "the killed run is shown as interrupted:\n{runs}"
    );
}

#[test]
fn ctrl_c_stops_running_stages_and_caches_nothing_of_them() {
    let project = TestProject::new();
    project.write("pipe.yaml", SLOW);
    let child = project
        .std_command()
        .args(["run", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(
        || project.exists("slow.pid") && !project.read("slow.pid").trim().is_empty(),
        "the slow stage to start",
    );
    let stage_pid: i32 = project.read("slow.pid").trim().parse().unwrap();
    // SAFETY: SIGINT to the pipe process, as Ctrl-C would send.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{:?}\nstderr:\n{}\nstdout:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
    wait_for(|| !process_alive(stage_pid), "the stage's processes to end");
    let result = RunResult::from_output(output);
    assert_eq!(result.status("slow"), "interrupted");

    project.write("pipe.yaml", &SLOW.replace("sleep 30", "sleep 0"));
    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.status("quick"), "fresh");
    assert_eq!(rerun.status("slow"), "ran");
}

/// Ctrl-C is the user's choice, not the stage's failure: said as an
/// interruption on the terminal, in the record and in `why`, with no log
/// tail to read.
#[test]
fn ctrl_c_is_an_interruption_everywhere_never_a_failure() {
    let project = TestProject::new();
    project.write("pipe.yaml", SLOW);
    let child = project
        .std_command()
        .args(["run"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(
        || project.exists("slow.pid") && !project.read("slow.pid").trim().is_empty(),
        "the slow stage to start",
    );
    // SAFETY: SIGINT to the pipe process, as Ctrl-C would send.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("■ interrupted slow"), "{stderr}");
    assert!(
        stderr.contains("run #1 interrupted: 1 ran, 1 interrupted"),
        "{stderr}"
    );
    assert!(!stderr.contains("failed"), "{stderr}");
    assert!(!stderr.contains("full log"), "no log tail: {stderr}");

    let record: serde_json::Value =
        serde_json::from_slice(&project.pipe(&["show", "1", "--json"]).stdout).unwrap();
    let slow = record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|stage| stage["stage"] == "slow")
        .unwrap();
    assert_eq!(slow["status"], "interrupted", "{record}");
    let why = String::from_utf8_lossy(&project.pipe(&["why", "slow"]).stdout).to_string();
    assert!(why.contains("it was interrupted in run #1"), "{why}");
}

#[test]
fn two_concurrent_runs_take_turns_and_corrupt_nothing() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  work:\n    run: echo started >> calls.log; sleep 1; seq 1 1000 > numbers.txt\n    outs: [numbers.txt]\n",
    );
    let spawn = || {
        project
            .std_command()
            .args(["run", "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = spawn();
    let second = spawn();
    let first = RunResult::from_output(first.wait_with_output().unwrap());
    let second = RunResult::from_output(second.wait_with_output().unwrap());
    assert_eq!(
        (first.code, second.code),
        (0, 0),
        "{}\n{}",
        first.stderr,
        second.stderr
    );
    let mut statuses = vec![
        first.status("work").to_string(),
        second.status("work").to_string(),
    ];
    statuses.sort();
    assert_eq!(
        statuses,
        ["fresh", "ran"],
        "one ran, the other found its result"
    );
    assert_eq!(project.read("calls.log"), "started\n");
    assert_eq!(project.pipe(&["cache", "verify"]).status.code(), Some(0));
}
