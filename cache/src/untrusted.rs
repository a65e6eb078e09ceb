//! The one way pipe reads a file it did not just write itself: a cache
//! entry, a state file under `.pipe/`, a file in a `file://` remote.
//! Anyone with write access there (another process, a shared cache's other
//! users, a remote's writers) chooses what the path is, so the read:
//! - does not follow a symbolic link (a link to `/dev/zero` never ends);
//! - refuses what is not a regular file, without blocking on it (opening a
//!   FIFO for reading waits for a writer, and no signal but KILL ends it);
//! - reads at most the limit the format can need, plus one byte to see
//!   that there is more (a 2 GB sparse file costs nothing to make).
//!
//! The limits are stated in docs/cache-format.md ("Limits").

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The most bytes one kind of file may hold, and its name for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub bytes: u64,
    pub what: &'static str,
}

const MIB: u64 = 1 << 20;

/// An action file: its outputs and the stage's key manifest (command,
/// params, dependencies' digests). The largest real ones are a few KiB.
pub const ACTION_FILE: Limit = Limit {
    bytes: 16 * MIB,
    what: "an action file",
};

/// A tree listing: 53 bytes plus the name per entry of one directory, so
/// about 3.5 million entries of 20-byte names (a flat folder of 1.7 million
/// images takes 125 MiB). Storing a larger directory is refused.
pub const TREE_OBJECT: Limit = Limit {
    bytes: 256 * MIB,
    what: "a tree object",
};

/// A run record: a run's stages, their outputs and metrics, and the key
/// manifest of each (about 1-2 KiB a stage).
pub const RUN_RECORD: Limit = Limit {
    bytes: 16 * MIB,
    what: "a run record",
};

/// A small state file under `.pipe/` (`VERSION`, a running-stage marker, a
/// process-group record).
pub const STATE_FILE: Limit = Limit {
    bytes: 64 * 1024,
    what: "a state file",
};

/// `.pipe/catalog.json`: the workers' descriptions of their stages.
pub const CATALOG: Limit = Limit {
    bytes: 16 * MIB,
    what: "the cached stage catalog",
};

/// One answer of an S3 remote's server: the largest pipe asks for is a
/// small file read whole (an action file, a run record: 16 MiB) or one
/// 8 MiB range of an object; a listing page of 1,000 keys is under 2 MiB.
/// opendal holds a listing page or an error body whole, so an endless one
/// is cut off here (`remote::transport`).
pub const HTTP_ANSWER: Limit = Limit {
    bytes: 64 * MIB,
    what: "one answer of a remote",
};

/// A listing of a remote's run records or labels: the entries it may
/// hold, and the bytes of their names. A run makes one record and, per
/// change of its name or tags, one labels object.
pub const LISTING_ENTRIES: u64 = 100_000;
pub const LISTING: Limit = Limit {
    bytes: 32 * MIB,
    what: "a listing of a remote",
};

/// Opens `path` for reading when it is a regular file, not following a
/// symbolic link and never waiting on a FIFO.
pub fn open_regular(path: &Path) -> io::Result<(File, std::fs::Metadata)> {
    open(path, libc::O_NOFOLLOW)
}

/// `open_regular`, through a symbolic link: for files another program
/// writes that may be links (git's refs), still never waiting on a FIFO
/// or reading a device the link leads to.
pub fn open_regular_through_links(path: &Path) -> io::Result<(File, std::fs::Metadata)> {
    open(path, 0)
}

fn open(path: &Path, flags: libc::c_int) -> io::Result<(File, std::fs::Metadata)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        // NONBLOCK: opening a FIFO returns at once instead of waiting for a
        // writer; it has no effect on reading a regular file.
        .custom_flags(flags | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(libc::ELOOP) => refused("is a symbolic link, which pipe does not follow here"),
            _ => error,
        })?;
    let metadata = file.metadata()?;
    let kind = metadata.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_block_device() || kind.is_char_device() {
            "a device"
        } else {
            "something else"
        };
        return Err(refused(&format!("is {what}, not a regular file")));
    }
    Ok((file, metadata))
}

