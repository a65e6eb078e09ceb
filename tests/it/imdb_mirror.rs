//! Local mirrors of what pipelines/imdb.yaml and speed-study.yaml download:
//! a real HTTP server on 127.0.0.1 serving a small aclImdb-shaped archive
//! and a fake Hugging Face hub holding a tiny DistilBERT.

use std::collections::HashMap;
use std::process::Command;

use pipe_test_support::http::Server;
use pipe_test_support::{RunResult, TestProject};

pub const REVISION: &str = "12040accade4e8a0f71eabdb258fecc2e7e948be";

pub fn repo_path(path: &str) -> std::path::PathBuf {
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

/// A DistilBERT as the hub has it (MLM architecture, no classification
/// head, BERT's 30,522-id uncased vocabulary, 512 positions) but 32 wide
/// and 2 layers deep: the weights of the tiny fixture, tiled up to those
/// table sizes. Returns (config.json, model.safetensors).
pub fn tiny_distilbert() -> (Vec<u8>, Vec<u8>) {
    let fixture = repo_path("train/tests/fixtures/model/tiny-distilbert");
    let mut config: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&std::fs::read(fixture.join("config.json")).unwrap()).unwrap();
    config.insert("vocab_size".into(), 30522.into());
    config.insert("max_position_embeddings".into(), 512.into());
    config.insert(
        "architectures".into(),
        serde_json::json!(["DistilBertForMaskedLM"]),
    );
    config.remove("id2label");
    config.remove("label2id");

    let bytes = std::fs::read(fixture.join("model.safetensors")).unwrap();
    let weights = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in weights.tensors() {
        if name.starts_with("classifier.") || name.starts_with("pre_classifier.") {
            continue;
        }
        let rows = if name.ends_with("word_embeddings.weight") {
            Some(30522)
        } else if name.ends_with("position_embeddings.weight") {
            Some(512)
        } else {
            None
        };
        let (shape, data) = match rows {
            Some(rows) => {
                let row_bytes = view.data().len() / view.shape()[0];
                let data: Vec<u8> = view
                    .data()
                    .chunks_exact(row_bytes)
                    .cycle()
                    .take(rows)
                    .flatten()
                    .copied()
                    .collect();
                (vec![rows, view.shape()[1]], data)
            }
            None => (view.shape().to_vec(), view.data().to_vec()),
        };
        tensors.push((name, shape, data));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(name, shape, data)| {
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)
                    .unwrap();
            (name.clone(), view)
        })
        .collect();
    let model = safetensors::serialize(views, None).unwrap();
    (serde_json::to_vec_pretty(&config).unwrap(), model)
}

fn md5_hex(path: &std::path::Path) -> String {
    let output = Command::new("md5sum").arg(path).output().expect("md5sum");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// The server, and the md5 of the archive it serves at
/// `/data/aclImdb_v1.tar.gz`; the model is under `/distilbert-base-uncased`
/// at [`REVISION`] (point `HF_ENDPOINT` at `server.url("")`).
pub struct Mirror {
    pub server: Server,
    pub archive_md5: String,
    /// The Hugging Face cache of the runs against this mirror.
    hf_home: tempfile::TempDir,
    _fixtures: tempfile::TempDir,
}

/// A project (a git root) holding `pipelines/FILE` as the repository has it.
pub fn project_with_pipeline(file: &str) -> TestProject {
    let project = TestProject::new();
    std::fs::create_dir(project.path(".git")).unwrap();
    let path = format!("pipelines/{file}");
    project.write(&path, &std::fs::read_to_string(repo_path(&path)).unwrap());
    project
}

impl Mirror {
    pub fn start() -> Mirror {
        let fixtures = tempfile::tempdir().unwrap();
        let archive = small_imdb_archive(fixtures.path());
        let archive_md5 = md5_hex(&fixtures.path().join("aclImdb_v1.tar.gz"));
        let tokenizer =
            std::fs::read(repo_path("stages/tests/fixtures/tokenize/tokenizer.json")).unwrap();
        let mut files = HashMap::new();
        files.insert("/data/aclImdb_v1.tar.gz".to_string(), archive);
        let (config, model) = tiny_distilbert();
        for (name, body) in [
            ("config.json", config),
            ("tokenizer.json", tokenizer),
            ("model.safetensors", model),
        ] {
            files.insert(
                format!("/distilbert-base-uncased/resolve/{REVISION}/{name}"),
                body,
            );
        }
        Mirror {
            server: Server::serving(files),
            archive_md5,
            hf_home: tempfile::tempdir().unwrap(),
            _fixtures: fixtures,
        }
    }

    /// `pipe run --json pipelines/FILE` downloading from this mirror (its
    /// archive's URL and md5 as params, the hub at `HF_ENDPOINT`), then
    /// `args`, which may override those.
    pub fn run(&self, project: &TestProject, file: &str, args: &[&str]) -> RunResult {
        self.run_with_env(project, file, args, &[])
    }

    /// [`Mirror::run`] with more variables in pipe's environment.
    pub fn run_with_env(
        &self,
        project: &TestProject,
        file: &str,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> RunResult {
        let pipeline = format!("pipelines/{file}");
        let url = format!("imdb.url={}", self.server.url("/data/aclImdb_v1.tar.gz"));
        let md5 = format!("imdb.md5={}", self.archive_md5);
        let output = project
            .command()
            .args(["run", "--json", &pipeline, "-S", &url, "-S", &md5])
            .args(args)
            .env("HF_ENDPOINT", self.server.url(""))
            .env("HF_HOME", self.hf_home.path())
            .envs(env.iter().copied())
            .output()
            .unwrap();
        RunResult::from_output(output)
    }
}
