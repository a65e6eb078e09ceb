//! What the remote's handle and its transfers share: the operator, the
//! runtime, the bound on concurrent transfers, the report, and the layout
//! of objects and actions in the remote.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use opendal::{ErrorKind, Operator};
use tokio::sync::Semaphore;

use super::busy;
use super::location::Access;
use super::outcomes::{TmpSwept, TransferReport};
use super::progress::ProgressSink;
use crate::store::{shard_and_rest, STALE_TMP_AGE};
use crate::{fsutil, ActionKey, Cache, CacheError, ObjectDigest, RemoteError};

/// Chunk size of streamed transfers; S3 multipart parts are this large.
pub(super) const CHUNK: usize = 8 << 20;

/// Ranges of one object in flight at once, each way: a single large
/// object (a checkpoint) moves at the speed of several requests, not of
/// one, with at most this many chunks buffered.
pub(super) const PARTS_IN_FLIGHT: usize = 4;

/// Why one remote operation failed.
#[derive(Debug)]
pub(super) enum Failure {
    NotFound,
    Corrupt(String),
    /// The remote is unreachable, refuses access, or broke mid-transfer.
    Remote(opendal::Error),
    /// The local cache failed (disk full, permissions).
    Local(CacheError),
}

impl From<opendal::Error> for Failure {
    fn from(error: opendal::Error) -> Failure {
        if error.kind() == ErrorKind::NotFound {
            Failure::NotFound
        } else {
            Failure::Remote(error)
        }
    }
}

impl From<CacheError> for Failure {
    fn from(error: CacheError) -> Failure {
        match error {
            CacheError::Corrupt { digest, reason } => {
                Failure::Corrupt(format!("object {digest}: {reason}"))
            }
            other => Failure::Local(other),
        }
    }
}

pub(super) struct Shared {
    pub(super) url: String,
    pub(super) read_only: bool,
    pub(super) concurrency: usize,
    pub(super) cache: Cache,
    /// What reads and writes the remote with credentials.
    pub(super) signed: Operator,
    /// What lists the remote: rooted at the bucket for S3, whose keys all
    /// start with `list_prefix` (`list`).
    pub(super) signed_lister: Operator,
    /// The two, unsigned (S3 only): used when no credentials are found.
    pub(super) anonymous: Option<(Operator, Operator)>,
    /// Signed or anonymous, decided before the first request (`Remote::runtime`).
    pub(super) access: OnceLock<Access>,
    pub(super) list_prefix: String,
    pub(super) transfers: Semaphore,
    pub(super) secrets: Vec<String>,
    /// Remote paths found corrupt by this process: a push overwrites them
    /// instead of trusting their presence.
    pub(super) corrupt: Mutex<HashSet<String>>,
    pub(super) report: Mutex<TransferReport>,
    /// Where each result's transfer progress goes, if anyone shows it.
    pub(super) progress: Option<ProgressSink>,
    /// The time a push was under way, for the report's `push_seconds`.
    pub(super) pushing: busy::BusyClock,
    /// The directory of a `file://` remote, read without opendal (see
    /// `read`).
    pub(super) fs_root: Option<PathBuf>,
    /// Whether this process has cleared the stale temporaries of a
    /// `file://` remote yet (on its first write).
    pub(super) tmp_swept: AtomicBool,
}

impl Shared {
    /// Whether this process reads the remote without credentials, and so
    /// writes nothing to it.
    pub(super) fn anonymous(&self) -> bool {
        self.access.get() == Some(&Access::Anonymous)
    }

    /// What reads and writes objects, actions and records.
    pub(super) fn operator(&self) -> &Operator {
        match (&self.anonymous, self.anonymous()) {
            (Some((main, _)), true) => main,
            _ => &self.signed,
        }
    }

    /// What lists the remote.
    pub(super) fn lister(&self) -> &Operator {
        match (&self.anonymous, self.anonymous()) {
            (Some((_, lister)), true) => lister,
            _ => &self.signed_lister,
        }
    }

