//! The staging directory a restore builds an output in, beside it
//! (`.NAME.pipe-tmp-XXXXXX/`), and removing those that a killed restore
//! left behind.
//!
//! A restore that is killed (kill -9, the OOM killer) between creating its
//! staging directory and its final rename cannot remove it, and it may hold
//! up to the whole output. Its name says which output it was for, so the
//! next process that may write outputs finds it beside that output.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use pipe_protocol::ProjectPath;

use crate::fsutil;

/// Between the output's (shortened) name and the random part.
const MARK: &[u8] = b".pipe-tmp-";
/// The random characters `tempfile` appends (its default length).
const RANDOM_LEN: usize = 6;
/// At most this many characters of the output's name go into the
/// staging directory's name, which must stay a valid file name.
const NAME_CHARS: usize = 64;

/// `.NAME.pipe-tmp-`: what the staging directory of a restore to an output
/// named `name` starts with.
pub(crate) fn prefix(name: &OsStr) -> String {
    format!(".{}{}", short_name(name), String::from_utf8_lossy(MARK))
}

fn short_name(name: &OsStr) -> String {
    name.to_string_lossy().chars().take(NAME_CHARS).collect()
}

/// The shortened output name a staging directory named `entry` was made
/// for, if `entry` has the form `.NAME.pipe-tmp-XXXXXX`.
fn staged_for(entry: &[u8]) -> Option<&[u8]> {
    let random_start = entry.len().checked_sub(RANDOM_LEN)?;
    let mark_start = random_start.checked_sub(MARK.len())?;
    if mark_start < 2 || entry[0] != b'.' {
        return None;
    }
    let random_ok = entry[random_start..].iter().all(u8::is_ascii_alphanumeric);
    (random_ok && &entry[mark_start..random_start] == MARK).then(|| &entry[1..mark_start])
}

/// Where leftovers may be, as project-relative paths with `/` separators.
#[derive(Debug, Default)]
pub struct RestoreSites<'a> {
    /// Directory -> the names of the outputs in it; `None` when the whole
    /// directory is pipe's own, so a staging directory for any name in it
    /// is one of pipe's.
    dirs: HashMap<&'a str, Option<Vec<&'a OsStr>>>,
}

impl<'a> RestoreSites<'a> {
    /// An output that may be restored (a file or a directory).
    pub fn output(&mut self, path: &'a ProjectPath) {
        let path = path.as_str();
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        if let Some(names) = self.dirs.entry(dir).or_insert_with(|| Some(Vec::new())) {
            names.push(OsStr::new(name));
        }
    }

    /// A directory whose every entry is pipe's (a built-in stage's output
    /// directory under `.pipe/out/`).
    pub fn owned_dir(&mut self, dir: &'a str) {
        self.dirs.insert(dir, None);
    }

    /// Removes every staging directory beside these outputs, under `root`,
    /// and returns what it removed. Only a directory named as a restore's
    /// staging directory for an output in the same directory is removed,
    /// and only inside `root` (a directory that a symlink made since leads
    /// elsewhere is left alone). The caller must make sure that no restore
    /// to these outputs is running (pipe: it holds the project's run lock).
    /// A leftover that cannot be removed is logged and left.
    pub fn remove_leftovers(&self, root: &Path) -> Vec<PathBuf> {
        let real_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        let mut removed = Vec::new();
        for (dir, names) in &self.dirs {
            let dir_path = if dir.is_empty() {
                root.to_path_buf()
            } else {
                root.join(dir)
            };
            let Ok(entries) = std::fs::read_dir(&dir_path) else {
                continue;
            };
            let mut inside_root = None;
            for entry in entries.flatten() {
                let file_name = entry.file_name();
                let Some(staged) = staged_for(file_name.as_bytes()) else {
                    continue;
                };
                let ours = match names {
                    None => true,
                    Some(names) => names
                        .iter()
                        .any(|name| short_name(name).as_bytes() == staged),
                };
                if !ours || !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    continue;
                }
                let inside = *inside_root.get_or_insert_with(|| {
                    dir_path
                        .canonicalize()
                        .is_ok_and(|real| real.starts_with(&real_root))
                });
                if !inside {
                    break;
                }
                let path = entry.path();
                match fsutil::remove_any(&path) {
                    Ok(()) => removed.push(path),
                    Err(error) => tracing::warn!(
                        path = %path.display(),
                        %error,
                        "could not remove what a killed restore left"
                    ),
                }
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staging_name_gives_the_output_it_was_for() {
        assert_eq!(
            staged_for(b".model.bin.pipe-tmp-a1B2c3"),
            Some(&b"model.bin"[..])
        );
        assert_eq!(staged_for(b".model.bin.pipe-tmp-a1B2c"), None);
        assert_eq!(staged_for(b".model.bin.pipe-tmp-a1B2c_"), None);
        assert_eq!(staged_for(b"model.bin.pipe-tmp-a1B2c3"), None);
        assert_eq!(staged_for(b"..pipe-tmp-a1B2c3"), None);
        assert_eq!(prefix(OsStr::new("model.bin")), ".model.bin.pipe-tmp-");
        let long = "x".repeat(100);
        assert_eq!(prefix(OsStr::new(&long)).len(), 1 + 64 + MARK.len());
    }

    #[test]
    fn only_staging_dirs_of_declared_outputs_inside_the_root_are_removed() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("out");
        std::fs::create_dir_all(out.join(".model.bin.pipe-tmp-AbC123/new")).unwrap();
        std::fs::write(out.join(".model.bin.pipe-tmp-AbC123/new/x"), b"x").unwrap();
        // Another output's, a file, and a name that is not a staging name.
        std::fs::create_dir_all(out.join(".other.bin.pipe-tmp-AbC123")).unwrap();
        std::fs::write(out.join(".model.bin.pipe-tmp-zzzzzz"), b"x").unwrap();
        std::fs::create_dir_all(out.join(".model.bin.pipe-tmp-keep")).unwrap();
        let owned = root.path().join(".pipe/out/p/s");
        std::fs::create_dir_all(owned.join(".anything.pipe-tmp-q1w2e3")).unwrap();

        let model = ProjectPath::stored("out/model.bin").unwrap();
        let mut sites = RestoreSites::default();
        sites.output(&model);
        sites.owned_dir(".pipe/out/p/s");
        let mut removed = sites.remove_leftovers(root.path());
        removed.sort();
        assert_eq!(
            removed,
            vec![
                owned.join(".anything.pipe-tmp-q1w2e3"),
                out.join(".model.bin.pipe-tmp-AbC123"),
            ]
        );
        assert!(out.join(".other.bin.pipe-tmp-AbC123").is_dir());
        assert!(out.join(".model.bin.pipe-tmp-zzzzzz").is_file());
        assert!(out.join(".model.bin.pipe-tmp-keep").is_dir());
    }
}
