//! A job's files on the shared filesystem, and the limits of submitting it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A controller that has not answered for this long fails the waiting stages.
pub(super) const UNREACHABLE_LIMIT: Duration = Duration::from_secs(600);
/// After Ctrl-C, how long to wait for Slurm to confirm the cancellation.
pub(super) const CANCEL_WAIT: Duration = Duration::from_secs(15);
/// Matrix expansions that become ready within this window of each other
/// go out as one job array.
pub(super) const ARRAY_WINDOW: Duration = Duration::from_millis(200);
/// Array task ids are stage indices, below Slurm's default MaxArraySize.
pub(super) const MAX_ARRAY_INDEX: usize = 1000;
pub(super) fn cancel_job(job_id: &str) {
    if let Err(error) = Command::new("scancel")
        .arg(job_id)
        .stdin(Stdio::null())
        .status()
    {
        tracing::warn!("cannot cancel Slurm job {job_id}: {error}");
    }
}
/// The files of stage number `index`'s job, under the run's job directory.
pub(super) struct JobFiles {
    pub(super) script: PathBuf,
    pub(super) exit: PathBuf,
    pub(super) events: PathBuf,
    pub(super) stderr: PathBuf,
    /// What Slurm itself writes for the job (`--output`): its notices of
    /// cancellation and time limits.
    pub(super) slurm_out: PathBuf,
}

impl JobFiles {
    pub(super) fn remove(&self) {
        for path in [
            &self.script,
            &self.exit,
            &self.events,
            &self.stderr,
            &self.slurm_out,
        ] {
            let _ = std::fs::remove_file(path);
        }
    }

    pub(super) fn new(dir: &Path, index: usize) -> JobFiles {
        let file = |suffix: &str| dir.join(format!("S{index}.{suffix}"));
        JobFiles {
            script: file("sh"),
            exit: file("exit"),
            events: file("events"),
            stderr: file("stderr"),
            slurm_out: file("slurm"),
        }
    }
}

pub(super) fn write_script(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o700)
        .open(path)?;
    file.write_all(text.as_bytes())
}
