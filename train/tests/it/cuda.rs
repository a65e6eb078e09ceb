//! The training stage on a GPU, through the real worker.
//!
//! Where libtorch sees a CUDA device (scripts/gpu-check.sh runs this
//! binary on one) every test trains there and checks the run against the
//! same run on the CPU. Where it sees none, the same tests check the other
//! half of the promise instead: a stage given a GPU it cannot use fails at
//! once, with an error that says why (no driver, a driver too old for CUDA
//! 13, a CPU-only libtorch) and no output, never a panic and never a silent
//! CPU run. Nothing is skipped: each test prints which half it checked.
//!
//! Between processes: NCCL with one rank (every collective on the GPU,
//! through the same c10d group the stage joins), two Gloo ranks on the one
//! GPU (NCCL refuses two ranks on one device), and NCCL between two GPUs
//! where the machine has two (else the test prints "skipped: 1 GPU").
//! scripts/gpu-check.sh runs each of these as a step of its own.

use std::path::Path;
use std::time::Duration;

use pipe_test_support::worker::Run;
use serde_json::{json, Value};
use tch::{Device, Kind, Tensor};

use super::train::{
    checkpoint_dtypes, max_weight_difference, model_dir, model_dir_with, per_epoch, run_stage_on,
    tokens, without_dropout,
};
use pipe_train::precision::{LossScaler, Precision};

fn cuda() -> bool {
    let available = tch::Cuda::is_available();
    eprintln!(
        "{}",
        if available {
            "CUDA: on the GPU"
        } else {
            "no CUDA device: checking that GPU runs fail clearly"
        }
    );
    available
}

/// The train stage's params of `train::train`, with `extra` on top.
fn params(tokens: &Path, model: &Path, extra: Value) -> Value {
    let mut params = json!({
        "tokens": tokens, "model": model, "num_labels": 2, "epochs": 4, "batch_size": 8,
        "lr": 2e-3, "weight_decay": 0.01, "warmup_ratio": 0.0, "accumulate_grad_batches": 1,
        "gradient_clip_val": 1.0, "seed": null, "limit_train_samples": null,
        "early_stopping_patience": null, "precision": "32-true", "strategy": "single", "devices": 1,
    });
    for (key, value) in extra.as_object().unwrap() {
        params[key] = value.clone();
    }
    params
}

fn train_on(dir: &Path, name: &str, gpus: &[&str], params: Value) -> Run {
    run_stage_on(dir, name, "train/classifier", params, Some(123), gpus)
}

/// Without CUDA: the run failed before training, saying why.
fn assert_fails_for_want_of_cuda(run: &Run) {
    assert!(!run.success, "a GPU run without CUDA succeeded");
    let error = run.error();
    assert!(error.contains("no CUDA device"), "{error}");
    let reasons = [
        "CPU-only libtorch",
        "no NVIDIA driver",
        "older than the R580",
        "found no device",
        "could not be read",
    ];
    assert!(
        reasons.iter().any(|reason| error.contains(reason)),
        "the error does not say why: {error}"
    );
    assert!(
        !run.output_dir.join("checkpoint").exists(),
        "a failed run left a checkpoint"
    );
}

