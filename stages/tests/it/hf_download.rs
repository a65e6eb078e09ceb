//! `hf/download@1` against a fake hub on 127.0.0.1 and a fake HF cache.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::download_support::{payload, run_stage, sha256_hex};
use pipe_test_support::http::{unreachable_url, Reply, Server};
use serde_json::json;

const REPO: &str = "acme/tiny-bert";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
const WEIGHTS_LEN: usize = 300_000;

struct HubFile {
    body: Vec<u8>,
    /// What the hub announces as the sha256 of an LFS file (None: a small
    /// git file, announced by its git blob id only).
    lfs_sha256: Option<String>,
}

fn repo_files() -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([
        (
            "config.json".to_string(),
            br#"{"model_type": "bert", "hidden_size": 32}"#.to_vec(),
        ),
        (
            "tokenizer.json".to_string(),
            br#"{"version": "1.0", "model": {"type": "WordPiece"}}"#.to_vec(),
        ),
        ("model.safetensors".to_string(), payload(WEIGHTS_LEN)),
    ])
}

/// Serves `/{REPO}/resolve/{rev}/{file}` like the hub: small files directly
/// with a git blob id as ETag, LFS files as a redirect that carries
/// `X-Linked-Etag` to a CDN path whose own ETag is something else.
fn hub(files: BTreeMap<String, HubFile>) -> Server {
    let files = Arc::new(files);
    Server::start(move |request, _| {
        if let Some(blob) = request.path.strip_prefix("/cdn/") {
            return match files
                .values()
                .find(|f| f.lfs_sha256.as_deref() == Some(blob))
            {
                Some(file) => Reply::ranged(request, &file.body)
                    .header("ETag", "\"d41d8cd98f00b204e9800998ecf8427e\""),
                None => Reply::status(404),
            };
        }
        let prefix = format!("/{REPO}/resolve/");
        let Some((revision, name)) = request
            .path
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once('/'))
        else {
            return Reply::status(404);
        };
        if revision != COMMIT && revision != "main" {
            return Reply::status(404);
        }
        match files.get(name) {
            Some(HubFile {
                lfs_sha256: Some(sha),
                ..
            }) => Reply::status(302)
                .header("Location", &format!("/cdn/{sha}"))
                .header("X-Linked-Etag", &format!("\"{sha}\""))
                .header("X-Repo-Commit", COMMIT),
            Some(HubFile {
                body,
                lfs_sha256: None,
            }) => Reply::ranged(request, body)
                .header("ETag", "\"a94a8fe5ccb19ba61c4c0873d391e987982fbbd3\"")
                .header("X-Repo-Commit", COMMIT),
            None => Reply::status(404),
        }
    })
}

fn honest_hub() -> Server {
    hub(repo_files()
        .into_iter()
        .map(|(name, body)| {
            let lfs_sha256 = name.ends_with(".safetensors").then(|| sha256_hex(&body));
            (name, HubFile { body, lfs_sha256 })
        })
        .collect())
}

fn assert_model_dir(model: &Path) {
    for (name, body) in repo_files() {
        let got = std::fs::read(model.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == body, "{name} differs from the repo's");
    }
}

#[test]
fn downloads_the_files_and_checks_the_lfs_sha256() {
    let server = honest_hub();
    let empty_cache = tempfile::tempdir().unwrap();
    let run = run_stage(
        "hf/download",
        json!({
            "repo": REPO,
            "revision": COMMIT,
            "endpoint": format!("{}/", server.base),
            "cache_dir": empty_cache.path().to_str().unwrap(),
        }),
        &[],
    );
    run.assert_done();
    assert_model_dir(&run.output_dir.join("model"));
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    let weights = sha256_hex(&payload(WEIGHTS_LEN));
    assert!(
        paths.contains(&format!("/cdn/{weights}")),
        "the redirect was followed: {paths:?}"
    );
    assert!(
        !run.messages()
            .iter()
            .any(|m| m.contains("model.safetensors") && m.contains("not verified")),
        "the LFS file is verified: {:?}",
        run.messages()
    );
    assert!(run
        .messages()
        .iter()
        .any(|m| m.contains("config.json") && m.contains("not verified")));
    let metrics = run.metrics();
    assert_eq!(metrics["files"], 3);
    assert_eq!(metrics["files_from_cache"], 0);
    assert_eq!(metrics["bytes_downloaded"], metrics["bytes"]);
    assert!(run
        .events
        .iter()
        .any(|e| e["event"] == "progress" && e["unit"] == "bytes" && e["total"] == WEIGHTS_LEN));
    assert_eq!(
        std::fs::read_dir(empty_cache.path()).unwrap().count(),
        0,
        "the HF cache is never written"
    );
}

#[test]
fn a_file_that_does_not_match_its_etag_fails() {
    let mut files: BTreeMap<String, HubFile> = repo_files()
        .into_iter()
        .map(|(name, body)| {
            (
                name,
                HubFile {
                    body,
                    lfs_sha256: None,
                },
            )
        })
        .collect();
    let weights = files.get_mut("model.safetensors").unwrap();
    let announced = sha256_hex(&weights.body);
    weights.body[1234] ^= 0xff;
    weights.lfs_sha256 = Some(announced.clone());
    let server = hub(files);
    let run = run_stage(
        "hf/download",
        json!({ "repo": REPO, "revision": COMMIT, "endpoint": server.base }),
        &[],
    );
    assert_eq!(run.code, 1);
    let (message, hint) = run.error();
    assert!(
        message.contains("checksum") && message.contains(&announced),
        "{message}"
    );
    assert!(message.contains("model.safetensors"), "{message}");
    assert!(hint.contains("HF_ENDPOINT"), "{hint}");
    assert!(!run
        .output_dir
        .join("model")
        .join("model.safetensors")
        .exists());
}

