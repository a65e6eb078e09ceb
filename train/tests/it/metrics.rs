//! What a training run reports, through the real worker: metrics.json
//! holds exactly the metrics each stage declares, every run has its
//! throughput, FLOPs, MFU and phases, and the `steps` curve has its lines
//! where the schedule says.

use pipe_test_support::worker::Run;
use serde_json::{json, Value};

use crate::train::*;

/// The keys of a metrics.json as the engine stores a run's metrics:
/// nested objects joined with `.` down to a scalar, an array or an empty
/// object (pipe_engine::flatten_params).
pub(crate) fn flattened_keys(value: &Value) -> Vec<String> {
    fn walk(prefix: &str, value: &Value, keys: &mut Vec<String>) {
        match value.as_object() {
            Some(map) if !map.is_empty() => {
                for (name, item) in map {
                    let path = if prefix.is_empty() {
                        name.clone()
                    } else {
                        format!("{prefix}.{name}")
                    };
                    walk(&path, item, keys);
                }
            }
            _ => keys.push(prefix.to_string()),
        }
    }
    let mut keys = Vec::new();
    walk("", value, &mut keys);
    keys
}

/// Whether `key` is one of the keys a `StageInfo.metrics` entry stands
/// for: a `<...>` segment matches any one segment.
pub(crate) fn declares(pattern: &str, key: &str) -> bool {
    let (patterns, segments): (Vec<&str>, Vec<&str>) =
        (pattern.split('.').collect(), key.split('.').collect());
    patterns.len() == segments.len()
        && patterns.iter().zip(&segments).all(|(pattern, segment)| {
            pattern == segment || (pattern.starts_with('<') && pattern.ends_with('>'))
        })
}

/// The metrics.json of `run` holds every metric its stage declares and
/// none it does not.
pub(crate) fn assert_metrics_as_declared(run: &Run, stage: &str) {
    let info = pipe_train::builtins::training_stages()
        .into_iter()
        .map(|stage| stage.info())
        .find(|info| info.name == stage)
        .unwrap();
    let written = flattened_keys(&run.metrics());
    let undeclared: Vec<&String> = written
        .iter()
        .filter(|key| !info.metrics.iter().any(|pattern| declares(pattern, key)))
        .collect();
    let unwritten: Vec<&String> = info
        .metrics
        .iter()
        .filter(|pattern| !written.iter().any(|key| declares(pattern, key)))
        .collect();
    assert!(
        undeclared.is_empty() && unwritten.is_empty(),
        "{stage}: written but not in StageInfo.metrics: {undeclared:?}; declared but not written: {unwritten:?}"
    );
}

/// `StageInfo.metrics` is what `pipe stages` shows and what a report or a
/// comparison can expect of a stage's metrics: a real run's file holds
/// exactly those keys.
#[test]
fn metrics_json_holds_exactly_the_metrics_each_stage_declares() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-distilbert", 3);
    let run = train(
        dir.path(),
        "train",
        &tokens,
        &model,
        json!({"epochs": 2, "batch_size": 4, "limit_train_samples": 16}),
    );
    assert!(run.success, "{}", run.error());
    assert_metrics_as_declared(&run, "train/classifier");
    let scored = eval(
        dir.path(),
        "eval",
        &run.output_dir.join("checkpoint"),
        &tokens,
        "val",
    );
    assert!(scored.success, "{}", scored.error());
    assert_metrics_as_declared(&scored, "eval/classifier");
}

