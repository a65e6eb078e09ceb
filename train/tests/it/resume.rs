//! A training killed after an epoch resumes from it (the state in its
//! invocation's `resume_dir`) and ends with the bytes an uninterrupted run
//! trains, under `single` and with several replicas; a damaged state is
//! ignored with a warning and training starts over.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pipe_test_support::worker::{invocation, run_invocation, Run};
use serde_json::{json, Value};

use crate::train::{model_dir, tokenize, train_params, worker, write_split, Rng};

/// The toy task with enough training rows that an epoch (seconds) outlasts
/// the test's look at the resume directory (milliseconds) by far: the kill
/// lands in a later epoch, not after the last.
fn tokens(dir: &Path) -> PathBuf {
    let dataset = dir.join("dataset");
    std::fs::create_dir_all(&dataset).unwrap();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    write_split(&dataset.join("train.jsonl"), 240, &mut rng);
    write_split(&dataset.join("val.jsonl"), 32, &mut rng);
    write_split(&dataset.join("test.jsonl"), 8, &mut rng);
    let output = tokenize(
        dir,
        json!({
            "dataset": dataset,
            "tokenizer": crate::train::tokenizer_fixture(),
            "max_length": 32,
        }),
    );
    output.join("tokens")
}

/// The invocation of a 3-epoch training in `run_dir`, with its resume
/// directory there too.
fn training(run_dir: &Path, tokens: &Path, model: &Path, extra: Value) -> Value {
    let mut settings = json!({"epochs": 3, "batch_size": 8, "lr": 1e-3, "seed": 5,
                              "log_every_n_steps": 7});
    for (key, value) in extra.as_object().unwrap() {
        settings[key] = value.clone();
    }
    let params = train_params(tokens, model, settings);
    let mut invocation = invocation(run_dir, "train", "train/classifier", params, None, 2);
    invocation["resume_dir"] = json!(run_dir.join("resume"));
    invocation
}

/// Runs the invocation afresh: its outputs and scratch of a killed attempt
/// cleared, as the engine clears them, its resume directory kept.
fn rerun(run_dir: &Path, invocation: &Value) -> Run {
    for dir in ["out", "scratch"] {
        let _ = std::fs::remove_dir_all(run_dir.join(dir));
    }
    std::fs::create_dir_all(run_dir.join("out")).unwrap();
    run_invocation(&worker(), run_dir, invocation)
}

