//! The distributed strategies through the real worker: ddp, ZeRO-2 and fsdp
//! on 2 and 3 CPU processes step as `single` does on the whole batch, the
//! sharded ones hold a replica's share of the state, and device counts that
//! do not fit are clear errors.

use pipe_test_support::worker::Run;
use pipe_train::model::{ModelConfig, SequenceClassifier};
use serde_json::json;
use tch::Device;

use crate::metrics::step_lines;
use crate::train::*;

/// DDP's contract: 2 replicas on B/2 rows each, gradients summed, step the
/// same as one device on B rows. Only float rounding may differ (the sum of
/// two half-batch means is not bit-equal to one mean). The sharded
/// strategies promise the same.
fn strategy_matches_single(fixture: &str, strategy: &str, replicas: usize, accumulate: u64) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir_with(dir.path(), fixture, 4, without_dropout(fixture));
    let common = json!({"epochs": 3, "accumulate_grad_batches": accumulate, "gradient_clip_val": 1.0,
                        "warmup_ratio": 0.1});
    let mut single_params = common.clone();
    single_params["batch_size"] = json!(4 * replicas);
    let mut parallel_params = common;
    parallel_params["batch_size"] = json!(4);
    parallel_params["strategy"] = json!(strategy);
    parallel_params["devices"] = json!(replicas);
    let single = train(dir.path(), "single", &tokens, &model, single_params);
    let parallel = train(dir.path(), strategy, &tokens, &model, parallel_params);
    assert!(single.success, "{}", single.error());
    assert!(parallel.success, "{}", parallel.error());

    let (single_metrics, parallel_metrics) = (single.metrics(), parallel.metrics());
    assert_eq!(parallel_metrics["strategy"], strategy);
    assert_eq!(parallel_metrics["devices"], json!(vec!["cpu"; replicas]));
    assert_eq!(single_metrics["devices"], json!(["cpu"]));
    assert_eq!(
        parallel_metrics["optimizer_steps"], single_metrics["optimizer_steps"],
        "the same global batches, so the same steps"
    );
    let described = format!("{strategy} over {replicas} CPU replicas");
    assert!(
        parallel.messages().iter().any(|m| m.contains(&described)),
        "{:?}",
        parallel.messages()
    );
    for (a, b) in per_epoch(&single_metrics, "train_loss")
        .iter()
        .zip(per_epoch(&parallel_metrics, "train_loss"))
    {
        assert!((a - b).abs() < 1e-4, "train loss {a} vs {b}");
    }
    // The same steps, so the same lines of the step curve at the same
    // rates (the losses differ: a replica's are rank 0's share of each batch).
    let schedule = |run: &Run| -> Vec<(u64, u64, f64)> {
        step_lines(run).iter().map(|l| (l.0, l.1, l.3)).collect()
    };
    assert_eq!(schedule(&single), schedule(&parallel));
    assert!(!schedule(&single).is_empty());
    let difference = max_weight_difference(&single, &parallel);
    assert!(
        difference < 1e-5,
        "{strategy} weights differ from single by up to {difference}"
    );
    // And training did move the weights, so the comparison means something
    // (3 epochs: 0.84 at batch 12, above 0.9 at batch 8).
    assert!(
        single_metrics["val_acc"].as_f64().unwrap() > 0.8,
        "{single_metrics:#}"
    );
}

#[test]
fn ddp_on_two_and_three_cpu_processes_steps_as_single_on_the_whole_batch() {
    strategy_matches_single("tiny-bert", "ddp", 2, 1);
    strategy_matches_single("tiny-distilbert", "ddp", 3, 1);
}

#[test]
fn ddp_with_gradient_accumulation_matches_single_for_distilbert() {
    strategy_matches_single("tiny-distilbert", "ddp", 2, 2);
}

#[test]
fn deepspeed_stage_2_on_two_and_three_replicas_steps_as_single() {
    strategy_matches_single("tiny-bert", "deepspeed_stage_2", 2, 1);
    strategy_matches_single("tiny-distilbert", "deepspeed_stage_2", 3, 2);
}

