//! A training through the real `pipe`, its libtorch worker and a tiny
//! DistilBERT on a toy task: killed after an epoch, the next run resumes
//! from it and ends with what an uninterrupted run in another project
//! makes, nothing of the killed attempt cached; and its validation and
//! the evaluation after it report their progress as training does.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use pipe_test_support::{RunResult, TestProject};
use serde_json::{json, Value};

const TRAIN_DIR: &str = ".pipe/out/toy/train";

/// `rows` texts of the toy task: label 1 says "great", label 0 "awful",
/// among filler words drawn by a small xorshift.
fn split(rows: usize, seed: u64) -> String {
    const FILLER: &[&str] = &[
        "the", "movie", "plot", "was", "really", "quite", "story", "and",
    ];
    let mut state = seed;
    let mut below = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut text = String::new();
    for row in 0..rows {
        let words = 4 + below(9);
        let at = below(words);
        let sentence: Vec<&str> = (0..words)
            .map(|i| match (i == at, row % 2) {
                (true, 1) => "great",
                (true, _) => "awful",
                _ => FILLER[below(FILLER.len())],
            })
            .collect();
        text.push_str(&json!({"text": sentence.join(" "), "label": row % 2}).to_string());
        text.push('\n');
    }
    text
}

/// A project that tokenizes the toy task, trains the tiny DistilBERT on it
/// for `epochs`, validating on `rows` rows, and evaluates the checkpoint on
/// `rows` more, `eval_batch` at a time.
fn toy_project(epochs: u64, rows: usize, eval_batch: usize) -> TestProject {
    let project = TestProject::new();
    std::fs::create_dir(project.path(".git")).unwrap();
    project.write("data/train.jsonl", &split(240, 0x9E37_79B9_7F4A_7C15));
    project.write("data/val.jsonl", &split(rows, 0x2545_F491_4F6C_DD1D));
    project.write("data/test.jsonl", &split(rows, 0x1234_5678_9ABC_DEF1));
    let (config, weights) = crate::imdb_mirror::tiny_distilbert();
    std::fs::create_dir_all(project.path("model")).unwrap();
    std::fs::write(project.path("model/config.json"), config).unwrap();
    std::fs::write(project.path("model/model.safetensors"), weights).unwrap();
    std::fs::copy(
        crate::imdb_mirror::repo_path("stages/tests/fixtures/tokenize/tokenizer.json"),
        project.path("model/tokenizer.json"),
    )
    .unwrap();
    project.write(
        "pipe.yaml",
        &format!(
            "name: toy
stages:
  tokenize:
    uses: text/tokenize@1
    with: {{ dataset: data, tokenizer: model, max_length: 32 }}
  train:
    uses: train/classifier@1
    with:
      tokens: ${{stages.tokenize.outs.tokens}}
      model: model
      epochs: {epochs}
      batch_size: 8
      lr: 0.001
      seed: 5
      log_every_n_steps: 7
  evaluate:
    uses: eval/classifier@1
    with:
      checkpoint: ${{stages.train.outs.checkpoint}}
      tokens: ${{stages.tokenize.outs.tokens}}
      batch_size: {eval_batch}
"
        ),
    );
    project
}

/// The resume states in the project: `.pipe/resume/KEY/epoch-N`.
fn resume_states(project: &TestProject) -> Vec<PathBuf> {
    let Ok(keys) = std::fs::read_dir(project.path(".pipe/resume")) else {
        return Vec::new();
    };
    keys.flatten()
        .filter_map(|key| std::fs::read_dir(key.path()).ok())
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("epoch-"))
        })
        .collect()
}

/// Every stage's resume directory left: `.pipe/resume/KEY`.
fn resume_dirs(project: &TestProject) -> Vec<PathBuf> {
    std::fs::read_dir(project.path(".pipe/resume"))
        .map(|keys| keys.flatten().map(|key| key.path()).collect())
        .unwrap_or_default()
}

/// `pipe run` in a process group of its own, killed with SIGKILL, group
/// and all, as soon as the training's first epoch is saved.
fn run_killed_after_first_epoch(project: &TestProject) {
    let mut child = project
        .std_command()
        .args(["run", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    // A first build of the training worker takes minutes.
    let deadline = Instant::now() + Duration::from_secs(1800);
    while resume_states(project).is_empty() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "pipe ended ({status}) before the training saved an epoch: {}",
                stderr.join().unwrap()
            );
        }
        assert!(Instant::now() < deadline, "no epoch saved in 30 minutes");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: a signal to the process group pipe leads.
    assert_eq!(
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) },
        0
    );
    assert!(!child.wait().unwrap().success());
}

/// The freshness `pipe status --json` gives `stage`.
fn freshness(project: &TestProject, stage: &str) -> String {
    let status = project.pipe(&["status", "--json"]);
    let states: Value = serde_json::from_slice(&status.stdout).unwrap();
    states
        .as_array()
        .unwrap()
        .iter()
        .find(|state| state["stage"] == stage)
        .map(|state| state["freshness"].as_str().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("no {stage} in {states}"))
}

fn messages<'a>(run: &'a RunResult, stage: &str) -> Vec<&'a str> {
    run.events
        .iter()
        .filter(|event| event["event"] == "stage_message" && event["stage"] == stage)
        .filter_map(|event| event["text"].as_str())
        .collect()
}

