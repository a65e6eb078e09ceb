//! What a process that can write to `.pipe/` or to a remote can do to pipe
//! by what it leaves at a path: at worst a miss or a refused record, never
//! a hang, unbounded memory or disk, or a write outside the cache. Each
//! file pipe reads there is opened without following a link, refused when
//! it is not a regular file, and read no further than its format's limit
//! (docs/cache-format.md, "Limits"). Driven through the real binary, each
//! run under a memory limit and a timeout that kills it, so a regression
//! fails the test instead of the machine.

use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use pipe_test_support::{RunResult, TestProject};
use serde_json::Value;

const PIPELINE: &str = r#"stages:
  tree:
    run: mkdir -p out/sub && echo a > out/a.txt && echo b > out/sub/b.txt
    outs: [out]
  file:
    run: echo one > one.txt
    outs: [one.txt]
"#;

/// Far more than any of these commands needs, far less than reading
/// `/dev/zero` to the end would take: an allocation past it fails.
const DATA_LIMIT: u64 = 2 << 30;

/// Long enough for a slow machine, short enough that a hang is a failure.
const HUNG_AFTER: Duration = Duration::from_secs(120);

pub(crate) struct Finished {
    pub(crate) output: Output,
    /// Peak resident memory in bytes.
    pub(crate) peak_rss: u64,
}

impl Finished {
    pub(crate) fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    pub(crate) fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub(crate) fn run(&self) -> RunResult {
        RunResult::from_output(self.output.clone())
    }
}