#[test]
fn fsdp_shard_grad_op_on_two_and_three_replicas_steps_as_single() {
    strategy_matches_single("tiny-distilbert", "fsdp_shard_grad_op", 2, 2);
    strategy_matches_single("tiny-bert", "fsdp_shard_grad_op", 3, 1);
}

/// Full sharding: every unit gathered for its forward, gathered again and
/// recomputed for its backward, its gradients reduce-scattered at once
/// (and added up over micro-batches under accumulation).
#[test]
fn fsdp_on_two_and_three_replicas_steps_as_single() {
    strategy_matches_single("tiny-bert", "fsdp", 2, 1);
    strategy_matches_single("tiny-distilbert", "fsdp", 3, 2);
}

/// On one device fsdp's collectives are copies, and the rest is the
/// model's own arithmetic run unit by unit: each unit's forward without
/// autograd, then recomputed from its saved input and backpropagated with
/// the gradient from above. With dropout on, the recompute must draw the
/// first forward's masks; then the weights are single's, byte for byte,
/// gradient accumulation included. (Not with clipping: fsdp sums the
/// squares of the global norm per unit rather than per parameter, which
/// moves a last bit.)
#[test]
fn fsdp_on_one_device_trains_the_bytes_of_single_dropout_included() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-distilbert", 13);
    let run = |strategy: &str| {
        let run = train(
            dir.path(),
            strategy,
            &tokens,
            &model,
            json!({"epochs": 2, "batch_size": 8, "limit_train_samples": 96, "strategy": strategy,
                   "accumulate_grad_batches": 2}),
        );
        assert!(run.success, "{strategy}: {}", run.error());
        run
    };
    let (single, fsdp) = (run("single"), run("fsdp"));
    assert!(
        checkpoint_bytes(&single) == checkpoint_bytes(&fsdp),
        "fsdp on one device: not single's bytes (max difference {})",
        max_weight_difference(&single, &fsdp)
    );
    assert_eq!(fsdp.metrics()["strategy"], "fsdp");
}

/// With dropout on, fsdp's recomputed forwards must draw the masks of the
/// first forward: a unit backpropagated through other masks than those
/// that made its output gets another gradient, and the weights leave
/// ddp's (which draws the same masks in the same order, once): by 2e-2
/// here when the recompute draws fresh masks. With the right masks they
/// differ from ddp's by rounding only: the reduce-scatter of each unit
/// sums 3 replicas' gradients in another order than ddp's all-reduce of
/// one bucket, and AdamW turns the last-bit differences of near-zero
/// gradients (a unit of a layer that GELU has switched off) into steps of
/// up to lr: 1e-5 at most, measured; the test allows 1e-4. And the same
/// seed gives the same bytes.
#[test]
fn fsdp_with_dropout_trains_the_weights_of_ddp_and_the_same_bytes_twice() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    for (fixture, devices, precision, accumulate) in [
        ("tiny-bert", 3, "32-true", 1),
        ("tiny-distilbert", 2, "bf16-mixed", 2),
    ] {
        let model = model_dir(dir.path(), fixture, 12);
        let run = |strategy: &str, name: &str| {
            let run = train(
                dir.path(),
                &format!("{fixture}-{name}"),
                &tokens,
                &model,
                json!({"epochs": 2, "batch_size": 4, "devices": devices, "limit_train_samples": 120,
                       "precision": precision, "accumulate_grad_batches": accumulate,
                       "strategy": strategy}),
            );
            assert!(run.success, "{strategy} {fixture}: {}", run.error());
            run
        };
        let ddp = run("ddp", "ddp");
        let first = run("fsdp", "fsdp");
        let second = run("fsdp", "fsdp-again");
        assert!(
            checkpoint_bytes(&first) == checkpoint_bytes(&second),
            "fsdp on {fixture}: same seed, different bytes"
        );
        let difference = max_weight_difference(&first, &ddp);
        assert!(
            difference < 1e-4,
            "fsdp on {fixture} under {precision}: weights differ from ddp's by {difference}"
        );
    }
}

/// The bytes of a run's checkpoint.
pub(crate) fn checkpoint_bytes(run: &Run) -> Vec<u8> {
    std::fs::read(run.output_dir.join("checkpoint/model.safetensors")).unwrap()
}

