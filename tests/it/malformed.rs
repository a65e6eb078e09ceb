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

/// A path that is not a pipeline file is named for what it is: a
/// directory (with the pipeline inside it when there is one), a FIFO, or
/// nothing; never "does not exist" for a directory that does.
#[test]
fn a_directory_or_a_fifo_named_as_the_pipeline_file_is_said_to_be_one() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  a:\n    run: touch a.txt\n    outs: [a.txt]\n",
    );
    std::fs::create_dir(project.path("experiments")).unwrap();
    let said = |args: &[&str]| {
        let output = project.pipe(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&output.stderr).to_string()
    };
    // `pipe run NAME` takes a bare name for a stage's; a trailing `/` is a
    // directory.
    for args in [
        &["run", "experiments/"][..],
        &["status", "experiments"],
        &["validate", "experiments"],
    ] {
        let stderr = said(args);
        let shown = args[1];
        assert!(
            stderr.contains(&format!(
                "error: `{shown}` is a directory, not a pipeline file"
            )) && stderr.contains("pipe.yaml`")
                && stderr.contains("`-C experiments"),
            "{args:?}: {stderr}"
        );
    }
    project.write("experiments/pipe.yml", "stages: {}\n");
    let stderr = said(&["run", "experiments/"]);
    assert!(
        stderr.contains("did you mean `experiments/pipe.yml`?"),
        "{stderr}"
    );
    let stderr = said(&["cache", "push", "-f", "experiments"]);
    assert!(
        stderr.contains("is a directory, not a pipeline file"),
        "{stderr}"
    );

    let fifo = project.path("stream.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let stderr = said(&["validate", "stream.yaml"]);
    assert!(
        stderr.contains("pipeline file `stream.yaml` is not a regular file"),
        "{stderr}"
    );
    let stderr = said(&["run", "nowhere.yaml"]);
    assert!(
        stderr.contains("pipeline file `nowhere.yaml` does not exist"),
        "{stderr}"
    );
    assert!(!project.exists("a.txt"), "nothing ran");
}
