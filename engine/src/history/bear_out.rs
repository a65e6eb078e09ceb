//! What of a pulled record its results bear out beyond outputs and
//! metrics (`vet`): its params, held to the manifests its keys hash, and
//! its commit, held to the repository here, whose files at that commit
//! must be the dependencies its keys hashed. A field that contradicts
//! them refuses the record; one that nothing here can check is kept and
//! listed as unverified, so that it is shown as the record's word only.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use pipe_cache::ObjectDigest;
use serde::Deserialize;
use serde_json::Value;

use crate::key::flatten;
use crate::project_files::ProjectPath;
use crate::runs::RunExport;

/// The name of the commit field in [`RunExport::run`]'s `unverified`.
pub const COMMIT: &str = "git_commit";
/// The prefix of an unverified param's entry (`params.train.lr`).
pub const PARAMS: &str = "params.";

/// How many dependencies of a record are held to its commit: enough to
/// catch a record claiming another branch's commit, bounded for a pull of
/// a thousand records.
const DEPS_CHECKED: usize = 64;
/// A dependency larger than this is not read from git to be checked.
const LARGEST_CHECKED: u64 = 64 << 20;

/// Why a field of a record is refused.
#[derive(Debug)]
pub enum Contradiction {
    Param {
        path: String,
        recorded: String,
        keyed: String,
    },
    Commit {
        commit: String,
        path: String,
    },
}

impl std::fmt::Display for Contradiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Contradiction::Param {
                path,
                recorded,
                keyed,
            } => write!(
                f,
                "it says param `{path}` was {recorded}, but its results were made with {keyed}"
            ),
            Contradiction::Commit { commit, path } => write!(
                f,
                "it says it ran clean at commit {commit}, but `{path}` there is not the file its results were made from"
            ),
        }
    }
}

/// Holds `export`'s params and commit to what bears them out, and lists
/// in its `unverified` what nothing here can check.
pub fn bear_out(export: &mut RunExport, root: &Path) -> Result<(), Contradiction> {
    let mut unverified = unverified_params(export)?;
    if !commit_borne_out(export, root)? {
        unverified.push(COMMIT.to_string());
    }
    // After what `vet` found (superseded results).
    export.run.unverified.extend(unverified);
    Ok(())
}

/// The params the manifests of the record's keys hold must be the
/// record's (a sweep's: among its values); those no manifest holds are
/// returned, as `params.PATH`.
fn unverified_params(export: &RunExport) -> Result<Vec<String>, Contradiction> {
    let recorded = flatten(&export.run.params);
    let mut keyed: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for manifest in export.manifests.values() {
        if let Some(params) = manifest.get("params") {
            for (path, value) in flatten(params) {
                keyed.entry(path).or_default().push(value);
            }
        }
    }
    for (path, values) in &keyed {
        let Some(said) = recorded.get(path) else {
            continue;
        };
        for value in values {
            let agrees = said == value
                || (export.run.sweep
                    && said.as_array().is_some_and(|values| values.contains(value)));
            if !agrees {
                return Err(Contradiction::Param {
                    path: pipe_protocol::excerpt(path),
                    recorded: pipe_protocol::excerpt(&said.to_string()),
                    keyed: pipe_protocol::excerpt(&value.to_string()),
                });
            }
        }
    }
    Ok(recorded
        .keys()
        .filter(|path| !keyed.contains_key(*path))
        .map(|path| format!("{PARAMS}{path}"))
        .collect())
}