/// With dropout on and no clipping, a sharded strategy is ddp's arithmetic
/// cut into shards: the reduce-scatter adds in the all-reduce's order and
/// AdamW is element-wise, so the weights are ddp's. Bit for bit here; in
/// general the last bit of a few elements may differ where a shard cuts a
/// parameter (the fused AdamW kernel rounds its vectorised body and its
/// scalar tail differently), so the check is a tolerance far below any
/// training effect, and the bytes are compared as well for this fixture.
#[test]
fn sharded_strategies_train_the_weights_of_ddp_with_dropout_and_the_same_seed() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 9);
    for precision in ["32-true", "bf16-true"] {
        let settings = json!({"epochs": 2, "batch_size": 4, "devices": 3, "limit_train_samples": 120,
                              "precision": precision});
        let run = |strategy: &str| {
            let mut params = settings.clone();
            params["strategy"] = json!(strategy);
            let run = train(
                dir.path(),
                &format!("{strategy}-{precision}"),
                &tokens,
                &model,
                params,
            );
            assert!(run.success, "{strategy} {precision}: {}", run.error());
            run
        };
        let ddp = run("ddp");
        for strategy in ["deepspeed_stage_2", "fsdp_shard_grad_op"] {
            let sharded = run(strategy);
            let difference = max_weight_difference(&sharded, &ddp);
            assert!(
                difference <= 1e-6,
                "{strategy} under {precision}: weights differ from ddp's by {difference}"
            );
            assert!(
                checkpoint_bytes(&sharded) == checkpoint_bytes(&ddp),
                "{strategy} under {precision}: not ddp's bytes (max difference {difference})"
            );
        }
    }
}

/// What a replica holds, from the metrics: between steps the sharded
/// strategies keep 1/N of ddp's optimizer state and gradients,
/// fsdp_shard_grad_op and fsdp 1/N of its parameters as well; and the most
/// parameter and gradient bytes alive at once during a step, where fsdp
/// holds its shards plus one unit's full parameters and gradients, and the
/// others everything. The model has 16 layers with a wide feed-forward, so
/// that its largest unit (the embeddings, of the 30,522-token vocabulary)
/// is under a fifth of it, as in BERT-base.
#[test]
fn sharded_strategies_hold_a_replicas_share_of_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let layers = json!({"n_layers": 16, "hidden_dim": 4096});
    let model = model_dir_with(dir.path(), "tiny-distilbert", 10, layers);
    // The bytes of the largest unit, as fsdp cuts the model.
    let largest_unit = {
        let config = ModelConfig::from_file(&model.join("config.json")).unwrap();
        let model = SequenceClassifier::new(config, 2, Device::Cpu).unwrap();
        let mut units = vec![0f64; model.unit_count()];
        for (name, tensor) in model.vs.variables() {
            units[model.unit_of(&name)] += (tensor.numel() * 4) as f64;
        }
        assert_eq!(units.len(), 18, "embeddings, 16 layers, head");
        assert!(units.iter().all(|&bytes| bytes > 0.0), "{units:?}");
        units.into_iter().fold(0.0, f64::max)
    };
    let memory = |strategy: &str, devices: usize| -> [f64; 4] {
        let run = train(
            dir.path(),
            &format!("{strategy}-{devices}"),
            &tokens,
            &model,
            json!({"epochs": 1, "batch_size": 4, "strategy": strategy, "devices": devices,
                   "limit_train_samples": 48}),
        );
        assert!(run.success, "{strategy}: {}", run.error());
        let metrics = run.metrics();
        let bytes = |name: &str| metrics["memory"][name].as_f64().unwrap();
        assert!(metrics["memory"]["peak_rss_bytes"].as_f64().unwrap() > 0.0);
        let figures = [
            bytes("params_bytes"),
            bytes("grads_bytes"),
            bytes("optimizer_bytes"),
            bytes("peak_params_grads_bytes"),
        ];
        eprintln!("{strategy} on {devices}: {figures:?}");
        figures
    };
    for devices in [2usize, 3] {
        let [params, grads, optimizer, peak] = memory("ddp", devices);
        assert!(
            optimizer > 2.0 * params * 0.99,
            "AdamW keeps two moments: {optimizer} vs {params}"
        );
        assert!(
            grads == params,
            "ddp keeps every gradient: {grads} vs {params}"
        );
        assert_eq!(peak, params + grads, "ddp holds everything at once");
        // A 1/N share, up to the padding of each bucket's last part and a
        // step counter per piece of a parameter.
        let share = |sharded: f64, whole: f64| {
            let ratio = sharded * devices as f64 / whole;
            assert!(
                (0.98..1.03).contains(&ratio),
                "{sharded} is not 1/{devices} of {whole} ({ratio})"
            );
        };
        let [z_params, z_grads, z_optimizer, z_peak] = memory("deepspeed_stage_2", devices);
        assert_eq!(z_params, params, "ZeRO-2 keeps the parameters whole");
        share(z_grads, grads);
        share(z_optimizer, optimizer);
        assert_eq!(
            z_peak,
            params + grads + z_grads,
            "after backward ZeRO-2 holds the full gradients and its shard"
        );
        let [g_params, g_grads, g_optimizer, g_peak] = memory("fsdp_shard_grad_op", devices);
        share(g_params, params);
        share(g_grads, grads);
        share(g_optimizer, optimizer);
        assert_eq!(
            g_peak,
            params + grads + g_params + g_grads,
            "after backward SHARD_GRAD_OP holds every full parameter and gradient, and its shards"
        );
        let [f_params, f_grads, f_optimizer, f_peak] = memory("fsdp", devices);
        share(f_params, params);
        share(f_grads, grads);
        share(f_optimizer, optimizer);
        assert_eq!(
            f_peak,
            f_params + f_grads + 2.0 * largest_unit,
            "fsdp holds its shards and, at most, one unit's parameters and gradients"
        );
        assert!(
            f_peak < 0.75 * peak,
            "fsdp's peak {f_peak} is not well below ddp's {peak}"
        );
    }
}

