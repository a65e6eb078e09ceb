//! A cached result can write only what its stage declares, whoever wrote
//! it: a local action file, a shared `file://` remote, or a run record
//! pulled from one. Metrics are files like any output: a restored stage
//! leaves what a run of it leaves, and what `show` prints is what they
//! hold. A command that turns an output into a way out of the project
//! gets nothing from outside stored. Driven through the real `pipe`.

use std::path::{Path, PathBuf};

use pipe_test_support::TestProject;
use serde_json::{json, Value};

const HEADER: &str = "{\"format\":\"pipe-action-v2\",\"checksum\":\"";

const PIPELINE: &str = r#"
stages:
  score:
    run: >-
      echo '{"accuracy": 0.8765}' > score.json && echo model > model.txt
    outs: [model.txt]
    metrics: [score.json]
"#;

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project
}

pub(crate) fn action_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(shards) = std::fs::read_dir(root.join("actions")) else {
        return files;
    };
    for shard in shards.flatten() {
        for file in std::fs::read_dir(shard.path()).unwrap().flatten() {
            files.push(file.path());
        }
    }
    files.sort();
    files
}

/// The action's own JSON, its checksum checked.
pub(crate) fn read_action(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    let rest = text.strip_prefix(HEADER).expect("an action file");
    let (checksum, rest) = rest.split_at(64);
    let body = rest
        .strip_prefix("\",\"action\":")
        .and_then(|rest| rest.strip_suffix("}\n"))
        .unwrap();
    assert_eq!(blake3::hash(body.as_bytes()).to_hex().as_str(), checksum);
    serde_json::from_str(body).unwrap()
}

/// Rewrites an action as a writer with access to the cache would: a valid
/// file with a correct checksum, saying what the writer wants.
pub(crate) fn write_action(path: &Path, action: &Value) {
    let body = serde_json::to_string_pretty(action).unwrap();
    let checksum = blake3::hash(body.as_bytes()).to_hex();
    std::fs::write(path, format!("{HEADER}{checksum}\",\"action\":{body}}}\n")).unwrap();
}

/// Adds `paths` to the action's outputs (pointing at the object of
/// `model.txt`), and to its manifest's `outs` too when `in_manifest`.
pub(crate) fn plant(action_path: &Path, paths: &[String], in_manifest: bool) {
    let mut action = read_action(action_path);
    let artifact = action["outputs"]["model.txt"].clone();
    for (index, path) in paths.iter().enumerate() {
        action["outputs"][path] = artifact.clone();
        if in_manifest {
            action["manifest"]["outs"][format!("planted{index}")] = json!(path);
        }
    }
    write_action(action_path, &action);
}

fn hostile_paths(victim: &Path) -> Vec<String> {
    vec![
        victim.display().to_string(),
        "../escaped.txt".to_string(),
        ".git/hooks/post-checkout".to_string(),
        ".pipe/x".to_string(),
        "undeclared.txt".to_string(),
    ]
}

fn assert_nothing_planted(project: &TestProject, victim: &Path) {
    assert!(!victim.exists(), "the absolute path was written");
    assert!(!project
        .root()
        .parent()
        .unwrap()
        .join("escaped.txt")
        .exists());
    assert!(!project.exists(".git/hooks/post-checkout"));
    assert!(!project.exists(".pipe/x"));
    assert!(!project.exists("undeclared.txt"));
}

#[test]
fn a_local_action_naming_undeclared_paths_is_a_miss_and_writes_nothing() {
    for in_manifest in [false, true] {
        let project = project();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim.txt");
        project.run_ok(&[]);
        let actions = action_files(&project.path(".pipe/cache"));
        assert_eq!(actions.len(), 1);
        plant(&actions[0], &hostile_paths(&victim), in_manifest);
        // The outputs are gone, so a usable result would be restored.
        std::fs::remove_file(project.path("model.txt")).unwrap();

        let rerun = project.run(&[]);
        assert_eq!(rerun.code, 0, "{}", rerun.stderr);
        assert_eq!(rerun.status("score"), "ran", "{}", rerun.stderr);
        assert!(
            rerun
                .stderr
                .contains("which stage `score` does not declare")
                || rerun.stderr.contains("cannot be used: names output"),
            "{}",
            rerun.stderr
        );
        assert_nothing_planted(&project, &victim);
        assert_eq!(project.read("model.txt"), "model\n");
        // The rerun replaced the planted result with its own.
        let action = read_action(&action_files(&project.path(".pipe/cache"))[0]);
        let outputs: Vec<&String> = action["outputs"].as_object().unwrap().keys().collect();
        assert_eq!(outputs, ["model.txt", "score.json"]);
    }
}

