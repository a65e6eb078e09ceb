//! Training at each precision through the real worker: bf16 learns on the
//! CPU and saves fp32, fp16 is refused there, and the autocast guard and
//! loss scaler do what torch.amp's do.

use pipe_test_support::worker::invocation;
use serde_json::json;
use tch::Device;

use crate::train::*;

/// Trains the tiny BERT on the toy task at `precision` and checks that it
/// learns and that the checkpoint is fp32 whatever the precision.
fn learns_at(precision: &str) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 1);
    let run = train(
        dir.path(),
        "train",
        &tokens,
        &model,
        json!({"precision": precision, "gradient_clip_val": 1.0, "epochs": 6}),
    );
    assert!(run.success, "{}", run.error());
    let metrics = run.metrics();
    assert_eq!(metrics["precision"], precision);
    assert_eq!(metrics["skipped_steps"], 0);
    let train_loss = per_epoch(&metrics, "train_loss");
    assert!(
        train_loss[train_loss.len() - 1] < train_loss[0] * 0.5,
        "train loss {train_loss:?}"
    );
    assert!(metrics["val_acc"].as_f64().unwrap() > 0.9, "{metrics:#}");
    assert!(run.messages().iter().any(|m| m.contains(precision)));
    let dtypes = checkpoint_dtypes(&run);
    assert!(!dtypes.is_empty());
    assert!(
        dtypes.iter().all(|&d| d == safetensors::Dtype::F32),
        "{dtypes:?}"
    );
    // The fp32 checkpoint evaluates like any other.
    let test = eval(
        dir.path(),
        "eval",
        &run.output_dir.join("checkpoint"),
        &tokens,
        "test",
    );
    assert!(test.success, "{}", test.error());
}

#[test]
fn bf16_mixed_learns_on_the_cpu_and_saves_fp32() {
    learns_at("bf16-mixed");
}

#[test]
fn bf16_true_learns_on_the_cpu_and_saves_fp32() {
    learns_at("bf16-true");
}

/// On a CPU with no bf16 instruction libtorch emulates bf16, which trains
/// slower than fp32: the stage says so before its first epoch. The CPU is
/// stood in by a /proc/cpuinfo of one (PIPE_CPUINFO).
#[test]
fn bf16_on_a_cpu_without_bf16_instructions_trains_and_says_it_is_emulated() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 1);
    let cpuinfo = dir.path().join("cpuinfo");
    std::fs::write(
        &cpuinfo,
        "processor\t: 0\nmodel name\t: an AVX2 CPU\nflags\t\t: fpu sse2 avx avx2 fma\n",
    )
    .unwrap();
    let run_dir = dir.path().join("train");
    let params = train_params(
        &tokens,
        &model,
        json!({"precision": "bf16-mixed", "epochs": 1}),
    );
    let invocation = invocation(&run_dir, "train", "train/classifier", params, Some(123), 2);
    let run = pipe_test_support::worker::run_invocation_with_env(
        &worker(),
        &run_dir,
        &invocation,
        &[("PIPE_CPUINFO", cpuinfo.as_path())],
    );
    assert!(run.success, "{}", run.error());
    let messages = run.messages();
    let note = messages
        .iter()
        .find(|m| m.starts_with("note: this CPU has no bf16 instructions"))
        .unwrap_or_else(|| panic!("no note about emulated bf16 in {messages:#?}"));
    assert!(note.contains("32-true"), "{note}");
    assert!(note.contains("fp32's speed here"), "{note}");
}

#[test]
fn fp16_mixed_on_the_cpu_is_an_error_that_names_bf16_mixed() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 1);
    let run = train(
        dir.path(),
        "train",
        &tokens,
        &model,
        json!({"precision": "16-mixed"}),
    );
    let error = run.error();
    assert!(error.contains("16-mixed"), "{error}");
    assert!(error.contains("CPU"), "{error}");
    assert!(error.contains("bf16-mixed"), "{error}");
}

/// The guard really switches libtorch's autocast: a matmul of fp32 inputs
/// comes out bf16 under it, fp32 again once it is dropped, and nested
/// guards restore the outer state.
#[test]
fn autocast_guard_switches_cpu_matmuls_to_bf16_and_back() {
    use pipe_train::precision::AutocastGuard;
    use tch::{Kind, Tensor};

    let a = Tensor::ones([4, 4], (Kind::Float, Device::Cpu));
    assert!(!AutocastGuard::is_enabled(Device::Cpu));
    {
        let _outer = AutocastGuard::new(Device::Cpu, Kind::BFloat16).unwrap();
        assert!(AutocastGuard::is_enabled(Device::Cpu));
        assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
        // Ops autocast keeps in fp32 stay there.
        assert_eq!(a.softmax(-1, None::<Kind>).kind(), Kind::Float);
        {
            let _inner = AutocastGuard::new(Device::Cpu, Kind::BFloat16).unwrap();
            assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
        }
        assert!(AutocastGuard::is_enabled(Device::Cpu));
        assert_eq!(a.matmul(&a).kind(), Kind::BFloat16);
    }
    assert!(!AutocastGuard::is_enabled(Device::Cpu));
    assert_eq!(a.matmul(&a).kind(), Kind::Float);
    assert!(AutocastGuard::new(Device::Cpu, Kind::Float).is_err());
}

/// GradScaler's rules without a GPU: an overflow skips the step and halves
/// the scale, `growth_interval` good steps double it, and unscaling divides
/// the gradients and spots inf/NaN.
#[test]
fn the_loss_scaler_skips_on_overflow_backs_off_and_grows() {
    use pipe_train::precision::LossScaler;
    use tch::{Kind, Tensor};

    let defaults = LossScaler::default();
    assert_eq!(defaults.scale(), 65536.0);

    let mut scaler = LossScaler::new(8.0, 2.0, 0.5, 3);
    assert!(!scaler.update(true), "an overflowing step must be skipped");
    assert_eq!(scaler.scale(), 4.0);
    assert_eq!(scaler.skipped_steps(), 1);
    assert!(scaler.update(false));
    assert!(scaler.update(false));
    assert_eq!(scaler.scale(), 4.0);
    // An overflow in between restarts the count of good steps.
    assert!(!scaler.update(true));
    assert_eq!(scaler.scale(), 2.0);
    for _ in 0..2 {
        assert!(scaler.update(false));
        assert_eq!(scaler.scale(), 2.0);
    }
    assert!(scaler.update(false));
    assert_eq!(scaler.scale(), 4.0);
    assert_eq!(scaler.skipped_steps(), 2);

    let weight = Tensor::ones([3], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let unused = Tensor::ones([2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
    let loss = (&weight * 3.0).sum(Kind::Float);
    scaler.scale_loss(&loss).unwrap().backward();
    assert_eq!(Vec::<f32>::try_from(weight.grad()).unwrap(), [12.0; 3]);
    let params = [weight.shallow_clone(), unused.shallow_clone()];
    assert!(!scaler.unscale(&params).unwrap());
    assert_eq!(Vec::<f32>::try_from(weight.grad()).unwrap(), [3.0; 3]);

    let _ = weight.grad().zero_();
    let loss = (&weight * f64::INFINITY).sum(Kind::Float);
    scaler.scale_loss(&loss).unwrap().backward();
    assert!(scaler.unscale(&params).unwrap());
}
