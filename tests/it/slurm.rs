//! The Slurm executor through the real binary against a real single-node
//! Slurm (slurmctld, slurmd and munged on 127.0.0.1, started by
//! scripts/slurm.sh): a chained pipeline with a built-in worker gives the
//! bytes a local run gives and a rerun submits nothing; a failing job's
//! dependents never start; time limits, `scancel`, Ctrl-C and `kill -9` of
//! pipe; a request no node can meet is refused before anything is
//! submitted; a matrix goes out as one array.

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use pipe_test_support::slurm::{self, Job};
use pipe_test_support::{RunResult, TestProject};
use serde_json::Value;

fn rows(count: usize) -> String {
    (0..count)
        .map(|id| format!("{{\"text\": \"row {id}\", \"label\": {}}}\n", id % 2))
        .collect()
}

/// Three command stages and a built-in worker, chained.
const CHAINED: &str = r#"params: { seed: 3 }
stages:
  make:
    run: mkdir -p out && cp rows.src out/rows.jsonl && hostname -s > out/made-on.txt
    deps: [rows.src]
    outs: { rows: out/rows.jsonl, made: out/made-on.txt }
  split:
    uses: data/split@1
    with:
      dataset: ${stages.make.outs.rows}
      train: 12
      val: 4
      test: 4
  count:
    run: wc -l < .pipe/out/pipe/split/dataset/train.jsonl > count.txt && echo "$PIPE_STAGE $GREETING" > env.txt
    deps: [.pipe/out/pipe/split/dataset]
    env: { GREETING: "it's \"quoted\" $HOME" }
    outs: [count.txt, env.txt]
  local_summary:
    local: true
    run: cat count.txt > summary.txt
    deps: [count.txt]
    outs: [summary.txt]
"#;

fn on_slurm(project: &TestProject, args: &[&str]) -> RunResult {
    let conf = slurm::conf().to_string_lossy().into_owned();
    let mut all = vec!["--executor", "slurm"];
    all.extend_from_slice(args);
    project.run_with_env(&[("SLURM_CONF".to_string(), conf)], &all)
}

fn pipe_on_slurm(project: &TestProject) -> std::process::Command {
    let mut command = project.std_command();
    command.env("SLURM_CONF", slurm::conf());
    command
}

fn show(project: &TestProject, run: &str) -> Value {
    let output = pipe_on_slurm(project)
        .args(["show", run, "--json"])
        .output()
        .expect("pipe show");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("show --json")
}

fn show_with(project: &TestProject, conf: &Path) -> Value {
    let output = project
        .std_command()
        .env("SLURM_CONF", conf)
        .args(["show", "last", "--json"])
        .output()
        .expect("pipe show");
    serde_json::from_slice(&output.stdout).expect("show --json")
}

fn stage_record<'a>(run: &'a Value, stage: &str) -> &'a Value {
    run["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|record| record["stage"] == stage))
        .unwrap_or_else(|| panic!("no record of `{stage}` in {run:#}"))
}

fn detail<'a>(result: &'a RunResult, stage: &str) -> &'a str {
    result
        .events
        .iter()
        .find(|event| event["event"] == "stage_finished" && event["stage"] == stage)
        .and_then(|event| event["detail"].as_str())
        .unwrap_or_default()
}

