//! Throughput of a BERT/DistilBERT classifier on the CPU: the
//! forward alone (eval mode, no autograd), or with `train` a whole training
//! step (dropout on, cross-entropy, backward, tch's AdamW at lr 5e-5 and
//! weight decay 0.01, as torch.optim.AdamW's defaults). PRECISION is one of
//! the train stage's: 32-true (the default), bf16-mixed (forward and loss
//! under CPU bf16 autocast) or bf16-true (bf16 weights and optimizer).
//! Each is measured twice, without an attention mask and with the padding
//! mask the stage passes for a padded batch (PIPE_BENCH_MASK=none or
//! =padding for one of them), one line each.
//!
//!     cargo run -p pipe-train --example model_throughput -- MODEL_DIR [BATCH SEQ ITERS [train|forward [PRECISION]]]
//!
//! MODEL_DIR holds config.json and model.safetensors (MiniLM-L6: see
//! docs/libtorch.md). The dev profile already builds dependencies with
//! opt-level 2 and the work is inside libtorch, so a release build changes
//! little.

use std::error::Error;
use std::time::Instant;

use pipe_train::hardware::PeakFlops;
use pipe_train::model::SequenceClassifier;
use pipe_train::optim::AdamW;
use pipe_train::precision::{AutocastGuard, Precision};
use tch::{Device, Kind, Tensor};

/// What to measure, from the command line and the environment.
struct Bench {
    batch: i64,
    seq: i64,
    iters: i64,
    /// A whole training step, not the forward alone.
    train: bool,
    precision: Precision,
    device: Device,
    /// PIPE_BENCH_PROFILE=1: where a train step's time goes (the CPU runs
    /// each op to completion, so wall-clock splits are exact).
    profile: bool,
}

impl Bench {
    /// The bench of `args` (after MODEL_DIR).
    fn from_args(args: &[String]) -> Result<Bench, Box<dyn Error>> {
        let number = |index: usize, default: i64| -> Result<i64, Box<dyn Error>> {
            Ok(match args.get(index) {
                Some(text) => text.parse()?,
                None => default,
            })
        };
        let precision = match args.get(4) {
            Some(name) => Precision::parse(name).ok_or(format!("unknown precision `{name}`"))?,
            None => Precision::Fp32,
        };
        // PIPE_BENCH_DEVICE=cuda for the first GPU (scripts/bench/gpu_train.sh).
        let device = match std::env::var("PIPE_BENCH_DEVICE").as_deref() {
            Ok("cuda") => Device::Cuda(0),
            _ => Device::Cpu,
        };
        Ok(Bench {
            batch: number(0, 32)?,
            seq: number(1, 64)?,
            iters: number(2, 10)?,
            train: args.get(3).is_some_and(|mode| mode == "train"),
            precision,
            device,
            profile: std::env::var_os("PIPE_BENCH_PROFILE").is_some(),
        })
    }

    /// Model FLOPs utilisation as the train stage reports it
    /// (`SequenceClassifier::train_flops`, `hardware::peak_flops`: a known
    /// GPU's datasheet peak for this precision, else a measured matmul);
    /// PIPE_BENCH_PEAK_TFLOPS overrides the peak. Train steps only. The
    /// FLOPs are the same with and without the mask: the padded positions
    /// are computed either way.
    fn peak(&self) -> Option<PeakFlops> {
        self.train.then(|| {
            match std::env::var("PIPE_BENCH_PEAK_TFLOPS")
                .ok()
                .and_then(|text| text.parse::<f64>().ok())
            {
                Some(tflops) => PeakFlops {
                    per_device: tflops * 1e12,
                    source: "PIPE_BENCH_PEAK_TFLOPS".to_string(),
                },
                None => pipe_train::hardware::peak_flops(
                    &[self.device],
                    self.precision.compute_kind(),
                    false,
                    tch::get_num_threads() as usize,
                ),
            }
        })
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dir) = args.first() else {
        return Err(
            "usage: model_throughput MODEL_DIR [BATCH SEQ ITERS [train|forward [PRECISION]]]"
                .into(),
        );
    };
    let bench = Bench::from_args(&args[1..])?;
    bench.precision.check_device(bench.device)?;
    let mut model = load_model(std::path::Path::new(dir), &bench)?;
    tch::manual_seed(0);
    // Ids from 1000 up: ordinary word pieces, no special tokens.
    let ids = Tensor::randint_low(
        1000,
        model.config.vocab_size,
        [bench.batch, bench.seq],
        (Kind::Int64, bench.device),
    );
    // The stage passes a padding mask whenever a batch has a padded row
    // (classifier.rs, `batch_tensors`), which is almost every batch of
    // real text at 512 tokens: the attention then takes its masked path.
    // Without a mask (no row padded, as transformers drops an all-ones
    // mask) it takes the unmasked, fused one, which overstates what the
    // stage gets. Both are measured, one after the other in this process:
    // PIPE_BENCH_MASK=none or =padding measures one alone.
    let mask = padding_mask(bench.batch, bench.seq, bench.device);
    let variants: Vec<(&str, Option<&Tensor>)> = match std::env::var("PIPE_BENCH_MASK").as_deref() {
        Ok("none" | "0") => vec![("no mask", None)],
        Ok("padding" | "1") => vec![("padding mask", Some(&mask))],
        _ => vec![("no mask", None), ("padding mask", Some(&mask))],
    };
    let labels = Tensor::randint(2, [bench.batch], (Kind::Int64, bench.device));
    let mut optimizer = nn_adamw(&model);
    let peak = bench.peak();
    for (label, mask) in variants {
        let (seconds, phases) =
            time_iterations(&bench, &mut model, &mut optimizer, &ids, mask, &labels)?;
        report(&bench, &model, label, seconds, phases, peak.as_ref());
    }
    Ok(())
}