/// Whether the record's commit is borne out: the commit is in the
/// repository here, and each dependency file its keys hashed that git
/// tracks there has, at that commit, the content hashed. A record that
/// says it ran clean and names a file that differs is a contradiction;
/// `false` when the commit is not here (or git cannot be asked), or the
/// run had uncommitted changes to a file it read.
fn commit_borne_out(export: &RunExport, root: &Path) -> Result<bool, Contradiction> {
    // A run outside a git checkout claims no commit: nothing to bear out.
    let Some(commit) = export.run.git_commit.as_deref() else {
        return Ok(true);
    };
    if commit.len() != 40 || !commit.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return Ok(false);
    }
    let mut deps: Vec<(ProjectPath, ObjectDigest)> = Vec::new();
    for manifest in export.manifests.values() {
        let Some(entries) = manifest.get("deps").and_then(Value::as_object) else {
            continue;
        };
        for entry in entries.values() {
            // An entry that is no file, or whose path the stored rule
            // refuses, is nothing git is asked about.
            let Ok(FileDep { kind, path, digest }) = FileDep::deserialize(entry) else {
                continue;
            };
            if kind == "file" && !deps.iter().any(|(seen, _)| *seen == path) {
                deps.push((path, digest));
            }
        }
    }
    deps.truncate(DEPS_CHECKED);
    // A CI job's merge commit is often nowhere here; the branch head it
    // merged is, and its files are what the run read unless the base
    // changed them (then it is unverified, not a contradiction).
    let (commit, merged) = match files_at_commit(root, commit, &deps) {
        Some(contents) => (commit, Some(contents)),
        None => match export.run.head_commit.as_deref() {
            Some(head) => (head, files_at_commit(root, head, &deps)),
            None => (commit, None),
        },
    };
    let at_head = Some(commit) == export.run.head_commit.as_deref();
    let Some(contents) = merged else {
        return Ok(false);
    };
    let clean = export.run.git_dirty == Some(false) && !at_head;
    for ((path, digest), content) in deps.iter().zip(contents) {
        match content {
            FileAtCommit::Content(bytes) => {
                if ObjectDigest::of(&bytes) == *digest {
                    continue;
                }
                if clean {
                    return Err(Contradiction::Commit {
                        commit: commit[..12].to_string(),
                        path: pipe_protocol::excerpt(path),
                    });
                } else {
                    // Uncommitted changes: the commit is only where it
                    // started from.
                    return Ok(false);
                }
            }
            FileAtCommit::Untracked | FileAtCommit::TooLarge => {}
        }
    }
    Ok(true)
}

/// A dependency entry of a key manifest, as far as a commit is held to it.
#[derive(Deserialize)]
struct FileDep {
    kind: String,
    path: ProjectPath,
    digest: ObjectDigest,
}

enum FileAtCommit {
    Content(Vec<u8>),
    Untracked,
    TooLarge,
}

/// Each of `deps` as git holds it at `commit`, read by one `git cat-file
/// --batch`; `None` when the commit is not in the repository or git
/// cannot be asked.
fn files_at_commit(
    root: &Path,
    commit: &str,
    deps: &[(ProjectPath, ObjectDigest)],
) -> Option<Vec<FileAtCommit>> {
    let exists = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    if !exists.success() {
        return None;
    }
    if deps.is_empty() {
        return Some(Vec::new());
    }
    let mut child = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut input = String::new();
    for (path, _) in deps {
        // `./`: relative to the project, which may be below the
        // repository's root. A path holds no newline (nor any control
        // character), so each is one line of the batch.
        input.push_str(&format!("{commit}:./{path}\n"));
    }
    let mut stdin = child.stdin.take()?;
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let mut reader = BufReader::new(child.stdout.take()?);
    let mut files = Vec::with_capacity(deps.len());
    for _ in deps {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            break;
        }
        let fields: Vec<&str> = header.split_whitespace().collect();
        match fields.as_slice() {
            [_, "blob", size] => {
                let size: u64 = size.parse().ok()?;
                if size > LARGEST_CHECKED {
                    std::io::copy(&mut (&mut reader).take(size + 1), &mut std::io::sink()).ok()?;
                    files.push(FileAtCommit::TooLarge);
                    continue;
                }
                let mut content = Vec::new();
                (&mut reader).take(size).read_to_end(&mut content).ok()?;
                let mut newline = [0u8; 1];
                reader.read_exact(&mut newline).ok()?;
                files.push(FileAtCommit::Content(content));
            }
            [_, _, size] => {
                // A tree or another kind: skipped, its bytes read past.
                let size: u64 = size.parse().ok()?;
                std::io::copy(&mut (&mut reader).take(size + 1), &mut std::io::sink()).ok()?;
                files.push(FileAtCommit::Untracked);
            }
            _ => files.push(FileAtCommit::Untracked),
        }
    }
    let _ = writer.join();
    let _ = child.wait();
    (files.len() == deps.len()).then_some(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifests_dependency_the_stored_rule_refuses_is_never_asked_of_git() {
        let digest = ObjectDigest::of(b"x").to_hex();
        let entry =
            |path: &str| serde_json::json!({ "kind": "file", "path": path, "digest": digest });
        let plain = FileDep::deserialize(&entry("data/train.csv")).unwrap();
        assert_eq!(plain.path, "data/train.csv");
        for hostile in ["../x", "/etc/passwd", ".git/config", "a/./b", "a\nb"] {
            assert!(
                FileDep::deserialize(&entry(hostile)).is_err(),
                "{hostile:?}"
            );
        }
    }
}
