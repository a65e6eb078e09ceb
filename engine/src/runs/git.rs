//! The git state a run is recorded at.
//!
//! The commit is read from the files under `.git` when the run starts
//! (HEAD followed through symbolic and packed refs, a detached HEAD, the
//! `.git` file of a linked worktree or a submodule): microseconds, no
//! process. Whether the work tree is dirty is one `git status`, which
//! stats every tracked file and so grows with the repository (seconds in
//! one of a million files): [`GitProbe`] starts it once the run is sure to
//! be recorded, and a run that records nothing never does. When `pipe`
//! gives it a [`DirtySettler`], the check runs in a process of its own
//! that writes the flag into the run's row, so that a run waits for it at
//! most [`DIRTY_GRACE`] at its end (docs/decisions.md, "The run record's
//! git state").

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pipe_cache::untrusted::{self, Limit};

use super::RunId;

/// How long the end of a run waits for a settler still at work: enough for
/// a small repository's `git status`, little against the stages.
pub const DIRTY_GRACE: Duration = Duration::from_millis(30);

/// The settler's niceness: its `git status` (every core, in a large
/// repository) yields to the run's stages, which nothing waits on it for.
const SETTLER_NICENESS: libc::c_int = 10;

/// The most of a file under `.git` that is read to find the commit: a ref
/// is one line; a longer file is not one git wrote.
const REF_FILE: Limit = Limit {
    bytes: 4096,
    what: "a git ref file",
};

/// How long pipe waits for a git command it runs for itself: far longer
/// than any takes in a sound repository. git waits forever on a FIFO
/// planted where it reads (its config, its index); past this it is killed
/// and counts as a git that cannot answer.
const GIT_DEADLINE: Duration = Duration::from_secs(30);

/// [`GIT_DEADLINE`], or `PIPE_GIT_DEADLINE_MS` where a test shortens it.
fn git_deadline() -> Duration {
    std::env::var("PIPE_GIT_DEADLINE_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(GIT_DEADLINE, Duration::from_millis)
}

/// The most of `packed-refs` that is read (about 700,000 refs); a ref past
/// it is not found, and the run's commit is then unknown.
const PACKED_REFS_LIMIT: u64 = 64 << 20;

/// The longest line of `packed-refs` read: an object id, a space and a
/// ref name; a longer one is not git's, and ends the search.
const PACKED_REF_LINE_LIMIT: u64 = 8192;

/// Where a finished run was: the commit HEAD named when it started, and
/// whether tracked files differed from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitState {
    pub commit: String,
    /// `None` when it is not known here: it could not be worked out, or a
    /// settler is still at work and writes it into the run's row itself.
    pub dirty: Option<bool>,
}

/// The program that works out a recorded run's dirty flag in a process of
/// its own and writes it into the run's row (`pipe` itself, through a
/// hidden command that calls [`settle_git_dirty`]). It is given the run
/// database, the run's id and the work tree after `args`.
#[derive(Debug, Clone)]
pub struct DirtySettler {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

/// A run's git state being found: the commit is known from the start, the
/// dirty flag is worked out once it is wanted.
pub struct GitProbe {
    commit: String,
    /// The branch HEAD names (`refs/heads/X`), or the one the CI says it
    /// builds (`ci_ref`); `None` on a detached HEAD outside CI.
    branch: Option<String>,
    root: PathBuf,
    settler: Option<(DirtySettler, PathBuf)>,
    /// The run's row, once written (`recorded_as`).
    run_id: OnceLock<RunId>,
    dirty: Mutex<DirtyCheck>,
}

enum DirtyCheck {
    NotStarted,
    InThread(JoinHandle<Option<bool>>),
    /// A settler process: it writes the flag into the run's row.
    InSettler(Child),
    Done(Option<bool>),
}

impl GitProbe {
    /// Reads the commit of the repository around `root`. `None` outside a
    /// git repository, or in one with no commit yet: such a run records
    /// no git state.
    pub fn start(root: &Path) -> Option<GitProbe> {
        let (commit, head_branch) = head_commit(root)?;
        Some(GitProbe {
            commit,
            branch: super::ci_ref::ci_branch().or(head_branch),
            root: root.to_path_buf(),
            settler: None,
            run_id: OnceLock::new(),
            dirty: Mutex::new(DirtyCheck::NotStarted),
        })
    }

