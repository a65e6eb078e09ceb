//! Where stages run: on this machine, or as Slurm batch jobs
//! (docs/scale-out.md). Each setting comes from the first source that gives
//! it: `--executor`, `PIPE_EXECUTOR`, the pipeline's `executor:`, the
//! project's `pipe.config.yaml`.

use std::path::Path;
use std::time::Duration;

use crate::pipeline::{ExecutorKind, ExecutorSpec};
use crate::project_config::load_project_config;
use crate::settings::{Invalid, Setting};
use crate::Result;

/// How pipe talks to Slurm.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmSettings {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub flags: Vec<String>,
    pub poll: Duration,
}

impl SlurmSettings {
    /// One `squeue` for the whole run at most this often once nothing
    /// changes; a finished command is seen sooner, by its exit file.
    pub const DEFAULT_POLL: Duration = Duration::from_secs(5);
}

#[derive(Debug, Clone, PartialEq)]
pub enum Executor {
    Local,
    Slurm(SlurmSettings),
}

/// The executor for a run of the pipeline at `root`: `--executor`,
/// `PIPE_EXECUTOR`, the pipeline's `executor:`, pipe.config.yaml's, else
/// local. The Slurm settings come from the pipeline, else the project.
pub fn resolve(
    root: &Path,
    pipeline: Option<&ExecutorSpec>,
    flag: Option<ExecutorKind>,
) -> Result<Executor> {
    let project = load_project_config(root)?.executor.unwrap_or_default();
    let pipeline = pipeline.cloned().unwrap_or_default();
    let kind = Setting::new("the executor")
        .flag("--executor", flag)
        .env("PIPE_EXECUTOR", |text| {
            ExecutorKind::parse(text).ok_or_else(|| Invalid::expected("`local` or `slurm`"))
        })
        .pipeline(pipeline.kind, pipeline.places.get("type"))
        .project(project.kind, project.places.get("type"))
        .resolve()?
        .map_or(ExecutorKind::Local, |kind| kind.value);
    Ok(match kind {
        ExecutorKind::Local => Executor::Local,
        ExecutorKind::Slurm => {
            let from_files = |name: &'static str, pick: fn(&ExecutorSpec) -> Option<String>| {
                Setting::new(name)
                    .pipeline(pick(&pipeline), pipeline.places.get(name))
                    .project(pick(&project), project.places.get(name))
                    .resolve()
                    .map(|found| found.map(|found| found.value))
            };
            Executor::Slurm(SlurmSettings {
                partition: from_files("partition", |spec| spec.partition.clone())?,
                account: from_files("account", |spec| spec.account.clone())?,
                qos: from_files("qos", |spec| spec.qos.clone())?,
                flags: Setting::new("flags")
                    .pipeline(pipeline.flags.clone(), pipeline.places.get("flags"))
                    .project(project.flags.clone(), project.places.get("flags"))
                    .resolve()?
                    .map(|flags| flags.value)
                    .unwrap_or_default(),
                poll: Setting::new("poll")
                    .pipeline(pipeline.poll, pipeline.places.get("poll"))
                    .project(project.poll, project.places.get("poll"))
                    .resolve()?
                    .map_or(SlurmSettings::DEFAULT_POLL, |poll| poll.value),
            })
        }
    })
}
