//! The stage protocol through the real binary, with a third-party worker
//! written in Python (tests/fixtures/workers/pipe-stage-shout), so these
//! tests pin the protocol itself rather than any built-in stage.

use pipe_test_support::{RunResult, TestProject};

fn workers_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/workers")
}

const PIPELINE: &str = r#"
stages:
  loud:
    uses: shout@1
    with: { input: words.txt, suffix: "!!" }
  count:
    run: wc -l < ${deps.loud} > count.txt
    deps: { loud: "${stages.loud.outs.loud}" }
    outs: [count.txt]
"#;

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project.write("words.txt", "one\ntwo\nthree\nfour\n");
    project
}

fn run(project: &TestProject, args: &[&str], env: &[(&str, &str)]) -> RunResult {
    let mut command = project.command();
    command
        .arg("run")
        .arg("--json")
        .args(args)
        .env("PIPE_STAGE_PATH", workers_dir());
    for (name, value) in env {
        command.env(name, value);
    }
    RunResult::from_output(command.output().unwrap())
}

#[test]
fn a_third_party_worker_runs_and_its_result_is_cached() {
    let project = project();
    let first = run(&project, &[], &[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(first.ran(), ["count", "loud"]);
    assert_eq!(
        project.read(".pipe/out/pipe/loud/loud"),
        "ONE!!\nTWO!!\nTHREE!!\nFOUR!!\n"
    );
    assert_eq!(project.read("count.txt").trim(), "4");
    let progress: Vec<_> = first
        .events
        .iter()
        .filter(|event| event["event"] == "stage_progress")
        .collect();
    assert!(!progress.is_empty(), "progress events reach --json");
    assert_eq!(progress.last().unwrap()["unit"], "lines");

    let again = run(&project, &[], &[]);
    assert!(again.ran().is_empty(), "{:?}", again.stages);

    let show = project.pipe(&["show", "last", "--json"]);
    let record: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    let loud = record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|stage| stage["stage"] == "loud")
        .unwrap();
    assert_eq!(
        loud["metrics"]["lines"], 4,
        "metrics.json of a built-in stage becomes run metrics"
    );
}

#[test]
fn params_inputs_and_the_implementation_version_are_in_the_key() {
    let project = project();
    assert_eq!(run(&project, &[], &[]).code, 0);
    project.write("words.txt", "five\n");
    assert_eq!(
        run(&project, &[], &[]).ran(),
        ["count", "loud"],
        "a changed input reruns it"
    );
    project.write(
        "pipe.yaml",
        &PIPELINE.replace("suffix: \"!!\"", "suffix: \"?\""),
    );
    assert_eq!(
        run(&project, &[], &[]).status("loud"),
        "ran",
        "a changed param reruns it"
    );
    // A worker in the project's `.pipe/stages/` whose stage bumped its
    // implementation version: rebuilt workers are re-described.
    let worker = std::fs::read_to_string(workers_dir().join("pipe-stage-shout")).unwrap();
    let bumped = worker.replace("os.environ.get(\"SHOUT_IMPLEMENTATION\", \"1\")", "\"2\"");
    assert_ne!(worker, bumped);
    project.write(".pipe/stages/pipe-stage-shout", &bumped);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        project.path(".pipe/stages/pipe-stage-shout"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let local = |project: &TestProject| {
        RunResult::from_output(project.command().args(["run", "--json"]).output().unwrap())
    };
    assert_eq!(
        local(&project).status("loud"),
        "ran",
        "a new implementation reruns it"
    );
    // Writing a default explicitly is the same key as leaving it out.
    project.write(
        "pipe.yaml",
        &PIPELINE.replace("suffix: \"!!\"", "suffix: \"?\", repeat: 1"),
    );
    assert_eq!(local(&project).status("loud"), "fresh");
}

#[test]
fn a_failing_worker_leaves_no_output_and_caches_nothing() {
    let project = project();
    let failed = run(&project, &[], &[("SHOUT_FAIL", "1")]);
    assert_eq!(failed.code, 1);
    assert_eq!(failed.status("loud"), "failed");
    assert_eq!(failed.status("count"), "skipped");
    assert!(
        failed.stderr.contains("shout failed halfway"),
        "{}",
        failed.stderr
    );
    assert!(
        failed.stderr.contains("hint: unset SHOUT_FAIL"),
        "{}",
        failed.stderr
    );
    assert!(
        !project.exists(".pipe/out/pipe/loud"),
        "half-written output is never presented as done"
    );
    let entries: Vec<_> = std::fs::read_dir(project.path(".pipe/out/pipe"))
        .unwrap()
        .flatten()
        .collect();
    assert!(
        entries.is_empty(),
        "the partial directory is removed: {entries:?}"
    );
    assert_eq!(run(&project, &[], &[]).status("loud"), "ran");
}

/// A Python worker that dies before it speaks (a package missing from its
/// environment) fails its stage with the traceback's last lines on stderr
/// and the log that holds all of it; nothing is cached, and the next run
/// with the package there runs it.
#[test]
fn a_worker_that_dies_on_a_missing_module_shows_its_traceback_and_log() {
    let project = project();
    let crashed = run(&project, &[], &[("SHOUT_CRASH", "1")]);
    assert_eq!(crashed.code, 1, "{}", crashed.stderr);
    assert_eq!(crashed.status("loud"), "failed");
    assert_eq!(crashed.status("count"), "skipped");
    for shown in [
        "the stage worker exited with code 1",
        "│ ModuleNotFoundError: No module named 'a_module_this_environment_lacks'",
        "full log: .pipe/logs/1/loud.log",
    ] {
        assert!(
            crashed.stderr.contains(shown),
            "{shown}: {}",
            crashed.stderr
        );
    }
    let log = project.read(".pipe/logs/1/loud.log");
    assert!(
        log.contains("Traceback (most recent call last):")
            && log.contains("import a_module_this_environment_lacks"),
        "{log}"
    );
    assert!(!project.exists(".pipe/out/pipe/loud"));
    assert_eq!(run(&project, &[], &[]).status("loud"), "ran");
}

/// A worker that writes bytes that are not UTF-8 to its stdout, then more
/// than a pipe holds and one line of 3 MB, runs to its end: pipe reads its
/// output to the end (it used to stop at the first such byte, and the
/// worker then blocked on a full pipe for good), logs the lines that are
/// not events as text, and keeps 1 MiB of the long one.
#[test]
fn a_worker_writing_bytes_that_are_not_utf8_and_a_huge_line_runs_to_its_end() {
    let project = project();
    let mut command = project.std_command();
    command
        .args(["run", "--json", "--", "loud"])
        .env("PIPE_STAGE_PATH", workers_dir())
        .env("SHOUT_BYTES", "1");
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A hang is the failure this test is about: it must not hang the suite.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("pipe run did not end: the worker's output stopped being read");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let result = RunResult::from_output(child.wait_with_output().unwrap());
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(result.status("loud"), "ran");
    let log = std::fs::read(project.path(".pipe/logs/1/loud.log")).unwrap();
    let log = String::from_utf8(log).expect("the log is text");
    assert!(
        log.contains("caf\u{fffd} latin-1 chatter"),
        "{}",
        &log[..200]
    );
    assert_eq!(log.matches(&"x".repeat(999)).count(), 2000);
    let long = log
        .lines()
        .find(|line| line.starts_with('y'))
        .expect("the long line");
    assert!(
        long.ends_with(&format!(
            " … ({} more bytes of this line left out)",
            (3 << 20) - (1 << 20)
        )),
        "{}",
        &long[long.len() - 80..]
    );
    assert_eq!(long.find(' '), Some(1 << 20), "1 MiB of it is kept");
}

/// A worker whose `describe` never answers does not hang pipe: it is
/// killed at the limit and named, with how to find where it waits.
#[test]
fn a_worker_whose_describe_never_answers_is_named_at_the_limit() {
    let project = project();
    let output = project
        .std_command()
        .args(["validate"])
        .env("PIPE_STAGE_PATH", workers_dir())
        .env("SHOUT_DESCRIBE_HANGS", "1")
        .env("PIPE_DESCRIBE_TIMEOUT", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "pipe-stage-shout` did not describe its stages: it did not finish within 1 s"
        ) && stderr.contains("describe` must print its stages and exit; run it by hand"),
        "{stderr}"
    );
}

/// `pipe validate` with the Python worker on the stage path: exit code and stderr.
fn validate(project: &TestProject) -> (Option<i32>, String) {
    let output = project
        .command()
        .args(["validate"])
        .env("PIPE_STAGE_PATH", workers_dir())
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn unknown_stages_and_params_are_located_errors() {
    let project = project();
    project.write(
        "pipe.yaml",
        &PIPELINE.replace("suffix: \"!!\"", "sufix: \"!!\""),
    );
    let (code, stderr) = validate(&project);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("has no param `sufix`") && stderr.contains("pipe.yaml:5:31"),
        "{stderr}"
    );
    assert!(
        stderr.contains("did you mean `suffix`? its params: input, suffix, repeat, devices"),
        "{stderr}"
    );

    project.write("pipe.yaml", &PIPELINE.replace("shout@1", "shout@3"));
    let (code, stderr) = validate(&project);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("has no version 3") && stderr.contains("`shout@1`"),
        "{stderr}"
    );

    project.write("pipe.yaml", &PIPELINE.replace("outs.loud}", "outs.quiet}"));
    let (code, stderr) = validate(&project);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("stage `loud` has no output `quiet`")
            && stderr.contains("outputs of `loud`: `loud`"),
        "{stderr}"
    );
}