    /// Lets the dirty flag of the run's row in `runs_db` be settled by
    /// `settler` rather than waited for.
    pub fn settle_with(&mut self, settler: DirtySettler, runs_db: &Path) {
        self.settler = Some((settler, runs_db.to_path_buf()));
    }

    /// The run's row is `run_id`: from now on a settler may write into it.
    /// Before, the flag is worked out in this process.
    pub fn recorded_as(&self, run_id: RunId) {
        let _ = self.run_id.set(run_id);
    }

    pub fn commit(&self) -> &str {
        &self.commit
    }

    pub fn branch(&self) -> Option<&str> {
        self.branch.as_deref()
    }

    /// The merged branch's head, in a CI job that runs a merge commit.
    pub fn head_commit(&self) -> Option<String> {
        match super::ci_ref::merged_head()? {
            super::ci_ref::MergedHead::Named(sha) => Some(sha),
            super::ci_ref::MergedHead::SecondParent => second_parent(&self.root),
        }
    }

    /// Starts comparing the work tree with HEAD, unless it was started
    /// already. A run calls it as soon as it is sure to be recorded (a
    /// stage runs, or is restored); a run that records nothing never does,
    /// and never pays for the comparison.
    pub fn check_dirty(&self) {
        let mut dirty = lock(&self.dirty);
        if !matches!(*dirty, DirtyCheck::NotStarted) {
            return;
        }
        if let Some(settler) = self.spawn_settler() {
            *dirty = DirtyCheck::InSettler(settler);
            return;
        }
        let root = self.root.clone();
        *dirty = match std::thread::Builder::new()
            .name("pipe-git-dirty".into())
            .spawn(move || work_tree_is_dirty(&root))
        {
            Ok(thread) => DirtyCheck::InThread(thread),
            // No thread to be had: worked out here and now instead.
            Err(_) => DirtyCheck::Done(work_tree_is_dirty(&self.root)),
        };
    }

    /// The settler, in a session of its own so that Ctrl-C and a kill of
    /// the run's process group leave it to finish its write, and niced.
    fn spawn_settler(&self) -> Option<Child> {
        use std::os::unix::process::CommandExt;

        let (settler, runs_db) = self.settler.as_ref()?;
        // A settler writes into the run's row: none before the row is.
        let run_id = self.run_id.get()?;
        let mut command = Command::new(&settler.program);
        command
            .args(&settler.args)
            .arg(runs_db)
            .arg(run_id.to_string())
            .arg(&self.root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setsid and setpriority are async-signal-safe system calls
        // and touch no memory.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Best effort: a settler at the run's priority is still right.
                libc::setpriority(libc::PRIO_PROCESS, 0, SETTLER_NICENESS);
                Ok(())
            });
        }
        match command.spawn() {
            Ok(child) => Some(child),
            Err(error) => {
                tracing::debug!("no settler for the dirty flag ({error}); checked here");
                None
            }
        }
    }

    /// The state once the dirty flag is settled, waiting for it (started
    /// now if it was not yet). After a settler, `dirty` is `None` here: the
    /// flag is in the run's row.
    pub fn finish(&self) -> GitState {
        self.finish_waiting(None)
    }

    /// The state, waiting at most `grace` for a settler; one still at work
    /// then is left to write the flag into the run's row by itself. A check
    /// in this process is always waited for.
    pub fn finish_within(&self, grace: Duration) -> GitState {
        self.finish_waiting(Some(grace))
    }

    fn finish_waiting(&self, grace: Option<Duration>) -> GitState {
        self.check_dirty();
        let mut dirty = lock(&self.dirty);
        let flag = match std::mem::replace(&mut *dirty, DirtyCheck::NotStarted) {
            DirtyCheck::InThread(thread) => thread.join().ok().flatten(),
            // The flag is in the run's row, or will be once a settler still
            // at work after the grace writes it: nothing to wait for again.
            DirtyCheck::InSettler(mut child) => {
                wait_for(&mut child, grace);
                None
            }
            DirtyCheck::Done(flag) => flag,
            DirtyCheck::NotStarted => None,
        };
        *dirty = DirtyCheck::Done(flag);
        self.state(flag)
    }

    fn state(&self, dirty: Option<bool>) -> GitState {
        GitState {
            commit: self.commit.clone(),
            dirty,
        }
    }
}

