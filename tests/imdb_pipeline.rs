//! pipelines/imdb.yaml end to end through the real binary, against a real
//! HTTP server on 127.0.0.1 serving a small aclImdb-shaped archive and a
//! fake Hugging Face hub: download (md5-checked) -> extract -> split ->
//! model download -> tokenize.

mod common;

#[path = "common/http.rs"]
mod http;

use std::collections::HashMap;
use std::process::Command;

use common::TestProject;

const REVISION: &str = "12040accade4e8a0f71eabdb258fecc2e7e948be";

fn repo_path(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// 24 reviews in the aclImdb layout, packed with the system `tar`.
fn small_imdb_archive(dir: &std::path::Path) -> Vec<u8> {
    let root = dir.join("aclImdb");
    for split in ["train", "test"] {
        for (label, word) in [("pos", "wonderful"), ("neg", "dreadful")] {
            let folder = root.join(split).join(label);
            std::fs::create_dir_all(&folder).unwrap();
            for id in 0..6 {
                let rating = if label == "pos" {
                    7 + id % 4
                } else {
                    1 + id % 4
                };
                let text = format!(
                    "A {word} film, number {id} of the {split} set.<br /><br />Truly {word}."
                );
                std::fs::write(folder.join(format!("{id}_{rating}.txt")), text).unwrap();
            }
        }
    }
    std::fs::write(
        root.join("README"),
        "Large Movie Review Dataset (test fixture)",
    )
    .unwrap();
    let archive = dir.join("aclImdb_v1.tar.gz");
    let status = Command::new("tar")
        .arg("-czf")
        .arg(&archive)
        .arg("-C")
        .arg(dir)
        .arg("aclImdb")
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read(archive).unwrap()
}

fn md5_hex(path: &std::path::Path) -> String {
    let output = Command::new("md5sum").arg(path).output().expect("md5sum");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn the_imdb_pipeline_runs_against_local_mirrors() {
    let fixtures = tempfile::tempdir().unwrap();
    let archive = small_imdb_archive(fixtures.path());
    let archive_md5 = md5_hex(&fixtures.path().join("aclImdb_v1.tar.gz"));
    let tokenizer =
        std::fs::read(repo_path("stages/tests/fixtures/tokenize/tokenizer.json")).unwrap();
    let mut files = HashMap::new();
    files.insert("/data/aclImdb_v1.tar.gz".to_string(), archive);
    for (name, body) in [
        (
            "config.json",
            br#"{"model_type": "distilbert", "dim": 768}"#.to_vec(),
        ),
        ("tokenizer.json", tokenizer),
        (
            "model.safetensors",
            b"weights are not needed before training".to_vec(),
        ),
    ] {
        files.insert(
            format!("/distilbert-base-uncased/resolve/{REVISION}/{name}"),
            body,
        );
    }
    let server = http::StaticServer::start(files);

    let project = TestProject::new();
    std::fs::create_dir(project.path(".git")).unwrap();
    project.write(
        "pipelines/imdb.yaml",
        &std::fs::read_to_string(repo_path("pipelines/imdb.yaml")).unwrap(),
    );
    let hf_home = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let url = format!("imdb.url={}", server.url("/data/aclImdb_v1.tar.gz"));
        let md5 = format!("imdb.md5={archive_md5}");
        let mut args = vec![
            "run",
            "--json",
            "pipelines/imdb.yaml",
            "-S",
            &url,
            "-S",
            &md5,
        ];
        args.extend_from_slice(&[
            "-S",
            "split.train=16",
            "-S",
            "split.val=4",
            "-S",
            "split.test=4",
        ]);
        args.extend_from_slice(extra);
        let output = project
            .command()
            .args(&args)
            .env("HF_ENDPOINT", server.url(""))
            .env("HF_HOME", hf_home.path())
            .output()
            .unwrap();
        common::RunResult::from_output(output)
    };

    let first = run(&[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(
        first.ran(),
        ["download", "extract", "model", "split", "tokenize"]
    );
    let dataset = project.read(".pipe/out/extract/dataset");
    assert_eq!(dataset.lines().count(), 24);
    assert!(dataset.contains("\"rating\":") && dataset.contains("<br /><br />"));
    for split in ["train", "val", "test"] {
        let safetensors = project.path(&format!(".pipe/out/tokenize/tokens/{split}.safetensors"));
        assert!(safetensors.is_file(), "{split} tokens");
    }
    let requests = server.requests.load(std::sync::atomic::Ordering::SeqCst);

    let second = run(&[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(second.ran().is_empty(), "{:?}", second.stages);
    assert_eq!(
        server.requests.load(std::sync::atomic::Ordering::SeqCst),
        requests,
        "a cached run downloads nothing"
    );

    // A wrong checksum: a clean error naming it, nothing downstream runs, nothing cached.
    let wrong = run(&["-S", "imdb.md5=ffffffffffffffffffffffffffffffff"]);
    assert_eq!(wrong.code, 1);
    assert_eq!(wrong.status("download"), "failed");
    assert_eq!(wrong.status("tokenize"), "skipped");
    assert!(wrong.stderr.contains("checksum"), "{}", wrong.stderr);
    assert!(
        !project.exists(".pipe/out/download"),
        "a mismatching file never becomes an output"
    );
}