#[test]
fn pipe_stages_lists_and_describes_stages() {
    let project = project();
    let list = project
        .command()
        .args(["stages"])
        .env("PIPE_STAGE_PATH", workers_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("shout@1") && text.contains("Upper-case a text file"),
        "{text}"
    );
    assert!(
        text.contains("text/tokenize@1"),
        "the built-in worker is listed too: {text}"
    );
    let detail = project
        .command()
        .args(["stages", "shout"])
        .env("PIPE_STAGE_PATH", workers_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&detail.stdout);
    assert!(
        text.contains("suffix") && text.contains("default: \"!\"") && text.contains("loud"),
        "{text}"
    );
}

#[test]
fn an_absolute_input_path_inside_the_project_is_the_same_key_as_a_relative_one() {
    let project = project();
    assert_eq!(run(&project, &[], &[]).status("loud"), "ran");
    let absolute = project.path("words.txt").canonicalize().unwrap();
    project.write(
        "pipe.yaml",
        &PIPELINE.replace(
            "input: words.txt",
            &format!("input: {}", absolute.display()),
        ),
    );
    let again = run(&project, &[], &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.status("loud"), "fresh");
}

#[test]
fn a_training_stage_without_the_training_worker_says_how_to_get_it() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  other:\n    run: echo fine > fine.txt\n    outs: [fine.txt]\n  train:\n    uses: train/classifier@1\n    with: { tokens: tokens, model: model }\n",
    );
    project.write("tokens/train.safetensors", "");
    project.write("model/config.json", "{}");
    // As an installation without the libtorch worker: PIPE_WORKER names
    // the data worker, so nothing is built from the checkout, in a
    // directory of its own (the target directory holds both workers).
    let installed = project.path("installed");
    std::fs::create_dir(&installed).unwrap();
    let data_worker = installed.join("pipe-stage");
    std::os::unix::fs::symlink(
        assert_cmd::cargo::cargo_bin("pipe").with_file_name("pipe-stage"),
        &data_worker,
    )
    .unwrap();
    // The pipeline is valid: its training stage is known without the worker.
    let validate = project
        .command()
        .arg("validate")
        .env("PIPE_WORKER", &data_worker)
        .output()
        .unwrap();
    assert!(
        validate.status.success(),
        "{}",
        String::from_utf8_lossy(&validate.stderr)
    );
    // Every other stage runs; the training stage says what to install.
    let output = project
        .command()
        .args(["run", "--json"])
        .env("PIPE_WORKER", &data_worker)
        .output()
        .unwrap();
    let result = pipe_test_support::RunResult::from_output(output);
    assert_eq!(result.code, 1, "{}", result.stderr);
    assert_eq!(result.status("other"), "ran");
    assert_eq!(result.status("train"), "failed");
    let stderr = &result.stderr;
    assert!(
        stderr.contains("runs in the training worker")
            && stderr.contains("installed/pipe-stage-train")
            && stderr.contains("which is not installed")
            && stderr.contains("docs/install.md"),
        "{stderr}"
    );
    assert!(!stderr.contains("building"), "{stderr}");
    // The worker never started: its log is empty, and is not pointed at.
    assert!(!stderr.contains("full log"), "{stderr}");
}