/// Waits for `child` to exit, at most `grace` (`None`: however long it
/// takes).
fn wait_for(child: &mut Child, grace: Option<Duration>) {
    let Some(grace) = grace else {
        let _ = child.wait();
        return;
    };
    let deadline = Instant::now() + grace;
    while let Ok(None) = child.try_wait() {
        if Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the settler does: works out the dirty flag of the work tree at
/// `root` and writes it into run `run_id`'s row of `runs_db`, unless the
/// row has one already. An unknown flag writes nothing.
pub fn settle_git_dirty(runs_db: &Path, run_id: RunId, root: &Path) -> crate::Result<Option<bool>> {
    let flag = work_tree_is_dirty(root);
    if let Some(dirty) = flag {
        super::RunDb::open(runs_db)?.settle_git_dirty(run_id, dirty)?;
    }
    Ok(flag)
}

/// Resolves a git ref (`main`, `origin/main`, `v1.2`, `HEAD~2`, an
/// abbreviated id) to the id of the commit it names, in the repository
/// around `root`, with `git rev-parse`; `None` where git is not installed.
pub fn git_commit_of(root: &Path, reference: &str) -> Option<String> {
    // A run reference starting with `-` is a typo of a flag, never an
    // option for git.
    if reference.starts_with('-') {
        return None;
    }
    let spec = format!("{reference}^{{commit}}");
    let mut command = git_command(root);
    command
        .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
        .arg(spec);
    let output = git_output(command, None)?;
    if !output.status.success() {
        return None;
    }
    object_id(std::str::from_utf8(&output.stdout).ok()?.trim())
}

/// The second parent of HEAD, a merge commit, as the commit itself names
/// it: a CI's depth-1 checkout of a pull request's merge commit (GitHub's
/// default) has neither parent, so `HEAD^2` does not resolve there.
fn second_parent(root: &Path) -> Option<String> {
    let mut command = git_command(root);
    command.args(["cat-file", "commit", "HEAD"]);
    let output = git_output(command, None)?;
    if !output.status.success() {
        return None;
    }
    let text = std::str::from_utf8(&output.stdout).ok()?;
    text.lines()
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.strip_prefix("parent "))
        .nth(1)
        .and_then(|parent| object_id(parent.trim()))
}

/// The branches and tags that point at `commit` (`main`, `v1.2`,
/// `origin/feature`), for saying where a run ran; empty where git is not
/// installed or none does.
pub fn refs_at(root: &Path, commit: &str) -> Vec<String> {
    if !commit.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Vec::new();
    }
    let mut command = git_command(root);
    command
        .args(["for-each-ref", "--format=%(refname:short)"])
        .arg(format!("--points-at={commit}"))
        .args(["refs/heads", "refs/tags", "refs/remotes"]);
    match git_output(command, None) {
        Some(output) if output.status.success() => String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|name| !name.ends_with("/HEAD"))
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    }
}

fn git_command(root: &Path) -> Command {
    let mut command = Command::new("git");
    command.arg("-C").arg(root).stdin(Stdio::null());
    command
}

/// The output of git `command` (its stdout; `input` written to its stdin),
/// `None` when it could not start or ran past [`GIT_DEADLINE`], when it is
/// killed.
pub fn git_output(mut command: Command, input: Option<Vec<u8>>) -> Option<std::process::Output> {
    use std::io::Write;

    command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command.spawn().ok()?;
    let writer = child.stdin.take().map(|mut stdin| {
        let input = input.unwrap_or_default();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        })
    });
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let deadline = Instant::now() + git_deadline();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let stdout = reader.join().ok()?;
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    Some(std::process::Output {
        status: status?,
        stdout,
        stderr: Vec::new(),
    })
}