/// The same fp32 training without dropout on the GPU and on the CPU: the
/// same checkpoint format (names, shapes, fp32) and weights within what
/// different matmul kernels explain.
#[test]
fn a_gpu_run_matches_the_cpu_run_in_format_and_weights() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir_with(dir.path(), "tiny-bert", 21, without_dropout("tiny-bert"));
    let gpu = train_on(
        dir.path(),
        "gpu",
        &["0"],
        params(&tokens, &model, json!({})),
    );
    if !cuda() {
        assert_fails_for_want_of_cuda(&gpu);
        return;
    }
    let cpu = train_on(dir.path(), "cpu", &[], params(&tokens, &model, json!({})));
    assert!(gpu.success, "{}", gpu.error());
    assert!(cpu.success, "{}", cpu.error());
    assert_eq!(gpu.metrics()["devices"], json!(["cuda:0"]));
    assert_eq!(checkpoint_dtypes(&gpu), checkpoint_dtypes(&cpu));
    let difference = max_weight_difference(&gpu, &cpu);
    assert!(
        difference < 2e-3,
        "GPU and CPU weights differ by {difference}"
    );
    let throughput = &gpu.metrics()["throughput"];
    assert!(throughput["mfu"].as_f64().unwrap() > 0.0, "{throughput:#}");

    // TF32, the opt-in: the same training within TF32's precision.
    let tf32 = train_on(
        dir.path(),
        "tf32",
        &["0"],
        params(&tokens, &model, json!({"tf32": true})),
    );
    assert!(tf32.success, "{}", tf32.error());
    assert_eq!(tf32.metrics()["tf32"], true);
    let difference = max_weight_difference(&tf32, &cpu);
    assert!(
        difference < 2e-2,
        "TF32 and CPU weights differ by {difference}"
    );
}

/// Every precision learns on the GPU and saves fp32; 16-mixed's loss
/// scaler runs there (its overflow path in the next test).
#[test]
fn every_precision_learns_on_the_gpu_and_saves_fp32() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 22);
    for precision in ["bf16-mixed", "16-mixed", "bf16-true"] {
        let run = train_on(
            dir.path(),
            precision,
            &["0"],
            params(
                &tokens,
                &model,
                json!({"precision": precision, "epochs": 6}),
            ),
        );
        if !cuda() {
            assert_fails_for_want_of_cuda(&run);
            continue;
        }
        assert!(run.success, "{precision}: {}", run.error());
        let metrics = run.metrics();
        let loss = per_epoch(&metrics, "train_loss");
        assert!(loss[loss.len() - 1] < loss[0], "{precision}: {loss:?}");
        // bf16-true barely moves BERT-sized weights at fine-tuning rates
        // (docs/libtorch.md); the toy task's lr is 40 times larger.
        assert!(
            metrics["val_acc"].as_f64().unwrap() > 0.8,
            "{precision}: {metrics:#}"
        );
        assert!(
            checkpoint_dtypes(&run)
                .iter()
                .all(|&d| d == safetensors::Dtype::F32),
            "{precision}"
        );
    }
}

/// The loss scaler on CUDA gradients: an overflow is found, the step
/// skipped and the scale halved; finite gradients come back unscaled.
#[test]
fn the_loss_scaler_finds_a_forced_overflow_on_the_gpu() {
    if !cuda() {
        let refused = Precision::Fp16Mixed.check_device(Device::Cuda(0));
        let error = refused.expect_err("16-mixed accepted a GPU that is not there");
        assert!(
            error.to_string().contains("cuda:0 is not available"),
            "{error}"
        );
        return;
    }
    let device = Device::Cuda(0);
    let mut scaler = LossScaler::new(65536.0, 2.0, 0.5, 2000);
    let weight = Tensor::from_slice(&[1.0f32, 2.0])
        .to_device(device)
        .set_requires_grad(true);
    let huge = Tensor::from_slice(&[3.0e38f32, 1.0]).to_device(device);
    let loss = (&weight * &huge).sum(Kind::Float);
    scaler.scale_loss(&loss).unwrap().backward();
    let overflow = scaler.unscale(&[weight.shallow_clone()]).unwrap();
    assert!(overflow, "3e38 * 65536 is not finite in fp32");
    assert!(
        !scaler.update(overflow),
        "an overflowing step must be skipped"
    );
    assert_eq!(scaler.scale(), 32768.0);
    assert_eq!(scaler.skipped_steps(), 1);

    let _ = weight.grad().zero_();
    let loss = (&weight * Tensor::from_slice(&[0.5f32, 0.25]).to_device(device)).sum(Kind::Float);
    scaler.scale_loss(&loss).unwrap().backward();
    assert!(!scaler.unscale(&[weight.shallow_clone()]).unwrap());
    let grad = Vec::<f32>::try_from(weight.grad().to_device(Device::Cpu)).unwrap();
    assert_eq!(grad, [0.5, 0.25]);
}