#[test]
fn ddp_with_dropout_and_the_same_seed_writes_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 6);
    let settings = json!({"epochs": 2, "batch_size": 4, "strategy": "ddp", "devices": 3,
                          "limit_train_samples": 100});
    let first = train(dir.path(), "first", &tokens, &model, settings.clone());
    let second = train(dir.path(), "second", &tokens, &model, settings);
    assert!(first.success, "{}", first.error());
    assert!(second.success, "{}", second.error());
    let weights =
        |run: &Run| std::fs::read(run.output_dir.join("checkpoint/model.safetensors")).unwrap();
    assert!(
        weights(&first) == weights(&second),
        "same seed, different bytes"
    );
    // 100 rows in global batches of 12: the last batch of 4 is cut to 3,
    // a multiple of the replicas, so each sees one row of it.
    let metrics = first.metrics();
    assert_eq!(metrics["devices"], json!(["cpu", "cpu", "cpu"]));
    assert_eq!(metrics["optimizer_steps"], 2 * 9);
}

#[test]
fn device_counts_that_do_not_fit_the_strategy_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 7);
    let run = train(
        dir.path(),
        "single-two",
        &tokens,
        &model,
        json!({"devices": 2}),
    );
    assert!(!run.success);
    let error = run.error();
    assert!(error.contains("devices"), "{error}");
    assert!(error.contains("strategy: ddp"), "{error}");

    // Lightning's ZeRO-3 is not a strategy here; its equivalent, fsdp, is
    // among those the error lists.
    let run = train(
        dir.path(),
        "zero-3",
        &tokens,
        &model,
        json!({"strategy": "deepspeed_stage_3", "devices": 2}),
    );
    assert!(!run.success);
    let error = run.error();
    assert!(error.contains("deepspeed_stage_3"), "{error}");
    assert!(
        error.contains("deepspeed_stage_2, fsdp_shard_grad_op, fsdp,"),
        "{error}"
    );

    let run = train(
        dir.path(),
        "ddp-zero",
        &tokens,
        &model,
        json!({"strategy": "ddp", "devices": 0}),
    );
    assert!(!run.success);
    assert!(run.error().contains("at least 1"), "{}", run.error());
}