/// Runs `pipe ARGS` with `env`, under `DATA_LIMIT`; kills it and fails the
/// test if it has not ended after `HUNG_AFTER` (also for the hostile
/// servers and `.git`s of `hostile_s3` and `hostile_git`).
pub(crate) fn pipe(project: &TestProject, env: &[(&str, String)], args: &[&str]) -> Finished {
    let out_path = project.path(".out.txt");
    let err_path = project.path(".err.txt");
    let mut command = project.std_command();
    command
        .args(args)
        .envs(env.iter().map(|(key, value)| (*key, value)))
        .stdout(Stdio::from(File::create(&out_path).unwrap()))
        .stderr(Stdio::from(File::create(&err_path).unwrap()));
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: DATA_LIMIT,
                rlim_max: DATA_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Reaped by wait4 below, which also reports what it used.
    #[allow(clippy::zombie_processes)]
    let child = command.spawn().expect("start pipe");
    let pid = child.id() as i32;
    let started = Instant::now();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 reaps exactly this child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if reaped == pid {
            break;
        }
        assert_eq!(reaped, 0, "wait4");
        if started.elapsed() > HUNG_AFTER {
            // SAFETY: our own child, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::wait4(pid, &mut status, 0, &mut usage);
            }
            panic!(
                "`pipe {}` hung: killed after {HUNG_AFTER:?}; stderr:\n{}",
                args.join(" "),
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Finished {
        output: Output {
            status: std::process::ExitStatus::from_raw(status),
            stdout: std::fs::read(&out_path).unwrap(),
            stderr: std::fs::read(&err_path).unwrap(),
        },
        // Linux reports ru_maxrss in KiB.
        peak_rss: usage.ru_maxrss as u64 * 1024,
    }
}

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The tree object of `out/` under `cache` (the listing naming `a.txt`).
fn tree_object(cache: &Path) -> PathBuf {
    files_under(&cache.join("objects"))
        .into_iter()
        .find(|path| {
            let bytes = std::fs::read(path).unwrap();
            bytes.starts_with(b"pipe-tree-v1\n") && bytes.windows(5).any(|w| w == b"a.txt")
        })
        .expect("the tree object of out/")
}

/// The action file of the result that has `out/`.
fn tree_action(cache: &Path) -> PathBuf {
    files_under(&cache.join("actions"))
        .into_iter()
        .find(|path| std::fs::read_to_string(path).unwrap().contains("\"out\""))
        .expect("the action of the tree stage")
}

/// What each hostile file replaces an entry with.
#[derive(Debug, Clone, Copy)]
enum Hostile {
    LinkToDevZero,
    /// A 2 GiB file that takes no disk.
    Sparse,
    Fifo,
}

fn plant(path: &Path, hostile: Hostile) {
    std::fs::remove_file(path).unwrap();
    match hostile {
        Hostile::LinkToDevZero => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        Hostile::Sparse => File::create(path).unwrap().set_len(2 << 30).unwrap(),
        Hostile::Fifo => {
            let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
        }
    }
}

/// `status`, `run`, `cache verify` and `cache gc` each finish in bounded
/// memory with a tree object or an action file replaced by `hostile`, and
/// the run takes it as a miss: the stage runs again and its result
/// replaces the entry.
fn the_local_cache_survives(target: &str, hostile: Hostile) {
    let project = project();
    project.run_ok(&[]);
    let cache = project.path(".pipe/cache");
    let path = match target {
        "tree" => tree_object(&cache),
        _ => tree_action(&cache),
    };
    plant(&path, hostile);
    let what = format!("{target} replaced by {hostile:?}");

    let status = pipe(&project, &[], &["status"]);
    assert_eq!(
        status.code(),
        Some(0),
        "{what}: status\n{}",
        status.stderr()
    );

    let run = pipe(&project, &[], &["run", "--json"]);
    assert_eq!(run.code(), Some(0), "{what}: run\n{}", run.stderr());
    assert_eq!(run.run().status("tree"), "ran", "{what}: a miss");
    assert_ne!(
        run.run().status("file"),
        "ran",
        "{what}: only the damaged result is a miss"
    );
    assert_eq!(project.read("out/sub/b.txt"), "b\n", "{what}");
    let metadata = std::fs::symlink_metadata(&path).unwrap();
    assert!(
        metadata.is_file() && metadata.len() < 1 << 20,
        "{what}: the run's own result replaced it"
    );

    // verify and gc meet it too, planted again after the run replaced it.
    plant(&path, hostile);
    let verify = pipe(&project, &[], &["cache", "verify"]);
    assert_eq!(
        verify.code(),
        Some(4),
        "{what}: verify\n{}",
        verify.stderr()
    );
    let gc = pipe(&project, &[], &["cache", "gc", "--grace-secs", "0"]);
    assert!(gc.code().is_some(), "{what}: gc ended by a signal");
    let repair = pipe(&project, &[], &["cache", "verify", "--repair"]);
    assert_eq!(
        repair.code(),
        Some(0),
        "{what}: repair\n{}",
        repair.stderr()
    );
    // verify hashes every object whole, mapped from the file: what it
    // maps is the page cache's, not pipe's memory.
    for finished in [&status, &run, &gc] {
        assert!(
            finished.peak_rss < 512 << 20,
            "{what}: {} bytes of peak RSS",
            finished.peak_rss
        );
    }
    let rerun = pipe(&project, &[], &["run", "--json"]);
    assert_eq!(rerun.code(), Some(0), "{what}\n{}", rerun.stderr());
}

#[test]
fn a_tree_object_linked_to_dev_zero_is_a_miss_not_an_allocation_without_end() {
    the_local_cache_survives("tree", Hostile::LinkToDevZero);
}

#[test]
fn a_sparse_2_gib_tree_object_is_a_miss_not_read() {
    the_local_cache_survives("tree", Hostile::Sparse);
}

#[test]
fn an_action_file_linked_to_dev_zero_is_a_miss() {
    the_local_cache_survives("action", Hostile::LinkToDevZero);
}

#[test]
fn a_sparse_2_gib_action_file_is_a_miss_not_read() {
    the_local_cache_survives("action", Hostile::Sparse);
}

#[test]
fn an_action_file_that_is_a_fifo_never_blocks_status_run_or_verify() {
    the_local_cache_survives("action", Hostile::Fifo);
}

#[test]
fn a_tree_object_that_is_a_fifo_never_blocks() {
    the_local_cache_survives("tree", Hostile::Fifo);
}

/// A project that pushed its results and its run record to a new
/// `file://` remote; the remote's directory.
fn pushed() -> (TestProject, tempfile::TempDir, Vec<(&'static str, String)>) {
    let remote = tempfile::tempdir().unwrap();
    let env = vec![("PIPE_REMOTE", format!("file://{}", remote.path().display()))];
    let first = project();
    let run = pipe(&first, &env, &["run", "--json"]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert!(!files_under(&remote.path().join("runs")).is_empty());
    (first, remote, env)
}

#[test]
fn fifos_in_a_file_remote_are_refused_never_waited_on() {
    let (_first, remote, env) = pushed();
    plant(&tree_action(remote.path()), Hostile::Fifo);
    let record = files_under(&remote.path().join("runs")).remove(0);
    plant(&record, Hostile::Fifo);

    let clone = project();
    let run = pipe(&clone, &env, &["run", "--json"]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert_eq!(run.run().status("tree"), "ran", "the FIFO is a miss");
    assert_eq!(run.run().status("file"), "restored", "the rest is pulled");
    assert!(
        run.stderr().contains("not a regular file"),
        "{}",
        run.stderr()
    );

    let pull = pipe(&clone, &env, &["cache", "pull"]);
    assert_eq!(pull.code(), Some(0), "{}", pull.stderr());
    assert!(
        pull.stderr()
            .contains("a FIFO, not a regular file; skipped"),
        "{}",
        pull.stderr()
    );
}

#[test]
fn a_40_mb_run_record_in_a_remote_is_skipped_in_bounded_memory() {
    let (_first, remote, env) = pushed();
    let record = files_under(&remote.path().join("runs")).remove(0);
    let mut text = std::fs::read_to_string(&record).unwrap();
    let export: Value = serde_json::from_str(&text).unwrap();
    assert!(export["manifests"].is_object(), "{text}");
    // A record for its name, padded with 40 MB of tiny values, which cost
    // far more parsed than their bytes. Built as text: this process's own
    // memory would count in the child's peak, which starts as its fork.
    let at = text.find("\"manifests\": {").expect("manifests") + "\"manifests\": {".len();
    let padding = format!("\"padding\": [{}0],", "0,".repeat(20_000_000));
    text.insert_str(at, &padding);
    drop(padding);
    std::fs::write(&record, text).unwrap();
    assert!(std::fs::metadata(&record).unwrap().len() > 40_000_000);

    let clone = project();
    let pull = pipe(&clone, &env, &["cache", "pull"]);
    assert_eq!(pull.code(), Some(0), "{}", pull.stderr());
    assert!(
        pull.stderr()
            .contains("16 MiB, the most a run record can hold")
            && pull.stderr().contains("skipped"),
        "{}",
        pull.stderr()
    );
    assert!(
        pull.peak_rss < 200 << 20,
        "{} bytes of peak RSS to skip a 40 MB record",
        pull.peak_rss
    );
}

#[test]
fn a_tree_object_in_a_remote_is_downloaded_no_further_than_its_limit() {
    let (_first, remote, env) = pushed();
    // 1 GiB where a listing of two entries was: nothing declares a tree
    // listing's size, so the limit of the format stops it.
    let object = tree_object(remote.path());
    std::fs::remove_file(&object).unwrap();
    File::create(&object).unwrap().set_len(1 << 30).unwrap();

    let clone = project();
    let run = pipe(&clone, &env, &["run", "--json"]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert_eq!(
        run.run().status("tree"),
        "ran",
        "a corrupt remote entry is a miss"
    );
    let transferred: u64 = run
        .run()
        .events
        .iter()
        .filter(|event| event["event"] == "transfer_finished" && event["outcome"] == "failed")
        .map(|event| event["transferred_bytes"].as_u64().unwrap())
        .sum();
    assert!(
        transferred <= 256 << 20,
        "{transferred} bytes of a bogus tree object were received"
    );
    assert!(files_under(&clone.path(".pipe/cache/tmp")).is_empty());
}

fn set_age(path: &Path, age: Duration) {
    let file = File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
}

#[test]
fn what_killed_pushes_left_in_a_file_remote_is_cleared_by_the_next_push_and_by_gc() {
    let (first, remote, env) = pushed();
    let tmp = remote.path().join("tmp");
    let two_days = Duration::from_secs(2 * 24 * 3600);
    for name in ["partial-1", "partial-2"] {
        std::fs::write(tmp.join(name), vec![7u8; 1 << 20]).unwrap();
        set_age(&tmp.join(name), two_days);
    }
    // A push under way right now.
    std::fs::write(tmp.join("fresh"), b"in flight").unwrap();

    first.write("pipe.yaml", &PIPELINE.replace("echo one", "echo two"));
    let push = pipe(&first, &env, &["run", "--json"]);
    assert_eq!(push.code(), Some(0), "{}", push.stderr());
    assert_eq!(files_under(&tmp), vec![tmp.join("fresh")]);

    std::fs::write(tmp.join("partial-3"), b"left").unwrap();
    set_age(&tmp.join("partial-3"), two_days);
    let gc = pipe(&first, &env, &["cache", "gc"]);
    assert_eq!(gc.code(), Some(0), "{}", gc.stderr());
    let stdout = String::from_utf8_lossy(&gc.output.stdout).into_owned();
    assert!(stdout.contains("removed 1 temporary files"), "{stdout}");
    assert_eq!(files_under(&tmp), vec![tmp.join("fresh")]);
}

#[test]
fn what_a_killed_run_left_in_the_local_cache_tmp_is_cleared_by_the_next_run() {
    let project = project();
    project.run_ok(&[]);
    let tmp = project.path(".pipe/cache/tmp");
    std::fs::write(tmp.join("object-killed"), vec![7u8; 1 << 20]).unwrap();
    set_age(
        &tmp.join("object-killed"),
        Duration::from_secs(2 * 24 * 3600),
    );
    std::fs::write(tmp.join("object-in-flight"), b"now").unwrap();
    let run = pipe(&project, &[], &["run", "--json"]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert_eq!(files_under(&tmp), vec![tmp.join("object-in-flight")]);
}

#[test]
fn a_file_remote_whose_folder_links_outside_it_is_refused() {
    let remote = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), remote.path().join("runs")).unwrap();
    let env = vec![("PIPE_REMOTE", format!("file://{}", remote.path().display()))];
    let project = project();
    let run = pipe(&project, &env, &["run", "--json"]);
    assert_ne!(run.code(), Some(0), "{}", run.stderr());
    let stderr = run.stderr();
    assert!(
        stderr.contains(&format!("{}/runs", remote.path().display()))
            && stderr.contains("symbolic link")
            && stderr.contains(&outside.path().display().to_string()),
        "{stderr}"
    );
    assert!(
        files_under(outside.path()).is_empty(),
        "nothing written there"
    );

    // A link inside the remote is only another name for its own folder.
    std::fs::remove_file(remote.path().join("runs")).unwrap();
    std::fs::create_dir(remote.path().join("records")).unwrap();
    std::os::unix::fs::symlink("records", remote.path().join("runs")).unwrap();
    let run = pipe(&project, &env, &["run", "--json"]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert!(!files_under(&remote.path().join("records")).is_empty());
}

#[test]
fn a_local_cache_whose_folder_links_outside_it_is_refused() {
    let project = project();
    project.run_ok(&[]);
    let outside = tempfile::tempdir().unwrap();
    let actions = project.path(".pipe/cache/actions");
    std::fs::remove_dir_all(&actions).unwrap();
    std::os::unix::fs::symlink(outside.path(), &actions).unwrap();
    project.write("pipe.yaml", &PIPELINE.replace("echo one", "echo two"));
    let run = pipe(&project, &[], &["run", "--json"]);
    assert_ne!(run.code(), Some(0), "{}", run.stderr());
    assert!(
        run.stderr().contains("symbolic link") && run.stderr().contains("PIPE_CACHE_DIR"),
        "{}",
        run.stderr()
    );
    assert!(
        files_under(outside.path()).is_empty(),
        "nothing written there"
    );
}
