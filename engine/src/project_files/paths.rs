//! Project-relative paths for deps, outs and metrics (`ProjectPath`), and
//! where they really are once symlinks are followed.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::path::{Component, Path, PathBuf};

/// pipe's own directory: cache, run records, built-in stages' outputs.
pub(crate) const PIPE_DIR: &str = ".pipe";
/// The repository with its history.
pub(crate) const GIT_DIR: &str = ".git";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathProblem {
    Empty,
    Absolute,
    EscapesRoot,
    IsRoot,
    /// A NUL byte, which no file name can hold (a YAML `"\0"`, or a param).
    Nul,
}

/// A path inside the project, as pipe keeps it once it has been checked:
/// relative, normal (`a/b`: `/` between parts, no `.`, `..` or empty
/// part), not the root itself, no NUL. The loader makes one for each
/// dependency and output it reads (`ProjectPath::new`), and a path read
/// back from a stored result is made one by the cache's own rule
/// (`ProjectPath::stored`); code that holds one never checks or
/// normalises it again. It compares, hashes, prints and serialises as its
/// text, so a key manifest, a run record or a JSON line holds the very
/// string it held when paths were `String`s.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct ProjectPath(String);

impl ProjectPath {
    /// `./a//b/` -> `a/b`, `a/../b` -> `b`; refused when it is empty,
    /// absolute (`/x`, `~x`, `C:/x`), leaves the project, is the project
    /// itself or holds a NUL. Paths are compared as text afterwards, so
    /// every spelling of one path must normalise alike.
    pub(crate) fn new(path: &str) -> Result<ProjectPath, PathProblem> {
        normalize(path).map(ProjectPath)
    }

    /// A path a stored result or a run record names, which pipe did not
    /// write itself this time: taken only when the cache's rule finds it
    /// plain, normal and outside `.git/` and `.pipe/` but `.pipe/out/`
    /// (`pipe_cache::check_relative_path`, whose refusal it returns).
    pub(crate) fn stored(path: &str) -> Result<ProjectPath, &'static str> {
        pipe_cache::check_relative_path(path)?;
        Ok(ProjectPath(path.to_string()))
    }

    /// A path under pipe's own layout (`.pipe/out/PIPELINE/STAGE/...`),
    /// composed by pipe from names the loader checked: no user text is
    /// joined in unchecked, so it is taken as written (in debug builds,
    /// asserted normal).
    pub(crate) fn of_pipe_layout(path: String) -> ProjectPath {
        debug_assert_eq!(normalize(&path).as_deref(), Ok(path.as_str()));
        ProjectPath(path)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `.pipe` or `.git` when the path is or lies inside one of them.
    pub(crate) fn protected_dir(&self) -> Option<&'static str> {
        protected_dir(&self.0)
    }
}