#[test]
fn a_chained_pipeline_runs_on_slurm_as_it_runs_here_and_a_rerun_submits_nothing() {
    let local = TestProject::new();
    let cluster = TestProject::new();
    for project in [&local, &cluster] {
        project.write("pipe.yaml", CHAINED);
        project.write("rows.src", &rows(20));
    }
    local.run_ok(&[]);
    let first = on_slurm(&cluster, &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(first.ran().len(), 4, "{:?}", first.stages);
    for file in [
        "out/rows.jsonl",
        ".pipe/out/pipe/split/dataset/train.jsonl",
        ".pipe/out/pipe/split/dataset/val.jsonl",
        ".pipe/out/pipe/split/dataset/test.jsonl",
        "count.txt",
        "env.txt",
        "summary.txt",
    ] {
        assert_eq!(local.read(file), cluster.read(file), "{file} differs");
    }
    assert_eq!(cluster.read("env.txt"), "count it's \"quoted\" $HOME\n");

    // Every stage but the local one went out as a job, recorded with its node.
    let node = cluster.read("out/made-on.txt").trim().to_string();
    let record = show(&cluster, "last");
    for stage in ["make", "split", "count"] {
        let stage = stage_record(&record, stage);
        assert!(
            stage["job"]
                .as_str()
                .is_some_and(|id| id.parse::<u64>().is_ok()),
            "{stage:#}"
        );
        assert_eq!(stage["node"].as_str(), Some(node.as_str()), "{stage:#}");
    }
    assert_eq!(stage_record(&record, "local_summary").get("job"), None);
    let jobs = slurm::jobs_of(cluster.root());
    assert_eq!(jobs.len(), 3, "{jobs:#?}");
    assert!(jobs.iter().all(|job| job.state == "COMPLETED"), "{jobs:#?}");
    let text = pipe_on_slurm(&cluster)
        .args(["show", "last"])
        .output()
        .expect("pipe show");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("[Slurm job {} on {node}]", jobs[0].id)),
        "{text}"
    );

    let again = on_slurm(&cluster, &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.ran().is_empty(), "{:?}", again.stages);
    assert_eq!(
        slurm::jobs_of(cluster.root()).len(),
        3,
        "a no-op rerun submitted a job"
    );
}

#[test]
fn a_failing_job_fails_its_stage_and_its_dependents_never_start() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"stages:
  broken:
    run: echo "about to fail" && exit 3
    outs: [never.txt]
  after:
    run: touch after.txt
    deps: [never.txt]
    outs: [after.txt]
  independent:
    run: echo fine > fine.txt
    outs: [fine.txt]
"#,
    );
    let result = on_slurm(&project, &[]);
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert_eq!(result.status("broken"), "failed");
    assert_eq!(result.status("after"), "skipped");
    assert_eq!(result.status("independent"), "ran");
    assert!(
        detail(&result, "broken").contains("exited with code 3"),
        "{}",
        detail(&result, "broken")
    );
    assert!(
        result.stderr.contains("about to fail"),
        "the log's tail is shown:\n{}",
        result.stderr
    );
    // What ran, as it ran, like a local stage's.
    let finished = result
        .events
        .iter()
        .find(|event| event["event"] == "stage_finished" && event["stage"] == "broken")
        .expect("the failed stage's event");
    assert_eq!(finished["command"], r#"echo "about to fail" && exit 3"#);
    let jobs = slurm::jobs_of(project.root());
    assert_eq!(jobs.len(), 2, "`after` must never be submitted: {jobs:#?}");
    assert!(jobs.iter().any(|job| job.state == "FAILED"), "{jobs:#?}");
    assert!(!project.exists("after.txt"));
}

#[test]
fn a_job_past_its_time_limit_is_reported_as_timed_out() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"stages:
  slow:
    run: sleep 600 && touch slow.txt
    outs: [slow.txt]
    resources: { time: 1m }
"#,
    );
    let result = on_slurm(&project, &[]);
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert_eq!(result.status("slow"), "failed");
    let detail = detail(&result, "slow");
    assert!(
        detail.contains("timed out") && detail.contains("resources.time"),
        "{detail}"
    );
    assert!(detail.contains("0-00:01:00"), "{detail}");
    let jobs = slurm::jobs_of(project.root());
    assert_eq!(
        jobs.iter()
            .map(|job| job.state.as_str())
            .collect::<Vec<_>>(),
        ["TIMEOUT"]
    );
    assert!(!project.exists("slow.txt"));
}

