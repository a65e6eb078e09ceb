//! Objects, trees, action results, link strategies, verify and gc.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{ActionKey, ObjectDigest, Result, StatCache};

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

/// How a cached output is put back into the workspace; tried in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkMode {
    Reflink,
    /// The workspace file becomes a read-only hard link to the object.
    Hardlink,
    Copy,
}

impl LinkMode {
    pub const DEFAULT_ORDER: [LinkMode; 3] = [LinkMode::Reflink, LinkMode::Hardlink, LinkMode::Copy];

    pub fn parse(text: &str) -> Option<LinkMode> {
        match text {
            "reflink" => Some(LinkMode::Reflink),
            "hardlink" => Some(LinkMode::Hardlink),
            "copy" => Some(LinkMode::Copy),
            _ => None,
        }
    }
}

/// What a successful stage produced, stored under its key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionResult {
    pub key: ActionKey,
    /// Project-relative output path -> stored artifact.
    pub outputs: BTreeMap<String, Artifact>,
    /// Flattened metrics (`a.b.c` -> value).
    pub metrics: BTreeMap<String, serde_json::Value>,
    /// The canonical key manifest this key is the digest of.
    pub manifest: serde_json::Value,
    pub created_unix_ms: u64,
    pub duration_ms: u64,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct VerifyReport {
    pub objects_checked: u64,
    pub bytes_checked: u64,
    pub corrupt: Vec<String>,
    pub actions_checked: u64,
    pub corrupt_actions: Vec<String>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct GcReport {
    pub objects_removed: u64,
    pub bytes_removed: u64,
    pub actions_removed: u64,
    pub objects_kept: u64,
    pub actions_kept: u64,
}

/// A cache directory: `objects/`, `actions/`, `tmp/` and a `VERSION` file.
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    pub fn open(root: &Path) -> Result<Cache> {
        let _ = root;
        todo!()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Hashes a file or directory without storing it (for dependencies).
    pub fn hash_path(&self, path: &Path, stat: &StatCache) -> Result<Artifact> {
        let _ = (path, stat);
        todo!()
    }

    /// Hashes and stores a file or directory (for outputs).
    pub fn store(&self, path: &Path, stat: &StatCache) -> Result<Artifact> {
        let _ = (path, stat);
        todo!()
    }

    /// True when every object of `artifact` is present with the right size.
    pub fn contains(&self, artifact: &Artifact) -> bool {
        let _ = artifact;
        todo!()
    }

    /// Puts `artifact` at `dest` (replacing what is there), trying `modes`
    /// in order. Verifies content first: corruption is `CacheError::Corrupt`
    /// and leaves `dest` absent rather than half-written.
    pub fn restore(&self, artifact: &Artifact, dest: &Path, modes: &[LinkMode], stat: &StatCache) -> Result<()> {
        let _ = (artifact, dest, modes, stat);
        todo!()
    }

    pub fn put_action(&self, result: &ActionResult) -> Result<()> {
        let _ = result;
        todo!()
    }

    /// `None` when absent, unreadable, or when an object it names is gone.
    pub fn get_action(&self, key: &ActionKey) -> Option<ActionResult> {
        let _ = key;
        todo!()
    }

    pub fn verify(&self) -> Result<VerifyReport> {
        todo!()
    }

    /// Removes actions not in `keep` and objects they do not reach; entries
    /// younger than `grace` survive so a concurrent run is never robbed.
    pub fn gc(&self, keep: &HashSet<ActionKey>, grace: std::time::Duration) -> Result<GcReport> {
        let _ = (keep, grace);
        todo!()
    }
}
