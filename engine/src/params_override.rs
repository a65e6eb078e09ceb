//! `params.yaml` holding a run's `-S` values while its commands run, and
//! put back byte for byte after: when the run ends, or, if it was killed,
//! by the next pipe command that reads the file.
//!
//! Before the file is touched, its original bytes and a journal naming it
//! are written under `.pipe/params-override/`, and the journal is locked
//! (`flock`) for as long as the run holds the file. A journal nobody holds
//! is a killed run's: its file is put back when it still has the bytes the
//! run wrote, and kept (with a warning) when someone edited it since. A
//! command that reads the params while a run holds the file reads the
//! original copy, so that `pipe status` never shows another run's `-S`.
//!
//! The file is written whole, through a temporary file under
//! `.pipe/params-override/` renamed over it; one a killed pipe left is
//! removed by the next write or the next command that finds a killed
//! run's journal. pipe writes only into a regular file of one name (not a
//! link, not hard-linked), and keeps a UTF-8 byte order mark it found.
//!
//! Everything under `.pipe/` is read back as untrusted: the journal is
//! bounded, and names a file called `params.yaml` inside the project or
//! nothing is done but removing it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::pipeline::ParamsFileEdits;
use crate::project::STATE_DIR;
use crate::project_files::ProjectPath;
use crate::{EngineError, Result, UsageError};

const DIR: &str = "params-override";
const JOURNAL: &str = "journal.json";
const ORIGINAL: &str = "original";
/// A journal is a few hundred bytes; more is not one pipe wrote.
const MAX_JOURNAL_BYTES: u64 = 64 * 1024;
/// What names a temporary file, before its writer's process id.
const TEMP_MARK: &str = ".pipe-tmp-";
const BOM: &str = "\u{feff}";

#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    /// The file, relative to the project root; read back, a journal whose
    /// file the stored rule refuses is no journal pipe wrote.
    file: ProjectPath,
    /// BLAKE3 (hex) of its bytes before the run, and of those it wrote.
    original: String,
    written: String,
}

/// `params.yaml` as a run wrote it; put back on [`WrittenParams::restore`]
/// or when dropped.
pub struct WrittenParams {
    dir: PathBuf,
    file: PathBuf,
    journal: Journal,
    /// Holds the journal's lock while the run has the file.
    lock: Option<File>,
}

/// How a written `params.yaml` was left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// Back to its bytes before the run.
    PutBack,
    /// Someone changed it during the run: left as they made it; the bytes
    /// before the run are at `kept`.
    ChangedMeanwhile { kept: PathBuf },
}

fn digest(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> EngineError + '_ {
    move |error| EngineError::io(path, error)
}

/// Writes `bytes` into `temp_dir` and renames it over `dest`, synced: a
/// reader sees the old bytes or all of the new, even after a crash. The
/// temporary file is `.NAME.pipe-tmp-PID`: one a killed process left is
/// removed by [`sweep_temps`]. Beside `dest` only when `temp_dir` is on
/// another file system.
pub(crate) fn replace_file(
    dest: &Path,
    bytes: &[u8],
    permissions: Option<std::fs::Permissions>,
    temp_dir: &Path,
) -> Result<()> {
    let name = dest
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp_name = format!(".{name}{TEMP_MARK}{}", std::process::id());
    match replace_via(&temp_dir.join(&temp_name), dest, bytes, permissions.clone()) {
        Err(error) if error.raw_os_error() == Some(libc::EXDEV) => {
            replace_via(&dest.with_file_name(&temp_name), dest, bytes, permissions)
        }
        other => other,
    }
    .map_err(io(dest))?;
    if let Some(parent) = dest.parent() {
        // The rename itself survives a crash once the directory is synced.
        let _ = File::open(parent).and_then(|directory| directory.sync_all());
    }
    Ok(())
}

fn replace_via(
    temp: &Path,
    dest: &Path,
    bytes: &[u8],
    permissions: Option<std::fs::Permissions>,
) -> std::io::Result<()> {
    let mut file = File::create(temp)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| match permissions {
            Some(permissions) => file.set_permissions(permissions),
            None => Ok(()),
        })
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(temp, dest));
    if written.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    written
}

