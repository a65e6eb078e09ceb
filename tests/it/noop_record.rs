//! What a `pipe run` records: nothing when every stage was fresh (it says
//! so), a run as before when anything happened, and the git state the run
//! started at, read from any layout git leaves (packed refs, a detached
//! HEAD, a linked worktree) with the dirty flag it had, which a run does
//! not wait for.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use pipe_test_support::git;
use pipe_test_support::TestProject;
use serde_json::Value;

const PIPELINE: &str = "
name: noop
stages:
  make:
    run: cat input.txt > made.txt
    deps: [input.txt]
    outs: [made.txt]
  copy:
    run: cat made.txt made.txt > copied.txt
    deps: [made.txt]
    outs: [copied.txt]
";

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project.write("input.txt", "one\n");
    project
}

fn json(project: &TestProject, args: &[&str]) -> Value {
    let output = project.pipe(args);
    assert!(
        output.status.success(),
        "pipe {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("pipe {args:?} printed no JSON: {error}"))
}

/// The ids of the recorded runs, oldest first.
fn run_ids(project: &TestProject) -> Vec<i64> {
    let mut ids: Vec<i64> = json(project, &["runs", "--json"])
        .as_array()
        .expect("a list of runs")
        .iter()
        .map(|run| run["id"].as_i64().expect("an id"))
        .collect();
    ids.sort_unstable();
    ids
}

fn finished(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|event| event["event"] == "run_finished")
        .expect("a run_finished event")
}

#[test]
fn a_rerun_with_nothing_changed_records_no_run_and_says_so() {
    let project = project();
    let first = project.run_ok(&[]);
    assert_eq!(first.ran().len(), 2);
    assert_eq!(finished(&first.events)["recorded"], true);
    assert_eq!(finished(&first.events)["run"], 1);

    let again = project.run_ok(&[]);
    assert!(again.stages.values().all(|status| status == "fresh"));
    let end = finished(&again.events);
    assert_eq!(end["recorded"], false, "{end}");
    assert_eq!(end["run"], Value::Null, "{end}");
    assert_eq!(end["status"], "succeeded");
    assert_eq!(run_ids(&project), vec![1]);
    assert_eq!(json(&project, &["show", "last", "--json"])["id"], 1);

    // On stderr in human mode, and nothing at all with -q.
    let human = project.pipe(&["run"]);
    assert!(human.status.success());
    let said = String::from_utf8_lossy(&human.stderr);
    assert!(
        said.contains("nothing to do: 2 stages fresh, no run recorded"),
        "{said}"
    );
    assert!(!said.contains("run #"), "{said}");
    let quiet = project.pipe(&["run", "-q"]);
    assert!(quiet.status.success());
    assert!(quiet.stderr.is_empty() && quiet.stdout.is_empty());
    assert_eq!(run_ids(&project), vec![1]);

    // The numbers no-ops took are given back: the next run is #2.
    project.write("input.txt", "two\n");
    let changed = project.run_ok(&[]);
    assert_eq!(changed.ran().len(), 2);
    assert_eq!(finished(&changed.events)["run"], 2);
    assert_eq!(run_ids(&project), vec![1, 2]);
    // `pipe diff` compares the two runs that did something.
    let diff = project.pipe(&["diff", "--json"]);
    assert!(
        diff.status.success(),
        "{}",
        String::from_utf8_lossy(&diff.stderr)
    );
}

#[test]
fn a_run_that_restores_a_removed_output_is_recorded() {
    let project = project();
    project.run_ok(&[]);
    std::fs::remove_file(project.path("copied.txt")).unwrap();
    let restore = project.run_ok(&[]);
    assert_eq!(restore.status("copy"), "restored", "{}", restore.stderr);
    assert_eq!(restore.status("make"), "fresh");
    assert_eq!(finished(&restore.events)["recorded"], true);
    assert_eq!(run_ids(&project), vec![1, 2]);
    let last = json(&project, &["show", "last", "--json"]);
    assert_eq!(last["id"], 2);
    let statuses: Vec<&str> = last["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|stage| stage["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, vec!["fresh", "restored"]);
}

