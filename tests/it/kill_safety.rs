//! A `pipe` that dies (kill -9, the OOM killer, a CI timeout) leaves nothing
//! behind that could write into a later run, and a stage's result is stored
//! only once every process it started has exited.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use pipe_test_support::{RunResult, TestProject};

/// Slow appending stages (a second run of the same command doubles their
/// file), a ~50 MB output written by a pipeline of grandchildren, a stage
/// whose writer is a background subshell, and dependents of all of them.
const TORTURE: &str = r#"
stages:
  append_a:
    run: for i in $(seq 1 40); do echo a$i >> out/a.txt; sleep 0.02; done
    outs: [out/a.txt]
  big:
    run: seq 1 6400000 | tr 0-9 a-j > out/big.txt
    outs: [out/big.txt]
  background:
    run: (for i in $(seq 1 30); do echo c$i >> out/c.txt; sleep 0.02; done) & wait
    outs: [out/c.txt]
  append_b:
    deps: [out/a.txt]
    run: cp out/a.txt out/b.txt; for i in $(seq 1 20); do echo b$i >> out/b.txt; sleep 0.02; done
    outs: [out/b.txt]
  summary:
    deps: [out/b.txt, out/c.txt, out/big.txt]
    run: (wc -l < out/b.txt; wc -l < out/c.txt; cksum < out/big.txt) > out/summary.txt
    outs: [out/summary.txt]
"#;

const KILL_ITERATIONS: u64 = 50;
/// Kills land anywhere in a run of the pipeline above, and sometimes after it.
const LONGEST_DELAY_MS: u64 = 1500;

/// The files under `out/`, by name.
fn outputs(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(root.join("out")).expect("out/ exists") {
        let entry = entry.expect("dir entry");
        let bytes = std::fs::read(entry.path()).expect("read output");
        files.insert(entry.file_name().to_string_lossy().into_owned(), bytes);
    }
    files
}

fn assert_same_outputs(expected: &BTreeMap<String, Vec<u8>>, project: &TestProject, when: &str) {
    let actual = outputs(project.root());
    let names = |files: &BTreeMap<String, Vec<u8>>| files.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&actual), names(expected), "{when}: output files");
    for (name, bytes) in expected {
        let got = &actual[name];
        if got != bytes {
            let shown = |bytes: &[u8]| {
                let text = String::from_utf8_lossy(&bytes[..bytes.len().min(400)]).into_owned();
                format!("{} bytes: {text:?}", bytes.len())
            };
            panic!(
                "{when}: out/{name} differs from a clean run\nexpected {}\ngot      {}",
                shown(bytes),
                shown(got)
            );
        }
    }
}

/// A small seeded generator, so a failing sequence of kills can be replayed.
struct Xorshift(u64);

