//! The cache suite: what a content-addressed pipeline engine must get
//! right, exercised through the real binary in temporary projects.

use pipe_test_support::{RunResult, TestProject};

/// prepare -> train, plus an independent `lint` branch. Each command
/// appends its name to `calls.log` (not an output) so tests can count
/// executions independently of what pipe reports.
const TWO_BRANCHES: &str = r#"
name: suite
params:
  scale: 2
  unused: 1
stages:
  prepare:
    run: echo prepare >> calls.log; mkdir -p data; cat input.txt input.txt > data/prepared.txt
    deps: { input: input.txt }
    outs: { prepared: data/prepared.txt }
  train:
    run: echo train >> calls.log; (cat ${deps.data}; echo scale=${params.scale}) > model.txt
    deps: { data: "${stages.prepare.outs.prepared}" }
    outs: { model: model.txt }
  lint:
    run: echo lint >> calls.log; wc -l < input.txt > lint.txt
    deps: [input.txt]
    outs: [lint.txt]
"#;

fn two_branches() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", TWO_BRANCHES);
    project.write("input.txt", "hello\n");
    project
}

fn calls(project: &TestProject) -> Vec<String> {
    if !project.exists("calls.log") {
        return Vec::new();
    }
    project
        .read("calls.log")
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn second_run_executes_nothing() {
    let project = two_branches();
    let first = project.run_ok(&[]);
    assert_eq!(first.ran(), ["lint", "prepare", "train"]);
    let second = project.run_ok(&[]);
    assert!(second.ran().is_empty(), "{:?}", second.stages);
    assert_eq!(second.status("train"), "fresh");
    assert_eq!(calls(&project).len(), 3);
    assert_eq!(project.read("model.txt"), "hello\nhello\nscale=2\n");
}

#[test]
fn a_changed_dependency_reruns_the_stage_and_its_dependents_only() {
    let project = two_branches();
    project.run_ok(&[]);
    project.write("input.txt", "changed\n");
    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.ran(), ["lint", "prepare", "train"]);
    project.write(
        "pipe.yaml",
        &TWO_BRANCHES.replace("> model.txt", "> model.txt; true"),
    );
    let downstream_only = project.run_ok(&[]);
    assert_eq!(
        downstream_only.ran(),
        ["train"],
        "changing a dependent must not rerun upstream"
    );
}

#[test]
fn params_are_in_the_key_but_only_those_a_stage_uses() {
    let project = two_branches();
    project.run_ok(&[]);
    let unrelated = project.run_ok(&["-S", "unused=5"]);
    assert!(
        unrelated.ran().is_empty(),
        "an unused param must not rerun anything: {:?}",
        unrelated.stages
    );
    let used = project.run_ok(&["-S", "scale=3"]);
    assert_eq!(used.ran(), ["train"]);
    assert_eq!(project.read("model.txt"), "hello\nhello\nscale=3\n");
}

#[test]
fn stage_env_is_in_the_key() {
    let project = TestProject::new();
    let pipeline = |value: &str| {
        format!(
            "stages:\n  greet:\n    run: echo \"$GREETING\" > out.txt\n    env: {{ GREETING: \"{value}\" }}\n    outs: [out.txt]\n"
        )
    };
    project.write("pipe.yaml", &pipeline("hi"));
    assert_eq!(project.run_ok(&[]).ran(), ["greet"]);
    assert!(project.run_ok(&[]).ran().is_empty());
    project.write("pipe.yaml", &pipeline("bye"));
    assert_eq!(project.run_ok(&[]).ran(), ["greet"]);
    assert_eq!(project.read("out.txt"), "bye\n");
}

#[test]
fn an_older_key_is_restored_from_the_run_cache() {
    let project = two_branches();
    project.run_ok(&["-S", "scale=1"]);
    project.run_ok(&["-S", "scale=2"]);
    let back = project.run_ok(&["-S", "scale=1"]);
    assert_eq!(back.status("train"), "restored");
    assert_eq!(project.read("model.txt"), "hello\nhello\nscale=1\n");
    assert_eq!(
        calls(&project)
            .iter()
            .filter(|call| *call == "train")
            .count(),
        2
    );
}

#[test]
fn early_cutoff_when_a_changed_stage_reproduces_the_same_bytes() {
    let project = two_branches();
    project.run_ok(&[]);
    // A different command with identical output.
    project.write(
        "pipe.yaml",
        &TWO_BRANCHES.replace(
            "cat input.txt input.txt >",
            "cat input.txt input.txt | cat >",
        ),
    );
    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.status("prepare"), "ran");
    assert_eq!(
        rerun.status("train"),
        "fresh",
        "same bytes upstream: the dependent must not rerun"
    );
}