impl Deref for ProjectPath {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

/// Maps keyed by `String` or `ProjectPath` are looked up with a `&str`.
impl Borrow<str> for ProjectPath {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<Path> for ProjectPath {
    fn as_ref(&self) -> &Path {
        Path::new(&self.0)
    }
}

impl fmt::Display for ProjectPath {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl From<ProjectPath> for String {
    fn from(path: ProjectPath) -> String {
        path.0
    }
}

impl PartialEq<str> for ProjectPath {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ProjectPath {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for ProjectPath {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<ProjectPath> for String {
    fn eq(&self, other: &ProjectPath) -> bool {
        *self == other.0
    }
}

impl PartialEq<ProjectPath> for str {
    fn eq(&self, other: &ProjectPath) -> bool {
        self == other.0
    }
}

/// `./a//b/` -> `a/b`, `a/../b` -> `b`: what `ProjectPath::new` keeps.
fn normalize(path: &str) -> Result<String, PathProblem> {
    if path.trim().is_empty() {
        return Err(PathProblem::Empty);
    }
    if path.contains('\0') {
        return Err(PathProblem::Nul);
    }
    if path.starts_with('/') || path.starts_with('~') || looks_like_windows_drive(path) {
        return Err(PathProblem::Absolute);
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(PathProblem::EscapesRoot);
                }
            }
            _ => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Err(PathProblem::IsRoot);
    }
    Ok(parts.join("/"))
}

fn looks_like_windows_drive(path: &str) -> bool {
    let bytes = path.as_bytes();
    bytes.len() >= 3
        && bytes[0].is_ascii_alphabetic()
        && bytes[1] == b':'
        && (bytes[2] == b'\\' || bytes[2] == b'/')
}

/// `a/b/c` -> `a/b`, `a`: the directories that could hold `path`.
pub(crate) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.char_indices()
        .rev()
        .filter(|(_, ch)| *ch == '/')
        .map(move |(index, _)| &path[..index])
}

/// `.pipe` or `.git` when the normalised `path` is or lies inside one of
/// them. Compared without case: on a case-insensitive file system `.GIT`
/// is the repository.
pub(crate) fn protected_dir(path: &str) -> Option<&'static str> {
    let first = path.split('/').next().unwrap_or(path);
    [PIPE_DIR, GIT_DIR]
        .into_iter()
        .find(|dir| first.eq_ignore_ascii_case(dir))
}

pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Where a project-relative path really is once symlinks are followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RealPath {
    /// Where it is written: no symlink on the way. `exists` is false for a
    /// directory pipe would create.
    AsWritten { exists: bool },
    /// Elsewhere in the project (`path`, project-relative), through a symlink.
    Moved { path: String, exists: bool },
    /// Outside the project: `link` (project-relative, as written) is the
    /// symlink that leads to `target`.
    Outside { link: String, target: PathBuf },
}

/// Follows symlinks in project-relative paths. Each directory is looked at
/// once (one `lstat`, and a `canonicalize` only for a symlink), and nothing
/// below a directory that does not exist is looked at, so checking many
/// outputs under a few directories costs a few system calls.
pub(crate) struct RealPaths {
    root: PathBuf,
    known: HashMap<String, RealPath>,
}

impl RealPaths {
    pub(crate) fn new(root: &Path) -> RealPaths {
        RealPaths {
            root: root.canonicalize().unwrap_or_else(|_| root.to_path_buf()),
            known: HashMap::new(),
        }
    }

    /// Where the directory `dir` (normalised; `""` is the root) really is.
    pub(crate) fn dir(&mut self, dir: &str) -> RealPath {
        if dir.is_empty() {
            return RealPath::AsWritten { exists: true };
        }
        if let Some(known) = self.known.get(dir) {
            return known.clone();
        }
        let (real, looked) = self.entry(dir);
        // Only what cost a system call is worth remembering; a path under a
        // missing or outside directory is found again without one.
        if looked {
            self.known.insert(dir.to_string(), real.clone());
        }
        real
    }

    /// Where `path` (normalised) itself really is, following a symlink at
    /// its last component too. Remembered like a directory: a source that
    /// many stages read (a matrix's shared input) is looked at once.
    pub(crate) fn path(&mut self, path: &str) -> RealPath {
        self.dir(path)
    }

    /// Where the directory holding `path` is: what pipe writes into when it
    /// creates, removes or restores `path` (a symlink at `path` itself is
    /// replaced, not followed).
    pub(crate) fn parent(&mut self, path: &str) -> RealPath {
        self.dir(parent_of(path))
    }