#[test]
fn a_failed_run_of_otherwise_fresh_stages_is_recorded() {
    let project = project();
    project.run_ok(&[]);
    project.write(
        "pipe.yaml",
        &format!("{PIPELINE}  broken:\n    run: exit 3\n    outs: [never.txt]\n"),
    );
    let failed = project.run(&[]);
    assert_eq!(failed.code, 1, "{}", failed.stderr);
    assert_eq!(finished(&failed.events)["recorded"], true);
    assert_eq!(run_ids(&project), vec![1, 2]);
}

/// The project as a repository: the pipeline, its input and a tracked
/// file no stage reads, in two commits; outputs and `.pipe/` untracked.
fn repository() -> TestProject {
    let project = project();
    project.write("notes.txt", "notes\n");
    let root = project.root();
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "pipe.yaml", "input.txt", "notes.txt"]);
    git(root, &["commit", "-qm", "one"]);
    project.write("notes.txt", "more notes\n");
    git(root, &["commit", "-qam", "two"]);
    project
}

/// Runs every stage (so that the run is recorded) and returns the record's
/// git commit and dirty flag.
fn recorded_git_state(project: &TestProject) -> (Value, Value) {
    project.run_ok(&["--force-all"]);
    let last = project.show_settled("last");
    (last["git_commit"].clone(), last["git_dirty"].clone())
}

#[test]
fn the_commit_is_recorded_through_packed_refs_and_a_detached_head() {
    let project = repository();
    let root = project.root();
    git(root, &["pack-refs", "--all", "--prune"]);
    assert!(!project.exists(".git/refs/heads/main"));
    let head = git(root, &["rev-parse", "HEAD"]);
    assert_eq!(
        recorded_git_state(&project),
        (Value::from(head.as_str()), Value::from(false))
    );
    // `pipe show main` resolves the packed branch in-process too.
    assert_eq!(
        json(&project, &["show", "main", "--json"])["git_commit"],
        head
    );

    git(root, &["checkout", "-q", "--detach", "HEAD~1"]);
    let first = git(root, &["rev-parse", "HEAD"]);
    assert_ne!(first, head);
    assert_eq!(
        recorded_git_state(&project),
        (Value::from(first.as_str()), Value::from(false))
    );
}