/// Starts `pipe run --executor slurm --json` in the background.
fn spawn_run(project: &TestProject) -> Child {
    pipe_on_slurm(project)
        .args(["run", "--executor", "slurm", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pipe")
}

fn finish(child: Child) -> (RunResult, Output) {
    let output = child.wait_with_output().expect("wait for pipe");
    (RunResult::from_output(output.clone()), output)
}

fn running(jobs: &[Job], count: usize) -> bool {
    jobs.iter().filter(|job| job.state == "RUNNING").count() >= count
}

#[test]
fn a_job_cancelled_with_scancel_is_reported_as_cancelled() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"stages:
  victim:
    run: sleep 300 && touch victim.txt
    outs: [victim.txt]
  after:
    run: touch after.txt
    deps: [victim.txt]
    outs: [after.txt]
"#,
    );
    let child = spawn_run(&project);
    let jobs = slurm::wait_for_jobs(
        project.root(),
        Duration::from_secs(60),
        "the job to run",
        |jobs| running(jobs, 1),
    );
    let status = slurm::command("scancel")
        .arg(&jobs[0].id)
        .status()
        .expect("scancel");
    assert!(status.success());
    let (result, _) = finish(child);
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert_eq!(result.status("victim"), "failed");
    assert_eq!(result.status("after"), "skipped");
    let detail = detail(&result, "victim");
    assert!(
        detail.contains(&format!("Slurm job {}", jobs[0].id)) && detail.contains("was cancelled"),
        "{detail}"
    );
}

fn sleepers(count: usize) -> String {
    let mut text = String::from("stages:\n");
    for index in 0..count {
        text.push_str(&format!(
            "  sleep{index}:\n    run: sleep 300 && touch s{index}.txt\n    outs: [s{index}.txt]\n"
        ));
    }
    text
}

#[test]
fn ctrl_c_cancels_the_runs_queued_and_running_jobs() {
    let project = TestProject::new();
    // The node has 8 CPUs: 8 run, 4 wait in the queue.
    project.write("pipe.yaml", &sleepers(12));
    let child = spawn_run(&project);
    slurm::wait_for_jobs(
        project.root(),
        Duration::from_secs(60),
        "12 jobs, some running",
        |jobs| jobs.len() == 12 && running(jobs, 1),
    );
    let pid = child.id() as libc::pid_t;
    // SAFETY: signals the pipe this test started.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let (result, _) = finish(child);
    assert_eq!(result.code, 130, "{}", result.stderr);
    let jobs = slurm::wait_for_jobs(
        project.root(),
        Duration::from_secs(30),
        "every job cancelled",
        |jobs| jobs.iter().all(|job| job.state == "CANCELLED"),
    );
    assert_eq!(jobs.len(), 12);
    let record = show(&project, "last");
    assert_eq!(record["status"], "interrupted", "{record:#}");
}

#[test]
fn a_killed_pipe_leaves_no_job_behind() {
    let project = TestProject::new();
    project.write("pipe.yaml", &sleepers(3));
    let mut child = spawn_run(&project);
    slurm::wait_for_jobs(
        project.root(),
        Duration::from_secs(60),
        "3 running jobs",
        |jobs| jobs.len() == 3 && running(jobs, 3),
    );
    child.kill().expect("kill -9 pipe");
    let _ = child.wait();
    slurm::wait_for_jobs(
        project.root(),
        Duration::from_secs(30),
        "the jobs of a killed pipe cancelled",
        |jobs| jobs.iter().all(|job| job.state == "CANCELLED"),
    );
}

#[test]
fn a_request_no_node_can_meet_is_refused_before_anything_is_submitted() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  fine:\n    run: touch fine.txt\n    outs: [fine.txt]\n  huge:\n    run: touch huge.txt\n    outs: [huge.txt]\n    resources: { cpus: 64, mem: 4T }\n",
    );
    let output = pipe_on_slurm(&project)
        .args(["run", "--executor", "slurm"])
        .output()
        .expect("run pipe");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pipe.yaml:5:3"), "says where:\n{stderr}");
    assert!(
        stderr.contains(
            "stage `huge` asks for 64 CPUs, but the largest node of the default partition has 8"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("MiB of memory"), "{stderr}");
    assert!(stderr.contains("lower the stage's `resources`"), "{stderr}");
    assert!(
        slurm::jobs_of(project.root()).is_empty(),
        "nothing may be submitted"
    );
    assert!(!project.exists("fine.txt"));
}

