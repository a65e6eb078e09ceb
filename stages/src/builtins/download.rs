//! `data/download@1`: one file over HTTP(S) or from `file://`, verified
//! against a checksum before it becomes the output.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

use pipe_protocol::format::{format_bytes, format_seconds};
use pipe_protocol::{excerpt, ParamSpec};

use crate::http::{self, Algorithm, FetchError, Fetcher, SizeLimit, UrlFailure};
use crate::params::unset_is_empty;
use crate::{
    BuiltinStage, OutputKind, ParamKind, Result, StageContext, StageError, StageInfo,
    StageInfoBuilder,
};

pub struct Download;

/// `max_bytes` by default: 64 GiB, above the large single-file datasets
/// (the biggest Hugging Face allows is 50 GB) yet an end to an endless body.
const DEFAULT_MAX_BYTES: u64 = 64 << 30;

/// The stage's params, one field per `ParamSpec` of its `info()`.
#[derive(Deserialize)]
struct DownloadParams {
    url: String,
    #[serde(deserialize_with = "unset_is_empty")]
    mirrors: Vec<String>,
    md5: Option<String>,
    sha1: Option<String>,
    sha256: Option<String>,
    filename: Option<String>,
    retries: u64,
    timeout_secs: u64,
    size: Option<u64>,
    max_bytes: u64,
}

impl DownloadParams {
    /// Each checksum param with its algorithm and value, weakest first.
    fn checksums(&self) -> [(&'static str, Algorithm, Option<&str>); 3] {
        [
            ("md5", Algorithm::Md5, self.md5.as_deref()),
            ("sha1", Algorithm::Sha1, self.sha1.as_deref()),
            ("sha256", Algorithm::Sha256, self.sha256.as_deref()),
        ]
    }
}

impl BuiltinStage for Download {
    fn info(&self) -> StageInfo {
        StageInfoBuilder::new(
            "data/download",
            1,
            "Downloads one file over HTTP(S) or copies it from file://, with resume, retries, mirrors and a checksum check",
        )
        .params([
            ParamSpec::new("url", ParamKind::String, None, "where the file is: http://, https:// or file:///absolute/path"),
            ParamSpec::new("mirrors", ParamKind::StringList, Some(json!([])), "more URLs with the same file, tried in order after `url`"),
            ParamSpec::new("md5", ParamKind::String, Some(Value::Null), "expected md5 of the file (32 hex digits)"),
            ParamSpec::new("sha1", ParamKind::String, Some(Value::Null), "expected sha1 of the file (40 hex digits)"),
            ParamSpec::new("sha256", ParamKind::String, Some(Value::Null), "expected sha256 of the file (64 hex digits); exactly one checksum is required for http(s) URLs"),
            ParamSpec::new("filename", ParamKind::String, Some(Value::Null), "name of the file in messages and scratch space; default: the last segment of the URL path"),
            ParamSpec::new("retries", ParamKind::Integer, Some(json!(5)), "retries per URL after connection errors, timeouts, HTTP 408/429/5xx").at_least(0.0),
            ParamSpec::new("timeout_secs", ParamKind::Integer, Some(json!(60)), "seconds to wait to connect or for the next bytes before a try counts as failed").at_least(1.0),
            ParamSpec::new("size", ParamKind::Integer, Some(Value::Null), "expected size of the file in bytes: a server that announces another size is refused, and a body is cut off as soon as it goes past it").at_least(0.0),
            ParamSpec::new("max_bytes", ParamKind::Integer, Some(json!(DEFAULT_MAX_BYTES)), "largest file accepted when `size` is unset (default 64 GiB): a larger announced size is refused at once, and a body without one (chunked, endless) is cut off past it").at_least(1.0),
        ])
        .output("file", OutputKind::File, "the downloaded file, its checksum verified")
        .metrics(["bytes", "seconds", "bytes_per_second"])
        .makes_data()
        .build()
    }

