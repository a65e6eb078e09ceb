//! Which remote cache a command uses: each setting from the first source
//! that gives it (flag, environment, the pipeline's `cache.remote`, the
//! project's `pipe.config.yaml`), except read-only, which any source can
//! turn on and none can turn off: a CI job that marks itself read-only
//! stays so whatever the pipeline says.

use std::path::Path;

use pipe_cache::remote::RemoteConfig;

use crate::spec::cache_section::load_project_config;
use crate::{EngineError, Result};

/// What one source says about the remote cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteSpec {
    /// A URL, a directory, or `off`.
    pub url: Option<String>,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub read_only: Option<bool>,
    pub concurrency: Option<usize>,
}

impl RemoteSpec {
    /// The `PIPE_REMOTE*` variables.
    pub fn from_env() -> Result<RemoteSpec> {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let read_only = match var("PIPE_REMOTE_READ_ONLY").as_deref() {
            None => None,
            Some("1" | "true" | "yes") => Some(true),
            Some("0" | "false" | "no") => Some(false),
            Some(other) => {
                return Err(EngineError::usage(
                    format!("PIPE_REMOTE_READ_ONLY is `{other}`"),
                    "set it to 1 (read-only) or 0",
                ))
            }
        };
        let concurrency = match var("PIPE_REMOTE_CONCURRENCY") {
            None => None,
            Some(text) => match text.parse::<usize>() {
                Ok(n) if (1..=256).contains(&n) => Some(n),
                _ => {
                    return Err(EngineError::usage(
                        format!("PIPE_REMOTE_CONCURRENCY is `{text}`"),
                        "set it to a whole number from 1 to 256",
                    ))
                }
            },
        };
        Ok(RemoteSpec {
            url: var("PIPE_REMOTE"),
            endpoint: var("PIPE_REMOTE_ENDPOINT"),
            region: var("PIPE_REMOTE_REGION"),
            read_only,
            concurrency,
        })
    }

    /// A directory given as a relative path is relative to `base`.
    fn anchored(mut self, base: &Path) -> RemoteSpec {
        if let Some(url) = &self.url {
            if url != "off" && !url.contains("://") && !url.starts_with('/') {
                self.url = Some(base.join(url).to_string_lossy().into_owned());
            }
        }
        self
    }
}

/// The remote cache for a command in the project at `root`, or `None`
/// when none is configured or it is turned off.
pub fn resolve(
    root: &Path,
    pipeline: Option<&RemoteSpec>,
    flag: Option<&str>,
    read_only_flag: bool,
) -> Result<Option<RemoteConfig>> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| root.to_path_buf());
    let from_flag = RemoteSpec {
        url: flag.map(str::to_string),
        read_only: read_only_flag.then_some(true),
        ..RemoteSpec::default()
    }
    .anchored(&cwd);
    let sources = [
        from_flag,
        RemoteSpec::from_env()?.anchored(&cwd),
        pipeline.cloned().unwrap_or_default().anchored(root),
        load_project_config(root)?
            .remote
            .unwrap_or_default()
            .anchored(root),
    ];
    let first = |pick: fn(&RemoteSpec) -> Option<String>| sources.iter().find_map(pick);
    let Some(url) = first(|spec| spec.url.clone()) else {
        return Ok(None);
    };
    if url == "off" {
        return Ok(None);
    }
    pipe_cache::remote::Location::parse(&url).map_err(|message| {
        EngineError::usage(
            message,
            "set the remote with --remote, PIPE_REMOTE, `cache: { remote: ... }` in the pipeline, or pipe.config.yaml",
        )
    })?;
    Ok(Some(RemoteConfig {
        url,
        endpoint: first(|spec| spec.endpoint.clone()),
        region: first(|spec| spec.region.clone()),
        read_only: sources.iter().any(|spec| spec.read_only == Some(true)),
        concurrency: sources
            .iter()
            .find_map(|spec| spec.concurrency)
            .unwrap_or(RemoteConfig::DEFAULT_CONCURRENCY),
    }))
}
