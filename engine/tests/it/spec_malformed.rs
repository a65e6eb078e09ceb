//! Every way a pipeline file can be wrong gets one located message with a
//! hint; the messages themselves are snapshot-tested.

use std::path::{Path, PathBuf};

use pipe_engine::ParamOverride;
use pipe_engine::{Diagnostic, EngineError};

fn malformed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/malformed")
}

fn diagnostics_for(file: &Path, overrides: &[&str]) -> Vec<Diagnostic> {
    let overrides: Vec<ParamOverride> = overrides
        .iter()
        .map(|text| ParamOverride::parse(text).unwrap())
        .collect();
    match pipe_engine::load_pipeline(file, &overrides, &crate::fixture_catalog()) {
        Err(EngineError::Spec(diagnostics)) => diagnostics,
        Err(other) => panic!("{}: expected a spec error, got {other:?}", file.display()),
        Ok(loaded) => panic!(
            "{}: expected a spec error, but it loaded {} stages",
            file.display(),
            loaded.pipeline.stages.len()
        ),
    }
}

/// The rendered text of all diagnostics, with `file`'s path shortened to
/// `shown_as` so that snapshots do not depend on the checkout's location.
fn rendered(diagnostics: Vec<Diagnostic>, file: &Path, shown_as: &str) -> String {
    EngineError::Spec(diagnostics)
        .to_string()
        .replace(&file.display().to_string(), shown_as)
}