/// Columns `keep` of a CSV output: the others are times.
fn columns(project: &TestProject, output: &str, keep: usize) -> Vec<String> {
    project
        .read(&format!("{TRAIN_DIR}/{output}"))
        .lines()
        .map(|line| line.split(',').take(keep).collect::<Vec<_>>().join(","))
        .collect()
}

#[test]
fn a_training_killed_between_epochs_resumes_and_ends_as_an_uninterrupted_run() {
    let whole = toy_project(3, 64, 16);
    let uninterrupted = whole.run(&[]);
    assert_eq!(uninterrupted.code, 0, "{}", uninterrupted.stderr);
    assert_eq!(
        resume_dirs(&whole),
        Vec::<PathBuf>::new(),
        "a stored result keeps no state"
    );
    // Where the stage's time went, in its metrics: among the parts, the
    // states saved after the two epochs another followed.
    let parts: Value = serde_json::from_str(&whole.read(&format!("{TRAIN_DIR}/metrics.json")))
        .map(|metrics: Value| metrics["stage_seconds"].clone())
        .unwrap();
    let seconds = |part: &str| {
        parts[part]
            .as_f64()
            .unwrap_or_else(|| panic!("no {part}: {parts}"))
    };
    for part in ["start", "steps", "validation", "resume_state", "checkpoint"] {
        assert!(seconds(part) > 0.0, "{part}: {parts}");
    }
    let named: f64 = [
        "start",
        "steps",
        "validation",
        "resume_state",
        "checkpoint",
        "other",
    ]
    .iter()
    .map(|part| seconds(part))
    .sum();
    assert!((named - seconds("total")).abs() < 0.01, "{parts}");

    let project = toy_project(3, 64, 16);
    run_killed_after_first_epoch(&project);
    // What the killed attempt saved is outside the cache: the stage has no
    // result to restore, only a state to resume from.
    assert_eq!(resume_states(&project).len(), 1);
    assert_eq!(freshness(&project, "train"), "stale");

    let resumed = project.run(&[]);
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert_eq!(resumed.status("train"), "ran");
    let said = messages(&resumed, "train");
    assert!(
        said.iter()
            .any(|text| text.starts_with("resuming from epoch ")
                && text.ends_with(" of 3 (state from an interrupted run)")),
        "{said:?}"
    );
    assert_eq!(
        resume_dirs(&project),
        Vec::<PathBuf>::new(),
        "a state outlived its stored result"
    );

    assert!(
        std::fs::read(project.path(&format!("{TRAIN_DIR}/checkpoint/model.safetensors"))).unwrap()
            == std::fs::read(whole.path(&format!("{TRAIN_DIR}/checkpoint/model.safetensors")))
                .unwrap(),
        "the resumed training made other weights"
    );
    let metrics = |project: &TestProject| -> Value {
        serde_json::from_str(&project.read(&format!("{TRAIN_DIR}/metrics.json"))).unwrap()
    };
    let (a, b) = (metrics(&project), metrics(&whole));
    for key in [
        "best_epoch",
        "val_acc",
        "val_loss",
        "epochs_run",
        "optimizer_steps",
        "epochs",
    ] {
        let strip_times = |value: &Value| -> Value {
            let mut value = value.clone();
            if let Some(epochs) = value.as_object_mut().filter(|_| key == "epochs") {
                for figures in epochs.values_mut() {
                    let figures = figures.as_object_mut().unwrap();
                    figures
                        .retain(|name, _| !name.contains("seconds") && !name.ends_with("_per_s"));
                }
            }
            value
        };
        assert_eq!(strip_times(&a[key]), strip_times(&b[key]), "{key}");
    }
    assert_eq!(columns(&project, "curves", 5), columns(&whole, "curves", 5));
    assert_eq!(columns(&project, "steps", 4), columns(&whole, "steps", 4));
    assert_eq!(
        project.read(".pipe/out/toy/evaluate/predictions"),
        whole.read(".pipe/out/toy/evaluate/predictions")
    );
}

#[test]
fn validation_and_evaluation_report_progress_while_they_run_and_in_the_stage_log() {
    // `PIPE_PROGRESS_INTERVAL=0` has the worker send every reading it
    // makes, not one per 200 ms: each phase moves in the events however
    // fast this machine runs it.
    let project = toy_project(1, 300, 1);
    let output = project
        .command()
        .args(["run", "--json"])
        .env("PIPE_PROGRESS_INTERVAL", "0")
        .output()
        .unwrap();
    let run = RunResult::from_output(output);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // A reading strictly inside the phase: the bar moved while it ran.
    let moved = |stage: &str, phase: &str| {
        run.events.iter().any(|event| {
            event["event"] == "stage_progress"
                && event["stage"] == stage
                && event["phase"] == phase
                && event["unit"] == "rows"
                && event["done"].as_u64().unwrap() > 0
                && event["done"].as_u64() < event["total"].as_u64()
        })
    };
    assert!(moved("train", "validate epoch 1/1"), "{:#?}", run.events);
    assert!(moved("evaluate", "eval test"), "{:#?}", run.events);

    let log = project.read(&format!(".pipe/logs/{}/evaluate.log", run.run_id()));
    assert!(
        log.lines()
            .any(|line| line.starts_with("eval test  ") && line.contains(" of 300 rows")),
        "{log}"
    );
    let log = project.read(&format!(".pipe/logs/{}/train.log", run.run_id()));
    assert!(
        log.lines()
            .any(|line| line.starts_with("validate epoch 1/1  ")),
        "{log}"
    );
}