/// Removes the temporary files in `dir` named `.{prefix}…pipe-tmp-PID`
/// (any name when `prefix` is empty) whose process is gone: what a
/// `kill -9` in the middle of [`replace_file`] leaves. Directories (the
/// cache's staging, `.NAME.pipe-tmp-XXXXXX/`) are not touched.
pub(crate) fn sweep_temps(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let wanted = format!(".{prefix}");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((stem, pid)) = name.rsplit_once(TEMP_MARK) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let ours = match prefix {
            "" => stem.len() > 1 && stem.starts_with('.'),
            _ => stem == wanted,
        };
        let file = entry.file_type().is_ok_and(|kind| kind.is_file());
        if ours && file && pid != std::process::id() && !alive(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether process `pid` exists (one of another user's does too).
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return true;
    }
    // SAFETY: signal 0 checks that the process exists and sends nothing.
    let found = unsafe { libc::kill(pid, 0) } == 0;
    found || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Refuses a file pipe must not write params into: a link (renaming over
/// it would replace the link, writing through it would change a file
/// other projects may read), anything but a regular file, or a file with
/// other names (hard links), which a rename would leave the old bytes
/// and a write in place would change too.
pub(crate) fn check_editable(file: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let found = std::fs::symlink_metadata(file).map_err(io(file))?;
    if !found.file_type().is_file() {
        return Err(UsageError::ParamsFileNotRegular {
            file: file.to_path_buf(),
        }
        .into());
    }
    if found.nlink() > 1 {
        return Err(UsageError::ParamsFileLinked {
            file: file.to_path_buf(),
            links: found.nlink(),
        }
        .into());
    }
    Ok(())
}

/// The bytes of the file of `edits` with them made, from its bytes
/// `now`: `None` unless `now` is the text the pipeline was loaded from.
/// A UTF-8 byte order mark, which the reader skips, is kept.
pub(crate) fn edited(edits: &ParamsFileEdits, now: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(now).ok()?;
    let (mark, text) = match text.strip_prefix(BOM) {
        Some(rest) => (BOM, rest),
        None => ("", text),
    };
    if digest(text.as_bytes()) != edits.loaded {
        return None;
    }
    let new_text = edits.apply(text)?;
    Some([mark.as_bytes(), new_text.as_bytes()].concat())
}

/// Where the files pipe writes params into are written first, in `root`.
pub(crate) fn temp_dir(root: &Path) -> PathBuf {
    root.join(STATE_DIR).join(DIR)
}

/// Takes the journal's lock without waiting: `false` when a live run
/// holds it.
fn try_lock(file: &File) -> bool {
    // SAFETY: flock on a file descriptor we own.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

impl WrittenParams {
    /// Writes `edits` into their file for the run of `root`, after the
    /// journal that puts it back. The file must still be the one the
    /// pipeline was loaded from.
    pub fn write(root: &Path, edits: &ParamsFileEdits) -> Result<WrittenParams> {
        let dir = temp_dir(root);
        let relative = edits
            .file
            .strip_prefix(root)
            .ok()
            .and_then(Path::to_str)
            .and_then(|relative| ProjectPath::stored(relative).ok())
            .ok_or_else(|| {
                EngineError::io(
                    &edits.file,
                    std::io::Error::other("params.yaml is not a plain path in the project"),
                )
            })?;
        check_editable(&edits.file)?;
        let original = std::fs::read(&edits.file).map_err(io(&edits.file))?;
        let Some(new_bytes) = edited(edits, &original) else {
            return Err(UsageError::ParamsFileChanged {
                file: edits.file.clone(),
            }
            .into());
        };
        sweep_temps(&dir, "");
        sweep_beside(&edits.file);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        replace_file(&dir.join(ORIGINAL), &original, None, &dir)?;
        let journal = Journal {
            file: relative,
            original: digest(&original),
            written: digest(&new_bytes),
        };
        // Locked before it is in place: no reader ever finds it unlocked
        // while this run lives.
        let journal_path = dir.join(JOURNAL);
        let temp = dir.join(format!(".{JOURNAL}{TEMP_MARK}{}", std::process::id()));
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)
            .map_err(io(&temp))?;
        if !try_lock(&lock) {
            return Err(EngineError::io(
                &temp,
                std::io::Error::other("locked by another process"),
            ));
        }
        let body = serde_json::to_vec(&journal).unwrap_or_default();
        lock.write_all(&body)
            .and_then(|()| lock.sync_all())
            .and_then(|()| std::fs::rename(&temp, &journal_path))
            .map_err(io(&journal_path))?;
        let permissions = std::fs::metadata(&edits.file)
            .ok()
            .map(|meta| meta.permissions());
        let written = WrittenParams {
            dir,
            file: edits.file.clone(),
            journal,
            lock: Some(lock),
        };
        replace_file(&edits.file, &new_bytes, permissions, &written.dir)?;
        Ok(written)
    }

    /// The file written.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Puts the file back, unless someone changed it meanwhile.
    pub fn restore(mut self) -> Result<Restored> {
        let restored = put_back(&self.dir, &self.file, &self.journal);
        self.lock = None;
        restored
    }
}

impl Drop for WrittenParams {
    fn drop(&mut self) {
        if self.lock.take().is_some() {
            if let Err(error) = put_back(&self.dir, &self.file, &self.journal) {
                tracing::warn!("could not put {} back: {error}", self.file.display());
            }
        }
    }
}

/// Puts `file` back from the original copy when it holds the bytes the
/// run wrote, then removes the journal.
fn put_back(dir: &Path, file: &Path, journal: &Journal) -> Result<Restored> {
    let original_path = dir.join(ORIGINAL);
    let current = std::fs::read(file).ok();
    let outcome = match current.as_deref().map(digest) {
        Some(found) if found == journal.written => {
            let original = std::fs::read(&original_path).map_err(io(&original_path))?;
            if digest(&original) != journal.original {
                return Err(EngineError::io(
                    &original_path,
                    std::io::Error::other(
                        "the copy of params.yaml before the run is not the one written",
                    ),
                ));
            }
            let permissions = std::fs::metadata(file).ok().map(|meta| meta.permissions());
            replace_file(file, &original, permissions, dir)?;
            Restored::PutBack
        }
        Some(found) if found == journal.original => Restored::PutBack,
        _ => {
            let kept = dir.join("params.yaml.before-run");
            std::fs::rename(&original_path, &kept).map_err(io(&kept))?;
            Restored::ChangedMeanwhile { kept }
        }
    };
    let journal_path = dir.join(JOURNAL);
    std::fs::remove_file(&journal_path).map_err(io(&journal_path))?;
    let _ = std::fs::remove_file(&original_path);
    Ok(outcome)
}

/// `params_file` absolute, its directory's links resolved but not the file's
/// own: a link named `params.yaml` is what edits refuse, not its target.
pub fn absolute(params_file: &Path) -> PathBuf {
    let directory = params_file
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let directory = directory
        .canonicalize()
        .unwrap_or_else(|_| directory.to_path_buf());
    match params_file.file_name() {
        Some(name) => directory.join(name),
        None => params_file.to_path_buf(),
    }
}

/// The file to read `params_file`'s params from, in the project at
/// `root`: the file itself, put back first if a killed run left it with
/// its `-S` values; or, while a live run holds it, the copy of it before
/// that run.
pub fn readable(params_file: &Path, root: &Path) -> PathBuf {
    let dir = temp_dir(root);
    let journal_path = dir.join(JOURNAL);
    let Ok(mut handle) = File::open(&journal_path) else {
        return params_file.to_path_buf();
    };
    let live = !try_lock(&handle);
    let journal = read_journal(&mut handle);
    let named = journal.as_ref().map(|journal| root.join(&journal.file));
    let ours = named.as_deref() == Some(absolute(params_file).as_path());
    if live {
        return if ours {
            dir.join(ORIGINAL)
        } else {
            params_file.to_path_buf()
        };
    }
    match (journal, named) {
        (Some(journal), Some(file)) => match put_back(&dir, &file, &journal) {
            Ok(Restored::PutBack) => tracing::warn!(
                "put {} back as it was before a killed `pipe run -S` wrote its overrides into it",
                journal.file
            ),
            Ok(Restored::ChangedMeanwhile { kept }) => tracing::warn!(
                "a killed `pipe run -S` had written its overrides into {}, which was changed since; left as it is (the file before that run: {})",
                journal.file,
                kept.display()
            ),
            Err(error) => tracing::warn!("could not put {} back: {error}", journal.file),
        },
        _ => {
            tracing::warn!(
                "removed {}, which does not name a params.yaml of this project",
                journal_path.display()
            );
            let _ = std::fs::remove_file(&journal_path);
        }
    }
    // What the killed run was writing when it died goes too.
    sweep_temps(&dir, "");
    sweep_beside(params_file);
    params_file.to_path_buf()
}

/// [`sweep_temps`] of `file`'s own temporary files beside it, which a
/// pipe that wrote them there (an older one, or across file systems)
/// left.
pub(crate) fn sweep_beside(file: &Path) {
    let (Some(parent), Some(name)) = (file.parent(), file.file_name()) else {
        return;
    };
    let parent = match parent.as_os_str().is_empty() {
        true => Path::new("."),
        false => parent,
    };
    sweep_temps(parent, &name.to_string_lossy());
}

/// The journal, when it is one pipe could have written: bounded, and
/// naming a `params.yaml` inside the project by a plain relative path (its
/// type's rule, applied as it is read).
fn read_journal(handle: &mut File) -> Option<Journal> {
    let mut body = Vec::new();
    handle.take(MAX_JOURNAL_BYTES).read_to_end(&mut body).ok()?;
    let journal: Journal = serde_json::from_slice(&body).ok()?;
    let hex = |text: &str| text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit());
    let named = Path::new(journal.file.as_str()).file_name() == Some("params.yaml".as_ref());
    (named && hex(&journal.original) && hex(&journal.written)).then_some(journal)
}
