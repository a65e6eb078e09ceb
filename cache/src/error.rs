use std::path::PathBuf;

/// Every way the cache can fail. A corrupt entry is not an error while a
/// pipeline runs (it is a miss); it surfaces here only where the caller
/// asked for that exact entry (restore, verify).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("I/O error on `{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cache object `{digest}` is missing or corrupt ({reason})")]
    Corrupt { digest: String, reason: String },
    #[error("`{path}` is neither a regular file nor a directory")]
    Unsupported { path: PathBuf },
    /// A directory nested deeper than [`crate::MAX_TREE_DEPTH`] levels:
    /// walking it could exhaust a thread's stack.
    #[error(
        "`{path}` is nested more than {max} directories deep, more than pipe stores or restores"
    )]
    TooDeep { path: PathBuf, max: usize },
    /// A directory whose listing is larger than a tree object may be
    /// (`untrusted::TREE_OBJECT`): no reader would take it back.
    #[error(
        "`{path}` holds too many entries: its listing would be {size} bytes, more than the {limit} \
         a tree object may hold (docs/cache-format.md, Limits); split it into subdirectories"
    )]
    TooManyEntries {
        path: PathBuf,
        size: u64,
        limit: String,
    },
    #[error("stat cache database `{path}`: {source}")]
    StatDb {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    /// The remote cache's configuration is wrong (its URL, its options).
    #[error("{0}")]
    RemoteConfig(String),
    /// The remote cache's I/O threads could not start (the process has no
    /// threads or file descriptors left).
    #[error("remote cache {url} is unusable: cannot start its I/O threads: {source}")]
    RemoteRuntime {
        url: String,
        #[source]
        source: std::io::Error,
    },
    /// A folder of a cache directory that is a link to elsewhere.
    #[error(
        "`{path}` is a symbolic link to `{target}`, outside the cache directory that holds it, \
         so what pipe writes there would land outside; {fix}"
    )]
    LinkOutside {
        path: PathBuf,
        target: PathBuf,
        fix: String,
    },
    #[error("cache at `{path}` has layout `{found}`, this pipe expects `{expected}`")]
    Layout {
        path: PathBuf,
        found: String,
        expected: String,
    },
}

impl CacheError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CacheError::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = CacheError> = std::result::Result<T, E>;
