//! Stage keys: the blake3 digest of a canonical key manifest that names
//! everything a stage's result depends on.

use std::collections::BTreeMap;

use pipe_cache::{ActionKey, Artifact};
use pipe_protocol::redact::{redact_json, redact_text, redacted_json, MASK};
use serde_json::{json, Map, Value};

use crate::pipeline::{Stage, StageKind};

/// Bumped when the manifest's shape changes, so old keys stop matching
/// (2: results hold their metrics as files and carry a checksum).
const MANIFEST_VERSION: u64 = 2;

/// The content digest of each dependency, by dep name.
pub type DepDigests = BTreeMap<String, Artifact>;

/// Builds the manifest. `nonce` is set only for `always_run` stages, whose
/// results must never be reused.
///
/// Credentials are masked before hashing (`pipe_protocol::redact`): the
/// manifest is stored in the run database and in the cache, which may be
/// shared. Masking them in the key is also what we want: a password or a
/// token says who may fetch a file, not what the file is, so rotating a
/// token reruns nothing. Secret env values are keyed as `***` for the same
/// reason.
pub fn manifest(stage: &Stage, deps: &DepDigests, nonce: Option<&str>) -> Value {
    let mut manifest = Map::new();
    manifest.insert("manifest_version".into(), json!(MANIFEST_VERSION));
    match &stage.kind {
        StageKind::Command { command } => {
            manifest.insert("command".into(), json!(redact_text(command)));
        }
        StageKind::Argv { argv } => {
            let argv: Vec<String> = argv
                .iter()
                .map(|word| redact_text(word).into_owned())
                .collect();
            manifest.insert("argv".into(), json!(argv));
        }
        StageKind::Worker(worker) => {
            manifest.insert(
                "uses".into(),
                json!(format!("{}@{}", worker.uses, worker.version)),
            );
            manifest.insert("implementation".into(), json!(worker.implementation));
            let mut with = Value::Object(worker.with.clone());
            redact_json(&mut with);
            manifest.insert("with".into(), with);
        }
    }
    let params: Map<String, Value> = stage
        .params_used
        .iter()
        .map(|(path, value)| (path.clone(), redacted_json(value)))
        .collect();
    manifest.insert("params".into(), Value::Object(params));
    let mut dep_entries = Map::new();
    for dep in &stage.deps {
        let mut entry = Map::new();
        entry.insert("path".into(), json!(dep.path));
        if let Some(artifact) = deps.get(&dep.name) {
            entry.insert("digest".into(), json!(artifact.digest.to_hex()));
            entry.insert("kind".into(), json!(artifact.kind));
        }
        dep_entries.insert(dep.name.clone(), Value::Object(entry));
    }
    manifest.insert("deps".into(), Value::Object(dep_entries));
    let outs: Map<String, Value> = stage
        .outs
        .iter()
        .map(|out| (out.name.clone(), json!(out.path)))
        .collect();
    manifest.insert("outs".into(), Value::Object(outs));
    // A built-in stage's `metrics.json` too: the paths listed here (and
    // under `outs`) are the only ones a result filed under this key may
    // hold (`pipe_cache::ActionResult::check_paths`).
    manifest.insert("metrics".into(), json!(stage.metrics_paths()));
    let env: Map<String, Value> = stage
        .env
        .iter()
        .map(|(name, value)| {
            let shown = if stage.secret_env.contains(name) {
                MASK.into()
            } else {
                redact_text(value)
            };
            (name.clone(), json!(shown))
        })
        .collect();
    manifest.insert("env".into(), Value::Object(env));
    if let Some(nonce) = nonce {
        manifest.insert("always_run".into(), json!(nonce));
    }
    Value::Object(manifest)
}

/// Adds a field made outside the stage's declaration (the run a report
/// reads, crate::run_input).
pub fn add_field(manifest: &mut Value, name: &str, value: Value) {
    if let Value::Object(map) = manifest {
        map.insert(name.into(), value);
    }
}

