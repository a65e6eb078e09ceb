//! Downloads shared by `data/download` and `hf/download`: streaming to a
//! partial file while hashing, resuming with `Range`, retrying with backoff,
//! and redirects followed by hand so the headers of every hop (the hub's
//! `X-Linked-Etag` sits on a redirect) stay visible.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use md5::Md5;
use pipe_protocol::format::format_seconds;
use sha1::Sha1;
use sha2::{Digest, Sha256};
use ureq::config::AutoHeaderValue;
use ureq::http::{HeaderMap, Response, StatusCode};
use ureq::{Agent, Body};

use crate::{StageContext, StageError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    Md5,
    Sha1,
    Sha256,
}

impl Algorithm {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Algorithm::Md5 => "md5",
            Algorithm::Sha1 => "sha1",
            Algorithm::Sha256 => "sha256",
        }
    }

    pub(crate) fn hex_len(self) -> usize {
        match self {
            Algorithm::Md5 => 32,
            Algorithm::Sha1 => 40,
            Algorithm::Sha256 => 64,
        }
    }

    pub(crate) fn hasher(self) -> Hasher {
        match self {
            Algorithm::Md5 => Hasher::Md5(Md5::new()),
            Algorithm::Sha1 => Hasher::Sha1(Sha1::new()),
            Algorithm::Sha256 => Hasher::Sha256(Sha256::new()),
        }
    }
}

pub(crate) enum Hasher {
    Md5(Md5),
    Sha1(Sha1),
    Sha256(Sha256),
}

impl Hasher {
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Md5(h) => h.update(bytes),
            Hasher::Sha1(h) => h.update(bytes),
            Hasher::Sha256(h) => h.update(bytes),
        }
    }

    fn reset(&mut self) {
        match self {
            Hasher::Md5(h) => Digest::reset(h),
            Hasher::Sha1(h) => Digest::reset(h),
            Hasher::Sha256(h) => Digest::reset(h),
        }
    }

    pub(crate) fn finish_hex(self) -> String {
        match self {
            Hasher::Md5(h) => hex::encode(h.finalize()),
            Hasher::Sha1(h) => hex::encode(h.finalize()),
            Hasher::Sha256(h) => hex::encode(h.finalize()),
        }
    }
}

pub(crate) fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Why one URL could not be fetched. `connection` tells a network that is
/// down or a host that is unreachable apart from a server that answered no.
#[derive(Debug, Clone)]
pub(crate) struct UrlFailure {
    pub url: String,
    pub reason: String,
    pub connection: bool,
}

pub(crate) enum FetchError {
    Url(UrlFailure),
    /// Our side failed (disk full, scratch not writable): no mirror helps.
    Stage(StageError),
}

impl From<StageError> for FetchError {
    fn from(error: StageError) -> Self {
        FetchError::Stage(error)
    }
}

pub(crate) struct Fetched {
    pub bytes: u64,
    pub digest_hex: String,
    /// The first `X-Linked-Etag`, then `ETag`, over all redirect hops that
    /// is a sha256 (the hub sets it to the content's sha256 for LFS files).
    pub announced_sha256: Option<String>,
    /// The hub's `X-Repo-Commit`: the commit a branch or tag resolved to.
    pub repo_commit: Option<String>,
}

/// How many bytes a download may have: `expected` when the pipeline (or
/// the hub, for one file) says how large the file is, else at most `max`.
/// A body that goes past it is cut off with an error, so an endless body
/// ends and a server that sends more than it announced is caught.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SizeLimit {
    pub expected: Option<u64>,
    /// Who says the file has `expected` bytes, for messages.
    pub expected_by: &'static str,
    pub max: u64,
    /// The param that sets `max`, for messages (`max_bytes`), if any.
    pub max_param: Option<&'static str>,
}

impl SizeLimit {
    fn cap(&self) -> u64 {
        self.expected.unwrap_or(self.max)
    }

    /// Why `bytes` are refused, if they are, as the end of a sentence:
    /// `whole` when they are the file's full size (announced, or a local
    /// file's length), else how far a body has got.
    fn refuses(&self, bytes: u64, whole: bool) -> Option<String> {
        match self.expected {
            Some(expected) if whole && bytes != expected => {
                Some(format!("but {} says {expected}", self.expected_by))
            }
            Some(expected) if bytes > expected => {
                Some(format!("more than {} says ({expected})", self.expected_by))
            }
            Some(_) => None,
            None if bytes > self.max => Some(match self.max_param {
                Some(param) => format!("more than `{param}` ({})", self.max),
                None => format!("more than the limit of {} bytes", self.max),
            }),
            None => None,
        }
    }
}

