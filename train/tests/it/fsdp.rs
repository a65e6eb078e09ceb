//! Full sharding over a whole run, through the real worker on CPU ranks:
//! validation and the checkpoint never gather the whole model (the peak
//! comes from the run's own memory metrics), bf16 communication halves
//! what the collectives carry, and prefetching the next unit changes
//! nothing but when the gathers wait.

use pipe_test_support::worker::Run;
use pipe_train::model::SequenceClassifier;
use serde_json::{json, Value};
use tch::Device;

use crate::strategies::checkpoint_bytes;
use crate::train::*;

fn memory(run: &Run, figure: &str) -> f64 {
    run.metrics()["memory"][figure]
        .as_f64()
        .unwrap_or_else(|| panic!("no memory.{figure} in {:#}", run.metrics()))
}

fn communication(run: &Run, figure: &str) -> Value {
    run.metrics()["communication"][figure].clone()
}

/// BERT-base's shape (12 layers of 768, the 30,522-token vocabulary: 109M
/// parameters) with random weights, trained for one epoch on 3 ranks: the
/// epoch's steps, its validation and the checkpoint's writing. ddp holds
/// every parameter and gradient at once; fsdp its thirds plus, at most,
/// the embeddings' parameters and gradients (the largest unit): 0.55x by
/// arithmetic, and the run must measure no more than 0.6x. The checkpoint
/// it streamed holds ddp's weights (within what AdamW makes of rounding
/// noise), validates as ddp's, and loads as a BERT classifier.
#[test]
fn fsdp_on_three_ranks_of_bert_base_peaks_under_six_tenths_of_ddp_over_the_whole_run() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let mut shape = json!({"hidden_size": 768, "num_hidden_layers": 12,
                           "num_attention_heads": 12, "intermediate_size": 3072,
                           "max_position_embeddings": 512});
    shape
        .as_object_mut()
        .unwrap()
        .extend(without_dropout("tiny-bert").as_object().unwrap().clone());
    let model = model_dir_with(dir.path(), "tiny-bert", 21, shape);
    let run = |strategy: &str| {
        let run = train(
            dir.path(),
            strategy,
            &tokens,
            &model,
            json!({"epochs": 1, "batch_size": 2, "strategy": strategy, "devices": 3,
                   "limit_train_samples": 12}),
        );
        assert!(run.success, "{strategy}: {}", run.error());
        run
    };
    let (ddp, fsdp) = (run("ddp"), run("fsdp"));
    let (ddp_peak, fsdp_peak) = (
        memory(&ddp, "peak_params_grads_bytes"),
        memory(&fsdp, "peak_params_grads_bytes"),
    );
    eprintln!(
        "peak params + grads per replica: ddp {ddp_peak}, fsdp {fsdp_peak} ({:.3}x)",
        fsdp_peak / ddp_peak
    );
    assert!(
        ddp_peak > 2.0 * 4.0 * 109e6,
        "ddp holds every fp32 parameter and gradient: {ddp_peak}"
    );
    assert!(
        fsdp_peak <= 0.6 * ddp_peak,
        "fsdp's whole-run peak {fsdp_peak} is above 0.6x ddp's {ddp_peak}"
    );
    // Its shards alone are a third of ddp's parameters and gradients, so
    // the peak counted more than them: the gathered units.
    let shards = memory(&fsdp, "params_bytes") + memory(&fsdp, "grads_bytes");
    assert!(fsdp_peak > shards * 1.2, "{fsdp_peak} vs shards {shards}");

    // The deep layers of a random 12-layer BERT attend almost uniformly, so
    // their query and key gradients (and a few elements anywhere among
    // 109M) are rounding noise, whose sign depends on the order of a sum:
    // there AdamW steps +-lr either way, and the two checkpoints may differ
    // by up to 2 x lr per step, on some CPUs by 1.6e-3. A unit written at
    // the wrong place, padded wrongly or missing differs by the weights'
    // own scale; a parameter that matters moves the validation loss below.
    let steps = ddp.metrics()["optimizer_steps"].as_f64().unwrap();
    assert_eq!(fsdp.metrics()["optimizer_steps"].as_f64(), Some(steps));
    let noise_bound = (2.0 * LR * steps) as f32 + 1e-5;
    let difference = max_weight_difference(&fsdp, &ddp);
    assert!(
        difference < noise_bound,
        "fsdp's checkpoint differs from ddp's by {difference}, beyond AdamW's noise ({noise_bound})"
    );
    let (val_ddp, val_fsdp) = (
        ddp.metrics()["val_loss"].clone(),
        fsdp.metrics()["val_loss"].clone(),
    );
    assert!(
        (val_ddp.as_f64().unwrap() - val_fsdp.as_f64().unwrap()).abs() < 1e-5,
        "validation unit by unit: {val_fsdp} vs ddp's {val_ddp}"
    );
    let checkpoint = fsdp.output_dir.join("checkpoint");
    let (loaded, report) = SequenceClassifier::from_pretrained(&checkpoint, None, Device::Cpu)
        .expect("the streamed checkpoint loads");
    assert!(
        report.missing.is_empty() && report.unexpected.is_empty(),
        "{report:?}"
    );
    assert_eq!(loaded.num_labels(), 2);
}

