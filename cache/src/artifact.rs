//! What a stage's output is to the cache: a file or a tree, by digest.

use serde::{Deserialize, Serialize};

use crate::ObjectDigest;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactKind {
    File,
    Dir,
}

/// A stored file or directory. For a directory, `digest` names its tree
/// object (a canonical listing of entries), `size` and `files` are totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub kind: ArtifactKind,
    pub digest: ObjectDigest,
    pub size: u64,
    pub files: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub executable: bool,
}
