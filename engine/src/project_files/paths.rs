//! Where project-relative paths (`ProjectPath`, `pipe_protocol::paths`,
//! where the cache's rule for a stored one lives too) really are once
//! symlinks are followed, and whether pipe may write an output there.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

pub(crate) use pipe_protocol::paths::{
    check_relative_path, protected_dir, PathProblem, GIT_DIR, PIPE_DIR,
};
pub use pipe_protocol::ProjectPath;

/// `a/b/c` -> `a/b`, `a`: the directories that could hold `path`.
pub(crate) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.char_indices()
        .rev()
        .filter(|(_, ch)| *ch == '/')
        .map(move |(index, _)| &path[..index])
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
    fn the_directories_that_could_hold_a_path_are_its_ancestors() {
        assert_eq!(ancestors("a/b/c").collect::<Vec<_>>(), vec!["a/b", "a"]);
        assert_eq!(ancestors("a").count(), 0);
    }
}