#[test]
fn every_malformed_fixture_is_refused_with_located_hinted_errors() {
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(malformed_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    fixtures.sort();
    assert!(
        fixtures.len() >= 35,
        "only {} malformed fixtures",
        fixtures.len()
    );

    for fixture in &fixtures {
        let name = fixture.file_name().unwrap().to_string_lossy().into_owned();
        let diagnostics = diagnostics_for(fixture, &[]);
        assert!(!diagnostics.is_empty(), "{name}: no diagnostics");
        for diagnostic in &diagnostics {
            let location = diagnostic
                .location
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: `{}` has no location", diagnostic.message));
            assert_eq!(*location.file, **fixture, "{name}: located in another file");
            assert!(
                location.line >= 1 && location.col >= 1,
                "{name}: location {location:?}"
            );
            assert!(
                diagnostic.hint.is_some(),
                "{name}: `{}` has no hint",
                diagnostic.message
            );
        }
        let text = rendered(diagnostics, fixture, &name);
        assert!(
            text.contains(&format!("--> {name}:")),
            "{name}: no `-->` line in\n{text}"
        );
        assert!(text.contains("= hint: "), "{name}: no hint in\n{text}");
        insta::assert_snapshot!(name.trim_end_matches(".yaml").to_string(), text);
    }
}

/// The codes are part of the interface (the CLI and docs name them), so
/// each fixture's mistake must be the one reported.
#[test]
fn each_fixture_reports_its_own_mistake() {
    let expected = [
        ("01-yaml-syntax-error.yaml", "yaml-syntax"),
        ("02-tab-indentation.yaml", "yaml-syntax"),
        ("03-duplicate-key.yaml", "duplicate-key"),
        ("04-unknown-top-level-key.yaml", "unknown-key"),
        ("05-unknown-stage-key-typo.yaml", "unknown-key"),
        ("06-run-and-uses.yaml", "run-and-uses"),
        ("07-neither-run-nor-uses.yaml", "missing-run"),
        ("08-bad-uses-syntax.yaml", "bad-uses"),
        ("09-deps-as-number.yaml", "bad-type"),
        ("10-unknown-param-ref.yaml", "bad-reference"),
        ("11-bare-param-ref.yaml", "bad-reference"),
        ("12-unterminated-interpolation.yaml", "bad-reference"),
        ("13-unknown-stage-ref.yaml", "bad-reference"),
        ("14-ref-to-matrix-base.yaml", "bad-reference"),
        ("15-unknown-stage-output.yaml", "bad-reference"),
        ("16-cycle-of-three.yaml", "cycle"),
        ("17-self-cycle.yaml", "cycle"),
        ("18-duplicate-output.yaml", "duplicate-output"),
        ("19-nested-output.yaml", "duplicate-output"),
        ("20-output-outside-project.yaml", "output-outside-project"),
        ("21-absolute-output.yaml", "output-outside-project"),
        ("22-output-in-pipe-dir.yaml", "output-in-pipe-dir"),
        ("23-empty-matrix-list.yaml", "empty-matrix"),
        ("24-matrix-not-mapping.yaml", "bad-type"),
        ("25-bad-stage-name.yaml", "bad-stage-name"),
        ("26-negative-cpus.yaml", "bad-type"),
        ("27-non-bool-always-run.yaml", "bad-type"),
        ("28-bad-env-name.yaml", "bad-env-name"),
        ("29-alias-bomb.yaml", "too-many-nodes"),
        ("30-deep-nesting.yaml", "too-deep"),
        ("31-multiple-documents.yaml", "multiple-documents"),
        ("32-non-string-key.yaml", "non-string-key"),
        ("33-empty-file.yaml", "empty-file"),
        ("34-stages-missing.yaml", "missing-stages"),
        ("35-matrix-same-output.yaml", "duplicate-output"),
        ("36-unknown-namespace.yaml", "bad-reference"),
        ("37-unknown-matrix-key.yaml", "bad-reference"),
        ("38-matrix-ref-without-matrix.yaml", "bad-reference"),
        ("39-with-on-run-stage.yaml", "misplaced-key"),
        ("40-bad-link-mode.yaml", "bad-link-mode"),
        ("41-stages-empty.yaml", "no-stages"),
        ("42-dvc-cmd-key.yaml", "unknown-key"),
        ("43-mapping-in-command.yaml", "bad-reference"),
        ("45-dep-outside-project.yaml", "bad-path"),
        ("46-unknown-dep-ref.yaml", "bad-reference"),
        ("47-stage-not-mapping.yaml", "bad-type"),
        ("48-stage-ref-in-output.yaml", "bad-reference"),
        ("49-multibyte-unknown-param.yaml", "bad-reference"),
        ("50-output-is-git-dir.yaml", "output-in-git-dir"),
        ("51-output-inside-git-dir.yaml", "output-in-git-dir"),
        ("52-raw-outside-run.yaml", "bad-reference"),
        ("53-raw-in-run-list.yaml", "bad-reference"),
        ("54-value-not-plain.yaml", "bad-reference"),
        ("55-run-list-with-mapping.yaml", "bad-type"),
        ("56-matrix-too-large.yaml", "matrix-too-large"),
        ("57-raw-in-with.yaml", "bad-reference"),
        ("58-bad-pipeline-name.yaml", "bad-pipeline-name"),
    ];
    for (name, code) in expected {
        let diagnostics = diagnostics_for(&malformed_dir().join(name), &[]);
        assert_eq!(diagnostics[0].code, code, "{name}: {diagnostics:#?}");
    }
}

#[test]
fn several_mistakes_are_reported_in_one_pass() {
    let diagnostics = diagnostics_for(&malformed_dir().join("44-several-errors.yaml"), &[]);
    let codes: Vec<&str> = diagnostics
        .iter()
        .map(|diagnostic| diagnostic.code)
        .collect();
    assert_eq!(
        codes,
        ["unknown-key", "bad-reference", "bad-reference", "bad-type"],
        "{diagnostics:#?}"
    );
}

#[test]
fn a_reference_is_pointed_at_inside_its_string() {
    let diagnostics = diagnostics_for(&malformed_dir().join("10-unknown-param-ref.yaml"), &[]);
    let location = diagnostics[0].location.as_ref().unwrap();
    // `    run: python train.py --lr ${params.train.lrr} ...`
    assert_eq!(
        (location.line, location.col, location.len),
        (5, 31, "${params.train.lrr}".len())
    );
    assert_eq!(
        diagnostics[0]
            .hint
            .as_deref()
            .map(|hint| hint.starts_with("did you mean `train.lr`?")),
        Some(true)
    );

    // Columns count characters, not bytes.
    let diagnostics = diagnostics_for(
        &malformed_dir().join("49-multibyte-unknown-param.yaml"),
        &[],
    );
    let location = diagnostics[0].location.as_ref().unwrap();
    let line = &location.source_line;
    let expected_col = line[..line.find("${").unwrap()].chars().count() + 1;
    assert_eq!(location.col, expected_col);
}

#[test]
fn too_many_errors_are_capped_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pipe.yaml");
    let stages: String = (0..30)
        .map(|index| format!("  s{index}:\n    run: echo ${{params.missing{index}}}\n"))
        .collect();
    std::fs::write(&file, format!("stages:\n{stages}")).unwrap();
    let diagnostics = diagnostics_for(&file, &[]);
    assert_eq!(diagnostics.len(), 20);
    assert!(
        diagnostics[19]
            .notes
            .iter()
            .any(|note| note.contains("10 more not shown")),
        "{:?}",
        diagnostics[19].notes
    );
}

#[test]
fn a_file_over_4_mib_is_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("huge.yaml");
    let mut text = String::from("stages:\n  train:\n    run: python train.py\n");
    let filler = format!("# {}\n", "x".repeat(1021));
    while text.len() <= 4 * 1024 * 1024 {
        text.push_str(&filler);
    }
    std::fs::write(&file, text).unwrap();
    let text = rendered(diagnostics_for(&file, &[]), &file, "huge.yaml");
    insta::assert_snapshot!("file-too-large", text);
}

#[test]
fn a_file_that_is_not_utf8_is_located() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("latin1.yaml");
    std::fs::write(&file, b"stages:\n  train:\n    run: echo gr\xf6\xdfe\n").unwrap();
    let diagnostics = diagnostics_for(&file, &[]);
    assert_eq!(diagnostics[0].code, "not-utf8");
    let location = diagnostics[0].location.as_ref().unwrap();
    assert_eq!((location.line, location.col), (3, 17));
}