/// ddp and both sharded strategies with two ranks on one GPU, over Gloo
/// (NCCL refuses two ranks of one device; Gloo stages CUDA tensors through
/// the host): they step as one replica on the whole batch does, and the
/// sharded ones hold their share of the state.
#[test]
fn gloo_ddp_and_the_sharded_strategies_on_two_ranks_of_one_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir_with(
        dir.path(),
        "tiny-distilbert",
        23,
        without_dropout("tiny-distilbert"),
    );
    let single = train_on(
        dir.path(),
        "single",
        &["0"],
        params(&tokens, &model, json!({"batch_size": 8, "epochs": 3})),
    );
    if !cuda() {
        assert_fails_for_want_of_cuda(&single);
        let ddp = train_on(
            dir.path(),
            "ddp",
            &["0", "0"],
            params(
                &tokens,
                &model,
                json!({"strategy": "ddp", "devices": 2, "process_group_backend": "gloo"}),
            ),
        );
        assert_fails_for_want_of_cuda(&ddp);
        return;
    }
    assert!(single.success, "{}", single.error());
    let mut optimizer_bytes = Vec::new();
    for strategy in ["ddp", "deepspeed_stage_2", "fsdp_shard_grad_op", "fsdp"] {
        let run = train_on(
            dir.path(),
            strategy,
            &["0", "0"],
            params(
                &tokens,
                &model,
                json!({
                    "batch_size": 4, "epochs": 3, "strategy": strategy, "devices": 2,
                    "process_group_backend": "gloo",
                }),
            ),
        );
        assert!(run.success, "{strategy}: {}", run.error());
        assert_joined_over(&run, "gloo on cuda:0");
        let metrics = run.metrics();
        assert_eq!(
            metrics["devices"],
            json!(["cuda:0", "cuda:0"]),
            "{strategy}"
        );
        let difference = max_weight_difference(&single, &run);
        assert!(
            difference < 2e-3,
            "{strategy} differs from single by {difference}"
        );
        optimizer_bytes.push(metrics["memory"]["optimizer_bytes"].as_f64().unwrap());
        // Gloo's cost per step through the host, for the GPU check's log.
        let throughput = &metrics["throughput"];
        eprintln!(
            "{strategy} on 2 Gloo ranks of cuda:0: ms per step forward {}, backward {}, collective {}, optimizer {}",
            throughput["forward_ms"], throughput["backward_ms"], throughput["collective_ms"],
            throughput["optimizer_ms"]
        );
    }
    for sharded in &optimizer_bytes[1..] {
        let ratio = sharded * 2.0 / optimizer_bytes[0];
        assert!((0.98..1.03).contains(&ratio), "{optimizer_bytes:?}");
    }
    fsdp_communication_on(dir.path(), &tokens, &model, &single, &["0", "0"], "gloo");
}

