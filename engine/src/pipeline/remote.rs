//! What a pipeline file or pipe.config.yaml says about the remote cache
//! (`cache.remote`).

use crate::settings::Places;

/// What one source says about the remote cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteSpec {
    /// A URL, a directory, or `off`.
    pub url: Option<String>,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub read_only: Option<bool>,
    pub concurrency: Option<usize>,
    /// Where each is written (`url`, `endpoint`, ...).
    pub places: Places,
}