#[test]
fn a_failed_stage_caches_nothing_stops_its_branch_and_lets_others_finish() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"
stages:
  broken:
    run: echo partial > broken.txt; echo "something went wrong" >&2; exit 3
    outs: [broken.txt]
  after:
    run: cat broken.txt > after.txt
    deps: [broken.txt]
    outs: [after.txt]
  independent:
    run: sleep 0.3; echo ok > independent.txt
    outs: [independent.txt]
"#,
    );
    let result = project.run(&[]);
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert_eq!(result.status("broken"), "failed");
    assert_eq!(result.status("after"), "skipped");
    assert_eq!(result.status("independent"), "ran");
    assert!(
        result.stderr.contains("something went wrong"),
        "the log tail is shown:\n{}",
        result.stderr
    );
    assert!(
        result.stderr.contains("exited with code 3"),
        "{}",
        result.stderr
    );
    // Nothing of the failed stage may be reused: it runs again.
    let again = project.run(&[]);
    assert_eq!(again.status("broken"), "failed");
    assert_eq!(again.status("independent"), "fresh");
}

#[test]
fn a_missing_declared_output_fails_the_stage() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  lazy:\n    run: echo nothing\n    outs: [promised.txt]\n",
    );
    let result = project.run(&[]);
    assert_eq!(result.code, 1);
    assert!(
        result
            .stderr
            .contains("did not write its declared output `promised.txt`"),
        "{}",
        result.stderr
    );
    assert_eq!(project.run(&[]).status("lazy"), "failed");
}

#[test]
fn a_flipped_byte_in_an_object_is_caught_and_treated_as_a_miss() {
    let project = two_branches();
    project.run_ok(&[]);
    let verify = project.pipe(&["cache", "verify"]);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );

    let model_digest = blake3::hash(project.read("model.txt").as_bytes())
        .to_hex()
        .to_string();
    let object = project
        .object_files()
        .into_iter()
        .find(|path| {
            path.to_string_lossy()
                .replace('/', "")
                .ends_with(&model_digest)
        })
        .expect("the model's object");
    let mut bytes = std::fs::read(&object).unwrap();
    bytes[0] ^= 0x20;
    let mut permissions = std::fs::metadata(&object).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    std::fs::set_permissions(&object, permissions).unwrap();
    // The workspace copy may be a hard link to the object: break the link first.
    std::fs::remove_file(project.path("model.txt")).unwrap();
    std::fs::write(&object, &bytes).unwrap();

    let verify = project.pipe(&["cache", "verify"]);
    assert_eq!(verify.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&verify.stdout).contains(&model_digest));

    let rerun = project.run_ok(&[]);
    assert_eq!(
        rerun.status("train"),
        "ran",
        "a corrupt entry must not be restored"
    );
    assert_eq!(project.read("model.txt"), "hello\nhello\nscale=2\n");
}

#[test]
fn restored_outputs_use_the_requested_link_mode() {
    use std::os::unix::fs::MetadataExt;
    let project = two_branches();
    project.run_ok(&[]);
    std::fs::remove_file(project.path("model.txt")).unwrap();
    let restored = project.run_ok(&["--link", "hardlink"]);
    assert_eq!(restored.status("train"), "restored");
    let metadata = std::fs::metadata(project.path("model.txt")).unwrap();
    assert!(metadata.nlink() >= 2, "a hard link into the cache");
    assert!(
        metadata.permissions().readonly(),
        "hard-linked outputs are read-only"
    );

    std::fs::remove_file(project.path("model.txt")).unwrap();
    project.run_ok(&["--link", "copy"]);
    let metadata = std::fs::metadata(project.path("model.txt")).unwrap();
    assert_eq!(metadata.nlink(), 1);
    assert!(!metadata.permissions().readonly());
    assert_eq!(project.read("model.txt"), "hello\nhello\nscale=2\n");
}

#[test]
fn a_rerun_may_overwrite_a_read_only_restored_output() {
    let project = two_branches();
    project.run_ok(&[]);
    std::fs::remove_file(project.path("model.txt")).unwrap();
    project.run_ok(&["--link", "hardlink"]);
    let forced = project.run_ok(&["--force", "train"]);
    assert_eq!(forced.status("train"), "ran");
    assert_eq!(project.read("model.txt"), "hello\nhello\nscale=2\n");
    assert_eq!(
        project.pipe(&["cache", "verify"]).status.code(),
        Some(0),
        "the cache object was not written through"
    );
}