pub(crate) struct Fetcher<'a> {
    context: &'a StageContext,
    agent: Agent,
    retries: u32,
    phase: String,
}

const MAX_REDIRECTS: usize = 10;
const CHUNK: usize = 256 * 1024;
const BACKOFF_STEP: Duration = Duration::from_millis(200);
const BACKOFF_CAP: Duration = Duration::from_secs(5);

enum AttemptError {
    Retry {
        reason: String,
        retry_after: Option<Duration>,
    },
    Fatal {
        reason: String,
        connection: bool,
    },
    Disk(StageError),
}

impl<'a> Fetcher<'a> {
    pub(crate) fn new(
        context: &'a StageContext,
        retries: u32,
        timeout: Duration,
        phase: impl Into<String>,
    ) -> Self {
        let config = Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            // Checksums are of the bytes as published: no transparent gzip.
            .accept_encoding(AutoHeaderValue::None)
            .user_agent(format!("pipe/{}", env!("CARGO_PKG_VERSION")))
            .timeout_resolve(Some(timeout))
            .timeout_connect(Some(timeout))
            .timeout_recv_response(Some(timeout))
            .timeout_per_read(Some(timeout))
            .timeout_per_write(Some(timeout))
            .build();
        Fetcher {
            context,
            agent: Agent::new_with_config(config),
            retries,
            phase: phase.into(),
        }
    }

    /// Streams `url` into `dest` (created or truncated), hashing with
    /// `algorithm`. `headers` go only to the host of `url`, not to hosts it
    /// redirects to (they carry tokens).
    pub(crate) fn fetch(
        &self,
        url: &str,
        dest: &Path,
        algorithm: Algorithm,
        headers: &[(String, String)],
        limit: SizeLimit,
    ) -> Result<Fetched, FetchError> {
        let mut file = File::create(dest).map_err(|e| StageError::io(dest, e))?;
        let mut state = Transfer {
            file: &mut file,
            dest,
            hasher: algorithm.hasher(),
            have: 0,
            announced_sha256: None,
            announced_size: None,
            repo_commit: None,
        };
        let mut failed_in_a_row = 0u32;
        let mut attempts = 0u32;
        let mut furthest = 0u64;
        loop {
            attempts += 1;
            match self.attempt(url, &mut state, headers, limit) {
                Ok(()) => {
                    state.file.flush().map_err(|e| StageError::io(dest, e))?;
                    return Ok(Fetched {
                        bytes: state.have,
                        digest_hex: state.hasher.finish_hex(),
                        announced_sha256: state.announced_sha256,
                        repo_commit: state.repo_commit,
                    });
                }
                Err(AttemptError::Disk(error)) => return Err(FetchError::Stage(error)),
                Err(AttemptError::Fatal { reason, connection }) => {
                    return Err(FetchError::Url(UrlFailure {
                        url: url.to_string(),
                        reason,
                        connection,
                    }))
                }
                Err(AttemptError::Retry {
                    reason,
                    retry_after,
                }) => {
                    // An attempt that got further than any before earns a
                    // fresh set of retries; bytes only grow, so this ends.
                    if state.have > furthest {
                        furthest = state.have;
                        failed_in_a_row = 0;
                    }
                    failed_in_a_row += 1;
                    if failed_in_a_row > self.retries {
                        let tries = if attempts == 1 {
                            "1 try".to_string()
                        } else {
                            format!("{attempts} tries")
                        };
                        return Err(FetchError::Url(UrlFailure {
                            url: url.to_string(),
                            reason: format!("{reason} ({tries})"),
                            connection: true,
                        }));
                    }
                    let delay = retry_after
                        .unwrap_or(BACKOFF_STEP * failed_in_a_row)
                        .min(BACKOFF_CAP);
                    let resume = if state.have > 0 {
                        format!(", resuming at byte {}", state.have)
                    } else {
                        String::new()
                    };
                    self.context.message(format!(
                        "{url}: {reason}; retry {failed_in_a_row} of {} in {}{resume}",
                        self.retries,
                        format_seconds(delay.as_secs_f64())
                    ));
                    std::thread::sleep(delay);
                }
            }
        }
    }