impl Xorshift {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

/// `pipe run` as its own process group, as `setsid pipe run &` would start it.
fn spawn_detached(project: &TestProject, args: &[&str]) -> Child {
    project
        .std_command()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start pipe")
}

fn send(target: i32, signal: libc::c_int) {
    // SAFETY: plain kill(2); the targets are processes this test started.
    unsafe {
        libc::kill(target, signal);
    }
}

/// Running, as opposed to gone or a zombie waiting for a parent to reap it.
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn wait_for(mut condition: impl FnMut() -> bool, what: &str) {
    for _ in 0..3000 {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting for {what}");
}

fn read_pid(project: &TestProject, file: &str) -> i32 {
    wait_for(
        || project.exists(file) && project.read(file).ends_with('\n'),
        file,
    );
    project.read(file).trim().parse().expect("a pid")
}

/// Kills a process group when the test ends, so a failing test does not
/// leave an endless loop running.
struct GroupGuard(Vec<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        for &group in &self.0 {
            send(-group, libc::SIGKILL);
        }
    }
}

#[test]
fn kill_dash_nine_at_random_moments_never_caches_a_wrong_result() {
    let clean = TestProject::new();
    clean.write("pipe.yaml", TORTURE);
    clean.run_ok(&[]);
    let expected = outputs(clean.root());
    assert_eq!(
        expected["a.txt"].len(),
        (1..=40).map(|i| format!("a{i}\n").len()).sum::<usize>()
    );
    assert!(expected["big.txt"].len() > 50_000_000);

    let project = TestProject::new();
    project.write("pipe.yaml", TORTURE);
    let mut random = Xorshift(0x9E37_79B9_7F4A_7C15);
    for iteration in 0..KILL_ITERATIONS {
        let delay = random.below(LONGEST_DELAY_MS);
        let whole_group = random.below(3) == 0;
        let mut pipe = spawn_detached(&project, &["run"]);
        std::thread::sleep(Duration::from_millis(delay));
        let pid = pipe.id() as i32;
        send(if whole_group { -pid } else { pid }, libc::SIGKILL);
        pipe.wait().expect("reap the killed pipe");
        let when = |what: &str| {
            format!("iteration {iteration} (kill -9 after {delay} ms, whole group: {whole_group}): {what}")
        };

        let rerun = project.run(&[]);
        assert_eq!(rerun.code, 0, "{}\n{}", when("rerun"), rerun.stderr);
        assert_same_outputs(&expected, &project, &when("after the rerun"));

        std::fs::remove_dir_all(project.path("out")).expect("remove out/");
        let restore = project.run(&[]);
        assert_eq!(restore.code, 0, "{}\n{}", when("restore"), restore.stderr);
        assert!(
            restore.ran().is_empty(),
            "{}: every result comes from the cache, ran {:?}",
            when("restore"),
            restore.ran()
        );
        assert_same_outputs(&expected, &project, &when("after restoring"));
    }
    let verify = project.pipe(&["cache", "verify"]);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

#[test]
fn a_rerun_stops_what_a_killed_run_left_running_before_touching_outputs() {
    let project = TestProject::new();
    // The writer is a grandchild of pipe: a kill of pipe alone does not reach it.
    project.write(
        "pipe.yaml",
        "stages:\n  writer:\n    run: echo $$ > stage.pgid; (echo $BASHPID > writer.pid; while true; do echo tick >> out/log.txt; sleep 0.01; done) & wait\n    outs: [out/log.txt]\n",
    );
    let mut pipe = spawn_detached(&project, &["run"]);
    let stage_group = read_pid(&project, "stage.pgid");
    let _guard = GroupGuard(vec![stage_group]);
    let writer = read_pid(&project, "writer.pid");
    wait_for(
        || project.exists("out/log.txt"),
        "the writer to start writing",
    );
    send(pipe.id() as i32, libc::SIGKILL);
    pipe.wait().expect("reap the killed pipe");

    project.write(
        "pipe.yaml",
        "stages:\n  writer:\n    run: echo final > out/log.txt\n    outs: [out/log.txt]\n",
    );
    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.status("writer"), "ran");
    assert!(
        !running(writer),
        "the killed run's writer (pid {writer}) still runs after the rerun"
    );
    assert_eq!(project.read("out/log.txt"), "final\n");
    assert_eq!(project.pipe(&["status"]).status.code(), Some(0));
}

#[test]
fn processes_a_stage_leaves_behind_are_stopped_before_its_result_is_stored() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  leaves:\n    run: echo $$ > stage.pgid; sleep 60 & echo $! > left.pid; echo done > out.txt\n    outs: [out.txt]\n",
    );
    let result = project.run(&[]);
    let _guard = GroupGuard(vec![project.read("stage.pgid").trim().parse().unwrap()]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(result.status("leaves"), "ran");
    let left: i32 = project.read("left.pid").trim().parse().unwrap();
    assert!(
        !running(left),
        "the stage's background process (pid {left}) outlived its stage"
    );
    assert!(
        result.stderr.contains("left 1 process running"),
        "the user is told: {}",
        result.stderr
    );
    let log_dir = project.path(&format!(".pipe/logs/{}", result.run_id()));
    let log = std::fs::read_to_string(log_dir.join("leaves.log")).unwrap();
    assert!(
        log.contains("left 1 process running"),
        "and the log says so: {log}"
    );
    assert_eq!(project.read("out.txt"), "done\n");
}

