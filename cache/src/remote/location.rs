//! Where a remote cache is: its URL, parsed and checked before anything
//! connects, and the opendal operator that reaches it.

use std::path::PathBuf;
use std::time::Duration;

use opendal::layers::{RetryLayer, TimeoutLayer};
use opendal::{services, Operator};
use reqsign_aws_v4::{Credential, DefaultCredentialProvider, EnvCredentialProvider};
use reqsign_core::{Context, ProvideCredential, ProvideCredentialChain};

use crate::error::BadLocation;
use crate::{CacheError, RemoteError};

/// How a remote cache is configured, from whichever source set it (flag,
/// environment, pipeline file, project config); see docs/remote-cache.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteConfig {
    /// `s3://bucket/prefix` or `file:///path`. Never carries credentials: those come from the
    /// storage's own environment variables and profiles.
    pub url: String,
    /// An S3-compatible endpoint (`http://127.0.0.1:9000` for a local
    /// server, with path-style requests).
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// Pull, never push: for jobs that must not write (forks' pull requests).
    pub read_only: bool,
    /// Objects in flight at once, pulls and pushes each.
    pub concurrency: usize,
    /// Where each result's transfer progress goes: set by whoever shows
    /// it (the CLI), never by a setting.
    pub progress: Option<super::progress::ProgressSink>,
}

impl RemoteConfig {
    pub const DEFAULT_CONCURRENCY: usize = 8;

    pub fn new(url: impl Into<String>) -> RemoteConfig {
        RemoteConfig {
            url: url.into(),
            endpoint: None,
            region: None,
            read_only: false,
            concurrency: RemoteConfig::DEFAULT_CONCURRENCY,
            progress: None,
        }
    }

    /// This configuration, reporting transfers to `sink`.
    pub fn with_progress(mut self, sink: super::progress::ProgressSink) -> RemoteConfig {
        self.progress = Some(sink);
        self
    }
}

/// A parsed remote URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A directory (a mounted share, or a test).
    Fs(PathBuf),
    S3 {
        bucket: String,
        prefix: String,
    },
}

impl Location {
    pub fn parse(url: &str) -> Result<Location, BadLocation> {
        let owned_url = || url.to_string();
        if url.starts_with('/') {
            return Ok(Location::Fs(PathBuf::from(url)));
        }
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(BadLocation::NotAUrl { url: owned_url() });
        };
        if scheme == "file" {
            if !rest.starts_with('/') {
                return Err(BadLocation::RelativePath { url: owned_url() });
            }
            return Ok(Location::Fs(PathBuf::from(rest)));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.contains('@') {
            return Err(BadLocation::Credentials);
        }
        let prefix = path.trim_matches('/').to_string();
        if prefix.split('/').any(|part| part == ".." || part == ".") {
            return Err(BadLocation::DotInPrefix { url: owned_url() });
        }
        let named = |what: &'static str| -> Result<String, BadLocation> {
            let valid = !authority.is_empty()
                && authority
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
            if valid {
                Ok(authority.to_string())
            } else {
                Err(BadLocation::BadName {
                    url: owned_url(),
                    name: authority.to_string(),
                    what,
                })
            }
        };
        match scheme {
            "s3" => Ok(Location::S3 {
                bucket: named("bucket")?,
                prefix,
            }),
            "gs" | "gcs" | "azblob" | "ghac" => Err(BadLocation::NotBuiltIn {
                url: owned_url(),
                scheme: scheme.to_string(),
            }),
            other => Err(BadLocation::UnknownScheme {
                url: owned_url(),
                scheme: other.to_string(),
            }),
        }
    }
}

/// How long one request may take before the remote counts as down, and
/// how long a transfer may stall (with the deadlines of `transport`,
/// which a drip that resets the stall timeout cannot extend).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// The operators of a remote: one rooted at its prefix for everything but
/// listings, and one for listings with the prefix its paths start with
/// (`list`).
pub(super) struct Operators {
    pub(super) main: Operator,
    pub(super) lister: Operator,
    pub(super) list_prefix: String,
    /// For S3, the same two that sign nothing: what a job without
    /// credentials reads a public-read prefix with (`Access`).
    pub(super) anonymous: Option<(Operator, Operator)>,
}