    /// One try at `url`: the request (redirects followed), what the
    /// response says about the bytes to come, and the body appended to
    /// what `state` holds.
    fn attempt(
        &self,
        url: &str,
        state: &mut Transfer,
        headers: &[(String, String)],
        limit: SizeLimit,
    ) -> Result<(), AttemptError> {
        let mut response = self.request(url, state, headers)?;
        let total = self.announced_total(url, &response, state)?;
        // The hub announces an LFS file's size on the redirect to its storage.
        let limit = match (limit.expected, state.announced_size) {
            (None, Some(announced)) => SizeLimit {
                expected: Some(announced),
                expected_by: "the hub's X-Linked-Size",
                ..limit
            },
            _ => limit,
        };
        if let Some(total) = total {
            if let Some(problem) = limit.refuses(total, true) {
                return Err(AttemptError::Fatal {
                    reason: format!("the server announces {total} bytes, {problem}"),
                    connection: false,
                });
            }
        }
        let total = total.or(limit.expected);
        self.receive(response.body_mut().as_reader(), state, limit, total)
    }

    /// GETs `url` from where `state` stands, following redirects; the
    /// response that is not one.
    fn request(
        &self,
        url: &str,
        state: &mut Transfer,
        headers: &[(String, String)],
    ) -> Result<Response<Body>, AttemptError> {
        let origin = authority(url);
        let mut current = url.to_string();
        let mut hops = 0;
        loop {
            let mut request = self
                .agent
                .get(&current)
                .header("Accept-Encoding", "identity");
            if state.have > 0 {
                request = request.header("Range", format!("bytes={}-", state.have));
            }
            if authority(&current) == origin {
                for (name, value) in headers {
                    request = request.header(name.as_str(), value.as_str());
                }
            }
            let response = request.call().map_err(|error| classify(&error))?;
            state.note_headers(response.headers());
            let status = response.status();
            if !status.is_redirection() || status == StatusCode::NOT_MODIFIED {
                return Ok(response);
            }
            let Some(location) = response
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
            else {
                return Err(AttemptError::Fatal {
                    reason: format!("HTTP {} without a Location to follow", status_text(status)),
                    connection: false,
                });
            };
            hops += 1;
            if hops > MAX_REDIRECTS {
                return Err(AttemptError::Fatal {
                    reason: format!("more than {MAX_REDIRECTS} redirects (last to {location})"),
                    connection: false,
                });
            }
            current = join_url(&current, location);
        }
    }

    /// The whole file's size as the response announces it, if it does;
    /// a response that cannot continue the transfer is an error to retry
    /// or to give up on, and one that starts it over empties `state`.
    fn announced_total(
        &self,
        url: &str,
        response: &Response<Body>,
        state: &mut Transfer,
    ) -> Result<Option<u64>, AttemptError> {
        let status = response.status();
        let content_length = header_u64(response.headers(), "content-length");
        match status.as_u16() {
            200 => {
                if state.have > 0 {
                    self.context.message(format!(
                        "{url}: the server does not resume (ignored Range); starting over"
                    ));
                    state.restart()?;
                }
                Ok(content_length)
            }
            206 => {
                let range = response
                    .headers()
                    .get("content-range")
                    .and_then(|v| v.to_str().ok());
                match range.and_then(parse_content_range) {
                    Some((start, total)) if start == state.have => {
                        Ok(total.or(content_length.map(|len| start + len)))
                    }
                    _ => {
                        state.restart()?;
                        Err(AttemptError::Retry {
                            reason: format!(
                                "the server sent a different range ({})",
                                range.unwrap_or("none")
                            ),
                            retry_after: None,
                        })
                    }
                }
            }
            416 if state.have > 0 => {
                state.restart()?;
                Err(AttemptError::Retry {
                    reason: "the server refused the resume range (the file may have changed)"
                        .into(),
                    retry_after: None,
                })
            }
            408 | 429 | 500..=599 => Err(AttemptError::Retry {
                reason: format!("HTTP {}", status_text(status)),
                retry_after: header_u64(response.headers(), "retry-after").map(Duration::from_secs),
            }),
            _ => Err(AttemptError::Fatal {
                reason: format!("HTTP {}", status_text(status)),
                connection: false,
            }),
        }
    }

    /// Appends the body to `state` up to the limit's cap; a body that ends
    /// short of `total` is a retry, from where it ended.
    fn receive(
        &self,
        mut reader: impl Read,
        state: &mut Transfer,
        limit: SizeLimit,
        total: Option<u64>,
    ) -> Result<(), AttemptError> {
        let cap = limit.cap();
        let mut buffer = vec![0u8; CHUNK];
        loop {
            let read = match reader.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(AttemptError::Retry {
                        reason: format!("connection lost after {} bytes: {error}", state.have),
                        retry_after: None,
                    })
                }
            };
            if state.have + read as u64 > cap {
                // Nothing past the limit reaches the disk.
                let problem = limit
                    .refuses(state.have + read as u64, false)
                    .unwrap_or_default();
                return Err(AttemptError::Fatal {
                    reason: format!("the body goes on past {cap} bytes, {problem}"),
                    connection: false,
                });
            }
            state.append(&buffer[..read])?;
            self.context
                .progress(&self.phase, state.have, total, "bytes");
        }
        match total {
            Some(total) if state.have < total => Err(AttemptError::Retry {
                reason: format!("connection closed at byte {} of {total}", state.have),
                retry_after: None,
            }),
            _ => {
                self.context.progress_done(&self.phase, state.have, "bytes");
                Ok(())
            }
        }
    }
}

