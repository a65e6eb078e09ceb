//! The git state a run is recorded at, read in-process with gix.
//!
//! The commit is read when the run starts (HEAD followed through symbolic
//! and packed refs, a detached HEAD, the `.git` file of a linked worktree
//! or a submodule): a millisecond. Whether the work tree is dirty means
//! comparing every tracked file with the index and the index with HEAD's
//! tree, which grows with the repository (a second in one of a million
//! files), so [`GitProbe`] works it out on a thread of its own, started
//! once the run is sure to be recorded and waited for at its end; a run
//! that records nothing never starts it (docs/decisions.md, "The run
//! record's git state").

use std::path::Path;
use std::sync::Mutex;
use std::thread::JoinHandle;

/// Where a finished run was: the commit HEAD named when it started, and
/// whether tracked files differed from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitState {
    pub commit: String,
    /// `None` when it could not be worked out (an unreadable index).
    pub dirty: Option<bool>,
}

/// A run's git state being found: the commit is known from the start, the
/// dirty flag is worked out on a thread of its own once it is wanted.
pub struct GitProbe {
    commit: String,
    repository: gix::ThreadSafeRepository,
    dirty: Mutex<DirtyCheck>,
}

enum DirtyCheck {
    NotStarted,
    Running(JoinHandle<Option<bool>>),
    Done(Option<bool>),
}

impl GitProbe {
    /// Reads the commit of the repository around `root`. `None` outside a
    /// git repository, or in one with no commit yet: such a run records
    /// no git state.
    pub fn start(root: &Path) -> Option<GitProbe> {
        let repository = open(root)?;
        let commit = repository
            .to_thread_local()
            .head_id()
            .ok()?
            .detach()
            .to_string();
        Some(GitProbe {
            commit,
            repository,
            dirty: Mutex::new(DirtyCheck::NotStarted),
        })
    }

    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// Starts comparing the work tree in the background, unless it was
    /// started already. A run calls it as soon as it is sure to be
    /// recorded (a stage runs, or is restored); a run that records nothing
    /// never does, and never pays for the comparison.
    pub fn check_dirty(&self) {
        let mut dirty = lock(&self.dirty);
        if let DirtyCheck::NotStarted = *dirty {
            let repository = self.repository.clone();
            *dirty = match std::thread::Builder::new()
                .name("pipe-git-dirty".into())
                .spawn(move || is_dirty(&repository.to_thread_local()))
            {
                Ok(thread) => DirtyCheck::Running(thread),
                // No thread to be had: worked out here and now instead.
                Err(_) => DirtyCheck::Done(is_dirty(&self.repository.to_thread_local())),
            };
        }
    }

    /// The state, once the dirty flag is known (started now if it was not
    /// yet).
    pub fn finish(&self) -> GitState {
        self.check_dirty();
        let mut dirty = lock(&self.dirty);
        let flag = match std::mem::replace(&mut *dirty, DirtyCheck::NotStarted) {
            DirtyCheck::Running(thread) => thread.join().ok().flatten(),
            DirtyCheck::Done(flag) => flag,
            DirtyCheck::NotStarted => None,
        };
        *dirty = DirtyCheck::Done(flag);
        GitState {
            commit: self.commit.clone(),
            dirty: flag,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The commit and dirty flag of the git work tree at `root`, if any,
/// waiting for both.
pub fn git_state(root: &Path) -> Option<GitState> {
    GitProbe::start(root).map(|probe| probe.finish())
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
    // The index keeps the tree it would write (git's cache-tree, kept by
    // `git commit`, invalidated by `git add`): when it is whole and is
    // HEAD's, nothing is staged, as `git status` concludes too, without
    // reading HEAD's tree into a second index of every tracked file (most
    // of the comparison's CPU in a repository of a million files).
    let staged_nothing = index.tree().is_some_and(|tree| {
        tree.id == head_tree.detach()
            && tree.num_entries.map(|entries| entries as usize) == Some(index.entries().len())
    });
    if !staged_nothing {
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
    }
    let mut changes = repository
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
    match changes.next() {
        None => Some(false),
        Some(change) => change.ok().map(|_| true),
    }
}

#[cfg(test)]
#[path = "git_tests.rs"]
mod tests;
