//! Action results: what a stage produced, stored under its key, and the
//! checks that decide whether one read back (from disk or a remote) may
//! be used at all.
//!
//! An action file is read from places pipe does not control (a shared
//! directory, a bucket others write to), so nothing in it is taken on
//! faith:
//! - its bytes are covered by a checksum, so a flipped bit anywhere is a
//!   miss, never a wrong figure;
//! - it must be filed under its own key;
//! - every output path must be one its manifest declares (the key is the
//!   digest of that manifest, so a writer cannot add a path without
//!   changing the key), plain and project-relative, outside `.git/` and
//!   outside `.pipe/` except `.pipe/out/`.
//!
//! The engine checks the paths once more against the stage it is running
//! (`check_action_fits` in the engine's `workspace.rs`): this module does not
//! know stages, only what the action says of itself.

use std::collections::BTreeMap;

use pipe_protocol::excerpt as shown;
use pipe_protocol::ProjectPath;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::{ActionKey, Artifact};

/// What a successful stage produced, stored under its key. Metrics are
/// not kept here: they are outputs (`metrics.json` and the stage's
/// `metrics:` files), stored, restored and verified as objects.
#[derive(Debug, Clone, Serialize)]
pub struct ActionResult {
    pub key: ActionKey,
    /// Project-relative output path -> stored artifact. Each path passed
    /// the stored rule when the result was read back (`decode`), so a
    /// restore joins it to the project root as it is.
    pub outputs: BTreeMap<ProjectPath, Artifact>,
    /// The canonical key manifest this key is the digest of, as written
    /// (`manifest_of`). Its `outs` (name -> path) and `metrics` (paths) are
    /// the only paths an action may hold; nothing else of it is read when
    /// a result is looked up, so it is kept as text, not built into a tree
    /// (most of what a no-op's hundred lookups cost).
    pub manifest: Box<RawValue>,
    pub created_unix_ms: u64,
    pub duration_ms: u64,
}

impl PartialEq for ActionResult {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.outputs == other.outputs
            && self.manifest.get() == other.manifest.get()
            && self.created_unix_ms == other.created_unix_ms
            && self.duration_ms == other.duration_ms
    }
}

/// An action file's body as written, its output paths still text: read
/// first, so that a path the stored rule refuses is named as the action's
/// output (`BadAction::OutputNotRelative`) when the file is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenResult {
    key: ActionKey,
    outputs: BTreeMap<String, Artifact>,
    manifest: Box<RawValue>,
    created_unix_ms: u64,
    duration_ms: u64,
}

/// A manifest as an action keeps it.
pub fn manifest_of(manifest: &serde_json::Value) -> Box<RawValue> {
    // Serialising a tree of JSON values cannot fail.
    serde_json::value::to_raw_value(manifest)
        .unwrap_or_else(|_| RawValue::from_string("null".into()).expect("null is JSON"))
}

/// The paths a manifest declares, read from its text: `outs` values and
/// `metrics` items that are text; anything else of the manifest is
/// skipped, not built.
#[derive(Deserialize, Default)]
struct DeclaredPaths {
    #[serde(default)]
    outs: Option<serde_json::Value>,
    #[serde(default)]
    metrics: Option<serde_json::Value>,
}

impl DeclaredPaths {
    fn of(manifest: &RawValue) -> DeclaredPaths {
        serde_json::from_str(manifest.get()).unwrap_or_default()
    }

    fn outs(&self) -> impl Iterator<Item = &str> {
        self.outs
            .as_ref()
            .and_then(|outs| outs.as_object())
            .into_iter()
            .flat_map(|outs| outs.values().filter_map(|path| path.as_str()))
    }

    fn metrics(&self) -> impl Iterator<Item = &str> {
        self.metrics
            .as_ref()
            .and_then(|metrics| metrics.as_array())
            .into_iter()
            .flat_map(|metrics| metrics.iter().filter_map(|path| path.as_str()))
    }
}

/// The fixed start of an action file, before the checksum.
const HEADER: &[u8] = b"{\"format\":\"pipe-action-v2\",\"checksum\":\"";
/// Between the checksum and the action's own JSON.
const BODY_START: &[u8] = b"\",\"action\":";
const CHECKSUM_HEX_LEN: usize = 64;

