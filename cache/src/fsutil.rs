//! Small file-system helpers: removal of read-only trees, temp paths that
//! clean up after themselves, and touching mtimes.

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Removes `path` (file, symlink or directory tree) if it exists, first
/// making directories writable: outputs restored from the cache, or
/// written by a stage, may contain read-only directories that
/// `remove_dir_all` cannot empty.
pub(crate) fn remove_any(path: &Path) -> io::Result<()> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if !metadata.is_dir() {
        return ignore_not_found(std::fs::remove_file(path));
    }
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(first_error) => {
            make_dirs_writable(path)?;
            tracing::debug!(path = %path.display(), error = %first_error, "retrying removal after making directories writable");
            ignore_not_found(std::fs::remove_dir_all(path))
        }
    }
}

fn ignore_not_found(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn make_dirs_writable(dir: &Path) -> io::Result<()> {
    let metadata = std::fs::symlink_metadata(dir)?;
    let mode = metadata.permissions().mode();
    if mode & 0o700 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o700))?;
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            make_dirs_writable(&entry.path())?;
        }
    }
    Ok(())
}

/// A path removed on drop unless `keep` is called: a failed write never
/// leaves a stray temp file behind.
pub(crate) struct TempPath {
    path: Option<PathBuf>,
}

impl TempPath {
    pub fn new(path: PathBuf) -> TempPath {
        TempPath { path: Some(path) }
    }

    pub fn path(&self) -> &Path {
        self.path.as_deref().unwrap_or(Path::new(""))
    }

    pub fn keep(mut self) {
        self.path = None;
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            if let Err(error) = remove_any(&path) {
                tracing::warn!(path = %path.display(), %error, "could not remove temporary file");
            }
        }
    }
}

/// A name unique among this and concurrent processes: the pid separates
/// processes, the counter calls within one, the clock a reused pid.
pub(crate) fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|since| since.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{count}-{nanos:08x}", std::process::id())
}

/// Sets `path`'s mtime to now without opening it (objects are read-only),
/// so `gc`'s grace period protects an object a running stage just reused.
pub(crate) fn touch(path: &Path) -> io::Result<()> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    let times = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
    ];
    // SAFETY: `c_path` is a valid NUL-terminated string and `times` holds
    // the two timespecs utimensat reads; both outlive the call.
    let status = unsafe { libc::utimensat(libc::AT_FDCWD, c_path.as_ptr(), times.as_ptr(), 0) };
    if status == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether `metadata`'s mtime is at least `age` before `now`. An mtime in
/// the future or unreadable counts as young: when unsure, keep.
pub(crate) fn older_than(metadata: &std::fs::Metadata, age: Duration, now: SystemTime) -> bool {
    match metadata.modified() {
        Ok(modified) => now
            .duration_since(modified)
            .is_ok_and(|elapsed| elapsed >= age),
        Err(_) => false,
    }
}

/// Removes the entries of `dir` whose mtime is at least `max_age` old
/// (temporaries of killed processes); returns how many, and their bytes.
/// A missing `dir` has none.
pub(crate) fn remove_stale(dir: &Path, max_age: Duration) -> io::Result<(u64, u64)> {
    let now = SystemTime::now();
    let listing = match std::fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(error) => return Err(error),
    };
    let (mut files, mut bytes) = (0, 0);
    for entry in listing {
        let path = entry?.path();
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if older_than(&metadata, max_age, now) {
            tracing::debug!(path = %path.display(), "removing stale temp file");
            remove_any(&path)?;
            files += 1;
            bytes += metadata.len();
        }
    }
    Ok((files, bytes))
}

/// The folders of a cache directory (local or a `file://` remote) that
/// pipe writes into.
pub(crate) const CACHE_FOLDERS: [&str; 4] = ["objects", "actions", "runs", "tmp"];

/// Refuses a cache directory at `root` one of whose own folders is a
/// symbolic link leading outside it: every write meant for the cache
/// would land where the link points.
pub(crate) fn check_own_folders(root: &Path, fix: &str) -> Result<(), crate::CacheError> {
    let real_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    for name in CACHE_FOLDERS {
        let folder = root.join(name);
        let Ok(metadata) = std::fs::symlink_metadata(&folder) else {
            continue;
        };
        if !metadata.file_type().is_symlink() {
            continue;
        }
        let inside = std::fs::canonicalize(&folder)
            .is_ok_and(|real| real.starts_with(&real_root) && real != real_root);
        if !inside {
            let target = std::fs::read_link(&folder).unwrap_or_default();
            return Err(crate::CacheError::LinkOutside {
                path: folder,
                target,
                fix: fix.to_string(),
            });
        }
    }
    Ok(())
}
