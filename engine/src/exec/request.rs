//! What `pipe run` was asked, as given, and the one place it becomes the
//! options a run uses: each setting from the first source that gives it
//! (flag, environment, pipeline, pipe.config.yaml, default).

use pipe_cache::remote::ProgressSink;

use super::run::RunOptions;
use crate::executor::{self, Executor};
use crate::link::link_modes_for;
use crate::overrides::ParamOverride;
use crate::pipeline::{ExecutorKind, Pipeline};
use crate::remote;
use crate::runs::DirtySettler;
use crate::Result;

/// On a cluster, `-j` bounds the jobs in the queue, not this machine's
/// cores.
const DEFAULT_CLUSTER_JOBS: usize = 100;

#[derive(Default)]
pub struct RunRequest {
    /// Stage names to bring up to date; empty: every stage.
    pub targets: Vec<String>,
    pub force: Vec<String>,
    pub force_all: bool,
    /// `-j`.
    pub jobs: Option<usize>,
    /// `--executor`.
    pub executor: Option<ExecutorKind>,
    /// `--link`, each a mode or a comma-separated list.
    pub link: Vec<String>,
    /// `--remote`.
    pub remote: Option<String>,
    /// `--remote-read-only`.
    pub remote_read_only: bool,
    /// The command line, for the run record.
    pub argv: Vec<String>,
    /// The `-S` settings the pipeline was loaded with.
    pub overrides: Vec<ParamOverride>,
    /// They are a sweep's, loaded as one run (`pipe run --run` of a sweep run).
    pub sweep: bool,
    /// Where the remote's transfers are reported, when they are shown.
    pub transfers: Option<ProgressSink>,
    /// Settles the run's dirty flag after the run (`RunOptions::git_settler`).
    pub git_settler: Option<DirtySettler>,
    /// `--name`.
    pub name: Option<String>,
    /// `--remove-orphans`.
    pub remove_orphans: bool,
}

impl RunRequest {
    /// The options a run of `pipeline` uses.
    pub fn options(self, pipeline: &Pipeline) -> Result<RunOptions> {
        let executor =
            executor::resolve(&pipeline.root, pipeline.executor.as_ref(), self.executor)?;
        let default_jobs = match executor {
            Executor::Slurm(_) => DEFAULT_CLUSTER_JOBS,
            Executor::Local => std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        };
        let remote = remote::resolve(
            &pipeline.root,
            pipeline.remote.as_ref(),
            self.remote.as_deref(),
            self.remote_read_only,
        )?;
        let transfers = self.transfers;
        Ok(RunOptions {
            targets: self.targets,
            force: self.force,
            force_all: self.force_all,
            jobs: self.jobs.unwrap_or(default_jobs),
            link: link_modes_for(pipeline, &self.link)?.value,
            argv: self.argv,
            overrides: self.overrides,
            remote: remote.map(|config| match transfers {
                Some(sink) => config.with_progress(sink),
                None => config,
            }),
            executor,
            sweep: self.sweep,
            git_settler: self.git_settler,
            name: self.name,
            remove_orphans: self.remove_orphans,
        })
    }
}
