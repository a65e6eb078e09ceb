//! The git state a run is recorded at, read in-process with gix.
//!
//! The commit is read when the run starts (HEAD followed through symbolic
//! and packed refs, a detached HEAD, the `.git` file of a linked worktree
//! or a submodule): a millisecond. Whether the work tree is dirty means
//! comparing every tracked file with the index and the index with HEAD's
//! tree, which grows with the repository (a second in one of a million
//! files), so [`GitProbe`] works it out on a thread of its own and only a
//! run that is recorded waits for it, at its end (docs/ARCHITECTURE.md,
//! "The run record's git state").

use std::path::Path;
use std::thread::JoinHandle;

/// Where a finished run was: the commit HEAD named when it started, and
/// whether tracked files differed from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitState {
    pub commit: String,
    /// `None` when it could not be worked out (an unreadable index).
    pub dirty: Option<bool>,
}

/// A run's git state being found: the commit is known, the dirty flag is
/// being computed in the background.
pub struct GitProbe {
    commit: String,
    dirty: JoinHandle<Option<bool>>,
}

impl GitProbe {
    /// Reads the commit of the repository around `root` and starts working
    /// out its dirty flag. `None` outside a git repository, or in one with
    /// no commit yet: such a run records no git state.
    pub fn start(root: &Path) -> Option<GitProbe> {
        let repository = open(root)?;
        let commit = repository
            .to_thread_local()
            .head_id()
            .ok()?
            .detach()
            .to_string();
        let dirty = std::thread::Builder::new()
            .name("pipe-git-dirty".into())
            .spawn(move || {
                lower_priority();
                is_dirty(&repository.to_thread_local())
            })
            .ok()?;
        Some(GitProbe { commit, dirty })
    }

    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// The state, once the dirty flag is known. Dropping the probe instead
    /// leaves the thread to end on its own: a run that records nothing
    /// never waits for it.
    pub fn finish(self) -> GitState {
        GitState {
            commit: self.commit,
            dirty: self.dirty.join().ok().flatten(),
        }
    }
}

/// The commit and dirty flag of the git work tree at `root`, if any,
/// waiting for both.
pub fn git_state(root: &Path) -> Option<GitState> {
    GitProbe::start(root).map(GitProbe::finish)
}

/// Resolves a git ref (`main`, `origin/main`, `v1.2`, `HEAD~2`, an
/// abbreviated id) to the id of the commit it names, in the repository
/// around `root`.
pub fn git_commit_of(root: &Path, reference: &str) -> Option<String> {
    // Not an option of anything here, but `git rev-parse` refused these and
    // a run reference starting with `-` is a typo of a flag.
    if reference.starts_with('-') {
        return None;
    }
    let repository = open(root)?.to_thread_local();
    let spec = format!("{reference}^{{commit}}");
    let id = repository.rev_parse_single(spec.as_str()).ok()?;
    Some(id.detach().to_string())
}

/// The repository whose work tree holds `root`, found as git finds it
/// (`GIT_DIR`, `GIT_CEILING_DIRECTORIES` honoured). Configuration is read
/// from the repository, the user and the system, never by running the git
/// binary (gix's default), so no subprocess is started.
fn open(root: &Path) -> Option<gix::ThreadSafeRepository> {
    gix::ThreadSafeRepository::discover_with_environment_overrides(root).ok()
}

/// Whether tracked files differ from HEAD: HEAD's tree against the index
/// (something staged), then the index against the work tree (something
/// edited, deleted or of another type; submodules as configured). Untracked
/// files do not count, as `git status --untracked-files=no` did not count
/// them. Stops at the first difference; `None` when the comparison failed
/// part way, rather than a clean flag it did not establish.
fn is_dirty(repository: &gix::Repository) -> Option<bool> {
    use std::ops::ControlFlow;

    let head_tree = repository.head_tree_id_or_empty().ok()?;
    let index = repository.index_or_empty().ok()?;
    let mut staged = false;
    repository
        .tree_index_status(
            &head_tree,
            &index,
            None,
            gix::status::tree_index::TrackRenames::Disabled,
            |_, _, _| {
                staged = true;
                Ok::<_, std::convert::Infallible>(ControlFlow::Break(()))
            },
        )
        .ok()?;
    if staged {
        return Some(true);
    }
    let changes = repository
        .status(gix::features::progress::Discard)
        .ok()?
        .index_worktree_rewrites(None)
        .index_worktree_submodules(gix::status::Submodule::AsConfigured { check_dirty: true })
        .index_worktree_options_mut(|options| {
            // Untracked files are not looked for at all.
            options.dirwalk_options = None;
        })
        .into_index_worktree_iter(Vec::new())
        .ok()?;
    for change in changes {
        change.ok()?;
        return Some(true);
    }
    Some(false)
}

/// The dirty flag is never urgent: on a machine whose cores the stages (or
/// a no-op's own hashing) use, it takes what they leave. On Linux the nice
/// value is per thread, and the threads gix starts from this one inherit it.
fn lower_priority() {
    // SAFETY: gettid and setpriority have no memory effects; a failure
    // leaves the priority as it was, which is harmless.
    unsafe {
        let thread = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, thread, 10);
    }
}

#[cfg(test)]
#[path = "git_tests.rs"]
mod tests;