    /// Where `written` is, and whether finding out took a system call.
    fn entry(&mut self, written: &str) -> (RealPath, bool) {
        let (parent, name) = written.rsplit_once('/').unwrap_or(("", written));
        let real_parent = match self.dir(parent) {
            RealPath::AsWritten { exists: true } => parent.to_string(),
            RealPath::Moved { path, exists: true } => path,
            RealPath::AsWritten { exists: false } => {
                return (RealPath::AsWritten { exists: false }, false)
            }
            RealPath::Moved {
                path,
                exists: false,
            } => {
                let path = join(&path, name);
                return (
                    RealPath::Moved {
                        path,
                        exists: false,
                    },
                    false,
                );
            }
            RealPath::Outside { link, target } => {
                let target = target.join(name);
                return (RealPath::Outside { link, target }, false);
            }
        };
        let real = join(&real_parent, name);
        let full = self.root.join(&real);
        let placed = |path: String, exists: bool| {
            if path == written {
                RealPath::AsWritten { exists }
            } else {
                RealPath::Moved { path, exists }
            }
        };
        let real_path = match std::fs::symlink_metadata(&full) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                let (target, exists) = match full.canonicalize() {
                    Ok(target) => (target, true),
                    // A dangling link: where it points, by its text.
                    Err(_) => {
                        let text = std::fs::read_link(&full).unwrap_or_default();
                        let directory = full.parent().unwrap_or(&self.root);
                        (lexically_normal(&directory.join(text)), false)
                    }
                };
                match target.strip_prefix(&self.root) {
                    Ok(inside) => placed(inside.to_string_lossy().into_owned(), exists),
                    Err(_) => RealPath::Outside {
                        link: written.to_string(),
                        target,
                    },
                }
            }
            Ok(_) => placed(real, true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => placed(real, false),
            // Unreadable: what is there is not known, so nothing is assumed
            // to be missing below it.
            Err(_) => placed(real, true),
        };
        (real_path, true)
    }
}

fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}

/// `/a/b/../c` -> `/a/c` without asking the file system.
fn lexically_normal(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal
}

/// Why pipe will not delete, write or read an output where it lies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeOutput {
    /// A directory on its way is a symbolic link (`link`) out of the project.
    #[error(
        "output `{out_path}` is outside the project: `{link}` is a symbolic link to `{}`; pipe \
         does not delete or write files it does not own. Remove the link or change the output's path",
        .target.display()
    )]
    DirectoryOutside {
        out_path: String,
        link: String,
        target: PathBuf,
    },
    /// Its directory is really `real`, inside `dir/` (`.git`, `.pipe`).
    #[error(
        "output `{out_path}` leads into `{dir}/` through a symbolic link (its directory is really \
         `{real}`); pipe does not delete or write files there. Remove the link or change the output's path"
    )]
    DirectoryProtected {
        out_path: String,
        dir: &'static str,
        real: String,
    },
    /// The command left a symbolic link to nothing; `detail` is why it
    /// does not resolve.
    #[error(
        "output `{out_path}` is a symbolic link that leads nowhere ({detail}); write the output itself"
    )]
    DanglingLink { out_path: String, detail: String },
    #[error(
        "output `{out_path}` is a symbolic link to `{}`, outside the project; pipe does not read or \
         store files it does not own. Write the output itself, or copy the file into the project",
        .target.display()
    )]
    LinkOutside { out_path: String, target: PathBuf },
    /// The link leads to `inside`, project-relative, under `dir/`.
    #[error(
        "output `{out_path}` is a symbolic link into `{dir}/` (`{inside}`); pipe does not store \
         files from there. Write the output itself"
    )]
    LinkProtected {
        out_path: String,
        dir: &'static str,
        inside: String,
    },
    /// A path a cached result names that cannot be the project's: `problem`
    /// is `pipe_cache::check_relative_path`'s.
    #[error("refusing to restore `{}`, which {problem}", pipe_protocol::excerpt(.path))]
    NotProjectRelative { path: String, problem: &'static str },
}