/// The bytes of an action file: a JSON object holding the format, the
/// blake3 of the action's JSON exactly as written, and that JSON.
pub(crate) fn encode(result: &ActionResult) -> Vec<u8> {
    // Serialising plain data (maps with string keys, numbers) cannot fail.
    let body = serde_json::to_vec_pretty(result).unwrap_or_default();
    let checksum = blake3::hash(&body).to_hex();
    let mut bytes = Vec::with_capacity(HEADER.len() + 64 + BODY_START.len() + body.len() + 2);
    bytes.extend_from_slice(HEADER);
    bytes.extend_from_slice(checksum.as_bytes());
    bytes.extend_from_slice(BODY_START);
    bytes.extend_from_slice(&body);
    bytes.extend_from_slice(b"}\n");
    bytes
}

/// Why an action file is refused: it is not what `encode` writes for its
/// key, or its paths are not its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadAction {
    #[error("not a pipe-action-v2 file (written by another version of pipe, or damaged)")]
    NotAnAction,
    #[error("truncated")]
    Truncated,
    #[error("damaged framing")]
    DamagedFraming,
    #[error("its content does not match its checksum")]
    ChecksumMismatch,
    /// The body is not a result; serde's words.
    #[error("not a valid result ({0})")]
    NotAResult(String),
    #[error("holds key {0} under another name")]
    UnderAnotherKey(ActionKey),
    #[error("names output `{}`, which {problem}", shown(.path))]
    OutputNotRelative { path: String, problem: &'static str },
    #[error("names output `{}`, which its manifest does not declare", shown(.path))]
    OutputUndeclared { path: String },
    #[error("lacks its declared output `{}`", shown(.path))]
    OutputMissing { path: String },
}

/// Reads an action file filed under `key`, refusing anything `encode`
/// would not have written for that key, or whose paths are not its own.
pub(crate) fn decode(bytes: &[u8], key: &ActionKey) -> Result<ActionResult, BadAction> {
    let rest = bytes.strip_prefix(HEADER).ok_or(BadAction::NotAnAction)?;
    if rest.len() < CHECKSUM_HEX_LEN {
        return Err(BadAction::Truncated);
    }
    let (checksum, rest) = rest.split_at(CHECKSUM_HEX_LEN);
    let body = rest
        .strip_prefix(BODY_START)
        .and_then(|rest| rest.strip_suffix(b"}\n"))
        .ok_or(BadAction::DamagedFraming)?;
    if blake3::hash(body).to_hex().as_bytes() != checksum {
        return Err(BadAction::ChecksumMismatch);
    }
    let written: WrittenResult =
        serde_json::from_slice(body).map_err(|error| BadAction::NotAResult(error.to_string()))?;
    if written.key != *key {
        return Err(BadAction::UnderAnotherKey(written.key));
    }
    let mut outputs = BTreeMap::new();
    for (path, artifact) in written.outputs {
        match ProjectPath::stored(&path) {
            Ok(path) => outputs.insert(path, artifact),
            Err(problem) => return Err(BadAction::OutputNotRelative { path, problem }),
        };
    }
    let result = ActionResult {
        key: written.key,
        outputs,
        manifest: written.manifest,
        created_unix_ms: written.created_unix_ms,
        duration_ms: written.duration_ms,
    };
    result.check_paths()?;
    Ok(result)
}

impl ActionResult {
    /// The paths the manifest declares: its `outs` and its `metrics`.
    pub fn declared_paths(&self) -> Vec<String> {
        let declared = DeclaredPaths::of(&self.manifest);
        declared
            .outs()
            .chain(declared.metrics())
            .map(str::to_string)
            .collect()
    }

    /// The metrics files the manifest declares that the result holds, in
    /// the order their values are merged.
    pub fn metrics_paths(&self) -> Vec<String> {
        DeclaredPaths::of(&self.manifest)
            .metrics()
            .filter(|path| self.outputs.contains_key(*path))
            .map(str::to_string)
            .collect()
    }