    fn run(&self, context: &StageContext) -> Result<()> {
        let started = Instant::now();
        let params: DownloadParams = context.params()?;
        let url = params.url.trim().to_string();
        let mut sources = vec![url.clone()];
        sources.extend(params.mirrors.iter().map(|m| m.trim().to_string()));
        let sources: Vec<Source> = sources
            .iter()
            .map(|s| Source::parse(s))
            .collect::<Result<_>>()?;
        let expected = expected_checksum(&params, &sources)?;
        let filename = match params.filename.as_deref() {
            Some(name) => check_filename(name)?,
            None => filename_from_url(&url),
        };
        let retries = u32::try_from(params.retries).unwrap_or(u32::MAX);
        let timeout_secs = params.timeout_secs;
        if timeout_secs == 0 {
            return Err(StageError::param(
                "timeout_secs",
                "must be at least 1",
                "a few tens of seconds suits most servers",
            ));
        }

        let limit = SizeLimit {
            expected: params.size,
            expected_by: "`size`",
            max: params.max_bytes,
            max_param: Some("max_bytes"),
        };

        let scratch = context.scratch_dir();
        std::fs::create_dir_all(scratch).map_err(|e| StageError::io(scratch, e))?;
        let part = scratch.join(format!("{filename}.part"));
        let algorithm = expected
            .as_ref()
            .map_or(Algorithm::Sha256, |(algorithm, _)| *algorithm);
        let fetcher = Fetcher::new(
            context,
            retries,
            Duration::from_secs(timeout_secs),
            "download",
        );

        let mut failures: Vec<UrlFailure> = Vec::new();
        let mut mismatches: Vec<(String, String)> = Vec::new();
        for (index, source) in sources.iter().enumerate() {
            if index > 0 {
                context.message(format!("trying mirror {}", source.url()));
            }
            let got = match source {
                Source::Http(url) => match fetcher.fetch(url, &part, algorithm, &[], limit) {
                    Ok(fetched) => (fetched.bytes, fetched.digest_hex),
                    Err(FetchError::Stage(error)) => return Err(error),
                    Err(FetchError::Url(failure)) => {
                        context.message(format!("{}: {}", failure.url, failure.reason));
                        failures.push(failure);
                        continue;
                    }
                },
                Source::File { url, path } => {
                    if let Err(error) = std::fs::metadata(path) {
                        let failure = UrlFailure {
                            url: url.clone(),
                            reason: format!("{}: {error}", path.display()),
                            connection: false,
                        };
                        context.message(format!("{}: {}", failure.url, failure.reason));
                        failures.push(failure);
                        continue;
                    }
                    http::copy_hashing(context, "download", path, &part, algorithm, limit)?
                }
            };
            let (bytes, actual) = got;
            match &expected {
                Some((_, wanted)) if *wanted != actual => {
                    let _ = std::fs::remove_file(&part);
                    context.message(format!(
                        "{}: {} is {actual}, expected {wanted}; the file was discarded",
                        source.url(),
                        algorithm.name()
                    ));
                    mismatches.push((source.url().to_string(), actual));
                    continue;
                }
                Some(_) => {}
                None => context.message(format!(
                    "no checksum given for {}: add `sha256: {actual}` under `with:` so that a changed file is noticed",
                    source.url()
                )),
            }
            let output = context.output("file");
            http::move_into_place(&part, &output)?;
            let seconds = started.elapsed().as_secs_f64();
            let rate = if seconds > 0.0 {
                bytes as f64 / seconds
            } else {
                0.0
            };
            let verified = if expected.is_some() {
                format!(", {} verified", algorithm.name())
            } else {
                String::new()
            };
            context.message(format!(
                "{filename}: {} from {} in {} ({}/s){verified}",
                format_bytes(bytes as f64),
                source.url(),
                format_seconds(seconds),
                format_bytes(rate)
            ));
            return context.write_metrics(
                &json!({ "bytes": bytes, "seconds": seconds, "bytes_per_second": rate }),
            );
        }
        Err(all_failed(
            &filename,
            expected,
            algorithm,
            &failures,
            &mismatches,
        ))
    }
}

enum Source {
    Http(String),
    File { url: String, path: PathBuf },
}

impl Source {
    fn parse(url: &str) -> Result<Source> {
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            return Ok(Source::Http(url.to_string()));
        }
        if lower.starts_with("file://") {
            let rest = &url["file://".len()..];
            let rest = rest.strip_prefix("localhost").unwrap_or(rest);
            if !rest.starts_with('/') {
                return Err(StageError::param(
                    "url",
                    format!("`{url}` is not a file URL with an absolute path"),
                    "write `file:///absolute/path/to/file` (three slashes)",
                ));
            }
            let path = http::percent_decode(rest.split(['?', '#']).next().unwrap_or(rest));
            return Ok(Source::File {
                url: url.to_string(),
                path: PathBuf::from(path),
            });
        }
        Err(StageError::param(
            "url",
            format!("`{url}` is not an http://, https:// or file:// URL"),
            "give a full URL such as `https://host/path/file.tar.gz` or `file:///absolute/path`",
        ))
    }