struct Transfer<'f> {
    file: &'f mut File,
    dest: &'f Path,
    hasher: Hasher,
    have: u64,
    announced_sha256: Option<String>,
    /// The hub's `X-Linked-Size`: the size of the file it redirects to.
    announced_size: Option<u64>,
    repo_commit: Option<String>,
}

impl Transfer<'_> {
    fn append(&mut self, bytes: &[u8]) -> Result<(), AttemptError> {
        self.file
            .write_all(bytes)
            .map_err(|e| AttemptError::Disk(StageError::io(self.dest, e)))?;
        self.hasher.update(bytes);
        self.have += bytes.len() as u64;
        Ok(())
    }

    fn restart(&mut self) -> Result<(), AttemptError> {
        let disk = |e| AttemptError::Disk(StageError::io(self.dest, e));
        self.file.set_len(0).map_err(disk)?;
        self.file
            .seek(SeekFrom::Start(0))
            .map_err(|e| AttemptError::Disk(StageError::io(self.dest, e)))?;
        self.hasher.reset();
        self.have = 0;
        Ok(())
    }

    fn note_headers(&mut self, headers: &HeaderMap) {
        if self.announced_sha256.is_none() {
            for name in ["x-linked-etag", "etag"] {
                if let Some(sha) = headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .and_then(etag_sha256)
                {
                    self.announced_sha256 = Some(sha);
                    break;
                }
            }
        }
        if self.announced_size.is_none() {
            self.announced_size = header_u64(headers, "x-linked-size");
        }
        if self.repo_commit.is_none() {
            self.repo_commit = headers
                .get("x-repo-commit")
                .and_then(|v| v.to_str().ok())
                .map(String::from);
        }
    }
}

/// The sha256 in an ETag (`"abc…"`, `W/"abc…"`), if it is one: git blob
/// ids (40 hex) and S3 md5 etags (32 hex) are not.
pub(crate) fn etag_sha256(etag: &str) -> Option<String> {
    let tag = etag.trim();
    let tag = tag.strip_prefix("W/").unwrap_or(tag);
    let tag = tag.trim_matches('"');
    is_hex(tag, 64).then(|| tag.to_ascii_lowercase())
}

fn classify(error: &ureq::Error) -> AttemptError {
    let reason = match error {
        ureq::Error::Io(io) => io.to_string(),
        ureq::Error::Timeout(which) => format!("timed out ({which})"),
        ureq::Error::HostNotFound => "host not found (no network, or a wrong host name)".into(),
        ureq::Error::ConnectionFailed => "connection failed".into(),
        ureq::Error::Protocol(problem) => format!("HTTP protocol error: {problem}"),
        other => {
            return AttemptError::Fatal {
                reason: other.to_string(),
                connection: false,
            }
        }
    };
    AttemptError::Retry {
        reason,
        retry_after: None,
    }
}

fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// `bytes START-END/TOTAL` (TOTAL may be `*`) → (START, TOTAL).
fn parse_content_range(value: &str) -> Option<(u64, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes")?.trim_start();
    let (range, total) = rest.split_once('/')?;
    let (start, _end) = range.split_once('-')?;
    Some((start.trim().parse().ok()?, total.trim().parse().ok()))
}

/// `scheme://host:port` of an absolute URL.
fn authority(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    let end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |at| after_scheme + at);
    &url[..end]
}

/// Resolves a `Location` header against the URL that sent it.
pub(crate) fn join_url(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    if let Some(rest) = location.strip_prefix("//") {
        let scheme = base.split("://").next().unwrap_or("https");
        return format!("{scheme}://{rest}");
    }
    let origin = authority(base);
    if location.starts_with('/') {
        return format!("{origin}{location}");
    }
    let path = &base[origin.len()..];
    let path = path.split(['?', '#']).next().unwrap_or("");
    let directory = path.rfind('/').map_or("/", |at| &path[..=at]);
    format!("{origin}{directory}{location}")
}

