use std::path::PathBuf;
use std::sync::Arc;

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
    /// The remote cache is misconfigured, cannot be reached, refused, or
    /// sent something corrupt.
    #[error(transparent)]
    Remote(#[from] RemoteError),
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
/// Why the remote cache did not do what was asked. Every text in it went
/// through the remote's redaction first: no credential is ever in it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteError {
    /// The remote's URL is not one pipe can use.
    #[error(transparent)]
    BadLocation(#[from] BadLocation),
    /// The storage client refused the remote's options.
    #[error("{url}: {detail}")]
    BadOptions { url: String, detail: String },
    /// The remote answered that these credentials may not do this.
    #[error("remote cache {url} is access denied (check the credentials): {detail}")]
    Refused { url: String, detail: String },
    /// No credentials were found for a remote that needs them.
    #[error(
        "remote cache {url} is not reachable without credentials (set AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY, or AWS_PROFILE): {detail}"
    )]
    NoCredentials { url: String, detail: String },
    /// No credentials were found, and the remote refused to be read
    /// anonymously: its bucket grants no public read on the prefix.
    #[error(
        "remote cache {url} is not reachable without credentials (set AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY, or AWS_PROFILE), and refuses anonymous reads (a bucket policy \
         granting s3:GetObject and s3:ListBucket on the prefix allows them; docs/ci.md, \
         \"Forks\"): {detail}"
    )]
    AnonymousRefused { url: String, detail: String },
    /// A write to a remote read anonymously, since no credentials were found.
    #[error(
        "remote cache {url} cannot be written without credentials (set AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY, or AWS_PROFILE): none were found, and without them it is only \
         read, anonymously"
    )]
    NoWriteCredentials { url: String },
    /// The remote rejected a request as misconfigured.
    #[error("remote cache {url} is invalid configuration: {detail}")]
    Misconfigured { url: String, detail: String },
    #[error("remote cache {url} is rate limited: {detail}")]
    RateLimited { url: String, detail: String },
    /// The network, the server or a transfer failed.
    #[error("remote cache {url} is unreachable or failing: {detail}")]
    Unreachable { url: String, detail: String },
    /// The remote's I/O threads could not start (the process has no
    /// threads or file descriptors left).
    #[error("remote cache {url} is unusable: cannot start its I/O threads: {detail}")]
    NoThreads { url: String, detail: String },
    /// A write to a remote configured read-only.
    #[error("the remote is read-only")]
    ReadOnly,
    /// A run record larger than any pull would read back.
    #[error(
        "the run record is {bytes} bytes, more than the {limit} a pull reads \
         (docs/cache-format.md, Limits); not pushed"
    )]
    RecordTooLarge { bytes: usize, limit: String },
    /// What the remote holds is damaged, incomplete or not pipe's: `what`
    /// names the entry and says what is wrong with it.
    #[error("{what}")]
    Corrupt { what: String },
    /// A listing went past what pipe reads of one: the remote holds more
    /// than any team's records, or its server lists without end.
    #[error(
        "remote cache {url}: the listing of `{dir}` holds more than {entries} entries or \
         {bytes} of names, the most pipe reads of one (docs/cache-format.md, Limits); \
         stopped there"
    )]
    ListingTooLarge {
        url: String,
        dir: String,
        entries: u64,
        bytes: String,
    },
    /// An entry the remote listed was gone when it was read.
    #[error("`{path}` was removed while it was read")]
    Vanished { path: String },
    /// The local cache failed while taking in what the remote sent.
    #[error("local cache: {0}")]
    Local(Arc<CacheError>),
    /// The pool that bounds concurrent transfers was shut down under a
    /// transfer: only a bug does that.
    #[error("transfer pool closed")]
    TransferPoolClosed,
}

impl RemoteError {
    /// Whether the configuration is at fault (the URL, the options), so
    /// the user fixes it, rather than the remote or the network.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            RemoteError::BadLocation(_) | RemoteError::BadOptions { .. }
        )
    }
}

/// As its message: the `--json` reports carry the reason a remote was
/// given up on as text.
impl serde::Serialize for RemoteError {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

const URL_HINT: &str = "write the remote as s3://BUCKET/PREFIX (any S3-compatible store, with `endpoint`) or file:///ABSOLUTE/PATH";

/// Why a remote URL is not one pipe can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadLocation {
    #[error("remote `{url}` is not a URL or an absolute path; {hint}", hint = URL_HINT)]
    NotAUrl { url: String },
    #[error("remote `{url}` must name an absolute path: file:///PATH")]
    RelativePath { url: String },
    /// The URL is not repeated: it holds the credentials.
    #[error(
        "credentials in the remote URL are refused, since URLs end up in logs and run records; \
         set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) instead"
    )]
    Credentials,
    #[error("remote `{url}`: `.` and `..` are not allowed in the prefix")]
    DotInPrefix { url: String },
    #[error("remote `{url}`: `{name}` is not a valid {what} name")]
    BadName {
        url: String,
        name: String,
        what: &'static str,
    },
    #[error(
        "remote `{url}`: `{scheme}` is not built into this pipe (opendal supports it, \
         but it cannot be tested here and adds dozens of crates to the build); {hint}",
        hint = URL_HINT
    )]
    NotBuiltIn { url: String, scheme: String },
    #[error("remote `{url}`: unknown scheme `{scheme}`; {hint}", hint = URL_HINT)]
    UnknownScheme { url: String, scheme: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_error_serialises_as_the_message_it_shows() {
        let error = RemoteError::Unreachable {
            url: "s3://bucket/p".to_string(),
            detail: "Connection refused".to_string(),
        };
        assert_eq!(
            serde_json::to_value(&error).unwrap(),
            serde_json::json!(
                "remote cache s3://bucket/p is unreachable or failing: Connection refused"
            )
        );
        assert!(!error.is_configuration());
        assert!(RemoteError::BadLocation(BadLocation::Credentials).is_configuration());
    }
}
