//! Which remote cache a command uses: each setting from the first source
//! that gives it (flag, environment, the pipeline's `cache.remote`, the
//! project's `pipe.config.yaml`), except read-only, which any source can
//! turn on and none can turn off: a CI job that marks itself read-only
//! stays so whatever the pipeline says. And the remote opened from what
//! was resolved, for a run and for the commands that push, pull or look.

use std::path::Path;

use pipe_cache::remote::{Remote, RemoteConfig};
use pipe_cache::CacheError;

use crate::pipeline::RemoteSpec;
use crate::project_config::load_project_config;
use crate::settings::{Invalid, Setting};
use crate::{EngineError, Result, UsageError};

/// A directory given as a relative path is relative to `base`.
fn anchored(url: String, base: &Path) -> String {
    if url != "off" && !url.contains("://") && !url.starts_with('/') {
        base.join(url).to_string_lossy().into_owned()
    } else {
        url
    }
}

fn text(text: &str) -> std::result::Result<String, Invalid> {
    Ok(text.to_string())
}

fn parse_read_only(text: &str) -> std::result::Result<bool, Invalid> {
    match text {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(Invalid::expected("1 (read-only) or 0")),
    }
}

fn parse_concurrency(text: &str) -> std::result::Result<usize, Invalid> {
    match text.parse::<usize>() {
        Ok(n) if (1..=256).contains(&n) => Ok(n),
        _ => Err(Invalid::expected("a whole number from 1 to 256")),
    }
}

/// The remote cache for a command in the project at `root`, or `None`
/// when none is configured or it is turned off. A directory from the
/// command line or the environment is relative to the working directory,
/// one from a file to the project.
pub fn resolve(
    root: &Path,
    pipeline: Option<&RemoteSpec>,
    flag: Option<&str>,
    read_only_flag: bool,
) -> Result<Option<RemoteConfig>> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| root.to_path_buf());
    let pipeline = pipeline.cloned().unwrap_or_default();
    let project = load_project_config(root)?.remote.unwrap_or_default();
    // Any source can make the remote read-only, and none can undo it.
    let read_only = Setting::new("read_only")
        .flag("--remote-read-only", read_only_flag.then_some(true))
        .env("PIPE_REMOTE_READ_ONLY", parse_read_only)
        .pipeline(pipeline.read_only, pipeline.places.get("read_only"))
        .project(project.read_only, project.places.get("read_only"))
        .all()?
        .iter()
        .any(|source| source.value);
    let concurrency = Setting::new("concurrency")
        .env("PIPE_REMOTE_CONCURRENCY", parse_concurrency)
        .pipeline(pipeline.concurrency, pipeline.places.get("concurrency"))
        .project(project.concurrency, project.places.get("concurrency"))
        .resolve()?
        .map_or(RemoteConfig::DEFAULT_CONCURRENCY, |found| found.value);
    let env_url = std::env::var("PIPE_REMOTE")
        .ok()
        .map(|url| anchored(url, &cwd));
    let url = Setting::new("the remote cache")
        .flag("--remote", flag.map(|url| anchored(url.to_string(), &cwd)))
        .env_text("PIPE_REMOTE", env_url.as_deref(), text)
        .pipeline(
            pipeline.url.clone().map(|url| anchored(url, root)),
            pipeline.places.get("url"),
        )
        .project(
            project.url.clone().map(|url| anchored(url, root)),
            project.places.get("url"),
        )
        .resolve_checked(|url| {
            if url == "off" {
                return Ok(());
            }
            pipe_cache::remote::Location::parse(url)
                .map(|_| ())
                .map_err(|bad| {
                    Invalid::because(
                        bad.to_string(),
                        "an s3:// URL, a directory, or `off` (docs/remote-cache.md)",
                    )
                })
        })?;
    let Some(url) = url.map(|url| url.value).filter(|url| url != "off") else {
        return Ok(None);
    };
    let in_files =
        |name: &'static str, env: &'static str, pick: fn(&RemoteSpec) -> Option<String>| {
            Setting::new(name)
                .env(env, text)
                .pipeline(pick(&pipeline), pipeline.places.get(name))
                .project(pick(&project), project.places.get(name))
                .resolve()
                .map(|found| found.map(|found| found.value))
        };
    Ok(Some(RemoteConfig {
        url,
        endpoint: in_files("endpoint", "PIPE_REMOTE_ENDPOINT", |spec| {
            spec.endpoint.clone()
        })?,
        region: in_files("region", "PIPE_REMOTE_REGION", |spec| spec.region.clone())?,
        read_only,
        concurrency,
        progress: None,
    }))
}

/// Opens the remote cache of `config` for the local cache at `cache_dir`;
/// a configuration mistake is the user's to fix (exit 2).
pub fn open_remote(config: &RemoteConfig, cache_dir: &Path) -> Result<Remote> {
    Remote::new(config, cache_dir).map_err(|error| match error {
        CacheError::Remote(remote) if remote.is_configuration() => {
            UsageError::BadRemote(remote).into()
        }
        other => EngineError::Cache(other),
    })
}