#[test]
fn verify_refuses_an_action_with_planted_paths_or_any_flipped_bit() {
    let project = project();
    project.run_ok(&[]);
    let action = action_files(&project.path(".pipe/cache"))[0].clone();
    let clean = std::fs::read(&action).unwrap();
    assert_eq!(project.pipe(&["cache", "verify"]).status.code(), Some(0));

    let outside = tempfile::tempdir().unwrap();
    plant(&action, &hostile_paths(&outside.path().join("v")), false);
    let verify = project.pipe(&["cache", "verify"]);
    assert_eq!(verify.status.code(), Some(4));

    // Bit rot: 50 random single-bit flips, every one refused.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..50 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let at = (state % clean.len() as u64) as usize;
        let bit = (state >> 32) % 8;
        let mut flipped = clean.clone();
        flipped[at] ^= 1 << bit;
        std::fs::write(&action, &flipped).unwrap();
        let verify = project.pipe(&["cache", "verify"]);
        assert_eq!(
            verify.status.code(),
            Some(4),
            "flip of bit {bit} at byte {at} accepted:\n{}",
            String::from_utf8_lossy(&flipped)
        );
    }
    std::fs::write(&action, &clean).unwrap();
    assert_eq!(project.pipe(&["cache", "verify"]).status.code(), Some(0));
}

#[test]
fn a_remote_writer_cannot_make_a_fresh_clone_write_outside_its_outputs() {
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().display());
    let first = TestProject::new();
    first.write("pipe.yaml", &format!("cache:\n  remote: {url}\n{PIPELINE}"));
    first.run_ok(&[]);
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.txt");
    let remote_action = action_files(shared.path())[0].clone();
    plant(&remote_action, &hostile_paths(&victim), true);

    let second = TestProject::new();
    second.write("pipe.yaml", &first.read("pipe.yaml"));
    let run = second.run(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.status("score"), "ran", "{}", run.stderr);
    assert_nothing_planted(&second, &victim);
    // Its push replaced the planted result in the remote.
    let action = read_action(&remote_action);
    let outputs: Vec<&String> = action["outputs"].as_object().unwrap().keys().collect();
    assert_eq!(outputs, ["model.txt", "score.json"]);
    // A third clone now restores the clean result.
    let third = TestProject::new();
    third.write("pipe.yaml", &first.read("pipe.yaml"));
    let restored = third.run_ok(&[]);
    assert!(restored.ran().is_empty(), "{:?}", restored.stages);
    assert_eq!(third.read("score.json"), first.read("score.json"));
}

#[test]
fn shown_metrics_are_the_restored_files_and_a_flipped_metric_is_never_shown() {
    let project = project();
    project.run_ok(&[]);
    std::fs::remove_file(project.path("score.json")).unwrap();
    let restored = project.run_ok(&[]);
    assert_eq!(restored.status("score"), "restored");
    assert_eq!(project.read("score.json"), "{\"accuracy\": 0.8765}\n");
    let show: Value =
        serde_json::from_slice(&project.pipe(&["show", "last", "--json"]).stdout).unwrap();
    assert_eq!(show["stages"][0]["metrics"]["accuracy"], 0.8765);

    // The metrics object rots: 0.8765 becomes 0.9765. The next restore
    // finds it, runs the stage and shows the true figure.
    let object = project
        .object_files()
        .into_iter()
        .find(|path| std::fs::read(path).unwrap() == b"{\"accuracy\": 0.8765}\n")
        .expect("the metrics object");
    let mut perms = std::fs::metadata(&object).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    std::fs::set_permissions(&object, perms).unwrap();
    std::fs::write(&object, b"{\"accuracy\": 0.9765}\n").unwrap();
    std::fs::remove_file(project.path("score.json")).unwrap();
    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.status("score"), "ran", "{}", rerun.stderr);
    let show: Value =
        serde_json::from_slice(&project.pipe(&["show", "last", "--json"]).stdout).unwrap();
    assert_eq!(show["stages"][0]["metrics"]["accuracy"], 0.8765);
}