/// The entries of a run's resume directory, sorted.
fn states(run_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(run_dir.join("resume"))
        .map(|entries| {
            entries
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Starts the invocation's training in a process group of its own (the
/// ranks too) and kills the whole group with SIGKILL as soon as the state
/// of its first epoch is in place.
fn kill_after_first_epoch(run_dir: &Path, invocation: &Value) {
    std::fs::create_dir_all(run_dir.join("out")).unwrap();
    let file = run_dir.join("invocation.json");
    std::fs::write(&file, invocation.to_string()).unwrap();
    let mut child = Command::new(worker())
        .args(["run", "--invocation"])
        .arg(&file)
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let first = run_dir.join("resume").join("epoch-1");
    let deadline = Instant::now() + Duration::from_secs(600);
    while !first.is_dir() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the training ended before saving its first epoch"
        );
        assert!(
            Instant::now() < deadline,
            "no state of epoch 1 in 10 minutes"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: a signal to the process group the child leads.
    assert_eq!(
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) },
        0
    );
    let status = child.wait().unwrap();
    assert!(!status.success(), "the training was not killed");
}

/// The epoch a run said it resumed from (rank 0 says it, `[rank0] ` in
/// front when there are ranks).
fn resumed_from(run: &Run) -> Option<u64> {
    run.messages().iter().find_map(|message| {
        let message = message.strip_prefix("[rank0] ").unwrap_or(message);
        let rest = message.strip_prefix("resuming from epoch ")?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Columns `keep` of every line of a CSV output: the times in the others
/// are the only figures a resumed run does not share.
fn columns(run: &Run, output: &str, keep: usize) -> Vec<String> {
    std::fs::read_to_string(run.output_dir.join(output))
        .unwrap()
        .lines()
        .map(|line| line.split(',').take(keep).collect::<Vec<_>>().join(","))
        .collect()
}

/// What a resumed run must share with an uninterrupted one: the
/// checkpoint's bytes, every figure but times, both curves but their times.
fn assert_same_training(resumed: &Run, whole: &Run) {
    let checkpoint =
        |run: &Run| std::fs::read(run.output_dir.join("checkpoint/model.safetensors")).unwrap();
    assert!(
        checkpoint(resumed) == checkpoint(whole),
        "the resumed run trained other weights"
    );
    let (a, b) = (resumed.metrics(), whole.metrics());
    let mut keys = vec![
        "/best_epoch",
        "/val_acc",
        "/val_loss",
        "/epochs_run",
        "/stopped_early",
        "/train_rows",
        "/optimizer_steps",
        "/skipped_steps",
        "/memory/params_bytes",
        "/memory/grads_bytes",
        "/memory/optimizer_bytes",
        "/memory/peak_params_grads_bytes",
        "/throughput/flops_per_step",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    for epoch in 1..=3 {
        for field in ["train_loss", "train_acc", "val_loss", "val_acc"] {
            keys.push(format!("/epochs/{epoch}/{field}"));
        }
    }
    for key in keys {
        assert!(
            !b.pointer(&key).unwrap_or(&Value::Null).is_null(),
            "{key} missing: {b:#}"
        );
        assert_eq!(a.pointer(&key), b.pointer(&key), "{key}");
    }
    assert_eq!(columns(resumed, "curves", 5), columns(whole, "curves", 5));
    assert_eq!(columns(resumed, "steps", 4), columns(whole, "steps", 4));
}

/// Kills a training after its first epoch, runs it again, and holds the
/// result to an uninterrupted run of the same invocation.
fn killed_and_resumed_trains_what_an_uninterrupted_run_trains(fixture: &str, extra: Value) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), fixture, 3);

    let whole_dir = dir.path().join("whole");
    let whole = rerun(
        &whole_dir,
        &training(&whole_dir, &tokens, &model, extra.clone()),
    );
    assert!(whole.success, "{}", whole.error());
    assert_eq!(resumed_from(&whole), None, "{:?}", whole.messages());

    let killed_dir = dir.path().join("killed");
    let invocation = training(&killed_dir, &tokens, &model, extra);
    kill_after_first_epoch(&killed_dir, &invocation);
    let resumed = rerun(&killed_dir, &invocation);
    assert!(resumed.success, "{}", resumed.error());
    let from = resumed_from(&resumed);
    assert!(
        matches!(from, Some(1..=2)),
        "no resume: {:?}",
        resumed.messages()
    );
    assert_same_training(&resumed, &whole);
    // One state is kept, the newest, of the last epoch another followed:
    // the engine removes it once the result is stored.
    assert_eq!(states(&killed_dir), ["epoch-2"]);
}

#[test]
fn a_training_killed_after_an_epoch_resumes_from_it_and_trains_the_uninterrupted_bytes() {
    // Dropout on, warmup, clipping: every piece of state the steps carry.
    killed_and_resumed_trains_what_an_uninterrupted_run_trains(
        "tiny-bert",
        json!({"warmup_ratio": 0.2, "gradient_clip_val": 1.0}),
    );
}

#[test]
fn ddp_and_fsdp_replicas_killed_after_an_epoch_resume_and_train_the_uninterrupted_bytes() {
    killed_and_resumed_trains_what_an_uninterrupted_run_trains(
        "tiny-distilbert",
        json!({"strategy": "ddp", "devices": 2, "batch_size": 4}),
    );
    killed_and_resumed_trains_what_an_uninterrupted_run_trains(
        "tiny-bert",
        json!({"strategy": "fsdp", "devices": 2, "batch_size": 4, "accumulate_grad_batches": 2}),
    );
}

/// The strategies that shard AdamW's state (and, under
/// `fsdp_shard_grad_op`, the parameters between steps): each replica puts
/// back its own part, and the parts are gathered as after a step.
#[test]
fn sharded_optimizer_replicas_killed_after_an_epoch_resume_and_train_the_uninterrupted_bytes() {
    killed_and_resumed_trains_what_an_uninterrupted_run_trains(
        "tiny-bert",
        json!({"strategy": "deepspeed_stage_2", "devices": 2, "batch_size": 4}),
    );
    killed_and_resumed_trains_what_an_uninterrupted_run_trains(
        "tiny-distilbert",
        json!({"strategy": "fsdp_shard_grad_op", "devices": 2, "batch_size": 4}),
    );
}

/// A state cut short (a disk that filled, a machine that lost power before
/// the file reached it) is noticed, said, and not used: the run trains
/// from the start and ends where an uninterrupted one does.
#[test]
fn a_truncated_resume_state_is_ignored_with_a_warning_and_training_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = crate::train::tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 4);
    let run_dir = dir.path().join("run");
    let invocation = training(&run_dir, &tokens, &model, json!({"epochs": 2}));
    let first = rerun(&run_dir, &invocation);
    assert!(first.success, "{}", first.error());

    let state = run_dir.join("resume/epoch-1/rank-0.safetensors");
    let bytes = std::fs::read(&state).unwrap();
    std::fs::write(&state, &bytes[..bytes.len() / 2]).unwrap();
    let again = rerun(&run_dir, &invocation);
    assert!(again.success, "{}", again.error());
    assert_eq!(resumed_from(&again), None, "{:?}", again.messages());
    let warning = again
        .messages()
        .into_iter()
        .find(|message| message.starts_with("warning: ignoring the resume state of epoch 1"))
        .unwrap_or_else(|| panic!("no warning: {:?}", again.messages()));
    assert!(warning.contains("training starts over"), "{warning}");
    assert_eq!(
        std::fs::read(again.output_dir.join("checkpoint/model.safetensors")).unwrap(),
        std::fs::read(first.output_dir.join("checkpoint/model.safetensors")).unwrap()
    );
    // The run saved states of its own over the damaged one.
    assert_eq!(
        std::fs::read_dir(run_dir.join("resume")).unwrap().count(),
        1
    );
    assert_ne!(std::fs::read(&state).unwrap(), bytes[..bytes.len() / 2]);
}