/// The key of a manifest: blake3 over its canonical JSON.
pub fn key_of(manifest: &Value) -> ActionKey {
    let mut bytes = Vec::with_capacity(512);
    write_canonical(manifest, &mut bytes);
    ActionKey::of(&bytes)
}

/// JSON with object keys sorted at every level and no whitespace, so the
/// bytes depend only on content, never on insertion order.
pub fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (index, (name, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_json(name.as_str(), out);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::String(text) => write_json(text.as_str(), out),
        scalar => write_json(scalar, out),
    }
}

/// serde_json's own text for `value` (what `to_string` gives), written
/// straight into `out`.
fn write_json<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    // Writing a string or a scalar into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// One field that differs between two manifests.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FieldChange {
    /// The dotted path, for display and JSON (`params.lr`).
    pub field: String,
    /// The same path as names: a dependency named `data/train.csv` or
    /// `.pipe/out/x` is one name here, whatever dots it holds.
    #[serde(skip)]
    pub path: Vec<String>,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// Field-by-field differences, flattened to dotted paths in sorted order.
pub fn diff_manifests(before: &Value, after: &Value) -> Vec<FieldChange> {
    let before = flatten_paths(before);
    let after = flatten_paths(after);
    let mut paths: Vec<&Vec<String>> = before.keys().chain(after.keys()).collect();
    paths.sort_by_key(|path| path.join("."));
    paths.dedup();
    paths
        .into_iter()
        .filter(|path| before.get(*path) != after.get(*path))
        .map(|path| FieldChange {
            field: path.join("."),
            path: path.clone(),
            before: before.get(path).cloned(),
            after: after.get(path).cloned(),
        })
        .collect()
}

/// Calls `visit` with every leaf of nested objects (a scalar, an array or
/// an empty object) and the names that lead to it from the root.
fn visit_leaves(value: &Value, visit: &mut impl FnMut(&[String], &Value)) {
    fn walk(prefix: &mut Vec<String>, value: &Value, visit: &mut impl FnMut(&[String], &Value)) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (name, item) in map {
                    prefix.push(name.clone());
                    walk(prefix, item, visit);
                    prefix.pop();
                }
            }
            leaf => visit(prefix, leaf),
        }
    }
    walk(&mut Vec::new(), value, visit);
}

/// Nested objects as (names from the root) -> scalar or array.
fn flatten_paths(value: &Value) -> BTreeMap<Vec<String>, Value> {
    let mut out = BTreeMap::new();
    visit_leaves(value, &mut |path, leaf| {
        out.insert(path.to_vec(), leaf.clone());
    });
    out
}

/// Flattens nested objects to `a.b.c` -> scalar or array.
pub fn flatten(value: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    visit_leaves(value, &mut |path, leaf| {
        out.insert(path.join("."), leaf.clone());
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_bytes_ignore_insertion_order() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,2],"x":"s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(key_of(&a), key_of(&b));
        let c: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[2,1]},"b":1}"#).unwrap();
        assert_ne!(key_of(&a), key_of(&c));
    }

    /// Keys must not change: the canonical bytes of a document whose keys
    /// are already sorted are serde_json's compact text of it, escapes and
    /// numbers included.
    #[test]
    fn canonical_bytes_are_serde_jsons_compact_text() {
        let value: Value = serde_json::from_str(
            r#"{"a\"b":"tab\tquote\"nul\u0000é😀","n":[-1,0.5,1e300,18446744073709551615,null,true],"z":{"":{}}}"#,
        )
        .unwrap();
        let mut canonical = Vec::new();
        write_canonical(&value, &mut canonical);
        assert_eq!(canonical, serde_json::to_vec(&value).unwrap());
    }

    #[test]
    fn diff_names_changed_fields() {
        let a = json!({"command": "x", "params": {"lr": 0.1, "seed": 1}});
        let b = json!({"command": "x", "params": {"lr": 0.2, "seed": 1}, "env": {"A": "1"}});
        let changes = diff_manifests(&a, &b);
        let fields: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["env.A", "params.lr"]);
    }
}
