//! Where a project keeps its state: `.pipe/` under the project root, the
//! cache directory (shareable through `PIPE_CACHE_DIR`), and the run lock.
//! This is the one module that knows the layout of `.pipe/`.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use pipe_cache::ActionKey;

use crate::runs::RunId;
use crate::{EngineError, Result};

/// pipe's own directory in a project.
pub const STATE_DIR: &str = ".pipe";

/// Where pipe places the outputs of `uses:` stages, project-relative.
pub const OUTPUT_DIR: &str = ".pipe/out";

/// The run database of the project at `root`, which may not exist yet.
pub fn runs_db_of(root: &Path) -> PathBuf {
    root.join(STATE_DIR).join("runs.db")
}

/// The project-relative directory of a `uses:` stage's outputs. Each
/// pipeline has its own namespace, so two pipelines of one project that
/// both have a `split` stage never overwrite each other's outputs.
pub fn stage_output_dir(pipeline: &str, stage: &str) -> String {
    format!("{OUTPUT_DIR}/{pipeline}/{stage}")
}

/// Where a worker writes a stage's outputs until it reports success: a
/// sibling of `output_dir` (project-relative), so that publishing them is
/// one rename on the same file system.
pub fn partial_output_dir(root: &Path, output_dir: &str) -> PathBuf {
    let (parent, name) = output_dir.rsplit_once('/').unwrap_or(("", output_dir));
    root.join(parent).join(format!(".{name}.partial"))
}

/// The directories and databases of one project.
#[derive(Debug, Clone)]
pub struct Project {
    pub root: PathBuf,
    pub state_dir: PathBuf,
    pub cache_dir: PathBuf,
}

impl Project {
    /// `root` must be absolute. Creates `.pipe/` on first use.
    pub fn open(root: &Path) -> Result<Project> {
        let state_dir = root.join(STATE_DIR);
        std::fs::create_dir_all(&state_dir).map_err(|e| EngineError::io(&state_dir, e))?;
        crate::gitignore::ignore_state_dir(&state_dir);
        let cache_dir = match std::env::var_os("PIPE_CACHE_DIR") {
            Some(dir) if !dir.is_empty() => {
                let dir = PathBuf::from(dir);
                if dir.is_absolute() {
                    dir
                } else {
                    root.join(dir)
                }
            }
            _ => state_dir.join("cache"),
        };
        Ok(Project {
            root: root.to_path_buf(),
            state_dir,
            cache_dir,
        })
    }

    pub fn runs_db(&self) -> PathBuf {
        runs_db_of(&self.root)
    }

    pub fn stat_db(&self) -> PathBuf {
        self.state_dir.join("stat.db")
    }

    /// A stage's private scratch directory in run `run_id` (holds its
    /// invocation, credentials included; deleted when it ends).
    pub fn scratch_dir(&self, run_id: RunId, pipeline: &str, stage: &str) -> PathBuf {
        self.state_dir
            .join("tmp")
            .join(format!("{run_id}-{pipeline}-{stage}"))
    }

    pub fn log_dir(&self, run_id: RunId) -> PathBuf {
        self.state_dir.join("logs").join(run_id.to_string())
    }

    /// Where a sweep's work trees live while it runs
    /// (`crate::exec`'s workspaces), one folder per run.
    pub fn workspaces_dir(&self) -> PathBuf {
        self.state_dir.join("workspaces")
    }

    /// The fingerprint of the outputs and `.gitignore` last checked to
    /// keep the outputs out of git (`crate::gitignore`).
    pub fn gitignore_checked(&self) -> PathBuf {
        self.state_dir.join("gitignore-checked")
    }

    /// Where every key's resume directory lives.
    pub fn resume_root(&self) -> PathBuf {
        self.state_dir.join("resume")
    }

    /// Where a stage run under `key` keeps what it resumes from
    /// (`Invocation::resume_dir`). Keyed so that only an attempt with the
    /// same params, inputs and implementation ever reads it: any change is
    /// another key, which starts afresh.
    pub fn resume_dir(&self, key: &ActionKey) -> PathBuf {
        self.resume_root().join(key.to_hex())
    }

    /// The resume directory of `key`, made a real directory. What else may
    /// be found at `.pipe/resume` or at its place (a link planted to lead a
    /// worker's writes out of the project, a file) is removed first: the
    /// worst it costs is a fresh start.
    pub fn prepare_resume_dir(&self, key: &ActionKey) -> std::io::Result<PathBuf> {
        let dir = self.resume_dir(key);
        ensure_real_dir(&self.resume_root())?;
        ensure_real_dir(&dir)?;
        Ok(dir)
    }