#[test]
fn the_commit_of_a_linked_worktree_is_its_own() {
    let project = repository();
    let elsewhere = tempfile::tempdir().unwrap();
    let linked = elsewhere.path().join("linked");
    git(
        project.root(),
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            linked.to_str().unwrap(),
            "HEAD~1",
        ],
    );
    let first = git(&linked, &["rev-parse", "HEAD"]);
    let output = project
        .std_command()
        .current_dir(&linked)
        .args(["run", "-q"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = pipe_test_support::settled(|| {
        project
            .std_command()
            .current_dir(&linked)
            .args(["show", "last", "--json"])
            .output()
            .unwrap()
    });
    assert_eq!(last["git_commit"], first);
    assert_eq!(last["git_dirty"], false);
}

#[test]
fn the_dirty_flag_follows_tracked_files_and_ignores_untracked_ones() {
    let project = repository();
    let root = project.root();
    project.write("untracked.txt", "not in git\n");
    assert_eq!(recorded_git_state(&project).1, false);
    project.write("notes.txt", "edited, not committed\n");
    assert_eq!(recorded_git_state(&project).1, true);
    git(root, &["add", "notes.txt"]);
    assert_eq!(recorded_git_state(&project).1, true, "staged is dirty too");
    git(root, &["commit", "-qm", "three"]);
    let (commit, dirty) = recorded_git_state(&project);
    assert_eq!(dirty, false);
    assert_eq!(commit, git(root, &["rev-parse", "HEAD"]));
}

/// A killed no-op leaves what a killed run leaves, never a half-written
/// record: at most a run shown as interrupted, every run readable, and the
/// next run numbered after all of them.
#[test]
fn kill_dash_nine_during_a_no_op_leaves_the_history_consistent() {
    let project = TestProject::new();
    // Enough stages that the no-op lasts a few milliseconds.
    let mut pipeline = String::from("name: many\nstages:\n");
    for stage in 0..60 {
        pipeline.push_str(&format!(
            "  s{stage}:\n    run: echo {stage} > out{stage}.txt\n    outs: [out{stage}.txt]\n"
        ));
    }
    project.write("pipe.yaml", &pipeline);
    project.run_ok(&[]);
    for delay_ms in [0, 1, 2, 3, 5, 8, 12, 20] {
        let mut pipe = project
            .std_command()
            .args(["run", "-q"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pipe");
        std::thread::sleep(Duration::from_millis(delay_ms));
        pipe.kill().expect("SIGKILL");
        pipe.wait().expect("reap pipe");
    }
    // A no-op writes no row at any moment, so a kill leaves none: the
    // history is the one run that did something.
    let runs = json(&project, &["runs", "--json"]);
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(runs[0]["status"], "succeeded", "{runs}");
    json(&project, &["show", "1", "--json"]);
    let before = run_ids(&project);
    assert_eq!(project.run_ok(&[]).ran(), Vec::<&str>::new());
    assert_eq!(
        run_ids(&project),
        before,
        "a no-op after the kills records nothing"
    );
    std::fs::remove_file(project.path("out0.txt")).unwrap();
    let restore = project.run_ok(&[]);
    let id = finished(&restore.events)["run"].as_i64().unwrap();
    assert_eq!(id, before.last().unwrap() + 1);
}

/// The run database's files, byte for byte, with their modification times.
fn run_database_files(project: &TestProject) -> Vec<(String, Vec<u8>, std::time::SystemTime)> {
    ["runs.db", "runs.db-wal", "runs.db-shm"]
        .iter()
        .filter_map(|name| {
            let path = project.path(&format!(".pipe/{name}"));
            let bytes = std::fs::read(&path).ok()?;
            let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
            Some((name.to_string(), bytes, modified))
        })
        .collect()
}

/// A no-op never opens the run database: its files stay as they were,
/// byte for byte (a no-op used to insert a row and delete it, growing the
/// write-ahead log that every later open reads back whole). The run's
/// number is known once it does something: `run_started` carries none.
#[test]
fn a_no_op_leaves_the_run_database_untouched() {
    let project = project();
    let first = project.run_ok(&[]);
    let started = first
        .events
        .iter()
        .find(|event| event["event"] == "run_started")
        .expect("a run_started event");
    assert_eq!(started.get("run"), None, "{started}");
    assert_eq!(finished(&first.events)["run"], 1);
    let before = run_database_files(&project);
    assert!(!before.is_empty());
    for _ in 0..5 {
        assert!(project.run_ok(&[]).ran().is_empty());
    }
    assert!(
        run_database_files(&project) == before,
        "a no-op changed .pipe/runs.db or its log"
    );
}

/// A damaged run database does not stop a run that has nothing to record;
/// one that does something ends with the database's error (exit 3), its
/// stage not run, and says which file.
#[test]
fn a_damaged_run_database_is_found_by_the_first_run_that_records() {
    let project = project();
    project.run_ok(&[]);
    for name in ["runs.db-wal", "runs.db-shm"] {
        let _ = std::fs::remove_file(project.path(&format!(".pipe/{name}")));
    }
    project.write(".pipe/runs.db", &"not a database ".repeat(400));
    let noop = project.pipe(&["run", "-q"]);
    assert!(
        noop.status.success(),
        "{}",
        String::from_utf8_lossy(&noop.stderr)
    );
    project.write("input.txt", "two\n");
    let changed = project.pipe(&["run"]);
    let said = String::from_utf8_lossy(&changed.stderr);
    assert_eq!(changed.status.code(), Some(3), "{said}");
    assert!(said.contains("runs.db"), "{said}");
    assert_eq!(project.read("made.txt"), "one\n", "the stage ran: {said}");
}

/// A `git` in front of the real one on PATH that runs `on_status` (shell)
/// when asked for `status`, then goes on as git; returns the PATH.
fn git_that_on_status(project: &TestProject, on_status: &str) -> String {
    let real = std::process::Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .expect("sh");
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    let bin = project.path("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = bin.join("git");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" status \"*) {on_status};; esac\nexec '{real}' \"$@\"\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

/// A `git` that answers `status` only once the test lets it, in front of
/// the real one on PATH; returns the PATH and the gate file.
fn gated_git(project: &TestProject) -> (String, std::path::PathBuf) {
    let gate = project.path("gate");
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.02; done", gate.display());
    (git_that_on_status(project, &wait), gate)
}

/// A `git status` that never answers (a FIFO planted as the index) does
/// not keep the dirty flag's settler alive forever: like every git pipe
/// runs for itself it is killed at the deadline (30 s; shortened here),
/// and the flag stays unknown.
#[test]
fn a_git_status_that_never_answers_is_killed_at_the_deadline() {
    let project = repository();
    let pids = project.path("status-pids");
    let path = git_that_on_status(
        &project,
        &format!("echo $$ >> '{}'; exec sleep 600", pids.display()),
    );
    let output = project
        .std_command()
        .args(["run", "--json"])
        .env("PATH", &path)
        .env("PIPE_GIT_DEADLINE_MS", "1000")
        .output()
        .expect("run pipe");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let started = std::time::Instant::now();
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&pids)
            .ok()
            .and_then(|text| text.lines().next().map(str::to_string))
        {
            break pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "git status never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    // The hanging `git status` (a `sleep 600`) is gone well before it ends.
    let gone = loop {
        if !Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat.contains(") Z "))
        {
            break true;
        }
        if started.elapsed() > Duration::from_secs(60) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(gone, "the hanging git status {pid} was never killed");
    assert_eq!(
        json(&project, &["show", "last", "--json"])["git_dirty"],
        Value::Null
    );
}

/// `pipe show last` as a person reads it.
fn show_last(project: &TestProject) -> String {
    String::from_utf8(project.pipe(&["show", "last"]).stdout).unwrap()
}

/// A run in a repository where `git status` takes long (a million files)
/// ends without waiting for it, says the flag is not known yet, and the
/// flag lands in its record once git answers, after `pipe` exited.
#[test]
fn a_run_does_not_wait_for_the_dirty_flag_which_lands_in_its_record_later() {
    let project = repository();
    project.write("notes.txt", "edited, not committed\n");
    let (path, gate) = gated_git(&project);
    let run = project
        .command()
        .env("PATH", &path)
        .args(["run", "-q", "--force-all"])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let pending = json(&project, &["show", "last", "--json"]);
    let head = git(project.root(), &["rev-parse", "HEAD"]);
    assert_eq!(pending["git_commit"], head.as_str());
    assert_eq!(pending["git_dirty"], Value::Null, "{pending}");
    let shown = show_last(&project);
    let pending_line = format!(
        "commit   {}? (not known whether tracked files differed from it)",
        &head[..8]
    );
    assert!(shown.contains(&pending_line), "{shown}");
    let listed = String::from_utf8(project.pipe(&["runs"]).stdout).unwrap();
    assert!(listed.contains(&format!("{}?", &head[..8])), "{listed}");

    std::fs::write(&gate, "").unwrap();
    let settled = project.show_settled("last");
    assert_eq!(settled["git_dirty"], true, "{settled}");
    let shown = show_last(&project);
    let dirty_line = format!("commit   {}+ (tracked files differed from it)", &head[..8]);
    assert!(shown.contains(&dirty_line), "{shown}");
}

/// The settler outlives a run killed with `kill -9` and still records the
/// flag of the tree the run started from.
#[test]
fn a_run_killed_after_it_started_the_dirty_check_still_gets_its_flag() {
    let project = repository();
    project.write(
        "pipe.yaml",
        "name: slow\nstages:\n  wait:\n    run: touch started && sleep 30 && echo done > waited.txt\n    outs: [waited.txt]\n",
    );
    let root = project.root();
    git(root, &["add", "pipe.yaml"]);
    git(root, &["commit", "-qm", "slow"]);
    let (path, gate) = gated_git(&project);
    let mut pipe = project
        .std_command()
        .env("PATH", &path)
        .args(["run", "-q"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start pipe");
    let waited = std::time::Instant::now();
    while !project.exists("started") {
        if let Some(status) = pipe.try_wait().expect("poll pipe") {
            panic!("pipe ended ({status}) before its stage started");
        }
        assert!(
            waited.elapsed() < Duration::from_secs(120),
            "the stage never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    pipe.kill().expect("SIGKILL");
    pipe.wait().expect("reap pipe");
    let killed = json(&project, &["show", "last", "--json"]);
    assert_eq!(killed["git_dirty"], Value::Null, "{killed}");
    std::fs::write(&gate, "").unwrap();
    let settled = project.show_settled("last");
    assert_eq!(settled["git_dirty"], false, "{settled}");
}