    /// A failure as the user may read it: the kind, the message, and no
    /// credential anywhere in it.
    pub(super) fn describe(&self, error: &opendal::Error) -> RemoteError {
        // opendal's own message and the innermost cause ("Connection
        // refused"), not its context, which repeats the request.
        let mut detail = error.message().to_string();
        let mut cause: Option<&dyn std::error::Error> = std::error::Error::source(error);
        let mut innermost = None;
        while let Some(next) = cause {
            innermost = Some(next.to_string());
            cause = next.source();
        }
        if let Some(innermost) = innermost.filter(|text| !detail.contains(text.as_str())) {
            detail = format!("{detail}: {innermost}");
        }
        let mut readable = readable_detail(&detail);
        if readable.trim().is_empty() {
            readable = wordless_answer(error);
        }
        let first_line = readable.lines().next().unwrap_or_default();
        let url = self.redacted(&self.url);
        let detail = self.redacted(first_line);
        if first_line.contains("failed to load signing credential") {
            return RemoteError::NoCredentials { url, detail };
        }
        match error.kind() {
            ErrorKind::PermissionDenied if self.anonymous() => {
                RemoteError::AnonymousRefused { url, detail }
            }
            ErrorKind::PermissionDenied => RemoteError::Refused { url, detail },
            ErrorKind::ConfigInvalid => RemoteError::Misconfigured { url, detail },
            ErrorKind::RateLimited => RemoteError::RateLimited { url, detail },
            _ => RemoteError::Unreachable { url, detail },
        }
    }

    /// `text` with no credential in it.
    pub(super) fn redacted(&self, text: &str) -> String {
        let mut text = text.to_string();
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), "***");
        }
        pipe_protocol::redact::redact_text(&text).into_owned()
    }

    /// Records the first failure and reports it once; later operations in
    /// this process skip the remote.
    pub(super) fn give_up(&self, error: &opendal::Error) -> RemoteError {
        self.give_up_because(self.describe(error))
    }

    /// `give_up` for a failure that is not the remote's answer; `reason`
    /// is already redacted.
    pub(super) fn give_up_because(&self, reason: RemoteError) -> RemoteError {
        let mut report = lock(&self.report);
        if report.unavailable.is_none() {
            tracing::warn!("{reason}; going on with the local cache only");
            report.unavailable = Some(reason.clone());
        }
        reason
    }

    pub(super) fn is_unavailable(&self) -> bool {
        lock(&self.report).unavailable.is_some()
    }

    pub(super) fn push_refused(&self) -> bool {
        lock(&self.report).push_refused.is_some()
    }

    pub(super) fn refuse_pushes(&self, error: &opendal::Error) {
        let reason = self.describe(error);
        let mut report = lock(&self.report);
        if report.push_refused.is_none() {
            tracing::warn!(
                "{reason}; pushing is off for the rest of this run (pulls go on); \
                 set `read_only: true` for a job that should not write"
            );
            report.push_refused = Some(reason);
        }
    }

    pub(super) fn remove_stale_temporaries(&self) -> Result<Option<TmpSwept>, CacheError> {
        let Some(root) = self.fs_root.as_deref().filter(|_| !self.read_only) else {
            return Ok(None);
        };
        let tmp = root.join("tmp");
        let (files, bytes) = fsutil::remove_stale(&tmp, STALE_TMP_AGE)
            .map_err(|error| CacheError::io(&tmp, error))?;
        Ok(Some(TmpSwept { files, bytes }))
    }

    /// Clears a `file://` remote's stale temporaries once per process,
    /// before its first write: nothing else ever would, and every killed
    /// push leaves one. A failure is only worth a warning.
    pub(super) fn sweep_tmp_once(&self) {
        if self.tmp_swept.swap(true, Ordering::Relaxed) {
            return;
        }
        match self.remove_stale_temporaries() {
            Ok(Some(swept)) if swept.files > 0 => tracing::info!(
                "remote cache {}: removed {} temporary files ({} bytes) that killed pushes left behind",
                self.url,
                swept.files,
                swept.bytes
            ),
            Ok(_) => {}
            Err(error) => tracing::warn!(
                "remote cache {}: cannot clear old temporary files: {error}",
                self.url
            ),
        }
    }

    pub(super) fn mark_corrupt(&self, path: &str) {
        lock(&self.corrupt).insert(path.to_string());
    }

    pub(super) fn known_corrupt(&self, path: &str) -> bool {
        lock(&self.corrupt).contains(path)
    }
}