    /// Every output path (plain and inside the project, as its type
    /// holds) is declared by the manifest; every declared `outs` path is
    /// there.
    pub(crate) fn check_paths(&self) -> Result<(), BadAction> {
        let paths = DeclaredPaths::of(&self.manifest);
        let declared: Vec<&str> = paths.outs().chain(paths.metrics()).collect();
        for path in self.outputs.keys() {
            if !declared.contains(&path.as_str()) {
                return Err(BadAction::OutputUndeclared {
                    path: path.to_string(),
                });
            }
        }
        for path in paths.outs() {
            if !self.outputs.contains_key(path) {
                return Err(BadAction::OutputMissing {
                    path: path.to_string(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ArtifactKind, ObjectDigest};

    fn artifact() -> Artifact {
        Artifact {
            kind: ArtifactKind::File,
            digest: ObjectDigest::of(b"x"),
            size: 1,
            files: 1,
            executable: false,
        }
    }

    fn result(paths: &[&str]) -> ActionResult {
        ActionResult {
            key: ActionKey::of(b"k"),
            outputs: paths
                .iter()
                .map(|path| (ProjectPath::stored(path).unwrap(), artifact()))
                .collect(),
            manifest: manifest_of(&serde_json::json!({
                "outs": {"model": "out/model.bin"},
                "metrics": [".pipe/out/p/train/metrics.json"],
            })),
            created_unix_ms: 1,
            duration_ms: 2,
        }
    }

    #[test]
    fn a_written_action_reads_back() {
        let written = result(&["out/model.bin", ".pipe/out/p/train/metrics.json"]);
        let bytes = encode(&written);
        assert_eq!(decode(&bytes, &written.key), Ok(written));
    }

    #[test]
    fn every_flipped_bit_is_refused() {
        let written = result(&["out/model.bin"]);
        let bytes = encode(&written);
        for index in 0..bytes.len() {
            for bit in 0..8 {
                let mut flipped = bytes.clone();
                flipped[index] ^= 1 << bit;
                assert!(
                    decode(&flipped, &written.key).is_err(),
                    "a flip of bit {bit} of byte {index} was accepted"
                );
            }
        }
    }

    /// An action file whose outputs are `paths` as written, which no
    /// `ActionResult` can hold when the stored rule refuses one.
    fn written_with_outputs(paths: &[&str]) -> Vec<u8> {
        let mut body = serde_json::to_value(result(&[])).unwrap();
        for path in paths {
            body["outputs"][*path] = serde_json::to_value(artifact()).unwrap();
        }
        let body = serde_json::to_vec_pretty(&body).unwrap();
        let checksum = blake3::hash(&body).to_hex();
        [HEADER, checksum.as_bytes(), BODY_START, &body, b"}\n"].concat()
    }

    #[test]
    fn undeclared_or_escaping_paths_are_refused() {
        let key = result(&[]).key;
        let plain = decode(&written_with_outputs(&["out/model.bin"]), &key);
        assert!(plain.is_ok(), "{plain:?}");
        for path in [
            "/abs/victim.txt",
            "../escaped.txt",
            ".git/hooks/post-checkout",
            "vendor/.git/config",
            ".pipe/x",
            "out/./model.bin",
            "other.txt",
        ] {
            let bad = written_with_outputs(&["out/model.bin", path]);
            let error = decode(&bad, &key).expect_err(path);
            assert!(
                matches!(
                    error,
                    BadAction::OutputNotRelative { .. } | BadAction::OutputUndeclared { .. }
                ),
                "{path}: {error}"
            );
            assert!(
                error.to_string().contains("names output"),
                "{path}: {error}"
            );
        }
        let missing = result(&[]);
        let error = decode(&encode(&missing), &missing.key).expect_err("missing output");
        assert_eq!(
            error.to_string(),
            "lacks its declared output `out/model.bin`"
        );
    }

    #[test]
    fn a_result_under_another_key_is_refused() {
        let written = result(&["out/model.bin"]);
        let error = decode(&encode(&written), &ActionKey::of(b"other")).unwrap_err();
        assert_eq!(error, BadAction::UnderAnotherKey(written.key));
        assert!(error.to_string().contains("under another name"), "{error}");
    }
}