/// How an S3 remote's requests go: signed with the credentials the
/// standard AWS chain finds, or, where it finds none (a fork's pull
/// request), unsigned, so that a bucket whose policy lets anyone read the
/// prefix still gives its results and records. Decided once per process,
/// before the first request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    Signed,
    Anonymous,
}

/// Whether the credentials chain (environment, profiles, web identity,
/// container and instance metadata) finds any credentials for `operator`:
/// signing a URL loads them and sends nothing. They stay cached in the
/// operator's signer for the requests that follow.
pub(super) async fn access_of(operator: &Operator) -> Access {
    match operator
        .presign_stat("probe", Duration::from_secs(900))
        .await
    {
        Err(error) if no_credentials(&error) => Access::Anonymous,
        // Any other failure shows on the first real request, as it did.
        _ => Access::Signed,
    }
}

/// Whether `error` says that no credentials were found to sign with.
pub(super) fn no_credentials(error: &opendal::Error) -> bool {
    let mut texts = vec![error.to_string()];
    let mut cause = std::error::Error::source(error);
    while let Some(next) = cause {
        texts.push(next.to_string());
        cause = next.source();
    }
    texts
        .iter()
        .any(|text| text.contains("failed to load signing credential"))
}

pub(super) fn operators(
    config: &RemoteConfig,
    location: &Location,
) -> Result<Operators, CacheError> {
    let invalid = |error: opendal::Error| {
        CacheError::from(RemoteError::BadOptions {
            url: config.url.clone(),
            detail: error.to_string(),
        })
    };
    match location {
        Location::Fs(path) => {
            crate::fsutil::check_own_folders(
                path,
                "replace the link with the directory it points to, \
                 or set the remote to the directory that holds them all",
            )?;
            let mut builder = services::Fs::default().root(&path.to_string_lossy());
            // Writes land in tmp/ and are renamed into place; a read-only
            // remote is not written at all, not even that directory.
            if !config.read_only {
                std::fs::create_dir_all(path.join("tmp"))
                    .map_err(|error| CacheError::io(path, error))?;
                builder = builder.atomic_write_dir(&path.join("tmp").to_string_lossy());
            }
            let main = layered(Operator::new(builder).map_err(invalid)?);
            Ok(Operators {
                lister: main.clone(),
                main,
                list_prefix: String::new(),
                anonymous: None,
            })
        }
        Location::S3 { bucket, prefix } => {
            let s3 = |root: &str, signed: bool| -> Result<Operator, CacheError> {
                let mut builder = s3_builder(config, bucket, root);
                if !signed {
                    builder = builder.skip_signature();
                }
                let operator = Operator::new(builder).map_err(invalid)?;
                // Every request through the bounded client (`transport`).
                let context = operator
                    .base_context()
                    .with_http_transport(super::transport::transporter());
                Ok(layered(operator.with_context(context)))
            };
            // opendal makes a listed key relative to the operator's root
            // by cutting the root's length off it, and panics on a key
            // shorter than that: listings go through an operator rooted at
            // the bucket, whose root every key starts with, and `list`
            // drops keys outside the prefix.
            let root = format!("/{prefix}");
            Ok(Operators {
                main: s3(&root, true)?,
                lister: s3("/", true)?,
                anonymous: Some((s3(&root, false)?, s3("/", false)?)),
                list_prefix: if prefix.is_empty() {
                    String::new()
                } else {
                    format!("{prefix}/")
                },
            })
        }
    }
}

