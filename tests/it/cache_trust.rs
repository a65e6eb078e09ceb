//! What the cache promises a user: a corrupt entry is never presented and
//! is replaced or removed, a checkout never destroys work the cache cannot
//! give back, and restored outputs cannot write into the cache by default.
//! Driven through the real `pipe` binary.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use pipe_test_support::TestProject;

/// `big` writes a file of a few MiB (hashed with mmap), `tree` a directory.
const PIPELINE: &str = r#"
stages:
  big:
    run: seq 1 700000 > big.txt
    outs: [big.txt]
  tree:
    run: mkdir -p out/sub && echo a > out/a.txt && echo b > out/sub/b.txt
    outs: [out]
  model:
    run: (cat input.txt; echo scale=${params.scale}) > model.txt
    deps: [input.txt]
    outs: [model.txt]
params:
  scale: 1
"#;

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project.write("input.txt", "hello\n");
    project
}

fn expected_big() -> Vec<u8> {
    (1..=700_000)
        .map(|n| format!("{n}\n"))
        .collect::<String>()
        .into_bytes()
}

fn object_of(project: &TestProject, content: &[u8]) -> PathBuf {
    let hex = blake3::hash(content).to_hex().to_string();
    project.path(&format!(".pipe/cache/objects/{}/{}", &hex[..2], &hex[2..]))
}

/// The tree object of `out/` (the one listing `a.txt` and `sub`).
fn tree_object(project: &TestProject) -> PathBuf {
    project
        .object_files()
        .into_iter()
        .find(|path| {
            let bytes = std::fs::read(path).unwrap();
            bytes.starts_with(b"pipe-tree-v1\n") && bytes.windows(5).any(|w| w == b"a.txt")
        })
        .expect("the tree object of out/")
}

/// Flips one byte in place, keeping the size, as bit rot or a stray write would.
fn flip_byte(path: &Path, offset_from_end: usize) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes.len() - 1 - offset_from_end;
    bytes[at] ^= 0x01;
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    std::io::Write::write_all(&mut file, &bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444)).unwrap();
}

fn verify_code(project: &TestProject) -> (Option<i32>, String, String) {
    let output = project.pipe(&["cache", "verify"]);
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).to_string(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

fn assert_cache_clean(project: &TestProject) {
    let (code, stdout, stderr) = verify_code(project);
    assert_eq!(code, Some(0), "cache verify:\n{stdout}{stderr}");
}

fn assert_outputs_correct(project: &TestProject) {
    assert_eq!(
        std::fs::read(project.path("big.txt")).unwrap(),
        expected_big()
    );
    assert_eq!(project.read("out/a.txt"), "a\n");
    assert_eq!(project.read("out/sub/b.txt"), "b\n");
}

#[test]
fn a_corrupt_tree_object_is_replaced_by_the_next_run() {
    let project = project();
    project.run_ok(&[]);
    flip_byte(&tree_object(&project), 0);
    assert_eq!(verify_code(&project).0, Some(4));

    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.status("tree"), "ran", "a corrupt tree is a miss");
    assert_cache_clean(&project);
    assert_outputs_correct(&project);
    let checkout = project.pipe(&["checkout", "last"]);
    assert_eq!(checkout.status.code(), Some(0), "{checkout:?}");
    assert_outputs_correct(&project);
}

#[test]
fn a_forced_run_replaces_a_corrupt_file_object_of_the_right_size() {
    let project = project();
    project.run_ok(&[]);
    let object = object_of(&project, &expected_big());
    flip_byte(&object, 1000);
    assert_eq!(verify_code(&project).0, Some(4));

    let forced = project.run_ok(&["--force", "big"]);
    assert_eq!(forced.status("big"), "ran");
    assert_cache_clean(&project);
    assert_eq!(std::fs::read(&object).unwrap(), expected_big());

    // The newest run's outputs come back from the cache, byte for byte.
    std::fs::remove_file(project.path("big.txt")).unwrap();
    std::fs::remove_dir_all(project.path("out")).unwrap();
    let checkout = project.pipe(&["checkout", "last"]);
    assert_eq!(checkout.status.code(), Some(0), "{checkout:?}");
    assert_outputs_correct(&project);
}

#[test]
fn a_run_that_finds_a_corrupt_object_ends_with_a_clean_cache() {
    let project = project();
    project.run_ok(&[]);
    flip_byte(&object_of(&project, &expected_big()), 0);
    // The workspace copy is gone: the run must restore, finds the object
    // corrupt, runs the stage and stores a good object.
    std::fs::remove_file(project.path("big.txt")).unwrap();
    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.status("big"), "ran");
    assert_cache_clean(&project);
    assert_outputs_correct(&project);
}

#[test]
fn verify_repair_removes_corrupt_objects_and_the_actions_that_need_them() {
    let project = project();
    project.run_ok(&[]);
    let big = object_of(&project, &expected_big());
    flip_byte(&big, 0);
    flip_byte(&tree_object(&project), 0);

    let (code, stdout, stderr) = verify_code(&project);
    assert_eq!(code, Some(4));
    assert!(
        stderr.contains("pipe cache verify --repair"),
        "the hint names what repairs: {stderr}"
    );
    assert_eq!(stdout.matches("corrupt object").count(), 2, "{stdout}");
    assert_eq!(stdout.matches("corrupt action").count(), 2, "{stdout}");

    let repair = project.pipe(&["cache", "verify", "--repair"]);
    let repair_stderr = String::from_utf8_lossy(&repair.stderr);
    assert_eq!(repair.status.code(), Some(0), "{repair_stderr}");
    assert!(
        repair_stderr.contains("removed 2 corrupt objects and 2 action results"),
        "{repair_stderr}"
    );
    assert!(!big.exists());
    assert_cache_clean(&project);

    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.ran(), vec!["big", "tree"]);
    assert_cache_clean(&project);
    assert_outputs_correct(&project);
}