#[test]
fn a_restored_builtin_stage_leaves_the_output_directory_a_run_leaves() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  table:\n    uses: data/from-csv@1\n    with: { file: data.csv, text_column: text, label_column: label }\n",
    );
    project.write("data.csv", "text,label\ngood film,1\nbad film,0\nfine,1\n");
    let ran = project.run_ok(&[]);
    assert_eq!(ran.status("table"), "ran");
    let dir = project.path(".pipe/out/pipe/table");
    let after_run = tree_of(&dir);
    assert!(
        after_run.iter().any(|(name, _)| name == "metrics.json"),
        "{after_run:?}"
    );
    let shown_after_run = metrics_shown(&project);

    // Locally, with the directory gone.
    std::fs::remove_dir_all(&dir).unwrap();
    let restored = project.run_ok(&[]);
    assert_eq!(restored.status("table"), "restored");
    assert_eq!(tree_of(&dir), after_run);
    assert_eq!(metrics_shown(&project), shown_after_run);

    // In a clone, from a remote.
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().display());
    let with_remote = format!("cache:\n  remote: {url}\n{}", project.read("pipe.yaml"));
    project.write("pipe.yaml", &with_remote);
    project.run_ok(&["--force-all"]);
    let clone = TestProject::new();
    clone.write("pipe.yaml", &with_remote);
    clone.write("data.csv", &project.read("data.csv"));
    let pulled = clone.run_ok(&[]);
    assert_eq!(pulled.status("table"), "restored", "{}", pulled.stderr);
    assert_eq!(tree_of(&clone.path(".pipe/out/pipe/table")), after_run);
    assert_eq!(metrics_shown(&clone), shown_after_run);
}

/// Every file under `dir`, relative, with its bytes.
fn tree_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = walk_files(dir)
        .into_iter()
        .map(|path| {
            let name = path.strip_prefix(dir).unwrap().display().to_string();
            (name, std::fs::read(&path).unwrap())
        })
        .collect();
    files.sort();
    files
}

fn metrics_shown(project: &TestProject) -> Value {
    let show: Value =
        serde_json::from_slice(&project.pipe(&["show", "last", "--json"]).stdout).unwrap();
    let metrics = show["stages"][0]["metrics"].clone();
    assert!(metrics.as_object().is_some_and(|m| !m.is_empty()), "{show}");
    metrics
}

#[test]
fn an_output_the_command_leads_outside_is_never_read_stored_or_pushed() {
    let outside = tempfile::tempdir().unwrap();
    let secret = "the outside secret 8c1f\n";
    std::fs::write(outside.path().join("secret.txt"), secret).unwrap();
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().display());
    for (stage, outs) in [
        // The directory above the output becomes a link.
        (
            format!("rm -rf d && ln -s {} d", outside.path().display()),
            "d/secret.txt",
        ),
        // The output itself becomes a link.
        (
            format!("ln -s {}/secret.txt leak.txt", outside.path().display()),
            "leak.txt",
        ),
    ] {
        let project = TestProject::new();
        project.write(
            "pipe.yaml",
            &format!(
                "cache:\n  remote: {url}\nstages:\n  leak:\n    run: {stage}\n    outs: [{outs}]\n"
            ),
        );
        let run = project.run(&[]);
        assert_eq!(run.code, 1, "{}", run.stderr);
        assert_eq!(run.status("leak"), "failed");
        assert!(run.stderr.contains("outside the project"), "{}", run.stderr);
        for object in project.object_files() {
            assert_ne!(std::fs::read(&object).unwrap(), secret.as_bytes());
        }
        assert!(action_files(&project.path(".pipe/cache")).is_empty());
    }
    assert!(
        !shared.path().join("objects").exists() || {
            walk_files(&shared.path().join("objects"))
                .iter()
                .all(|file| std::fs::read(file).unwrap() != secret.as_bytes())
        }
    );
}

fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap().flatten() {
            if entry.path().is_dir() {
                pending.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    files
}