/// A training stage's params are held to the ranges of its ParamSpecs
/// when the pipeline loads, like any other stage's: a bad `lr` is an error
/// at its place before any stage runs, not a failure of the training
/// stage after its upstream stages have run. The training stages' specs
/// come from the catalog built into `pipe` (engine/src/workers/training_stages.json,
/// `pipe-stage-train describe`), as in an installation without the worker.
#[test]
fn a_training_param_out_of_its_range_is_a_located_error_before_anything_runs() {
    let project = TestProject::new();
    let pipeline = |with: &str| {
        format!(
            "stages:\n  other:\n    run: echo fine > fine.txt\n    outs: [fine.txt]\n  train:\n    uses: train/classifier@1\n    with: {{ tokens: tokens, model: model, {with} }}\n"
        )
    };
    project.write("tokens/train.safetensors", "");
    project.write("model/config.json", "{}");
    let installed = project.path("installed");
    std::fs::create_dir(&installed).unwrap();
    let data_worker = installed.join("pipe-stage");
    std::os::unix::fs::symlink(
        assert_cmd::cargo::cargo_bin("pipe").with_file_name("pipe-stage"),
        &data_worker,
    )
    .unwrap();
    for (with, column, message) in [
        (
            "lr: -1",
            47,
            "param `lr` must be above 0 and at most 1, not -1",
        ),
        (
            "lr: 0",
            47,
            "param `lr` must be above 0 and at most 1, not 0",
        ),
        (
            "warmup_ratio: 1.5",
            57,
            "param `warmup_ratio` must be between 0 and 1, not 1.5",
        ),
        ("epochs: 0", 51, "param `epochs` must be at least 1, not 0"),
    ] {
        project.write("pipe.yaml", &pipeline(with));
        let validate = project
            .command()
            .arg("validate")
            .env("PIPE_WORKER", &data_worker)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&validate.stderr);
        assert_eq!(validate.status.code(), Some(2), "{with}: {stderr}");
        assert!(
            stderr.contains(message) && stderr.contains(&format!("pipe.yaml:7:{column}")),
            "{with}: {stderr}"
        );
        let output = project
            .command()
            .args(["run", "--json"])
            .env("PIPE_WORKER", &data_worker)
            .output()
            .unwrap();
        let run = RunResult::from_output(output);
        assert_eq!(run.code, 2, "{with}: {}", run.stderr);
        assert!(run.stderr.contains(message), "{with}: {}", run.stderr);
        assert!(!project.exists("fine.txt"), "{with}: a stage ran");
    }
}