/// A stage's recorded time is its job's, not the queue's: two stages that
/// each take the whole node run one after the other, so one of them waits
/// 3 s in the queue, and what the two record adds up to the run's time,
/// not to 3 s more (which would also make a busy cluster look like a slow
/// stage in `pipe compare`).
#[test]
fn the_time_a_job_waits_in_the_queue_is_not_its_stages_time() {
    let project = TestProject::new();
    let stage = |name: &str| {
        format!(
            "  {name}:\n    run: sleep 3 && touch {name}.txt\n    outs: [{name}.txt]\n    resources: {{ cpus: 8 }}\n"
        )
    };
    project.write(
        "pipe.yaml",
        &format!("stages:\n{}{}", stage("first"), stage("second")),
    );
    let result = on_slurm(&project, &[]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    let run = show(&project, "last");
    let wall = run["ended_ms"].as_u64().unwrap() - run["started_ms"].as_u64().unwrap();
    let recorded: Vec<u64> = ["first", "second"]
        .iter()
        .map(|name| stage_record(&run, name)["duration_ms"].as_u64().unwrap())
        .collect();
    // Each ran its 3 s on the node; one after the other, so the run took 6.
    assert!(recorded.iter().all(|&ms| ms >= 3000), "{recorded:?}");
    assert!(wall >= 6000, "{wall} ms: the jobs did not share the node");
    // Counted with the queue, the two would add up to 9 s in a 6 s run.
    let sum: u64 = recorded.iter().sum();
    assert!(
        sum < wall + 1500,
        "the stages recorded {recorded:?} ms in a run of {wall} ms"
    );
}

#[test]
fn a_matrix_goes_out_as_one_job_array() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"stages:
  square:
    matrix: { n: [2, 3, 4] }
    run: echo $(( ${matrix.n} * ${matrix.n} )) > sq-${matrix.n}.txt
    outs: ["sq-${matrix.n}.txt"]
"#,
    );
    let result = on_slurm(&project, &[]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    for (n, square) in [(2, 4), (3, 9), (4, 16)] {
        assert_eq!(project.read(&format!("sq-{n}.txt")), format!("{square}\n"));
    }
    let record = show(&project, "last");
    let ids: Vec<&str> = record["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|stage| stage["job"].as_str().expect("a job id"))
        .collect();
    let arrays: Vec<&str> = ids
        .iter()
        .map(|id| id.split('_').next().unwrap_or_default())
        .collect();
    assert!(
        ids.iter().all(|id| id.contains('_')),
        "array task ids: {ids:?}"
    );
    assert!(
        arrays.iter().all(|array| *array == arrays[0]),
        "one array: {ids:?}"
    );
}

#[test]
fn the_executor_is_checked_where_it_is_written() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "executor: { type: slurmm, partiton: gpu }\nstages:\n  a:\n    run: touch a\n    outs: [a]\n    resources: { mem: lots }\n",
    );
    let output = project.pipe(&["run"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("pipe.yaml:1:19") && stderr.contains("unknown executor `slurmm`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("pipe.yaml:1:27") && stderr.contains("did you mean `partition`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("pipe.yaml:6:23")
            && stderr.contains("`resources.mem` of stage `a` must be a size"),
        "{stderr}"
    );
}

#[test]
fn a_project_config_sends_every_pipeline_to_slurm_and_the_flag_brings_it_back() {
    let project = TestProject::new();
    project.write("pipe.config.yaml", "executor: { type: slurm, poll: 1s }\n");
    project.write(
        "pipe.yaml",
        "stages:\n  a:\n    run: hostname > a.txt\n    outs: [a.txt]\n",
    );
    let conf = slurm::conf().to_string_lossy().into_owned();
    let env = [("SLURM_CONF".to_string(), conf)];
    let result = project.run_with_env(&env, &[]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(slurm::jobs_of(project.root()).len(), 1);
    let result = project.run_with_env(&env, &["--executor", "local", "--force-all"]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(
        slurm::jobs_of(project.root()).len(),
        1,
        "--executor local submits nothing"
    );
    assert!(Path::new(&project.path("a.txt")).exists());
}

/// The pid of the process that cancels the jobs named `job_name` when
/// their pipe dies.
fn reaper_of(job_name: &str) -> Option<libc::pid_t> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: libc::pid_t = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let words: Vec<&[u8]> = cmdline.split(|&byte| byte == 0).collect();
            (words.contains(&b"pipe-reaper".as_slice()) && words.contains(&job_name.as_bytes()))
                .then_some(pid)
        })
}