/// The bytes of the regular file at `path`, at most `limit.bytes` of them:
/// a larger file is an error naming the limit, read no further than one
/// byte past it. Errors other than "not found" have kind `InvalidData`
/// when the file is what is wrong.
pub fn read(path: &Path, limit: Limit) -> io::Result<Vec<u8>> {
    let (file, metadata) = open_regular(path)?;
    if metadata.len() > limit.bytes {
        return Err(too_large(limit));
    }
    read_open(file, metadata.len(), limit)
}

/// `read` through a symbolic link (`open_regular_through_links`).
pub fn read_through_links(path: &Path, limit: Limit) -> io::Result<Vec<u8>> {
    let (file, metadata) = open_regular_through_links(path)?;
    if metadata.len() > limit.bytes {
        return Err(too_large(limit));
    }
    read_open(file, metadata.len(), limit)
}

/// `read`, but a file that does not exist is `None`.
pub fn read_if_present(path: &Path, limit: Limit) -> io::Result<Option<Vec<u8>>> {
    match read(path, limit) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Reads an opened file of `size_hint` bytes, up to `limit`: the file may
/// grow while it is read.
fn read_open(file: File, size_hint: u64, limit: Limit) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(size_hint.min(limit.bytes) as usize + 1);
    file.take(limit.bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit.bytes {
        return Err(too_large(limit));
    }
    Ok(bytes)
}

fn too_large(limit: Limit) -> io::Error {
    refused(&format!(
        "is larger than {}, the most {} can hold (docs/cache-format.md, Limits)",
        human(limit.bytes),
        limit.what
    ))
}

fn refused(reason: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason.to_string())
}

/// A limit as a message states it: `16 MiB`, `64 KiB`.
pub fn human(bytes: u64) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Limit = Limit {
        bytes: 10,
        what: "a test file",
    };

    #[test]
    fn a_regular_file_within_its_limit_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read(&path, SMALL).unwrap(), b"0123456789");
    }

    #[test]
    fn a_file_one_byte_over_its_limit_is_refused_naming_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789a").unwrap();
        let error = read(&path, SMALL).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(error.to_string().contains("10 bytes"), "{error}");
        assert!(error.to_string().contains("a test file"), "{error}");
    }

    #[test]
    fn links_fifos_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let error = read(&link, SMALL).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");

        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0);
        let error = read(&fifo, SMALL).unwrap_err();
        assert!(error.to_string().contains("a FIFO"), "{error}");

        let error = read(dir.path(), SMALL).unwrap_err();
        assert!(error.to_string().contains("a directory"), "{error}");

        // Through links: a link to a regular file is read, one to a
        // device or a FIFO is refused as they are.
        let file = dir.path().join("file");
        std::fs::write(&file, b"ok").unwrap();
        let to_file = dir.path().join("to-file");
        std::os::unix::fs::symlink(&file, &to_file).unwrap();
        assert_eq!(read_through_links(&to_file, SMALL).unwrap(), b"ok");
        let error = read_through_links(&link, SMALL).unwrap_err();
        assert!(error.to_string().contains("a device"), "{error}");
        let to_fifo = dir.path().join("to-fifo");
        std::os::unix::fs::symlink(&fifo, &to_fifo).unwrap();
        let error = read_through_links(&to_fifo, SMALL).unwrap_err();
        assert!(error.to_string().contains("a FIFO"), "{error}");
        assert!(read_if_present(&dir.path().join("absent"), SMALL)
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_sparse_file_past_the_limit_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse");
        File::create(&path).unwrap().set_len(2 << 30).unwrap();
        let error = read(&path, ACTION_FILE).unwrap_err();
        assert!(error.to_string().contains("16 MiB"), "{error}");
    }
}