/// Early stopping ends a run without a state of its last epoch: none
/// follows. Resumed from the state before it, the run trains that epoch
/// again, stops there too, `stopped_early`, with the checkpoint of the
/// best epoch, an earlier one, whose weights only the state's best file
/// holds.
#[test]
fn a_run_resumed_before_early_stopping_stops_there_with_the_best_epochs_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = crate::train::tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 3);
    let run_dir = dir.path().join("run");
    let invocation = training(
        &run_dir,
        &tokens,
        &model,
        json!({"epochs": 30, "early_stopping_patience": 2, "limit_train_samples": 96}),
    );
    let first = rerun(&run_dir, &invocation);
    assert!(first.success, "{}", first.error());
    let metrics = first.metrics();
    assert_eq!(metrics["stopped_early"], true, "{metrics:#}");
    let epochs_run = metrics["epochs_run"].as_u64().unwrap();
    assert_eq!(epochs_run, metrics["best_epoch"].as_u64().unwrap() + 2);
    assert_eq!(states(&run_dir), [format!("epoch-{}", epochs_run - 1)]);
    assert!(run_dir
        .join(format!("resume/epoch-{}/best.safetensors", epochs_run - 1))
        .is_file());

    let again = rerun(&run_dir, &invocation);
    assert!(again.success, "{}", again.error());
    assert_eq!(
        resumed_from(&again),
        Some(epochs_run - 1),
        "{:?}",
        again.messages()
    );
    let said = again.messages();
    assert!(
        said.iter().any(|m| m.starts_with("early stopping")),
        "{said:?}"
    );
    let trained: Vec<&String> = said.iter().filter(|m| m.starts_with("epoch ")).collect();
    assert_eq!(trained.len(), 1, "{said:?}");
    assert!(
        trained[0].starts_with(&format!("epoch {epochs_run}/30: ")),
        "{said:?}"
    );
    let checkpoint =
        |run: &Run| std::fs::read(run.output_dir.join("checkpoint/model.safetensors")).unwrap();
    assert!(
        checkpoint(&again) == checkpoint(&first),
        "another checkpoint"
    );
    for key in [
        "best_epoch",
        "val_acc",
        "val_loss",
        "epochs_run",
        "stopped_early",
        "optimizer_steps",
    ] {
        assert_eq!(again.metrics()[key], metrics[key], "{key}");
    }
}

/// A state is for an epoch still to come: a 3-epoch run saves after its
/// first two epochs and not after its last, a 1-epoch run saves none; and
/// the stage's metrics say where its time went, resume states included.
#[test]
fn a_resume_state_is_saved_only_when_another_epoch_follows_and_the_metrics_say_what_each_part_cost()
{
    let dir = tempfile::tempdir().unwrap();
    let tokens = crate::train::tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 4);
    let saved = |run: &Run| -> Vec<u64> {
        run.messages()
            .iter()
            .filter_map(|message| {
                let rest = message.strip_prefix("resume state of epoch ")?;
                rest.split_whitespace().next()?.parse().ok()
            })
            .collect()
    };
    let parts = [
        "start",
        "steps",
        "validation",
        "resume_state",
        "checkpoint",
        "other",
    ];
    let seconds = |run: &Run, part: &str| -> f64 {
        let metrics = run.metrics();
        metrics["stage_seconds"][part]
            .as_f64()
            .unwrap_or_else(|| panic!("no stage_seconds.{part}: {metrics:#}"))
    };

    let three_dir = dir.path().join("three");
    let three = rerun(
        &three_dir,
        &training(&three_dir, &tokens, &model, json!({})),
    );
    assert!(three.success, "{}", three.error());
    assert_eq!(saved(&three), [1, 2], "{:?}", three.messages());
    assert_eq!(states(&three_dir), ["epoch-2"]);
    for part in ["start", "steps", "validation", "resume_state", "checkpoint"] {
        assert!(seconds(&three, part) > 0.0, "{part}: {:#}", three.metrics());
    }
    // The parts add up to the whole (each rounded to the millisecond).
    let named: f64 = parts.iter().map(|part| seconds(&three, part)).sum();
    assert!(
        (named - seconds(&three, "total")).abs() < 0.01,
        "{:#}",
        three.metrics()
    );
    // The steps are the epochs' training steps.
    let epochs: f64 = crate::train::per_epoch(&three.metrics(), "epoch_seconds")
        .iter()
        .sum();
    assert!((seconds(&three, "steps") - epochs).abs() < 0.01);

    let one_dir = dir.path().join("one");
    let one = rerun(
        &one_dir,
        &training(&one_dir, &tokens, &model, json!({"epochs": 1})),
    );
    assert!(one.success, "{}", one.error());
    assert_eq!(saved(&one), Vec::<u64>::new(), "{:?}", one.messages());
    assert_eq!(states(&one_dir), Vec::<String>::new());
    assert_eq!(seconds(&one, "resume_state"), 0.0);
    assert!(seconds(&one, "validation") > 0.0);
}