#[test]
fn jobs_a_lost_pipe_left_running_are_cancelled_before_the_next_run_writes() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  slow:\n    run: if [ -e slow ]; then sleep 300; fi; touch slow.txt\n    outs: [slow.txt]\n",
    );
    project.write("slow", "");
    let mut child = spawn_run(&project);
    let jobs = slurm::wait_for_jobs(
        project.root(),
        Duration::from_secs(60),
        "the job to run",
        |jobs| running(jobs, 1),
    );
    // The head and its reaper both die, as with a lost login node.
    let reaper = reaper_of(&jobs[0].name).expect("the reaper process");
    // SAFETY: kills the reaper this test's pipe started.
    unsafe { libc::kill(reaper, libc::SIGKILL) };
    child.kill().expect("kill -9 pipe");
    let _ = child.wait();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        slurm::jobs_of(project.root())[0].state,
        "RUNNING",
        "the orphan job still runs"
    );

    std::fs::remove_file(project.path("slow")).expect("remove marker");
    let again = on_slurm(&project, &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stderr.contains("still in the queue"),
        "{}",
        again.stderr
    );
    let orphan = slurm::jobs_of(project.root())
        .into_iter()
        .find(|job| job.id == jobs[0].id)
        .expect("the orphan's record");
    assert_eq!(orphan.state, "CANCELLED");
}

/// A cluster of the test's own, which it may break.
struct PrivateCluster {
    dir: tempfile::TempDir,
}