/// `communication_dtype: bfloat16` under bf16-mixed: every gather and
/// reduce-scatter carries half the bytes of fp32 communication, the peak
/// is lower, and training lands where fp32 communication does, within the
/// noise of bf16 arithmetic. The checkpoint stays fp32.
#[test]
fn bf16_communication_halves_the_bytes_and_trains_as_fp32_communication_does() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-bert", 8);
    let run = |dtype: &str| {
        let run = train(
            dir.path(),
            dtype,
            &tokens,
            &model,
            json!({"epochs": 3, "batch_size": 4, "strategy": "fsdp", "devices": 2,
                   "precision": "bf16-mixed", "communication_dtype": dtype}),
        );
        assert!(run.success, "{dtype}: {}", run.error());
        run
    };
    let (fp32, bf16) = (run("float32"), run("bfloat16"));
    assert_eq!(communication(&fp32, "dtype"), "float32");
    assert_eq!(communication(&bf16, "dtype"), "bfloat16");
    for figure in ["gathered_bytes_per_step", "reduce_scattered_bytes_per_step"] {
        let (full, half) = (
            communication(&fp32, figure).as_u64().unwrap(),
            communication(&bf16, figure).as_u64().unwrap(),
        );
        assert!(full > 0 && half * 2 == full, "{figure}: {half} vs {full}");
    }
    assert!(
        memory(&bf16, "peak_params_grads_bytes") < memory(&fp32, "peak_params_grads_bytes"),
        "the gathered units are bf16"
    );
    // The shards AdamW steps are fp32 either way.
    assert_eq!(
        memory(&bf16, "optimizer_bytes"),
        memory(&fp32, "optimizer_bytes")
    );
    assert!(checkpoint_dtypes(&bf16)
        .iter()
        .all(|dtype| *dtype == safetensors::Dtype::F32));
    let accuracy = |run: &Run| run.metrics()["val_acc"].as_f64().unwrap();
    let (a, b) = (accuracy(&fp32), accuracy(&bf16));
    eprintln!(
        "val accuracy fp32 {a} bf16 {b}, weights differ by {}",
        max_weight_difference(&fp32, &bf16)
    );
    assert!(a > 0.8, "fp32 communication trained: {a}");
    assert!(
        (a - b).abs() <= 2.0 / 32.0,
        "bf16 communication: {b} vs {a}"
    );
}

/// Prefetch moves when a gather waits, never what it gathers: with dropout
/// and gradient accumulation on 3 ranks, the same bytes either way, and
/// both runs report their collective time.
#[test]
fn fsdp_with_and_without_prefetch_trains_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let model = model_dir(dir.path(), "tiny-distilbert", 3);
    let run = |prefetch: bool| {
        let run = train(
            dir.path(),
            &format!("prefetch-{prefetch}"),
            &tokens,
            &model,
            json!({"epochs": 2, "batch_size": 4, "strategy": "fsdp", "devices": 3,
                   "accumulate_grad_batches": 2, "limit_train_samples": 96,
                   "fsdp_prefetch": prefetch}),
        );
        assert!(run.success, "prefetch {prefetch}: {}", run.error());
        run
    };
    let (with, without) = (run(true), run(false));
    assert!(checkpoint_bytes(&with) == checkpoint_bytes(&without));
    assert_eq!(with.metrics()["val_loss"], without.metrics()["val_loss"]);
    for run in [&with, &without] {
        assert!(
            run.metrics()["throughput"]["collective_ms"]
                .as_f64()
                .unwrap()
                > 0.0
        );
    }
}