/// The hub cache layout: `refs/main` names the commit, snapshot files link
/// to `blobs/` named by ETag (the sha256 for LFS files).
fn populate_cache(cache: &Path, weights_blob: &[u8]) {
    let repo_dir = cache.join(format!("models--{}", REPO.replace('/', "--")));
    let snapshot = repo_dir.join("snapshots").join(COMMIT);
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::create_dir_all(repo_dir.join("blobs")).unwrap();
    std::fs::write(repo_dir.join("refs").join("main"), COMMIT).unwrap();
    for (name, body) in repo_files() {
        if name == "model.safetensors" {
            let sha = sha256_hex(&body);
            std::fs::write(repo_dir.join("blobs").join(&sha), weights_blob).unwrap();
            std::os::unix::fs::symlink(format!("../../blobs/{sha}"), snapshot.join(&name)).unwrap();
        } else {
            std::fs::write(snapshot.join(&name), body).unwrap();
        }
    }
}

#[test]
fn a_populated_cache_needs_no_network() {
    let server = honest_hub();
    let cache = tempfile::tempdir().unwrap();
    populate_cache(cache.path(), &payload(WEIGHTS_LEN));
    for revision in ["main", COMMIT] {
        let run = run_stage(
            "hf/download",
            json!({
                "repo": REPO,
                "revision": revision,
                "endpoint": server.base,
                "cache_dir": cache.path().to_str().unwrap(),
            }),
            &[],
        );
        run.assert_done();
        assert_model_dir(&run.output_dir.join("model"));
        assert_eq!(run.metrics()["files_from_cache"], 3, "revision {revision}");
        assert_eq!(run.metrics()["bytes_downloaded"], 0);
    }
    assert_eq!(server.requests().len(), 0);

    let from_hf_home = tempfile::tempdir().unwrap();
    populate_cache(&from_hf_home.path().join("hub"), &payload(WEIGHTS_LEN));
    let run = run_stage(
        "hf/download",
        json!({ "repo": REPO, "revision": COMMIT, "endpoint": server.base }),
        &[("HF_HOME", from_hf_home.path().to_str().unwrap())],
    );
    run.assert_done();
    assert_eq!(
        server.requests().len(),
        0,
        "HF_HOME/hub is the default cache"
    );
}

#[test]
fn a_corrupt_cached_blob_is_downloaded_again() {
    let server = honest_hub();
    let cache = tempfile::tempdir().unwrap();
    let mut corrupt = payload(WEIGHTS_LEN);
    corrupt[7] ^= 1;
    populate_cache(cache.path(), &corrupt);
    let run = run_stage(
        "hf/download",
        json!({
            "repo": REPO,
            "revision": COMMIT,
            "endpoint": server.base,
            "cache_dir": cache.path().to_str().unwrap(),
        }),
        &[],
    );
    run.assert_done();
    assert_model_dir(&run.output_dir.join("model"));
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths.len(),
        2,
        "only the weights are fetched (hub, then CDN): {paths:?}"
    );
    assert!(paths[0].ends_with("/model.safetensors"));
    assert_eq!(run.metrics()["files_from_cache"], 2);
}

#[test]
fn honours_hf_endpoint() {
    let server = honest_hub();
    let run = run_stage(
        "hf/download",
        json!({ "repo": REPO, "revision": "main", "files": ["config.json"] }),
        &[("HF_ENDPOINT", &server.base)],
    );
    run.assert_done();
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, [format!("/{REPO}/resolve/main/config.json")]);
    assert!(
        run.messages()
            .iter()
            .any(|m| m.contains(&format!("revision: {COMMIT}"))),
        "a branch is reported with the commit to pin: {:?}",
        run.messages()
    );
}

#[test]
fn offline_without_a_cache_names_the_fixes() {
    let endpoint = unreachable_url("");
    let run = run_stage(
        "hf/download",
        json!({ "repo": "distilbert-base-uncased", "revision": COMMIT, "endpoint": endpoint }),
        &[],
    );
    assert_eq!(run.code, 1);
    let (message, hint) = run.error();
    assert!(
        message.contains("distilbert-base-uncased") && message.contains(COMMIT),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "{endpoint}/distilbert-base-uncased/resolve/{COMMIT}/config.json"
        )),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "models--distilbert-base-uncased/snapshots/{COMMIT}/config.json"
        )),
        "{message}"
    );
    for fix in ["HF_ENDPOINT", "HF_HOME", "data/download"] {
        assert!(hint.contains(fix), "hint lacks {fix}: {hint}");
    }
}

#[test]
fn a_missing_file_says_what_to_check() {
    let server = honest_hub();
    let run = run_stage(
        "hf/download",
        json!({ "repo": REPO, "revision": COMMIT, "files": ["pytorch_model.bin"], "endpoint": server.base }),
        &[],
    );
    let (message, hint) = run.error();
    assert!(message.contains("HTTP 404"), "{message}");
    assert!(hint.contains("does not exist"), "{hint}");
    assert_eq!(server.requests().len(), 1, "a 404 is not retried");
}

#[test]
fn rejects_paths_outside_the_repo() {
    let run = run_stage(
        "hf/download",
        json!({ "repo": REPO, "revision": COMMIT, "files": ["../../etc/passwd"], "endpoint": "http://127.0.0.1:9" }),
        &[],
    );
    assert!(run.error().0.contains("not a path inside the repo"));
    let run = run_stage(
        "hf/download",
        json!({ "repo": "a/b/c", "revision": COMMIT }),
        &[],
    );
    assert!(run.error().0.contains("not a hub repo name"));
}