#[test]
fn a_missing_pipeline_file_is_an_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let diagnostics = diagnostics_for(&dir.path().join("nope.yaml"), &[]);
    assert_eq!(diagnostics[0].code, "file-not-found");
    assert!(diagnostics[0].hint.is_some());
}

fn params_project(params_yaml: Option<&str>) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pipe.yaml");
    std::fs::write(
        &file,
        "params:\n  seed: 1\n  name: base\n  train: { lr: 0.1, epochs: 3 }\nstages:\n  train:\n    run: python train.py ${params.seed}\n",
    )
    .unwrap();
    if let Some(text) = params_yaml {
        std::fs::write(dir.path().join("params.yaml"), text).unwrap();
    }
    (dir, file)
}

/// `-S` arguments are not in any file, so these diagnostics name the
/// argument; an unknown param is also shown at the nearest mapping that
/// exists, whose keys the hint lists.
#[test]
fn bad_overrides_name_the_argument() {
    let (_dir, file) = params_project(None);
    let cases: [(&str, &[&str]); 4] = [
        ("override-type-mismatch", &["seed=abc"]),
        ("override-unknown-param", &["trian.lr=0.5"]),
        ("override-into-scalar", &["seed.x=1"]),
        ("override-string-gets-number", &["name=5"]),
    ];
    for (snapshot, overrides) in cases {
        let diagnostics = diagnostics_for(&file, overrides);
        assert!(diagnostics
            .iter()
            .all(|diagnostic| diagnostic.hint.is_some()
                && diagnostic.location.is_some() == (diagnostic.code == "unknown-param")));
        assert!(
            diagnostics[0]
                .message
                .contains(&format!("-S {}", overrides[0])),
            "{}",
            diagnostics[0].message
        );
        insta::assert_snapshot!(snapshot, rendered(diagnostics, &file, "pipe.yaml"));
    }
    let codes: Vec<&str> = diagnostics_for(&file, &["seed=abc", "trian.lr=1"])
        .iter()
        .map(|d| d.code)
        .collect();
    assert_eq!(codes, ["param-type", "unknown-param"]);
}

/// A `-S` that is not `key.path=value` with a YAML value is refused where
/// it is read, before any pipeline: saying what is wrong and how to
/// write it.
#[test]
fn a_malformed_override_is_refused_where_it_is_read() {
    for (argument, problem, hint) in [
        ("train.lr", "expected `key.path=value`", "-S train.lr=VALUE"),
        ("train..lr=1", "is not a param path", "dotted path"),
        ("=1", "is not a param path", "dotted path"),
        ("tags=[a, b", "not valid YAML", "-S 'tags=[a, b]'"),
    ] {
        let error = ParamOverride::parse(argument).unwrap_err();
        assert_eq!(
            EngineError::from(error.clone()).exit_code(),
            pipe_engine::ExitCode::InvalidInput
        );
        let message = error.to_string();
        assert!(message.contains(&format!("-S {argument}")), "{message}");
        assert!(message.contains(problem), "{message}");
        assert!(error.hint().contains(hint), "{}", error.hint());
    }
}

#[test]
fn errors_in_params_yaml_point_into_params_yaml() {
    let (dir, file) = params_project(Some("seed: 2\ntrain:\n  lr: [0.1\n"));
    let diagnostics = diagnostics_for(&file, &[]);
    let params_file = dir.path().join("params.yaml");
    assert_eq!(
        *diagnostics[0].location.as_ref().unwrap().file,
        *params_file
    );
    let text = rendered(diagnostics, &params_file, "params.yaml");
    insta::assert_snapshot!("params-yaml-syntax-error", text);

    let (dir, file) = params_project(Some("- seed\n- 2\n"));
    let diagnostics = diagnostics_for(&file, &[]);
    assert_eq!(diagnostics[0].code, "bad-type");
    assert_eq!(
        *diagnostics[0].location.as_ref().unwrap().file,
        *dir.path().join("params.yaml")
    );
}

#[test]
fn a_nul_byte_in_a_with_path_is_refused_at_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pipe.yaml");
    std::fs::write(
        &file,
        "params: { rows: rows.jsonl }\nstages:\n  split:\n    uses: data/split@1\n    with:\n      dataset: \"data/${params.rows}\"\n      train: 0.8\n      val: 0.2\n",
    )
    .unwrap();
    let diagnostics = diagnostics_for(&file, &[r#"rows="a\0b""#]);
    assert_eq!(diagnostics.len(), 1, "{diagnostics:#?}");
    assert!(
        diagnostics[0].message.contains("NUL byte"),
        "{diagnostics:#?}"
    );
    let location = diagnostics[0].location.as_ref().unwrap();
    assert_eq!((location.line, location.col), (6, 16), "{diagnostics:#?}");
}