#[test]
fn directory_outputs_round_trip() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  make:\n    run: mkdir -p out/sub && echo a > out/a.txt && echo b > out/sub/b.txt\n    outs: [out]\n",
    );
    project.run_ok(&[]);
    std::fs::remove_dir_all(project.path("out")).unwrap();
    assert_eq!(project.run_ok(&[]).status("make"), "restored");
    assert_eq!(project.read("out/a.txt"), "a\n");
    assert_eq!(project.read("out/sub/b.txt"), "b\n");
}

#[test]
fn checkout_restores_an_earlier_runs_outputs() {
    let project = two_branches();
    let first = project.run_ok(&["-S", "scale=1"]);
    project.run_ok(&["-S", "scale=9"]);
    assert_eq!(project.read("model.txt"), "hello\nhello\nscale=9\n");
    let checkout = project.pipe(&["checkout", &first.run_id().to_string()]);
    assert_eq!(
        checkout.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&checkout.stderr)
    );
    assert_eq!(project.read("model.txt"), "hello\nhello\nscale=1\n");
}

#[test]
fn gc_keeps_what_the_pipeline_and_recent_runs_need() {
    let project = two_branches();
    project.run_ok(&["-S", "scale=1"]);
    project.run_ok(&["-S", "scale=2"]);
    let gc = project.pipe(&["cache", "gc", "--keep-runs", "1", "--grace-secs", "0"]);
    assert_eq!(
        gc.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    let text = String::from_utf8_lossy(&gc.stdout);
    assert!(
        !text.contains("removed 0 objects"),
        "the scale=1 model is unreferenced: {text}"
    );
    assert!(
        project.run_ok(&[]).ran().is_empty(),
        "the current pipeline's results survive gc"
    );
    assert_eq!(
        project.run_ok(&["-S", "scale=1"]).status("train"),
        "ran",
        "the collected result is gone"
    );
}

/// A key in the run history that does not parse is an error naming its
/// run, and gc removes nothing: dropping the key from gc's roots would
/// delete the result that run points to.
#[test]
fn gc_refuses_a_damaged_key_in_the_run_history_and_names_its_run() {
    let project = two_branches();
    project.run_ok(&["-S", "scale=1"]);
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); \
             db.execute(\"UPDATE stage_runs SET key = 'not-a-key' WHERE stage = 'train'\"); \
             db.commit()",
        )
        .arg(project.path(".pipe/runs.db"))
        .status()
        .unwrap();
    assert!(status.success());
    project.write("pipe.yaml", &TWO_BRANCHES.replace("scale: 2", "scale: 3"));
    let objects_before = count_files(&project.path(".pipe/cache/objects"));

    let gc = project.pipe(&["cache", "gc", "--keep-runs", "1", "--grace-secs", "0"]);
    let stderr = String::from_utf8_lossy(&gc.stderr);
    assert_eq!(gc.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("run #1, stage `train`"), "{stderr}");
    assert!(stderr.contains("not-a-key"), "{stderr}");
    assert_eq!(
        count_files(&project.path(".pipe/cache/objects")),
        objects_before,
        "gc removed objects: {stderr}"
    );
}

fn count_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                count_files(&entry.path())
            } else {
                1
            }
        })
        .sum()
}

#[test]
fn matrix_stages_expand_and_run_separately() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"
stages:
  train:
    matrix: { precision: [32-true, bf16-mixed], seed: [1, 2] }
    run: echo "${matrix.precision} ${matrix.seed}" > out-${matrix.precision}-${matrix.seed}.txt
    outs: { result: "out-${matrix.precision}-${matrix.seed}.txt" }
  report:
    run: cat ${deps.a} ${deps.b} > report.txt
    deps:
      a: ${stages.train@precision=bf16-mixed,seed=1.outs.result}
      b: ${stages.train@precision=32-true,seed=2.outs.result}
    outs: [report.txt]
"#,
    );
    let result = project.run_ok(&[]);
    let names: Vec<&String> = result.stages.keys().collect();
    assert_eq!(
        names,
        [
            "report",
            "train@precision=32-true,seed=1",
            "train@precision=32-true,seed=2",
            "train@precision=bf16-mixed,seed=1",
            "train@precision=bf16-mixed,seed=2"
        ]
    );
    assert_eq!(project.read("report.txt"), "bf16-mixed 1\n32-true 2\n");
    let only = project.run_ok(&[
        "--force",
        "train@precision=32-true,seed=1",
        "train@precision=32-true,seed=1",
    ]);
    assert_eq!(only.ran(), ["train@precision=32-true,seed=1"]);
}