/// Every run reports its throughput: rates, model FLOPs, MFU against a
/// measured CPU peak, and where a step's time went.
#[test]
fn every_training_run_reports_throughput_flops_mfu_and_phases() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 11);
    for strategy in ["single", "deepspeed_stage_2", "fsdp"] {
        let devices = if strategy == "single" { 1 } else { 2 };
        let run = train(
            dir.path(),
            strategy,
            &tokens,
            &model,
            json!({"epochs": 1, "batch_size": 4, "strategy": strategy, "devices": devices,
                   "limit_train_samples": 64}),
        );
        assert!(run.success, "{}", run.error());
        let metrics = run.metrics();
        let throughput = &metrics["throughput"];
        let number = |value: &Value| value.as_f64().unwrap_or_else(|| panic!("{throughput:#}"));
        assert!(number(&throughput["samples_per_s"]) > 0.0);
        assert!(number(&throughput["padded_tokens_per_s"]) >= number(&throughput["tokens_per_s"]));
        assert!(number(&throughput["tokens_per_s"]) > number(&throughput["samples_per_s"]));
        // tiny-bert: 2 layers of hidden 32 and feed-forward 37 tokens long at
        // most: a step of 8 rows is tens of MFLOPs, not zero and not GFLOPs.
        let per_step = number(&throughput["flops_per_step"]);
        assert!((1e5..1e9).contains(&per_step), "{throughput:#}");
        let mfu = number(&throughput["mfu"]);
        assert!(mfu > 0.0 && mfu < 1.0, "{throughput:#}");
        assert!(throughput["peak_source"]
            .as_str()
            .unwrap()
            .starts_with("measured"));
        for phase in ["forward_ms", "backward_ms", "optimizer_ms"] {
            assert!(number(&throughput[phase]) > 0.0, "{phase}: {throughput:#}");
        }
        assert_eq!(
            throughput["timed_steps"], metrics["optimizer_steps"],
            "every CPU step is timed"
        );
        if strategy != "single" {
            assert!(number(&throughput["collective_ms"]) > 0.0, "{throughput:#}");
        }
    }
}

/// The `steps` CSV as (step, epoch, loss, lr, samples_per_s) lines.
pub(crate) fn step_lines(run: &Run) -> Vec<(u64, u64, f64, f64, f64)> {
    let text = std::fs::read_to_string(run.output_dir.join("steps")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("step,epoch,loss,lr,samples_per_s"));
    lines
        .map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            assert_eq!(fields.len(), 5, "{line}");
            (
                fields[0].parse().unwrap(),
                fields[1].parse().unwrap(),
                fields[2].parse().unwrap(),
                fields[3].parse().unwrap(),
                fields[4].parse().unwrap(),
            )
        })
        .collect()
}