#[test]
fn a_stage_device_count_must_match_its_gpus() {
    let project = project();
    let with_gpus = |devices: &str| {
        PIPELINE.replace(
            "    with: { input: words.txt, suffix: \"!!\" }\n",
            &format!(
                "    with:\n      input: words.txt\n      devices: {devices}\n    resources: {{ gpus: 2 }}\n"
            ),
        )
    };
    project.write("pipe.yaml", &with_gpus("1"));
    let (code, stderr) = validate(&project);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("asks for 2 GPU(s) in `resources.gpus` but runs on `devices: 1`")
            && stderr.contains("pipe.yaml:7:16")
            && stderr.contains("`devices: 2`"),
        "{stderr}"
    );
    project.write("pipe.yaml", &with_gpus("2"));
    let (code, stderr) = validate(&project);
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn a_flipped_byte_in_the_cached_catalog_is_caught_and_the_workers_asked_again() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  table:\n    uses: data/from-csv@1\n    with: { file: data.csv, text_column: text, label_column: label }\n",
    );
    project.write("data.csv", "text,label\ngood film,1\nbad film,0\n");
    // The first run may build the worker (then it knows the stage from the
    // catalog built into pipe); the second asks the worker, and caches it.
    project.run_ok(&[]);
    project.run_ok(&[]);
    let catalog = project.path(".pipe/catalog.json");
    let text = std::fs::read_to_string(&catalog).unwrap();
    // One bit of each `1` (0x31 -> 0x33): still valid JSON, and a stage's
    // implementation version, which is in its key, would change.
    let damaged = text.replace("\"implementation\": 1", "\"implementation\": 3");
    assert_ne!(damaged, text);
    std::fs::write(&catalog, damaged).unwrap();
    let rerun = project.run_ok(&[]);
    assert_eq!(rerun.status("table"), "fresh", "{}", rerun.stderr);
    assert!(
        rerun.stderr.contains("`.pipe/catalog.json` is damaged"),
        "{}",
        rerun.stderr
    );
    // Rewritten from the workers' own answers, as it was.
    assert_eq!(project.read(".pipe/catalog.json"), text);
}
