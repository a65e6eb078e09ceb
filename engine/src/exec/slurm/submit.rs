//! Submitting the run's jobs: one `sbatch` per stage, or one array for
//! the expansions of a matrix stage that ask for the same resources, with
//! retries while the controller is unreachable.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pipe_protocol::format::format_seconds;

use super::jobs::{
    cancel_job, write_script, JobFiles, ARRAY_WINDOW, MAX_ARRAY_INDEX, UNREACHABLE_LIMIT,
};
use super::queue::{Queue, SlurmError};
use super::script;
use crate::executor::SlurmSettings;
use crate::interrupt;
use crate::pipeline::Resources;

/// One stage's job, waiting to go out.
pub(super) struct Submission {
    pub(super) index: usize,
    /// The matrix stage it expands, when it has one.
    pub(super) group: Option<String>,
    pub(super) resources: Resources,
    pub(super) secret_env: BTreeMap<String, String>,
    /// The job id, or why there is none.
    pub(super) reply: mpsc::Sender<std::result::Result<String, SlurmError>>,
}

pub(super) struct SubmitContext {
    pub(super) settings: SlurmSettings,
    pub(super) job_name: String,
    pub(super) dir: PathBuf,
    pub(super) root: PathBuf,
}

impl SubmitContext {
    /// Submits jobs as they come; expansions of one matrix stage that come
    /// within `ARRAY_WINDOW` of each other go out as one array.
    pub(super) fn serve(&self, receiver: &mpsc::Receiver<Submission>, queue: &Queue) {
        while let Ok(first) = receiver.recv() {
            let mut batch = vec![first];
            if batch[0].group.is_some() {
                let deadline = Instant::now() + ARRAY_WINDOW;
                while let Some(left) = deadline.checked_duration_since(Instant::now()) {
                    match receiver.recv_timeout(left) {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
            }
            let mut groups: Vec<Vec<Submission>> = Vec::new();
            for submission in batch {
                let joins = groups.iter_mut().find(|group| {
                    let head = &group[0];
                    submission.group.is_some()
                        && head.group == submission.group
                        && head.resources == submission.resources
                        && head.secret_env == submission.secret_env
                        && submission.index < MAX_ARRAY_INDEX
                        && head.index < MAX_ARRAY_INDEX
                });
                match joins {
                    Some(group) => group.push(submission),
                    None => groups.push(vec![submission]),
                }
            }
            for group in groups {
                let indices: Vec<usize> = group.iter().map(|s| s.index).collect();
                let submitted =
                    self.submit(&indices, &group[0].resources, &group[0].secret_env, queue);
                if let (Ok(job_id), true) = (&submitted, queue.is_cancelled()) {
                    // Submitted while the run's jobs were being cancelled.
                    cancel_job(job_id);
                }
                queue.submitted(submitted.as_ref().map_or(0, |_| indices.len()));
                for submission in group {
                    let answer = submitted.as_ref().map(|id| match indices.len() {
                        1 => id.clone(),
                        _ => format!("{id}_{}", submission.index),
                    });
                    let _ = submission.reply.send(answer.map_err(Clone::clone));
                }
            }
        }
    }

    /// `sbatch` for one stage, or an array whose task ids are the stages'
    /// indices; the job id.
    fn submit(
        &self,
        indices: &[usize],
        resources: &Resources,
        secret_env: &BTreeMap<String, String>,
        queue: &Queue,
    ) -> std::result::Result<String, SlurmError> {
        let mut sbatch = Command::new("sbatch");
        sbatch
            .arg("--parsable")
            .arg(format!("--job-name={}", self.job_name))
            .arg(format!("--chdir={}", self.root.display()))
            .arg("--open-mode=truncate")
            // A requeued job would rerun over a half-written first attempt.
            .arg("--no-requeue")
            // The job gets the stage's credentials from sbatch's
            // environment, whatever the site's SBATCH_EXPORT says.
            .arg("--export=ALL")
            .args(script::resource_flags(resources, &self.settings));
        let script_path = if let [index] = indices {
            sbatch.arg(format!(
                "--output={}",
                JobFiles::new(&self.dir, *index).slurm_out.display()
            ));
            JobFiles::new(&self.dir, *index).script
        } else {
            let list: Vec<String> = indices.iter().map(usize::to_string).collect();
            sbatch
                .arg(format!("--array={}", list.join(",")))
                .arg(format!("--output={}", self.dir.join("S%a.slurm").display()));
            let path = self.dir.join(format!("A{}.sh", indices[0]));
            write_script(&path, &script::array_script(&self.dir)).map_err(|error| {
                SlurmError::Script {
                    path: path.clone(),
                    detail: error.to_string(),
                }
            })?;
            path
        };
        // Secrets reach the job through sbatch's environment (exported to
        // the job by default), never through a script on disk.
        sbatch
            .envs(secret_env)
            .arg(&script_path)
            .stdin(Stdio::null());
        let started = Instant::now();
        let mut pause = Duration::from_secs(1);
        let job_id = loop {
            let output = sbatch.output().map_err(|error| match error.kind() {
                std::io::ErrorKind::NotFound => SlurmError::NotASubmitHost,
                _ => SlurmError::CannotRun {
                    program: "sbatch".to_string(),
                    detail: error.to_string(),
                },
            })?;
            let stdout = String::from_utf8_lossy(&output.stdout);
            let job_id = stdout
                .trim()
                .split(';')
                .next()
                .unwrap_or_default()
                .to_string();
            if output.status.success()
                && !job_id.is_empty()
                && job_id.bytes().all(|b| b.is_ascii_digit())
            {
                break job_id;
            }
            let stderr = String::from_utf8_lossy(&output.stderr);
            let message = stderr
                .trim()
                .lines()
                .last()
                .unwrap_or("no message")
                .to_string();
            // A controller that restarts or is overloaded refuses for a while.
            let transient = [
                "Unable to contact slurm controller",
                "Socket timed out",
                "temporarily unable",
                "Connection refused",
            ]
            .iter()
            .any(|sign| message.contains(sign));
            if !transient
                || started.elapsed() > UNREACHABLE_LIMIT
                || queue.is_cancelled()
                || interrupt::requested()
            {
                return Err(SlurmError::Refused { message });
            }
            tracing::warn!(
                "sbatch: {message}; trying again in {}",
                format_seconds(pause.as_secs_f64())
            );
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(30));
        };
        Ok(job_id)
    }
}