pub(super) fn start_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("pipe-remote")
        .enable_all()
        .build()
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub fn object_path(digest: &ObjectDigest) -> String {
    let hex = digest.to_hex();
    let (shard, rest) = shard_and_rest(&hex);
    format!("objects/{shard}/{rest}")
}

pub fn action_path(key: &ActionKey) -> String {
    let hex = key.to_hex();
    let (shard, rest) = shard_and_rest(&hex);
    format!("actions/{shard}/{rest}.json")
}

/// What the server said, as a person reads it: an S3 error's code and
/// message (`SignatureDoesNotMatch: The request signature we calculated
/// does not match`) rather than its Rust form (`S3Error { code: ... }`),
/// and no empty part before it.
fn readable_detail(detail: &str) -> String {
    let field = |text: &str, name: &str| -> Option<String> {
        let start = text.find(&format!("{name}: \""))? + name.len() + 3;
        let end = text[start..].find('"')? + start;
        Some(text[start..end].to_string())
    };
    let detail = match detail.find("S3Error {") {
        Some(at) => {
            let error = &detail[at..];
            match (field(error, "code"), field(error, "message")) {
                (Some(code), Some(message)) if !message.is_empty() => {
                    format!("{}{code}: {message}", &detail[..at])
                }
                (Some(code), _) => format!("{}{code}", &detail[..at]),
                _ => detail.to_string(),
            }
        }
        None => detail.to_string(),
    };
    detail
        .trim_start_matches(|c: char| c == ':' || c == ';' || c.is_whitespace())
        .to_string()
}

/// What to say of an answer that gave no reason: an S3 server answers a
/// HEAD request (a `stat`) with a status and no body to say why.
fn wordless_answer(error: &opendal::Error) -> String {
    let text = error.to_string();
    let status = text.find("status: ").and_then(|at| {
        let digits = text.get(at + 8..at + 11)?;
        digits.parse::<u16>().ok().map(|_| digits.to_string())
    });
    let without_body = if text.contains(") at stat") {
        " (the answer to a HEAD request has no body)"
    } else {
        ""
    };
    match status {
        Some(status) => format!("HTTP {status}, no reason given{without_body}"),
        None => format!("{}, no reason given{without_body}", error.kind()),
    }
}

#[cfg(test)]
mod tests {
    use super::{readable_detail, wordless_answer};

    #[test]
    fn an_answer_without_a_reason_says_its_status_never_nothing() {
        let error = opendal::Error::new(opendal::ErrorKind::PermissionDenied, "")
            .with_operation("stat")
            .with_context("response", "Parts { status: 403, version: HTTP/1.1 }");
        assert_eq!(
            wordless_answer(&error),
            "HTTP 403, no reason given (the answer to a HEAD request has no body)"
        );
    }

    #[test]
    fn an_s3_error_reads_as_its_code_and_message_never_as_a_rust_struct() {
        let raw = ": S3Error { code: \"SignatureDoesNotMatch\", message: \"The request signature we calculated does not match\", resource: \"\", request_id: \"1\" }";
        assert_eq!(
            readable_detail(raw),
            "SignatureDoesNotMatch: The request signature we calculated does not match"
        );
        assert_eq!(
            readable_detail("; Connection refused"),
            "Connection refused"
        );
    }
}
