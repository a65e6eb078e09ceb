//! Whatever the text, loading a pipeline returns a result: no panic, no
//! hang. Inputs are valid pipelines with random edits, which reach far
//! deeper into the loader than random bytes do.

use std::path::Path;

use pipe_engine::DagFormat;
use pipe_engine::ParamOverride;
use proptest::prelude::*;

const SEEDS: [&str; 4] = [
    include_str!("../../../tests/fixtures/pipelines/imdb.yaml"),
    include_str!("../../../tests/fixtures/pipelines/sweep.yaml"),
    include_str!("../../../tests/fixtures/pipelines/dvc-style/pipe.yaml"),
    include_str!("../../../tests/fixtures/malformed/44-several-errors.yaml"),
];

/// Fragments that matter to YAML or to pipe's own syntax.
const FRAGMENTS: [&str; 24] = [
    ":",
    " ",
    "\n",
    "\t",
    "-",
    "[",
    "]",
    "{",
    "}",
    "&a",
    "*a",
    "${",
    "}",
    "$${",
    "${params.",
    "${stages.",
    ".outs.",
    "@",
    "\"",
    "'",
    "#",
    "../",
    "é→",
    "matrix: {k: [1, 2]}",
];

#[derive(Debug, Clone)]
enum Edit {
    Delete { at: usize, len: usize },
    Insert { at: usize, fragment: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..20).prop_map(|(at, len)| Edit::Delete { at, len }),
        (any::<usize>(), 0..FRAGMENTS.len())
            .prop_map(|(at, fragment)| Edit::Insert { at, fragment }),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for edit in edits {
        match *edit {
            Edit::Delete { at, len } => {
                let start = at % (chars.len() + 1);
                let end = (start + len).min(chars.len());
                chars.drain(start..end);
            }
            Edit::Insert { at, fragment } => {
                let at = at % (chars.len() + 1);
                chars.splice(at..at, FRAGMENTS[fragment].chars());
            }
        }
    }
    chars.into_iter().collect()
}

fn load_text(dir: &Path, text: &str, overrides: &[ParamOverride]) {
    let file = dir.join("pipe.yaml");
    std::fs::write(&file, text).unwrap();
    match pipe_engine::load_pipeline(&file, overrides, &crate::fixture_catalog()) {
        Ok(pipe_engine::Loaded { pipeline, dag, .. }) => {
            for format in [DagFormat::Ascii, DagFormat::Dot, DagFormat::Mermaid] {
                dag.render(&pipeline, format);
            }
        }
        Err(error) => {
            // Rendering walks every location's excerpt and caret.
            error.to_string();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn edited_pipelines_never_panic(seed in 0..SEEDS.len(), edits in proptest::collection::vec(edit(), 1..6)) {
        let dir = tempfile::tempdir().unwrap();
        load_text(dir.path(), &apply(SEEDS[seed], &edits), &[]);
    }

    #[test]
    fn arbitrary_overrides_never_panic(key in "[a-z.]{0,12}", value in "\\PC{0,12}", with_equals in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let argument = if with_equals { format!("{key}={value}") } else { key };
        // A malformed one is refused where it is read, as a usage error;
        // any other reaches the loader.
        for parse in [ParamOverride::parse, ParamOverride::parse_swept] {
            match parse(&argument) {
                Ok(setting) => load_text(dir.path(), SEEDS[1], &[setting]),
                Err(error) => {
                    prop_assert!(error.to_string().contains(&argument), "{error}");
                }
            }
        }
    }
}