#[test]
fn checkout_refuses_to_overwrite_an_edited_output_unless_forced() {
    let project = project();
    let first = project.run_ok(&[]).run_id();
    project.run_ok(&["-S", "scale=2"]);
    // An output pipe wrote and nobody touched is safe to replace.
    let checkout = project.pipe(&["checkout", &first.to_string()]);
    assert_eq!(checkout.status.code(), Some(0), "{checkout:?}");
    assert_eq!(project.read("model.txt"), "hello\nscale=1\n");

    project.run_ok(&["-S", "scale=2"]);
    std::fs::write(project.path("model.txt"), "my own edit\n").unwrap();
    let refused = project.pipe(&["checkout", &first.to_string()]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("  model.txt\n"), "lists the file: {stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(
        project.read("model.txt"),
        "my own edit\n",
        "nothing was changed"
    );

    let forced = project.pipe(&["checkout", &first.to_string(), "--force"]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    assert_eq!(project.read("model.txt"), "hello\nscale=1\n");
}

#[test]
fn checkout_refuses_to_delete_an_untracked_file_inside_an_output_directory() {
    let project = project();
    project.run_ok(&[]);
    project.write("out/notes.txt", "mine\n");
    let refused = project.pipe(&["checkout", "last"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("  out/notes.txt\n"), "{stderr}");
    assert!(
        !stderr.contains("a.txt"),
        "unchanged files are not listed: {stderr}"
    );
    assert_eq!(project.read("out/notes.txt"), "mine\n");

    let forced = project.pipe(&["checkout", "last", "--force"]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    assert!(!project.exists("out/notes.txt"));
    assert_outputs_correct(&project);
}

#[test]
fn restored_outputs_are_private_copies_by_default() {
    let project = project();
    project.run_ok(&[]);
    std::fs::remove_file(project.path("model.txt")).unwrap();
    assert_eq!(project.run_ok(&[]).status("model"), "restored");

    let content = b"hello\nscale=1\n";
    let restored = std::fs::metadata(project.path("model.txt")).unwrap();
    let object = std::fs::metadata(object_of(&project, content)).unwrap();
    assert_ne!(
        restored.ino(),
        object.ino(),
        "not a hard link into the cache"
    );
    assert_eq!(restored.nlink(), 1);
    assert!(!restored.permissions().readonly());

    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(project.path("model.txt"))
        .unwrap();
    std::io::Write::write_all(&mut file, b"edited\n").unwrap();
    assert_eq!(
        std::fs::read(object_of(&project, content)).unwrap(),
        content
    );
    assert_cache_clean(&project);
}

#[test]
fn verify_names_the_project_file_that_wrote_into_a_hard_linked_object() {
    let project = project();
    project.run_ok(&[]);
    std::fs::remove_file(project.path("model.txt")).unwrap();
    project.run_ok(&["--link", "hardlink"]);
    let model = project.path("model.txt");
    assert!(std::fs::metadata(&model).unwrap().nlink() >= 2);

    // As root the read-only mode does not stop this; chmod makes it so for anyone.
    std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&model)
        .unwrap();
    std::io::Write::write_all(&mut file, b"x\n").unwrap();

    let (code, stdout, stderr) = verify_code(&project);
    assert_eq!(code, Some(4), "{stdout}{stderr}");
    assert!(
        stdout.contains("(changed through `model.txt`)"),
        "names the file: {stdout}"
    );
    assert!(
        stderr.contains("hard links or symlinks into the cache"),
        "{stderr}"
    );

    // The next run notices the edited output, reruns, and replaces the object.
    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.status("model"), "ran");
    assert_cache_clean(&project);
    assert_eq!(project.read("model.txt"), "hello\nscale=1\n");
}

#[test]
fn symlink_restores_point_into_the_cache_and_stay_fresh() {
    let project = project();
    project.run_ok(&[]);
    std::fs::remove_file(project.path("model.txt")).unwrap();
    std::fs::remove_dir_all(project.path("out")).unwrap();
    let restored = project.run_ok(&["--link", "symlink"]);
    assert_eq!(restored.status("model"), "restored");
    assert_eq!(restored.status("tree"), "restored");
    for link in ["model.txt", "out/a.txt", "out/sub/b.txt"] {
        let metadata = std::fs::symlink_metadata(project.path(link)).unwrap();
        assert!(metadata.file_type().is_symlink(), "{link} is a symlink");
        let target = std::fs::read_link(project.path(link)).unwrap();
        assert!(
            target.starts_with(project.path(".pipe/cache/objects")) || {
                // The temp dir may be reached through a symlinked path.
                let canonical = std::fs::canonicalize(project.path(".pipe/cache/objects")).unwrap();
                target.starts_with(canonical)
            }
        );
    }
    assert_outputs_correct(&project);

    let again = project.run_ok(&["--link", "symlink"]);
    assert_eq!(again.status("model"), "fresh");
    assert_eq!(again.status("tree"), "fresh");
    let checkout = project.pipe(&["checkout", "last"]);
    assert_eq!(checkout.status.code(), Some(0), "{checkout:?}");
    assert_cache_clean(&project);
}
