//! Every malformed pipeline under tests/fixtures/malformed is refused by
//! the real binary with a located error, exit code 2, and no panic.

use pipe_test_support::TestProject;

#[test]
fn each_malformed_file_gets_a_located_error_and_exit_code_2() {
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/malformed");
    let mut files: Vec<_> = std::fs::read_dir(&fixtures)
        .expect("fixtures")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 30, "only {} malformed fixtures", files.len());
    for file in files {
        let project = TestProject::new();
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        std::fs::copy(&file, project.path(&name)).unwrap();
        let output = project.pipe(&["validate", &name]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{name}: expected exit 2, got {:?}\n{stderr}",
            output.status.code()
        );
        assert!(!stderr.contains("panicked"), "{name} panicked:\n{stderr}");
        assert!(
            stderr.contains(&format!("{name}:")),
            "{name}: the error does not name the file:line:col\n{stderr}"
        );
        assert!(stderr.contains("error"), "{name}: {stderr}");
    }
}

#[test]
fn a_huge_file_is_refused_quickly() {
    let project = TestProject::new();
    let mut text = String::from("stages:\n");
    while text.len() < 5 * 1024 * 1024 {
        text.push_str("  # padding padding padding padding padding padding padding padding\n");
    }
    project.write("pipe.yaml", &text);
    let output = project.pipe(&["validate"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("pipe.yaml"));
}

#[test]
fn bad_overrides_and_missing_files_are_usage_errors() {
    let project = TestProject::new();
    project.write("pipe.yaml", "params: { epochs: 3 }\nstages:\n  a:\n    run: echo ${params.epochs} > a.txt\n    outs: [a.txt]\n");
    let wrong_type = project.pipe(&["run", "-S", "epochs=many"]);
    assert_eq!(
        wrong_type.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&wrong_type.stderr)
    );
    assert!(String::from_utf8_lossy(&wrong_type.stderr).contains("hint"));
    let no_equals = project.pipe(&["run", "-S", "epochs"]);
    assert_eq!(no_equals.status.code(), Some(2));
    let missing = project.pipe(&["run", "nope.yaml"]);
    assert_eq!(missing.status.code(), Some(2));
    let unknown_stage = project.pipe(&["run", "b"]);
    assert_eq!(unknown_stage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown_stage.stderr).contains("stages: a"));
}
