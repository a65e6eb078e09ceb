//! The real single-node Slurm cluster of the Slurm tests: the one
//! scripts/test.sh starts (`SLURM_CONF`), or, when a test is run on its
//! own, one started by `scripts/slurm.sh` under `target/slurm` and left
//! running for the next test run (starting it again is a no-op).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `SLURM_CONF` of a running cluster.
pub fn conf() -> &'static Path {
    static CONF: OnceLock<PathBuf> = OnceLock::new();
    CONF.get_or_init(|| {
        if let Some(conf) = std::env::var_os("SLURM_CONF").map(PathBuf::from) {
            if conf.is_file() && answers(&conf) {
                return conf;
            }
        }
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = workspace.join("target/slurm");
        let status = Command::new("bash")
            .arg(workspace.join("scripts/slurm.sh"))
            .arg("start")
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run scripts/slurm.sh");
        assert!(
            status.success(),
            "scripts/slurm.sh start {} failed",
            dir.display()
        );
        dir.join("slurm.conf")
    })
}

fn answers(conf: &Path) -> bool {
    Command::new("sinfo")
        .env("SLURM_CONF", conf)
        .args(["--noheader", "--format=%T"])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// A Slurm client command for the tests' cluster.
pub fn command(program: &str) -> Command {
    let mut command = Command::new(program);
    command.env("SLURM_CONF", conf());
    command
}

/// A job as `squeue --states=all` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: String,
    pub name: String,
    pub state: String,
    pub reason: String,
    /// The batch script, which lives in the project that submitted it.
    pub script: String,
}

/// Every job Slurm still remembers whose script lies under `root`.
pub fn jobs_of(root: &Path) -> Vec<Job> {
    let output = command("squeue")
        .args(["--noheader", "--states=all", "--format=%i|%j|%T|%r|%o"])
        .output()
        .expect("run squeue");
    assert!(
        output.status.success(),
        "squeue failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let root = root.to_string_lossy().into_owned();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.trim().splitn(5, '|').collect();
            let [id, name, state, reason, script] = fields.as_slice() else {
                return None;
            };
            Some(Job {
                id: id.to_string(),
                name: name.to_string(),
                state: state.to_string(),
                reason: reason.to_string(),
                script: script.to_string(),
            })
        })
        .filter(|job| job.script.starts_with(&root))
        .collect()
}

/// Waits until `check` holds for the project's jobs; panics after `limit`.
pub fn wait_for_jobs(
    root: &Path,
    limit: Duration,
    what: &str,
    check: impl Fn(&[Job]) -> bool,
) -> Vec<Job> {
    let started = Instant::now();
    loop {
        let jobs = jobs_of(root);
        if check(&jobs) {
            return jobs;
        }
        assert!(
            started.elapsed() < limit,
            "waited {limit:?} for {what}; jobs: {jobs:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