/// Whether git can be asked about the repository around `root` without
/// waiting forever: its HEAD reads as pipe reads it (a regular file, not
/// a FIFO git would block on). Where git's own variables choose the
/// repository, git is asked.
pub fn git_can_answer(root: &Path) -> bool {
    if DISCOVERY
        .iter()
        .any(|name| std::env::var_os(name).is_some())
    {
        return true;
    }
    find_git_dir(root).is_some_and(|git_dir| read_small(&git_dir.join("HEAD")).is_some())
}

/// Whether tracked files differ from HEAD, as `git status` sees them:
/// staged, edited, deleted, of another type, submodules as configured.
/// Untracked files do not count. Stops at the first line git prints; `None`
/// when git failed or is not installed, rather than a clean flag it did
/// not establish. `--no-optional-locks`: the index is not rewritten under
/// the user's feet.
fn work_tree_is_dirty(root: &Path) -> Option<bool> {
    let mut child = git_command(root)
        .args([
            "--no-optional-locks",
            "status",
            "--porcelain",
            "-z",
            "--untracked-files=no",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    // The first byte, or the end, read on a thread of its own so that a
    // git that never answers (a FIFO planted as its index or config) is
    // killed at the deadline like every git pipe runs for itself, and the
    // flag is then not known.
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut first = [0u8; 1];
        let read = loop {
            match stdout.read(&mut first) {
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        let _ = sender.send(read.ok());
    });
    let read = receiver.recv_timeout(git_deadline()).ok().flatten();
    match read {
        Some(0) => child.wait().ok()?.success().then_some(false),
        Some(_) => {
            // One changed path is the answer; the rest is not listed.
            let _ = child.kill();
            let _ = child.wait();
            Some(true)
        }
        None => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

/// The commit HEAD names, read from the files git keeps it in; the git
/// binary where those are not laid out as this reads them (`GIT_DIR` and
/// friends set, the reftable format).
/// The commit HEAD names, and the branch when HEAD is one
/// (`ref: refs/heads/X`).
fn head_commit(root: &Path) -> Option<(String, Option<String>)> {
    if DISCOVERY
        .iter()
        .any(|name| std::env::var_os(name).is_some())
    {
        return git_commit_of(root, "HEAD").map(|commit| (commit, None));
    }
    let git_dir = find_git_dir(root)?;
    let common = common_dir(&git_dir);
    if common.join("reftable").is_dir() {
        return git_commit_of(root, "HEAD").map(|commit| (commit, None));
    }
    let mut name = "HEAD".to_string();
    let mut branch = None;
    // Symbolic refs nest rarely; git itself stops at five.
    for _ in 0..5 {
        match read_ref(&git_dir, &common, &name)? {
            RefValue::Id(id) => return Some((id, branch)),
            RefValue::Symbolic(target) => {
                if branch.is_none() {
                    branch = target.strip_prefix("refs/heads/").map(str::to_string);
                }
                name = target
            }
        }
    }
    None
}

/// The variables by which git finds a repository other than by looking
/// for `.git` above the working directory.
const DISCOVERY: [&str; 4] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_COMMON_DIR",
];

/// The git directory of the work tree holding `start`: the first `.git`
/// above it, a directory or a file naming one (`gitdir: ...`).
fn find_git_dir(start: &Path) -> Option<PathBuf> {
    for dir in start.ancestors() {
        let dot_git = dir.join(".git");
        let Ok(metadata) = std::fs::metadata(&dot_git) else {
            continue;
        };
        if metadata.is_dir() {
            return dot_git.join("HEAD").is_file().then_some(dot_git);
        }
        let text = read_small(&dot_git)?;
        let target = text.strip_prefix("gitdir:")?.trim();
        return Some(dir.join(target));
    }
    None
}

/// Where the refs shared by all work trees are: the `commondir` a linked
/// worktree's git directory names, else the git directory itself.
fn common_dir(git_dir: &Path) -> PathBuf {
    match read_small(&git_dir.join("commondir")) {
        Some(common) => git_dir.join(common.trim()),
        None => git_dir.to_path_buf(),
    }
}

enum RefValue {
    Id(String),
    Symbolic(String),
}

/// A ref's value: its loose file (a worktree's own refs in its git
/// directory, the rest in the common one), else its line in packed-refs.
fn read_ref(git_dir: &Path, common: &Path, name: &str) -> Option<RefValue> {
    if name != "HEAD" && !is_plain_ref_name(name) {
        return None;
    }
    let per_worktree = name == "HEAD"
        || name.starts_with("refs/worktree/")
        || name.starts_with("refs/bisect/")
        || name.starts_with("refs/rewritten/");
    let dir = if per_worktree { git_dir } else { common };
    if let Some(text) = read_small(&dir.join(name)) {
        let text = text.trim();
        return match text.strip_prefix("ref:") {
            Some(target) => Some(RefValue::Symbolic(target.trim().to_string())),
            None => object_id(text).map(RefValue::Id),
        };
    }
    packed_ref(common, name).map(RefValue::Id)
}

/// A ref name that names a file under the git directory and nothing else:
/// under `refs/`, no `..`, no empty or hidden component.
fn is_plain_ref_name(name: &str) -> bool {
    name.starts_with("refs/")
        && name
            .split('/')
            .all(|part| !part.is_empty() && !part.starts_with('.') && !part.contains('\\'))
}

/// `name`'s id in `packed-refs`, read as `read_small` reads (never from a
/// FIFO or a device, whatever a link leads to), line by bounded line.
fn packed_ref(common: &Path, name: &str) -> Option<String> {
    use std::io::BufRead;

    let (file, _) = untrusted::open_regular_through_links(&common.join("packed-refs")).ok()?;
    let mut reader = std::io::BufReader::new(file.take(PACKED_REFS_LIMIT));
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(PACKED_REF_LINE_LIMIT)
            .read_until(b'\n', &mut line)
            .ok()?;
        if read == 0 || (read as u64 == PACKED_REF_LINE_LIMIT && !line.ends_with(b"\n")) {
            return None;
        }
        let Ok(line) = std::str::from_utf8(&line) else {
            continue;
        };
        if let Some((id, refname)) = line.split_once(' ') {
            if refname.trim_end() == name {
                return object_id(id);
            }
        }
    }
}

/// The contents of a small file, `None` when absent, unreadable, larger
/// than a ref file can be, or not a regular file: a FIFO is refused
/// without waiting for a writer, and a link is followed (git may write
/// one) but not to a FIFO or a device.
fn read_small(path: &Path) -> Option<String> {
    let bytes = untrusted::read_through_links(path, REF_FILE).ok()?;
    String::from_utf8(bytes).ok()
}

/// `text` when it is a full object id: 40 (SHA-1) or 64 (SHA-256)
/// lowercase hex digits.
fn object_id(text: &str) -> Option<String> {
    let hex = text
        .bytes()
        .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    (hex && matches!(text.len(), 40 | 64)).then(|| text.to_string())
}

#[cfg(test)]
#[path = "git_tests.rs"]
mod tests;

/// Of `files` (absolute, in the work tree at `root`), those whose content
/// git says differs from HEAD: staged or edited. Empty outside a git work
/// tree, or when git cannot answer (a file pipe may then rewrite is named
/// with its old values by the caller, so nothing is lost unseen).
pub fn files_with_uncommitted_edits(root: &Path, files: &[PathBuf]) -> Vec<PathBuf> {
    if files.is_empty() || !root.join(".git").exists() {
        return Vec::new();
    }
    let mut command = git_command(root);
    command
        .args([
            "--no-optional-locks",
            "status",
            "--porcelain",
            "-z",
            "--untracked-files=no",
            "--",
        ])
        .args(files);
    let Some(output) = git_output(command, None).filter(|output| output.status.success()) else {
        return Vec::new();
    };
    // `XY PATH\0` entries, paths relative to the root; a rename's second
    // path is an entry of its own, which names no file here.
    let listed: Vec<PathBuf> = output
        .stdout
        .split(|&byte| byte == 0)
        .filter_map(|entry| std::str::from_utf8(entry.get(3..)?).ok())
        .map(|path| root.join(path))
        .collect();
    let canonical = |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let listed: Vec<PathBuf> = listed.iter().map(|path| canonical(path)).collect();
    files
        .iter()
        .filter(|file| listed.contains(&canonical(file)))
        .cloned()
        .collect()
}