/// Refuses to let pipe delete or write `out_path` (project-relative, as
/// declared) when a symlink on the way leads outside the project or into
/// `.git/` or `.pipe/`. The spec is checked when the pipeline is loaded;
/// this repeats the check right before outputs are removed or restored,
/// since a symlink may appear in between. It looks only at the output's
/// directories, a handful of `lstat`s.
pub(crate) fn check_output_location(
    root: &Path,
    out_path: &ProjectPath,
) -> Result<(), UnsafeOutput> {
    // Built-in stages' outputs are placed in `.pipe/out/` by pipe itself,
    // wherever the user has put `.pipe/`.
    if out_path.protected_dir().is_some() {
        return Ok(());
    }
    let mut real_paths = RealPaths::new(root);
    match real_paths.parent(out_path) {
        RealPath::AsWritten { .. } => Ok(()),
        RealPath::Outside { link, target } => Err(UnsafeOutput::DirectoryOutside {
            out_path: out_path.to_string(),
            link,
            target,
        }),
        RealPath::Moved { path, .. } => match protected_dir(&path) {
            None => Ok(()),
            Some(dir) => Err(UnsafeOutput::DirectoryProtected {
                out_path: out_path.to_string(),
                dir,
                real: path,
            }),
        },
    }
}

/// Checks an output a stage's command has just written, before pipe reads
/// it: its directories as `check_output_location` wants them, and the
/// output itself, should the command have made it a symbolic link,
/// leading to a place inside the project and outside `.git/` and `.pipe/`.
/// So a command that swaps a directory for a link (`ln -s /outside d`)
/// gets nothing outside the project read, stored or pushed.
pub(crate) fn check_output_after_command(
    root: &Path,
    out_path: &ProjectPath,
) -> Result<(), UnsafeOutput> {
    check_output_location(root, out_path)?;
    let full = root.join(out_path.as_str());
    let is_link = std::fs::symlink_metadata(&full)
        .map(|metadata| metadata.file_type().is_symlink())
        .unwrap_or(false);
    if !is_link {
        return Ok(());
    }
    let target = full
        .canonicalize()
        .map_err(|error| UnsafeOutput::DanglingLink {
            out_path: out_path.to_string(),
            detail: error.to_string(),
        })?;
    let real_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let inside = target
        .strip_prefix(&real_root)
        .ok()
        .and_then(|inside| inside.to_str());
    match inside {
        None => Err(UnsafeOutput::LinkOutside {
            out_path: out_path.to_string(),
            target,
        }),
        Some(inside) => match protected_dir(inside) {
            None => Ok(()),
            Some(dir) => Err(UnsafeOutput::LinkProtected {
                out_path: out_path.to_string(),
                dir,
                inside: inside.to_string(),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_and_refuses_escapes() {
        assert_eq!(normalize("./a//b/"), Ok("a/b".to_string()));
        assert_eq!(normalize("a/../b"), Ok("b".to_string()));
        assert_eq!(normalize("../x"), Err(PathProblem::EscapesRoot));
        assert_eq!(normalize("/etc/passwd"), Err(PathProblem::Absolute));
        assert_eq!(normalize("./"), Err(PathProblem::IsRoot));
        assert_eq!(normalize(""), Err(PathProblem::Empty));
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), vec!["a/b", "a"]);
    }

    #[test]
    fn a_project_path_is_made_normal_once_and_serialises_as_the_text_it_was() {
        let path = ProjectPath::new("./data//train.csv").unwrap();
        assert_eq!(path, "data/train.csv");
        // Keys, run records and JSON hold the same string as before the type.
        assert_eq!(serde_json::to_string(&path).unwrap(), "\"data/train.csv\"");
        assert_eq!(
            serde_json::json!({ "path": path }),
            serde_json::json!({ "path": "data/train.csv" })
        );
        assert_eq!(ProjectPath::new("../x"), Err(PathProblem::EscapesRoot));
        assert_eq!(ProjectPath::new("a\0b"), Err(PathProblem::Nul));
        // What a stored result names is taken by the cache's rule only.
        assert_eq!(ProjectPath::stored("models/m.pt").unwrap(), "models/m.pt");
        assert!(ProjectPath::stored("a/./b").is_err());
        assert!(ProjectPath::stored(".git/config").is_err());
        assert!(ProjectPath::stored(".pipe/out/p/s/model").is_ok());
        // Looked up by its text in maps keyed by text.
        let mut map = std::collections::HashMap::new();
        map.insert(path.clone(), 1);
        assert_eq!(map.get("data/train.csv"), Some(&1));
    }
}