/// 56 rows in batches of 8: 7 optimizer steps an epoch, 14 in two. A line
/// every 3 steps counted across epochs, plus each epoch's last step; the
/// rate of each line's step is the warmup (ceil(0.25 x 14) = 4 steps from
/// 0) then the linear decay to 0 at step 14; each line's loss is the mean
/// over the steps since the line before.
#[test]
fn the_steps_curve_has_a_line_every_n_steps_and_at_each_epochs_end() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 8);
    let peak = 2e-3;
    let run = train(
        dir.path(),
        "train",
        &tokens,
        &model,
        json!({"epochs": 2, "limit_train_samples": 56, "warmup_ratio": 0.25,
               "log_every_n_steps": 3}),
    );
    assert!(run.success, "{}", run.error());
    let metrics = run.metrics();
    assert_eq!(metrics["optimizer_steps"], 14);
    let lines = step_lines(&run);
    let steps: Vec<(u64, u64)> = lines.iter().map(|l| (l.0, l.1)).collect();
    assert_eq!(steps, [(3, 1), (6, 1), (7, 1), (9, 2), (12, 2), (14, 2)]);
    // The rate of 1-based step n: (n-1)/4 of the peak while warming up,
    // then (14-(n-1))/10 of it.
    let expected_lr = [
        2.0 / 4.0,
        9.0 / 10.0,
        8.0 / 10.0,
        6.0 / 10.0,
        3.0 / 10.0,
        1.0 / 10.0,
    ];
    for (line, fraction) in lines.iter().zip(expected_lr) {
        let expected = peak * fraction;
        assert!(
            (line.3 - expected).abs() < expected * 1e-12,
            "step {}: lr {} != {expected}",
            line.0,
            line.3
        );
        assert!(
            line.2.is_finite() && line.2 > 0.0,
            "step {}: loss {}",
            line.0,
            line.2
        );
        assert!(line.4 > 0.0, "step {}: samples/s {}", line.0, line.4);
    }
    // Steps of 8 rows each: an epoch's train loss is its lines' losses
    // weighted by the steps each covers: 1-3, 4-6, 7 in epoch 1; 8-9,
    // 10-12, 13-14 in epoch 2 (the count of 3 runs across epochs).
    let train_loss = per_epoch(&metrics, "train_loss");
    for (epoch, window, weights) in [
        (0, &lines[0..3], [3.0, 3.0, 1.0]),
        (1, &lines[3..6], [2.0, 3.0, 2.0]),
    ] {
        let weighted: f64 = window
            .iter()
            .zip(weights)
            .map(|(line, weight)| line.2 * weight)
            .sum::<f64>()
            / 7.0;
        assert!(
            (weighted - train_loss[epoch]).abs() < 1e-5,
            "epoch {}: lines give {weighted}, curves {}",
            epoch + 1,
            train_loss[epoch]
        );
    }

    // The facts a report needs.
    let train_seconds = metrics["train_seconds"].as_f64().unwrap();
    let epoch_seconds: f64 = per_epoch(&metrics, "epoch_seconds").iter().sum();
    // Metrics hold seconds to the millisecond: each of the three figures
    // may be off by half of one.
    assert!(epoch_seconds > 0.0, "{metrics:#}");
    assert!(train_seconds + 0.0015 >= epoch_seconds, "{metrics:#}");
    let samples_per_s = metrics["samples_per_s"].as_f64().unwrap();
    let (slowest, fastest) = (
        112.0 / (epoch_seconds + 0.001),
        112.0 / (epoch_seconds - 0.001),
    );
    assert!(
        samples_per_s + 0.001 >= slowest
            && (epoch_seconds <= 0.001 || samples_per_s - 0.001 <= fastest),
        "samples_per_s {samples_per_s}, 112 rows in {epoch_seconds} s"
    );
    let hardware = &metrics["hardware"];
    assert!(hardware["cpus"].as_u64().unwrap_or(0) >= 1, "{hardware}");
    assert_eq!(hardware["gpus"], json!([]));
    let libtorch = hardware["libtorch"].as_str().unwrap_or_default();
    assert!(
        libtorch.starts_with(|c: char| c.is_ascii_digit()) && libtorch.contains('.'),
        "{hardware}"
    );
    if std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|text| text.contains("model name")) {
        assert!(
            !hardware["cpu"].as_str().unwrap_or_default().is_empty(),
            "{hardware}"
        );
    }

    // One epoch shorter than the default 50 steps still has its line.
    let short = train(
        dir.path(),
        "short",
        &tokens,
        &model,
        json!({"epochs": 1, "limit_train_samples": 56}),
    );
    assert!(short.success, "{}", short.error());
    let lines = step_lines(&short);
    assert_eq!(
        lines.iter().map(|l| (l.0, l.1)).collect::<Vec<_>>(),
        [(7, 1)]
    );
    let train_loss = per_epoch(&short.metrics(), "train_loss")[0];
    assert!(
        (lines[0].2 - train_loss).abs() < 1e-5,
        "{} vs {train_loss}",
        lines[0].2
    );
    // Without warmup the last step's rate is 1/7 of the peak.
    assert!(
        (lines[0].3 - peak / 7.0).abs() < peak * 1e-12,
        "{}",
        lines[0].3
    );

    let zero = train(
        dir.path(),
        "zero",
        &tokens,
        &model,
        json!({"log_every_n_steps": 0}),
    );
    assert!(!zero.success);
    assert!(
        zero.error().contains("log_every_n_steps") && zero.error().contains("at least 1"),
        "{}",
        zero.error()
    );
}