impl PrivateCluster {
    fn start() -> PrivateCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let status = std::process::Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/slurm.sh"))
            .arg("start")
            .arg(dir.path())
            .stdout(Stdio::null())
            .status()
            .expect("scripts/slurm.sh");
        assert!(status.success());
        PrivateCluster { dir }
    }

    fn conf(&self) -> std::path::PathBuf {
        self.dir.path().join("slurm.conf")
    }

    fn kill_controller(&self) {
        let pid = std::fs::read_to_string(self.dir.path().join("slurmctld.pid")).expect("pid file");
        let pid: libc::pid_t = pid.trim().parse().expect("a pid");
        // SAFETY: the controller this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }

    fn start_controller(&self) {
        let status = std::process::Command::new("slurmctld")
            .env("SLURM_CONF", self.conf())
            .arg("-f")
            .arg(self.conf())
            .status()
            .expect("slurmctld");
        assert!(status.success());
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/slurm.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn a_controller_that_goes_away_mid_run_and_comes_back_costs_nothing_but_time() {
    let cluster = PrivateCluster::start();
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  first:\n    run: sleep 4 && echo one > one.txt\n    outs: [one.txt]\n  second:\n    run: cat one.txt > two.txt\n    deps: [one.txt]\n    outs: [two.txt]\n",
    );
    let child = project
        .std_command()
        .env("SLURM_CONF", cluster.conf())
        .args(["run", "--executor", "slurm", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pipe");
    let squeue_running = || {
        std::process::Command::new("squeue")
            .env("SLURM_CONF", cluster.conf())
            .args(["--noheader", "--states=RUNNING", "--format=%i"])
            .output()
            .is_ok_and(|output| !output.stdout.is_empty())
    };
    let waited = std::time::Instant::now();
    while !squeue_running() {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "the first job never ran"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The first job ends while nobody answers for the cluster, and the
    // second is submitted into the silence.
    cluster.kill_controller();
    std::thread::sleep(Duration::from_secs(8));
    cluster.start_controller();
    let (result, _) = finish(child);
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(result.ran(), ["first", "second"]);
    assert_eq!(project.read("two.txt"), "one\n");
    let record = show_with(&project, &cluster.conf());
    for stage in ["first", "second"] {
        assert!(
            stage_record(&record, stage)["job"].is_string(),
            "{record:#}"
        );
    }
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn a_credential_reaches_the_job_but_no_file_pipe_writes_for_it() {
    let project = TestProject::new();
    let token = "tok-3f9a1c77e2b54d0b";
    project.write(
        "pipe.yaml",
        r#"stages:
  use_it:
    run: >-
      test "$(printf %s "$TOKEN" | sha256sum | cut -c1-16)" = 17e8120db68c7027
      && echo "the job saw it" && exit 4
    env:
      TOKEN: { from_env: PIPE_TEST_TOKEN, secret: true }
      PLAIN: visible
    outs: [never.txt]
"#,
    );
    let conf = slurm::conf().to_string_lossy().into_owned();
    let result = project.run_with_env(
        &[
            ("SLURM_CONF".to_string(), conf),
            ("PIPE_TEST_TOKEN".to_string(), token.to_string()),
        ],
        &["--executor", "slurm"],
    );
    // Exit 4 after comparing the token's hash (the pipeline file must not
    // hold the token itself): the job had the token, and a failed stage
    // keeps its job files, so they can be searched.
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert!(
        detail(&result, "use_it").contains("exited with code 4"),
        "{}",
        detail(&result, "use_it")
    );
    assert!(
        result.stderr.contains("the job saw it"),
        "{}",
        result.stderr
    );
    let files = files_under(&project.path(".pipe"));
    let scripts: Vec<_> = files
        .iter()
        .filter(|path| path.extension().is_some_and(|e| e == "sh"))
        .collect();
    assert_eq!(
        scripts.len(),
        1,
        "the failed stage's script is kept: {files:?}"
    );
    assert!(std::fs::read_to_string(scripts[0])
        .expect("script")
        .contains("export PLAIN='visible'"));
    for file in files {
        let bytes = std::fs::read(&file).unwrap_or_default();
        assert!(
            !bytes
                .windows(token.len())
                .any(|window| window == token.as_bytes()),
            "{} holds the credential",
            file.display()
        );
    }
}

/// A sweep that runs as one run sends its versions of a stage out as one
/// job array, as a declared matrix's expansions go.
#[test]
fn a_sweep_goes_out_as_one_job_array() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { n: 1 }\nstages:\n  square:\n    run: echo $(( ${params.n} * ${params.n} )) > sq-${params.n}.txt\n    outs: [\"sq-${params.n}.txt\"]\n",
    );
    let result = on_slurm(&project, &["-m", "-S", "n=2,3,4"]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    for (n, square) in [(2, 4), (3, 9), (4, 16)] {
        assert_eq!(project.read(&format!("sq-{n}.txt")), format!("{square}\n"));
    }
    let record = show(&project, "last");
    let ids: Vec<&str> = record["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|stage| stage["job"].as_str().expect("a job id"))
        .collect();
    assert_eq!(ids.len(), 3, "one run of three stages: {record}");
    let arrays: Vec<&str> = ids
        .iter()
        .map(|id| id.split('_').next().unwrap_or_default())
        .collect();
    assert!(
        ids.iter().all(|id| id.contains('_')) && arrays.iter().all(|array| *array == arrays[0]),
        "one array: {ids:?}"
    );
}