/// fsdp's new paths on the GPU: bf16 communication (half the bytes of the
/// fp32 run's, training where it does), prefetch off (the weights of
/// prefetch on, to the rounding of CUDA's atomics), and the streamed
/// checkpoint of both (fp32, close to the single device's).
fn fsdp_communication_on(
    dir: &Path,
    tokens: &Path,
    model: &Path,
    single: &Run,
    gpus: &[&str],
    backend: &str,
) {
    let run = |name: &str, extra: Value| {
        let mut with = json!({
            "batch_size": 4, "epochs": 3, "strategy": "fsdp", "devices": 2,
            "process_group_backend": backend, "precision": "bf16-mixed",
        });
        with.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let run = train_on(
            dir,
            &format!("{name}-{backend}"),
            gpus,
            params(tokens, model, with),
        );
        assert!(run.success, "{name} over {backend}: {}", run.error());
        let metrics = run.metrics();
        eprintln!(
            "fsdp {name} over {backend}: gathered {} B and reduce-scattered {} B per step ({}); ms per step forward {}, backward {}, collective {}; peak params+grads {} B; val_acc {}",
            metrics["communication"]["gathered_bytes_per_step"],
            metrics["communication"]["reduce_scattered_bytes_per_step"],
            metrics["communication"]["dtype"],
            metrics["throughput"]["forward_ms"], metrics["throughput"]["backward_ms"],
            metrics["throughput"]["collective_ms"],
            metrics["memory"]["peak_params_grads_bytes"], metrics["val_acc"]
        );
        run
    };
    let fp32 = run("fp32-comm", json!({}));
    let bf16 = run("bf16-comm", json!({"communication_dtype": "bfloat16"}));
    let unfetched = run("no-prefetch", json!({"fsdp_prefetch": false}));
    for figure in ["gathered_bytes_per_step", "reduce_scattered_bytes_per_step"] {
        let bytes = |run: &Run| run.metrics()["communication"][figure].as_u64().unwrap();
        assert_eq!(bytes(&bf16) * 2, bytes(&fp32), "{figure} over {backend}");
    }
    assert!(checkpoint_dtypes(&bf16)
        .iter()
        .all(|dtype| *dtype == safetensors::Dtype::F32));
    let accuracy = |run: &Run| run.metrics()["val_acc"].as_f64().unwrap();
    assert!(
        (accuracy(&fp32) - accuracy(&bf16)).abs() <= 2.0 / 32.0,
        "bf16 communication over {backend}: {} vs {}",
        accuracy(&bf16),
        accuracy(&fp32)
    );
    let prefetch = max_weight_difference(&fp32, &unfetched);
    assert!(
        prefetch < 2e-3,
        "prefetch changed the weights by {prefetch}"
    );
    let difference = max_weight_difference(single, &bf16);
    assert!(
        difference < 5e-2,
        "bf16 communication: {difference} from single"
    );
}

/// Rank 0 said it joined its group over `what` ("nccl on cuda:0").
fn assert_joined_over(run: &Run, what: &str) {
    let messages = run.messages();
    assert!(
        messages
            .iter()
            .any(|message| message.contains(&format!("joined over {what}"))),
        "no rank joined over {what}: {messages:#?}"
    );
}

/// NCCL with one rank: the process group the stage joins, every
/// collective the strategies use, on CUDA tensors. World size 1 is not
/// reachable through the stage (`devices: 1` trains without a group), so
/// this joins the group directly. Without CUDA, joining NCCL is an error
/// that names it, never a crash.
#[test]
fn nccl_of_one_rank_runs_every_collective_on_the_gpu() {
    use pipe_train::c10d::{Backend, ProcessGroup, Rendezvous, StoreServer};
    use pipe_train::collective::Collective;

    let timeout = Duration::from_secs(30);
    let server = StoreServer::start(timeout).unwrap();
    let rendezvous = Rendezvous {
        host: "127.0.0.1".into(),
        port: server.port(),
        serve_store: false,
        rank: 0,
        world_size: 1,
        interface_host: "127.0.0.1".into(),
        store_prefix: String::new(),
        timeout,
    };
    let joined = ProcessGroup::join(&rendezvous, Backend::Nccl);
    if !cuda() {
        let Err(error) = joined else {
            panic!("NCCL joined without a CUDA device");
        };
        assert!(error.to_string().contains("NCCL"), "{error}");
        return;
    }
    let group = joined.unwrap_or_else(|error| panic!("NCCL of one rank: {error}"));
    assert_eq!((group.rank(), group.world_size()), (0, 1));
    let device = Device::Cuda(0);
    let host = |tensor: &Tensor| Vec::<f32>::try_from(tensor.to_device(Device::Cpu)).unwrap();

    let mut tensor = Tensor::from_slice(&[1.0f32, -2.0, 3.5]).to_device(device);
    group.all_reduce_sum(&mut tensor).unwrap();
    assert_eq!(host(&tensor), [1.0, -2.0, 3.5]);
    group.all_reduce_max(&mut tensor).unwrap();
    assert_eq!(host(&tensor), [1.0, -2.0, 3.5]);
    group.broadcast(0, &mut tensor).unwrap();
    assert_eq!(host(&tensor), [1.0, -2.0, 3.5]);
    // A bf16 bucket too: the mixed precisions' gradients are fp32, but
    // bf16-true's are bf16.
    let mut bf16 = Tensor::from_slice(&[0.5f32, 4.0])
        .to_kind(Kind::BFloat16)
        .to_device(device);
    group.all_reduce_sum(&mut bf16).unwrap();
    assert_eq!(host(&bf16.to_kind(Kind::Float)), [0.5, 4.0]);

    let input = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).to_device(device);
    let mut part = Tensor::zeros([4], (Kind::Float, device));
    group.reduce_scatter_sum(&input, &mut part).unwrap();
    assert_eq!(host(&part), [1.0, 2.0, 3.0, 4.0]);
    let mut gathered = Tensor::zeros([4], (Kind::Float, device));
    group.all_gather(&part, &mut gathered).unwrap();
    assert_eq!(host(&gathered), [1.0, 2.0, 3.0, 4.0]);

    // Started, then waited on: how ddp overlaps a bucket with backward.
    let mut started = Tensor::from_slice(&[7.0f32; 1024]).to_device(device);
    let pending = group.start_all_reduce_sum(&mut started).unwrap();
    pending.wait().unwrap();
    assert!(host(&started).iter().all(|&x| x == 7.0));
    group.barrier().unwrap();
    eprintln!("NCCL of one rank on cuda:0: all-reduce (sum, max, bf16, started), broadcast, reduce-scatter, all-gather, barrier");
}