/// The model of `dir`. A directory with only config.json: fresh weights
/// of that shape, for throughput alone (a DistilBERT-base-sized model
/// without the hub).
fn load_model(dir: &std::path::Path, bench: &Bench) -> Result<SequenceClassifier, Box<dyn Error>> {
    let mut model = if dir.join("model.safetensors").is_file() {
        SequenceClassifier::from_pretrained(dir, Some(2), bench.device)?.0
    } else {
        let config = pipe_train::model::ModelConfig::from_file(&dir.join("config.json"))?;
        SequenceClassifier::new(config, 2, bench.device)?
    };
    if bench.precision.weight_kind() == Kind::BFloat16 {
        model.vs.bfloat16();
    }
    Ok(model)
}

/// Seconds for `bench.iters` forwards or train steps after two warm-up
/// ones, and (profiling) the forward, backward and optimizer seconds of
/// them all, warm-up included.
fn time_iterations(
    bench: &Bench,
    model: &mut SequenceClassifier,
    optimizer: &mut AdamW,
    ids: &Tensor,
    mask: Option<&Tensor>,
    labels: &Tensor,
) -> Result<(f64, [f64; 3]), Box<dyn Error>> {
    let mut phases = [0f64; 3];
    let mut run = || -> Result<(), Box<dyn Error>> {
        let autocast = bench
            .precision
            .autocast_kind()
            .map(|kind| AutocastGuard::new(bench.device, kind))
            .transpose()?;
        if bench.train {
            let started = Instant::now();
            let logits = model.forward_t(ids, mask, None, true)?;
            let loss = logits.cross_entropy_for_logits(labels);
            drop(autocast);
            let forward = started.elapsed().as_secs_f64();
            optimizer.zero_grad()?;
            loss.backward();
            let backward = started.elapsed().as_secs_f64();
            optimizer.step()?;
            let step = started.elapsed().as_secs_f64();
            if bench.profile {
                phases[0] += forward;
                phases[1] += backward - forward;
                phases[2] += step - backward;
            }
        } else {
            let _logits = tch::no_grad(|| model.forward_t(ids, mask, None, false))?;
        }
        Ok(())
    };
    // The first calls pay for oneDNN's kernel selection, allocator
    // warm-up and the optimizer's state (and, for the second variant,
    // for the other attention path's kernels).
    for _ in 0..2 {
        run()?;
    }
    let synchronize = || pipe_train::hardware::synchronize(bench.device);
    synchronize();
    let start = Instant::now();
    for _ in 0..bench.iters {
        run()?;
    }
    synchronize();
    Ok((start.elapsed().as_secs_f64(), phases))
}

/// One variant's lines, printed as soon as it is measured.
fn report(
    bench: &Bench,
    model: &SequenceClassifier,
    label: &str,
    seconds: f64,
    phases: [f64; 3],
    peak: Option<&PeakFlops>,
) {
    let (batch, seq, iters, precision) = (bench.batch, bench.seq, bench.iters, bench.precision);
    if bench.profile && bench.train {
        // Includes the two warm-up steps' share; read the proportions.
        let total: f64 = phases.iter().sum();
        eprintln!(
            "profile ({label}): forward+loss {:.1}%, backward {:.1}%, optimizer {:.1}% ({:.3} s/step in all)",
            100.0 * phases[0] / total,
            100.0 * phases[1] / total,
            100.0 * phases[2] / total,
            total / (iters + 2) as f64
        );
    }
    let samples = (batch * iters) as f64;
    if let Some(peak) = peak {
        let flops = model.train_flops(batch as usize, seq as usize) * iters as f64;
        let achieved = flops / seconds;
        println!(
            "{label}: model FLOPs {:.2} TFLOP/s, MFU {:.1}% of {:.1} TFLOP/s ({})",
            achieved / 1e12,
            100.0 * achieved / peak.per_device.max(1.0),
            peak.per_device / 1e12,
            peak.source
        );
    }
    println!(
        "{} {precision}, {label}: batch {batch} x {seq} tokens, {iters} iterations, {} threads: {:.3} s/batch, {:.1} samples/s, {:.0} tokens/s",
        if bench.train { "train step" } else { "forward" },
        tch::get_num_threads(),
        seconds / iters as f64,
        samples / seconds,
        samples * seq as f64 / seconds
    );
}

/// The attention mask of a batch padded as the stage pads one (to its
/// longest row): row `r` of `batch` holds `seq - r * seq / (2 * batch)`
/// real tokens, so the first row is full and the last about half padding.
fn padding_mask(batch: i64, seq: i64, device: Device) -> Tensor {
    let mut mask = vec![0i64; (batch * seq) as usize];
    for row in 0..batch {
        let real = seq - row * seq / (2 * batch);
        for position in 0..real {
            mask[(row * seq + position) as usize] = 1;
        }
    }
    Tensor::from_slice(&mask)
        .view([batch, seq])
        .to_device(device)
}

/// The stage's fused AdamW with torch.optim.AdamW's defaults (lr 5e-5 as
/// set, weight decay 0.01 on every parameter).
fn nn_adamw(model: &SequenceClassifier) -> AdamW {
    AdamW::new(
        vec![(model.vs.trainable_variables(), 0.01)],
        5e-5,
        0.9,
        0.999,
        1e-8,
    )
}