#[test]
fn runs_started_together_take_turns_and_each_sees_the_clean_result() {
    let clean = TestProject::new();
    clean.write("pipe.yaml", TORTURE);
    clean.run_ok(&[]);
    let expected = outputs(clean.root());

    let project = TestProject::new();
    project.write("pipe.yaml", TORTURE);
    let runs: Vec<Child> = (0..3)
        .map(|_| {
            project
                .std_command()
                .args(["run", "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start pipe")
        })
        .collect();
    let results: Vec<RunResult> = runs
        .into_iter()
        .map(|run| RunResult::from_output(run.wait_with_output().expect("wait")))
        .collect();
    for result in &results {
        assert_eq!(result.code, 0, "{}", result.stderr);
    }
    for stage in ["append_a", "big", "background", "append_b", "summary"] {
        let ran = results.iter().filter(|r| r.status(stage) == "ran").count();
        assert_eq!(
            ran, 1,
            "`{stage}` ran once; the other runs found its result"
        );
    }
    assert_same_outputs(&expected, &project, "after three concurrent runs");
    assert_eq!(project.pipe(&["cache", "verify"]).status.code(), Some(0));
}

/// What a restore killed between making its staging directory and its
/// final rename leaves beside the output: `.NAME.pipe-tmp-XXXXXX/new`.
fn leave_staging_dir(project: &TestProject, output: &str, random: &str) -> std::path::PathBuf {
    let path = project.path(output);
    let name = path
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    let staging = path.with_file_name(format!(".{name}.pipe-tmp-{random}"));
    std::fs::create_dir_all(staging.join("new/part")).expect("staging dir");
    std::fs::write(staging.join("new/part/half.bin"), vec![7u8; 4096]).expect("half a file");
    // Restored directories may be read-only.
    std::fs::set_permissions(
        staging.join("new/part"),
        std::os::unix::fs::PermissionsExt::from_mode(0o555),
    )
    .expect("chmod");
    staging
}

#[test]
fn what_a_killed_restore_left_beside_an_output_is_removed_by_the_next_run_and_checkout() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  make:\n    run: mkdir -p out/data && seq 1 1000 > out/model.bin && seq 1 10 > out/data/a.txt\n    outs: [out/model.bin, out/data]\n",
    );
    project.run_ok(&[]);
    std::fs::remove_file(project.path("out/model.bin")).expect("remove output");
    std::fs::remove_dir_all(project.path("out/data")).expect("remove output");
    let leftovers = [
        leave_staging_dir(&project, "out/model.bin", "a1B2c3"),
        leave_staging_dir(&project, "out/data", "Zz9Yy8"),
    ];
    // Not pipe's: another file's name, the wrong pattern, a plain file.
    let strangers = [
        leave_staging_dir(&project, "out/notes.txt", "a1B2c3"),
        leave_staging_dir(&project, "out/model.bin", "mine"),
    ];
    project.write(
        "out/.model.bin.pipe-tmp-q1w2e3",
        "a file, not a staging directory\n",
    );

    let run = project.run_ok(&[]);
    assert_eq!(run.status("make"), "restored", "{}", run.stderr);
    for leftover in &leftovers {
        assert!(!leftover.exists(), "{} is still there", leftover.display());
    }
    for stranger in &strangers {
        assert!(stranger.exists(), "{} was removed", stranger.display());
    }
    assert!(project.exists("out/.model.bin.pipe-tmp-q1w2e3"));
    assert!(
        run.stderr
            .contains("removed 2 staging directories that a killed restore had left"),
        "{}",
        run.stderr
    );
    assert_eq!(project.read("out/data/a.txt").lines().count(), 10);

    // `pipe checkout` writes outputs as a run does, and cleans up the same way.
    std::fs::remove_file(project.path("out/model.bin")).expect("remove output");
    let leftover = leave_staging_dir(&project, "out/model.bin", "Qq7Ww6");
    let checkout = project.pipe(&["checkout", "1"]);
    assert!(
        checkout.status.success(),
        "{}",
        String::from_utf8_lossy(&checkout.stderr)
    );
    assert!(!leftover.exists(), "{} is still there", leftover.display());
    assert_eq!(project.read("out/model.bin").lines().count(), 1000);
    // Nothing left to remove: the next run says nothing about it.
    let quiet = project.run_ok(&[]);
    assert!(!quiet.stderr.contains("staging"), "{}", quiet.stderr);
    for stranger in &strangers {
        std::fs::set_permissions(
            stranger.join("new/part"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod back, so the project can be removed");
    }
}