/// ddp, fsdp_shard_grad_op and fsdp over NCCL between two GPUs step as one
/// replica on the whole batch does. Needs a machine with two GPUs: on one
/// it prints "skipped: 1 GPU" (the only test here that can skip; the
/// GPU check says so in its table too).
#[test]
fn nccl_ddp_and_fsdp_shard_grad_op_between_two_gpus() {
    let dir = tempfile::tempdir().unwrap();
    if !cuda() {
        let tokens = tokens(dir.path());
        let model = model_dir(dir.path(), "tiny-distilbert", 24);
        let ddp = train_on(
            dir.path(),
            "ddp",
            &["0", "1"],
            params(
                &tokens,
                &model,
                json!({"strategy": "ddp", "devices": 2, "process_group_backend": "nccl"}),
            ),
        );
        assert_fails_for_want_of_cuda(&ddp);
        return;
    }
    let gpus = tch::Cuda::device_count();
    if gpus < 2 {
        eprintln!("skipped: {gpus} GPU");
        return;
    }
    let tokens = tokens(dir.path());
    let model = model_dir_with(
        dir.path(),
        "tiny-distilbert",
        24,
        without_dropout("tiny-distilbert"),
    );
    let single = train_on(
        dir.path(),
        "single",
        &["0"],
        params(&tokens, &model, json!({"batch_size": 8, "epochs": 3})),
    );
    assert!(single.success, "{}", single.error());
    for strategy in ["ddp", "fsdp_shard_grad_op", "fsdp"] {
        let run = train_on(
            dir.path(),
            strategy,
            &["0", "1"],
            params(
                &tokens,
                &model,
                json!({
                    "batch_size": 4, "epochs": 3, "strategy": strategy, "devices": 2,
                    "process_group_backend": "nccl",
                }),
            ),
        );
        assert!(run.success, "{strategy}: {}", run.error());
        assert_joined_over(&run, "nccl on cuda:0");
        assert_eq!(
            run.metrics()["devices"],
            json!(["cuda:0", "cuda:1"]),
            "{strategy}"
        );
        let difference = max_weight_difference(&single, &run);
        assert!(
            difference < 2e-3,
            "{strategy} over NCCL differs from single by {difference}"
        );
        let throughput = &run.metrics()["throughput"];
        eprintln!(
            "{strategy} on NCCL between cuda:0 and cuda:1: ms per step forward {}, backward {}, collective {}, optimizer {}",
            throughput["forward_ms"], throughput["backward_ms"], throughput["collective_ms"],
            throughput["optimizer_ms"]
        );
    }
    fsdp_communication_on(dir.path(), &tokens, &model, &single, &["0", "1"], "nccl");
}