#[test]
fn interpolation_and_literal_shell_variables() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        r#"
params: { model: { name: tiny, layers: 2 }, tags: [a, b] }
stages:
  show:
    run: echo "${params.model.name} ${params.model.layers} ${params.tags} $${PIPE_STAGE} $PIPE_STAGE ${deps.src}" > ${outs.out}
    deps: { src: input.txt }
    outs: { out: shown.txt }
"#,
    );
    project.write("input.txt", "x");
    project.run_ok(&[]);
    assert_eq!(
        project.read("shown.txt"),
        "tiny 2 a b show show input.txt\n"
    );
}

#[test]
fn params_yaml_beside_the_pipeline_is_merged() {
    let project = two_branches();
    project.write("params.yaml", "scale: 7\n");
    project.run_ok(&[]);
    assert_eq!(project.read("model.txt"), "hello\nhello\nscale=7\n");
}

#[test]
fn a_stage_selection_runs_only_what_it_needs() {
    let project = two_branches();
    let result = project.run_ok(&["train"]);
    assert_eq!(result.ran(), ["prepare", "train"]);
    assert!(!project.exists("lint.txt"));
}

#[test]
fn projects_sharing_a_cache_directory_reuse_each_others_results() {
    let shared = tempfile::tempdir().unwrap();
    let first = two_branches();
    let second = two_branches();
    let run = |project: &TestProject| {
        let output = project
            .command()
            .args(["run", "--json"])
            .env("PIPE_CACHE_DIR", shared.path())
            .output()
            .unwrap();
        RunResult::from_output(output)
    };
    assert_eq!(run(&first).ran().len(), 3);
    let reused = run(&second);
    assert_eq!(reused.code, 0, "{}", reused.stderr);
    assert!(
        reused.ran().is_empty(),
        "the second project restores everything: {:?}",
        reused.stages
    );
    assert_eq!(second.read("model.txt"), "hello\nhello\nscale=2\n");
    assert!(
        !second.exists(".pipe/cache/objects"),
        "the project's own cache directory is not used"
    );
}

/// A worker stage's resume state, planted where an interrupted attempt
/// of `key` leaves it.
fn plant_resume_state(project: &TestProject, key: &str) -> std::path::PathBuf {
    let dir = project.path(&format!(".pipe/resume/{key}/epoch-1"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("weights"), vec![0u8; 4096]).unwrap();
    project.path(&format!(".pipe/resume/{key}"))
}

fn tokens_key(project: &TestProject) -> String {
    let why = project.pipe(&["why", "tokens", "--json"]);
    let why: serde_json::Value = serde_json::from_slice(&why.stdout).expect("why JSON");
    why["key"].as_str().expect("a key").to_string()
}

fn tokenize_with_remote(remote: &std::path::Path) -> TestProject {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        &format!(
            "cache:\n  remote: file://{}\nstages:\n  tokens:\n    uses: text/tokenize@1\n    with: {{ dataset: data.jsonl, tokenizer: tokenizer.json, max_length: 8 }}\n",
            remote.display()
        ),
    );
    project.write(
        "data.jsonl",
        "{\"text\": \"a fine film\", \"label\": 1}\n{\"text\": \"a dull one\", \"label\": 0}\n",
    );
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("stages/tests/fixtures/tokenize/tokenizer.json");
    std::fs::copy(fixture, project.path("tokenizer.json")).unwrap();
    project
}

#[test]
fn a_resume_state_goes_once_its_result_is_restored_and_gc_keeps_none_of_a_stored_result() {
    let remote = tempfile::tempdir().unwrap();
    let first = tokenize_with_remote(remote.path());
    first.run_ok(&[]);
    // Another clone, where an attempt was interrupted before the result
    // reached the remote: the result restored from the remote ends it.
    let second = tokenize_with_remote(remote.path());
    let key = tokens_key(&second);
    let state = plant_resume_state(&second, &key);
    let restored = second.run_ok(&[]);
    assert_eq!(restored.status("tokens"), "restored");
    assert!(
        !state.exists(),
        "the resume state of a restored result stays"
    );

    // A state of a current key whose result is stored: gc removes it.
    let state = plant_resume_state(&first, &key);
    let gc = first.pipe(&["cache", "gc", "--grace-secs", "0"]);
    assert!(
        gc.status.success(),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    assert!(
        !state.exists(),
        "gc keeps the resume state of a stored result"
    );
}