    fn url(&self) -> &str {
        match self {
            Source::Http(url) | Source::File { url, .. } => url,
        }
    }
}

fn expected_checksum(
    params: &DownloadParams,
    sources: &[Source],
) -> Result<Option<(Algorithm, String)>> {
    let mut given = Vec::new();
    for (name, algorithm, value) in params.checksums() {
        if let Some(value) = value {
            let value = value.trim().to_ascii_lowercase();
            if !http::is_hex(&value, algorithm.hex_len()) {
                return Err(StageError::param(
                    name,
                    format!("`{}` is not an {name} ({} hex digits)", excerpt(&value), algorithm.hex_len()),
                    format!("copy the {name} from where the file is published, or compute it with `{name}sum FILE`"),
                ));
            }
            given.push((algorithm, value));
        }
    }
    match given.len() {
        0 if sources.iter().any(|s| matches!(s, Source::Http(_))) => Err(StageError::param(
            "sha256",
            "a download over http(s) needs a checksum (`md5`, `sha1` or `sha256`)",
            "the checksum names the content in the cache key and catches a changed or corrupt file: add `sha256: <64 hex digits>` (from the publisher, or `sha256sum FILE` on a copy you trust)",
        )),
        0 | 1 => Ok(given.pop()),
        _ => Err(StageError::param(
            given[1].0.name(),
            "give exactly one of `md5`, `sha1`, `sha256`",
            "keep the strongest one (sha256 over sha1 over md5)",
        )),
    }
}

fn check_filename(name: &str) -> Result<String> {
    let name = name.trim();
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\']) {
        return Err(StageError::param(
            "filename",
            format!("`{}` is not a plain file name", excerpt(name)),
            "give a name without directories, such as `aclImdb_v1.tar.gz`",
        ));
    }
    Ok(name.to_string())
}

fn filename_from_url(url: &str) -> String {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let after_scheme = path.find("://").map_or(path, |at| &path[at + 3..]);
    let segment = after_scheme
        .split_once('/')
        .map_or("", |(_, rest)| rest)
        .rsplit('/')
        .next()
        .unwrap_or("");
    let name = http::percent_decode(segment);
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\']) {
        "download".to_string()
    } else {
        name
    }
}

fn all_failed(
    filename: &str,
    expected: Option<(Algorithm, String)>,
    algorithm: Algorithm,
    failures: &[UrlFailure],
    mismatches: &[(String, String)],
) -> StageError {
    let local_copy = "use a local copy with `url: file:///path/to/local/copy` (same checksum), \
                      or put the file in the project and read it with a `run:` stage";
    let tried: Vec<String> = failures
        .iter()
        .map(|f| format!("  {}: {}", f.url, f.reason))
        .collect();
    if let (Some((url, actual)), Some((_, wanted))) = (mismatches.first(), expected) {
        let mut hint = format!(
            "the file at the URL changed or is corrupt: check `{}` in the pipeline, or add a mirror under `mirrors:` that serves the expected file",
            algorithm.name()
        );
        if !tried.is_empty() {
            hint.push_str(&format!("; the other URLs failed:\n{}", tried.join("\n")));
        }
        return StageError::Checksum {
            what: url.clone(),
            algorithm: algorithm.name().to_string(),
            expected: wanted,
            actual: actual.clone(),
            hint,
        };
    }
    let every_url = if failures.len() == 1 {
        "its URL"
    } else {
        "every URL"
    };
    let message = format!(
        "cannot download `{filename}`: {every_url} failed:\n{}",
        tried.join("\n")
    );
    let hint = if failures.iter().all(|f| f.connection) {
        format!("no network, or the host is down: add a mirror under `mirrors:`, {local_copy}")
    } else {
        format!("the server answered but did not serve the file: check the URL, add a mirror under `mirrors:`, or {local_copy}")
    };
    StageError::Network {
        url: failures.first().map(|f| f.url.clone()).unwrap_or_default(),
        message,
        hint,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filenames_from_urls() {
        assert_eq!(
            filename_from_url("https://h.example/a/aclImdb_v1.tar.gz?x=1"),
            "aclImdb_v1.tar.gz"
        );
        assert_eq!(filename_from_url("https://h.example/a%20b.txt"), "a b.txt");
        assert_eq!(filename_from_url("https://h.example/"), "download");
        assert_eq!(filename_from_url("https://h.example"), "download");
        assert_eq!(filename_from_url("file:///tmp/x.csv"), "x.csv");
    }
}