    /// Removes the resume directory of `key`, whose result is stored:
    /// nothing will resume from it again.
    pub fn remove_resume_dir(&self, key: &ActionKey) {
        let dir = self.resume_dir(key);
        // Does not follow a link: a planted one is removed, not its target.
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(
                "cannot remove the resume state `{}`: {error}",
                dir.display()
            ),
        }
    }

    /// Finds the project that holds `start` (a directory): the nearest
    /// ancestor with a `.pipe/` or `.git/`, else `start` itself.
    pub fn find_root(start: &Path) -> PathBuf {
        start
            .ancestors()
            .find(|dir| dir.join(STATE_DIR).is_dir() || dir.join(".git").exists())
            .unwrap_or(start)
            .to_path_buf()
    }

    /// The pipeline file a command uses when none is named, as git finds
    /// its repository: `pipe.yaml` (or `pipe.yml`) in `start` or the
    /// nearest directory above it that has one, looking no higher than the
    /// project root (the first directory with `.pipe/` or `.git`; without
    /// one, up to `/`). The path is relative to `start` (`../pipe.yaml`),
    /// so messages name it as the user would.
    pub fn find_pipeline_file(start: &Path) -> Option<PathBuf> {
        let mut relative = PathBuf::new();
        for dir in start.ancestors() {
            for name in DEFAULT_PIPELINE_FILES {
                if crate::project_files::yaml::present(&dir.join(name)) {
                    return Some(relative.join(name));
                }
            }
            if dir.join(STATE_DIR).is_dir() || dir.join(".git").exists() {
                return None;
            }
            relative.push("..");
        }
        None
    }
}

/// Makes `path` a directory of its own, not a link to one: anything else
/// there is removed. Two stages may make `.pipe/resume` at once.
fn ensure_real_dir(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(found) if found.is_dir() => return Ok(()),
        Ok(_) => std::fs::remove_file(path)?,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    match std::fs::create_dir(path) {
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            if std::fs::symlink_metadata(path)?.is_dir() {
                Ok(())
            } else {
                Err(error)
            }
        }
        made => made,
    }
}

/// The pipeline files a command looks for when it is given none.
pub const DEFAULT_PIPELINE_FILES: [&str; 2] = ["pipe.yaml", "pipe.yml"];

/// Held while `pipe run` executes: runs in one project take turns, so two
/// of them never race on the same output paths. Released on drop, and by
/// the kernel if the process dies; a run that died may leave stage
/// processes behind, which taking the lock stops (`groups`).
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Waits for the lock, calling `on_wait` once with the holder's pid if
    /// another process has it. Then stops every stage process that a killed
    /// run left behind, so that nothing but the new holder writes outputs.
    pub fn acquire(project: &Project, on_wait: impl FnOnce(Option<u32>)) -> Result<RunLock> {
        let path = project.state_dir.join("run.lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| EngineError::io(&path, e))?;
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            on_wait(holder.trim().parse().ok());
            loop {
                // SAFETY: as above; blocks until the holder releases it.
                if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                    break;
                }
                let error = std::io::Error::last_os_error();
                if error.kind() != std::io::ErrorKind::Interrupted {
                    return Err(EngineError::io(&path, error));
                }
                if crate::interrupt::requested() {
                    return Err(EngineError::Interrupted);
                }
            }
        }
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = write!(file, "{}", std::process::id());
        let stopped = crate::groups::stop_left_behind(&project.state_dir)?;
        crate::running::remove_dead(&project.state_dir);
        if stopped > 0 {
            tracing::warn!(
                "stopped {stopped} process(es) that a killed `pipe run` had left running in this project"
            );
        }
        Ok(RunLock { _file: file })
    }

    /// Removes the staging directories (`.NAME.pipe-tmp-XXXXXX/`) that
    /// restores killed mid-way left beside the outputs in `sites`. Only the
    /// lock's holder may: no other restore can be running in the project.
    pub fn remove_restore_leftovers(&self, root: &Path, sites: &pipe_cache::RestoreSites<'_>) {
        let removed = sites.remove_leftovers(root);
        if !removed.is_empty() {
            tracing::warn!(
                "removed {} staging director{} that a killed restore had left beside outputs",
                removed.len(),
                if removed.len() == 1 { "y" } else { "ies" }
            );
            for path in &removed {
                tracing::info!("removed {}", path.display());
            }
        }
    }
}