/// Percent-encodes everything but unreserved characters (and `/` when
/// `keep_slash`), for names put into URL paths.
pub(crate) fn percent_encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && byte == b'/')
        {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' && index + 2 < bytes.len() {
            let high = (bytes[index + 1] as char).to_digit(16);
            let low = (bytes[index + 2] as char).to_digit(16);
            if let (Some(high), Some(low)) = (high, low) {
                out.push((high * 16 + low) as u8);
                index += 3;
                continue;
            }
        }
        out.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Copies a local file to `dest` while hashing, reporting progress.
pub(crate) fn copy_hashing(
    context: &StageContext,
    phase: &str,
    source: &Path,
    dest: &Path,
    algorithm: Algorithm,
    limit: SizeLimit,
) -> Result<(u64, String), StageError> {
    let mut input = File::open(source).map_err(|e| StageError::io(source, e))?;
    // Only a regular file's length is its content's (not /dev/zero's).
    let total = input
        .metadata()
        .ok()
        .filter(|meta| meta.is_file())
        .map(|m| m.len());
    let refused = |problem: String| {
        StageError::input(
            format!("`{}`: {problem}", source.display()),
            "check the path, or set `size`/`max_bytes` to what the file should hold",
        )
    };
    if let Some(total) = total {
        if let Some(problem) = limit.refuses(total, true) {
            return Err(refused(format!("the file has {total} bytes, {problem}")));
        }
    }
    let cap = limit.cap();
    let mut output = File::create(dest).map_err(|e| StageError::io(dest, e))?;
    let mut hasher = algorithm.hasher();
    let mut buffer = vec![0u8; CHUNK];
    let mut done = 0u64;
    loop {
        let read = match input.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(StageError::io(source, error)),
        };
        if done + read as u64 > cap {
            let problem = limit.refuses(done + read as u64, false).unwrap_or_default();
            return Err(refused(format!("it goes on past {cap} bytes, {problem}")));
        }
        output
            .write_all(&buffer[..read])
            .map_err(|e| StageError::io(dest, e))?;
        hasher.update(&buffer[..read]);
        done += read as u64;
        context.progress(phase, done, total, "bytes");
    }
    output.flush().map_err(|e| StageError::io(dest, e))?;
    if let Some(problem) = limit.refuses(done, true) {
        return Err(refused(format!("it has {done} bytes, {problem}")));
    }
    context.progress_done(phase, done, "bytes");
    Ok((done, hasher.finish_hex()))
}

/// Moves a verified file into the outputs; scratch and outputs may be on
/// different file systems, where rename fails.
pub(crate) fn move_into_place(from: &Path, to: &Path) -> Result<(), StageError> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| StageError::io(parent, e))?;
    }
    if std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to).map_err(|e| StageError::io(to, e))?;
    std::fs::remove_file(from).map_err(|e| StageError::io(from, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_that_are_sha256() {
        let sha = "a".repeat(64);
        assert_eq!(etag_sha256(&format!("\"{sha}\"")), Some(sha.clone()));
        assert_eq!(etag_sha256(&format!("W/\"{sha}\"")), Some(sha.clone()));
        assert_eq!(etag_sha256(&"b".repeat(40)), None);
        assert_eq!(etag_sha256("\"d41d8cd98f00b204e9800998ecf8427e\""), None);
    }

    #[test]
    fn content_range() {
        assert_eq!(
            parse_content_range("bytes 100-199/200"),
            Some((100, Some(200)))
        );
        assert_eq!(parse_content_range("bytes 5-9/*"), Some((5, None)));
        assert_eq!(parse_content_range("items 1-2/3"), None);
    }

    #[test]
    fn redirect_locations() {
        let base = "https://hub.example/org/m/resolve/main/config.json?x=1";
        assert_eq!(
            join_url(base, "https://cdn.example/a"),
            "https://cdn.example/a"
        );
        assert_eq!(join_url(base, "//cdn.example/a"), "https://cdn.example/a");
        assert_eq!(join_url(base, "/api/x"), "https://hub.example/api/x");
        assert_eq!(
            join_url(base, "other.json"),
            "https://hub.example/org/m/resolve/main/other.json"
        );
    }

    #[test]
    fn percent_coding() {
        assert_eq!(percent_encode("refs/pr/1", false), "refs%2Fpr%2F1");
        assert_eq!(
            percent_encode("onnx/model a.onnx", true),
            "onnx/model%20a.onnx"
        );
        assert_eq!(percent_decode("/tmp/a%20b"), "/tmp/a b");
        assert_eq!(percent_decode("/tmp/100%"), "/tmp/100%");
    }
}
