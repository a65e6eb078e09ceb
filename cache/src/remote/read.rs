//! Every read of the remote, bounded: whoever can write to the remote
//! chooses what lies at a path, so nothing is read past the most its
//! format can need (`untrusted::Limit`), and in a `file://` remote a path
//! is read only when it is a regular file, never through a link, never
//! waiting on a FIFO (`untrusted::open_regular`; opendal's own file
//! service would follow the one and block on the other).

use std::io::Read;
use std::path::Path;

use futures::StreamExt;
use opendal::ErrorKind;

use super::shared::{Failure, Shared, CHUNK, PARTS_IN_FLIGHT};
use crate::untrusted::{self, Limit};

/// A remote file being read chunk by chunk.
pub(super) enum Chunks {
    Fs { file: std::fs::File, path: String },
    Stream(Box<opendal::FuturesBytesStream>),
}

impl Chunks {
    /// Opens the file at `path` (relative to the remote's root). `ranged`:
    /// in `CHUNK`-sized ranged requests, `PARTS_IN_FLIGHT` at a time, read
    /// back in order (an object, as large as it may be), else as one plain
    /// request (a small file: no `HEAD` first).
    pub(super) async fn open(shared: &Shared, path: &str, ranged: bool) -> Result<Chunks, Failure> {
        match &shared.fs_root {
            Some(root) => {
                let (file, _) = untrusted::open_regular(&root.join(path))
                    .map_err(|error| fs_failure(root, path, error))?;
                Ok(Chunks::Fs {
                    file,
                    path: path.to_string(),
                })
            }
            None => {
                let reader = if ranged {
                    shared
                        .operator()
                        .reader_with(path)
                        .chunk(CHUNK)
                        .concurrent(PARTS_IN_FLIGHT)
                        .await?
                } else {
                    shared.operator().reader(path).await?
                };
                Ok(Chunks::Stream(Box::new(
                    reader.into_bytes_stream(..).await?,
                )))
            }
        }
    }

    /// The next chunk, `None` at the end.
    pub(super) async fn next(&mut self, shared: &Shared) -> Result<Option<Vec<u8>>, Failure> {
        match self {
            // A local read: blocking it is what the local cache's writes
            // beside it do too.
            Chunks::Fs { file, path } => {
                let mut buffer = vec![0u8; CHUNK];
                let read = file.read(&mut buffer).map_err(|error| {
                    let root = shared.fs_root.as_deref().unwrap_or(Path::new("/"));
                    fs_failure(root, path, error)
                })?;
                buffer.truncate(read);
                Ok((read > 0).then_some(buffer))
            }
            Chunks::Stream(stream) => match stream.next().await {
                None => Ok(None),
                Some(Ok(bytes)) => Ok(Some(bytes.to_vec())),
                // The request is made on the first poll: its answer (a
                // missing key, a refusal) arrives here, wrapped.
                Some(Err(error)) => Err(stream_failure(error)),
            },
        }
    }
}

/// The whole file at `path`, refused (as corrupt) past `limit`.
pub(super) async fn read_capped(
    shared: &Shared,
    path: &str,
    limit: Limit,
) -> Result<Vec<u8>, Failure> {
    let mut chunks = Chunks::open(shared, path, false).await?;
    let mut bytes = Vec::new();
    while let Some(chunk) = chunks.next(shared).await? {
        if (bytes.len() + chunk.len()) as u64 > limit.bytes {
            return Err(Failure::Corrupt(format!(
                "`{path}` is larger than {}, the most {} can hold (docs/cache-format.md, Limits)",
                untrusted::human(limit.bytes),
                limit.what
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// What a failed read of a `file://` remote means: a path that is not
/// there, one that is not a regular file (corrupt), or a remote failing.
fn fs_failure(root: &Path, path: &str, error: std::io::Error) -> Failure {
    match error.kind() {
        std::io::ErrorKind::NotFound => Failure::NotFound,
        std::io::ErrorKind::InvalidData => Failure::Corrupt(format!("`{path}` {error}")),
        std::io::ErrorKind::PermissionDenied => Failure::Remote(opendal::Error::new(
            ErrorKind::PermissionDenied,
            format!("{}: {error}", root.join(path).display()),
        )),
        _ => Failure::Remote(opendal::Error::new(
            ErrorKind::Unexpected,
            format!("{}: {error}", root.join(path).display()),
        )),
    }
}

/// A failed read of a stream, as the opendal error inside it says.
fn stream_failure(error: std::io::Error) -> Failure {
    let text = error.to_string();
    match error
        .into_inner()
        .map(|inner| inner.downcast::<opendal::Error>())
    {
        Some(Ok(inner)) => Failure::from(*inner),
        _ => Failure::Remote(opendal::Error::new(ErrorKind::Unexpected, text)),
    }
}