fn s3_builder(config: &RemoteConfig, bucket: &str, root: &str) -> services::S3 {
    let mut builder = services::S3::default()
        .bucket(bucket)
        .root(root)
        .credential_provider_chain(credentials_chain());
    let endpoint = config
        .endpoint
        .clone()
        .or_else(|| env_nonempty("AWS_ENDPOINT_URL_S3"))
        .or_else(|| env_nonempty("AWS_ENDPOINT_URL"));
    if let Some(endpoint) = endpoint {
        builder = builder.endpoint(&endpoint);
    }
    let region = config
        .region
        .clone()
        .or_else(|| env_nonempty("AWS_REGION"))
        .or_else(|| env_nonempty("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|| "us-east-1".to_string());
    builder.region(&region)
}

/// AWS's credentials chain (the environment, profiles, SSO, web identity,
/// a credential process, the container's and the instance's metadata), in
/// which an access key or secret set to the empty string is no key: a CI
/// that withholds a secret (GitHub, for a fork's pull request) sets the
/// variable that would hold it to "", and a key of "" would sign requests
/// every server refuses instead of reading anonymously.
fn credentials_chain() -> ProvideCredentialChain<Credential> {
    ProvideCredentialChain::new()
        .push(NonEmptyEnv(EnvCredentialProvider::new()))
        .push(DefaultCredentialProvider::builder().no_env().build())
}

/// The environment's credentials, unless a part of them is empty.
#[derive(Debug)]
struct NonEmptyEnv(EnvCredentialProvider);

impl ProvideCredential for NonEmptyEnv {
    type Credential = Credential;

    async fn provide_credential(&self, ctx: &Context) -> reqsign_core::Result<Option<Credential>> {
        let found = self.0.provide_credential(ctx).await?;
        Ok(found.filter(|credential| {
            !credential.access_key_id.is_empty() && !credential.secret_access_key.is_empty()
        }))
    }
}

/// The timeout and retry layers every operator has.
fn layered(operator: Operator) -> Operator {
    // reqwest is built without a default TLS provider (docs/decisions.md,
    // "opendal, behind a sync API"); another part of the process may have
    // installed one already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    operator
        .layer(
            TimeoutLayer::new()
                .with_timeout(REQUEST_TIMEOUT)
                .with_io_timeout(IO_TIMEOUT),
        )
        .layer(
            RetryLayer::new()
                .with_max_times(2)
                .with_min_delay(Duration::from_millis(100))
                .with_max_delay(Duration::from_secs(2))
                .with_jitter(),
        )
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// Values that must never appear in a message: opendal quotes the
/// server's error body, and an S3 error names the access key it refused.
pub(super) fn secrets() -> Vec<String> {
    [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    ]
    .iter()
    .filter_map(|name| env_nonempty(name))
    .filter(|value| value.len() >= 4)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_into_locations() {
        assert_eq!(
            Location::parse("s3://ci-cache/pipe/imdb/").unwrap(),
            Location::S3 {
                bucket: "ci-cache".into(),
                prefix: "pipe/imdb".into()
            }
        );
        assert_eq!(
            Location::parse("s3://bucket").unwrap(),
            Location::S3 {
                bucket: "bucket".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            Location::parse("file:///mnt/cache").unwrap(),
            Location::Fs("/mnt/cache".into())
        );
        assert_eq!(
            Location::parse("/mnt/cache").unwrap(),
            Location::Fs("/mnt/cache".into())
        );
    }

    #[test]
    fn bad_urls_are_refused_with_a_way_out() {
        let refused = |url: &str| Location::parse(url).unwrap_err();
        let credentials = refused("s3://AKIA:secret@bucket/p");
        assert_eq!(credentials, BadLocation::Credentials);
        let credentials = credentials.to_string();
        assert!(credentials.contains("AWS_ACCESS_KEY_ID"), "{credentials}");
        assert!(!credentials.contains("secret@"), "{credentials}");
        assert!(
            matches!(refused("ftp://host/x"), BadLocation::UnknownScheme { scheme, .. } if scheme == "ftp")
        );
        assert!(refused("ftp://host/x")
            .to_string()
            .contains("s3://BUCKET/PREFIX"));
        assert!(refused("cache-dir").to_string().contains("absolute"));
        assert!(refused("file://relative").to_string().contains("absolute"));
        assert!(refused("s3://b/../x").to_string().contains(".."));
        assert_eq!(
            refused("s3:///prefix").to_string(),
            "remote `s3:///prefix`: `` is not a valid bucket name"
        );
    }
}
