//! The run's metrics.json: what it holds (`DECLARED`, the stage's
//! `StageInfo.metrics`) and the figures behind it: per epoch, memory,
//! throughput.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use tch::{Device, Tensor};

use pipe_stages::Result;

use super::super::classifier::torch;
use super::devices::device_name;
use super::errors::collective_error;
use super::params::TrainParams;
use super::phases::{Phase, PhaseTimes};
use super::replica::Replica;
use super::resume_files::bits;
use crate::collective::Collective;
use crate::hardware::{self, PeakFlops};
use crate::precision::LossScaler;

/// Every key of metrics.json, flattened, in `StageInfo.metrics`' form:
/// `<n>` is an epoch's number. A test of the worker holds a real run's
/// file to exactly these.
pub(super) const DECLARED: &[&str] = &[
    "best_epoch",
    "val_acc",
    "val_loss",
    "epochs_run",
    "stopped_early",
    "train_rows",
    "optimizer_steps",
    "precision",
    "tf32",
    "skipped_steps",
    "strategy",
    "devices",
    "peak_rss_mb",
    "train_seconds",
    "samples_per_s",
    "hardware.cpu",
    "hardware.cpus",
    "hardware.gpus",
    "hardware.libtorch",
    "memory.params_bytes",
    "memory.grads_bytes",
    "memory.optimizer_bytes",
    "memory.peak_rss_bytes",
    "memory.peak_params_grads_bytes",
    "communication.dtype",
    "communication.gathered_bytes_per_step",
    "communication.reduce_scattered_bytes_per_step",
    "throughput.samples_per_s",
    "throughput.tokens_per_s",
    "throughput.padded_tokens_per_s",
    "throughput.flops_per_step",
    "throughput.flops_per_s",
    "throughput.peak_flops_per_s",
    "throughput.peak_source",
    "throughput.mfu",
    "throughput.forward_ms",
    "throughput.backward_ms",
    "throughput.collective_ms",
    "throughput.optimizer_ms",
    "throughput.other_ms",
    "throughput.timed_steps",
    "stage_seconds.start",
    "stage_seconds.steps",
    "stage_seconds.validation",
    "stage_seconds.resume_state",
    "stage_seconds.checkpoint",
    "stage_seconds.other",
    "stage_seconds.total",
    "epochs.<n>.train_loss",
    "epochs.<n>.train_acc",
    "epochs.<n>.val_loss",
    "epochs.<n>.val_acc",
    "epochs.<n>.epoch_seconds",
    "epochs.<n>.val_seconds",
    "epochs.<n>.samples_per_s",
    "epochs.<n>.tokens_per_s",
];

/// What rank 0 knows at the end of a run.
pub(super) struct Summary<'a> {
    pub(super) settings: &'a TrainParams,
    pub(super) devices: &'a [Device],
    pub(super) replica: &'a Replica,
    /// Replicas in the whole run, every node's.
    pub(super) world: usize,
    pub(super) epochs: &'a [EpochStats],
    pub(super) best_epoch: u32,
    pub(super) best_acc: f64,
    pub(super) stopped_early: bool,
    pub(super) train_rows: usize,
    pub(super) optimizer_steps: u64,
    pub(super) train_seconds: f64,
    /// `memory_json`'s answer, which every rank takes part in.
    pub(super) memory: Value,
    pub(super) peak: &'a PeakFlops,
    /// `StageTime::to_json`'s parts of the stage's time.
    pub(super) stage_seconds: Value,
}

/// metrics.json: the best epoch's figures first, then how the run went.
pub(super) fn metrics_json(summary: &Summary) -> Value {
    let Summary {
        settings,
        devices,
        replica,
        epochs,
        ..
    } = summary;
    let best_stats = &epochs[summary.best_epoch as usize - 1];
    let mut per_epoch = Map::new();
    for stats in epochs.iter() {
        per_epoch.insert(stats.epoch.to_string(), stats.to_json());
    }
    json!({
        "best_epoch": summary.best_epoch,
        "val_acc": summary.best_acc,
        "val_loss": best_stats.val_loss,
        "epochs_run": epochs.len(),
        "stopped_early": summary.stopped_early,
        "train_rows": summary.train_rows,
        "optimizer_steps": summary.optimizer_steps,
        "precision": settings.precision.name(),
        "tf32": settings.tf32,
        "skipped_steps": replica.scaler.as_ref().map_or(0, LossScaler::skipped_steps),
        "strategy": settings.strategy.name(),
        "devices": devices.iter().map(|device| device_name(*device)).collect::<Vec<_>>(),
        "peak_rss_mb": peak_rss_mb(),
        "train_seconds": round3(summary.train_seconds),
        "samples_per_s": round3(
            epochs.iter().map(|stats| stats.rows as f64).sum::<f64>()
                / epochs.iter().map(|stats| stats.epoch_seconds).sum::<f64>().max(1e-9)
        ),
        "hardware": hardware::describe(devices),
        "memory": summary.memory,
        "communication": communication_json(settings, replica),
        "throughput": throughput_json(epochs, replica, summary.world, summary.peak),
        "stage_seconds": summary.stage_seconds,
        "epochs": per_epoch,
    })
}

/// `communication`: what fsdp's collectives carried in one optimizer step
/// (the units gathered, the gradients reduce-scattered, in their dtype);
/// null for the strategies that do not count it.
fn communication_json(settings: &TrainParams, replica: &Replica) -> Value {
    let wire = replica.strategy.wire_bytes();
    let dtype = wire.map(|_| match settings.communication {
        Some(_) => "bfloat16",
        None if settings.precision.name() == "bf16-true" => "bfloat16",
        None => "float32",
    });
    json!({
        "dtype": dtype,
        "gathered_bytes_per_step": wire.map(|w| w.gathered),
        "reduce_scattered_bytes_per_step": wire.map(|w| w.reduce_scattered),
    })
}

/// One epoch's figures; a resume state keeps them (floats to the bit), so
/// that a resumed run reports the epochs before it as they were.
#[derive(Serialize, Deserialize)]
pub(super) struct EpochStats {
    pub(super) epoch: u64,
    #[serde(with = "bits")]
    pub(super) train_loss: f64,
    #[serde(with = "bits")]
    pub(super) train_acc: f64,
    #[serde(with = "bits")]
    pub(super) val_loss: f64,
    #[serde(with = "bits")]
    pub(super) val_acc: f64,
    #[serde(with = "bits")]
    pub(super) epoch_seconds: f64,
    #[serde(with = "bits")]
    pub(super) val_seconds: f64,
    /// Rows trained on, every replica's.
    pub(super) rows: usize,
    /// Real tokens, positions computed (padding included) and model FLOPs,
    /// every replica's.
    pub(super) tokens: usize,
    pub(super) padded_tokens: usize,
    #[serde(with = "bits")]
    pub(super) flops: f64,
    /// Optimizer steps.
    pub(super) steps: u64,
    #[serde(with = "bits")]
    pub(super) samples_per_s: f64,
    #[serde(with = "bits")]
    pub(super) tokens_per_s: f64,
}

impl EpochStats {
    pub(super) fn to_json(&self) -> Value {
        json!({
            "train_loss": self.train_loss,
            "train_acc": self.train_acc,
            "val_loss": self.val_loss,
            "val_acc": self.val_acc,
            "epoch_seconds": round3(self.epoch_seconds),
            "val_seconds": round3(self.val_seconds),
            "samples_per_s": round3(self.samples_per_s),
            "tokens_per_s": round3(self.tokens_per_s),
        })
    }
}

/// `memory`: the most any replica held between two steps (after its
/// first), in bytes, the most parameter and gradient bytes it held at once
/// during its first step, and the highest peak RSS of the replicas'
/// processes.
pub(super) fn memory_json(replica: &Replica, collective: &dyn Collective) -> Result<Value> {
    let held = replica.memory.unwrap_or_default();
    let rss = peak_rss_mb().map_or(-1.0, |mb| mb * 1024.0 * 1024.0);
    let mut most = Tensor::from_slice(&[
        held.params_bytes as f64,
        held.grads_bytes as f64,
        held.optimizer_bytes as f64,
        rss,
        replica.peak_bytes() as f64,
    ]);
    collective
        .all_reduce_max(&mut most)
        .map_err(collective_error)?;
    let most = Vec::<f64>::try_from(&most).map_err(torch)?;
    Ok(json!({
        "params_bytes": most[0] as u64,
        "grads_bytes": most[1] as u64,
        "optimizer_bytes": most[2] as u64,
        "peak_rss_bytes": (most[3] >= 0.0).then(|| most[3].round() as u64),
        "peak_params_grads_bytes": most[4] as u64,
    }))
}

/// `throughput`: rates over the training steps of every epoch (validation
/// excluded), the model FLOPs they did, the fraction of the devices' peak
/// that is (MFU), and rank 0's time per step by phase.
pub(super) fn throughput_json(
    epochs: &[EpochStats],
    lead: &Replica,
    world: usize,
    peak: &PeakFlops,
) -> Value {
    let seconds = epochs
        .iter()
        .map(|e| e.epoch_seconds)
        .sum::<f64>()
        .max(1e-9);
    let rows = epochs.iter().map(|e| e.rows).sum::<usize>() as f64;
    let tokens = epochs.iter().map(|e| e.tokens).sum::<usize>() as f64;
    let padded = epochs.iter().map(|e| e.padded_tokens).sum::<usize>() as f64;
    let flops = epochs.iter().map(|e| e.flops).sum::<f64>();
    let steps: u64 = epochs.iter().map(|e| e.steps).sum();
    let flops_per_s = flops / seconds;
    // CPU replicas share the machine's cores, so its peak counts once;
    // GPUs each bring their own.
    let peak_total = peak.per_device
        * if lead.device == Device::Cpu {
            1.0
        } else {
            world as f64
        };
    let mut throughput = json!({
        "samples_per_s": round3(rows / seconds),
        "tokens_per_s": round3(tokens / seconds),
        "padded_tokens_per_s": round3(padded / seconds),
        "flops_per_step": (flops / steps.max(1) as f64).round(),
        "flops_per_s": flops_per_s.round(),
        "peak_flops_per_s": peak_total.round(),
        "peak_source": peak.source,
        "mfu": (peak_total > 0.0).then(|| (flops_per_s / peak_total * 1e5).round() / 1e5),
    });
    if let (Value::Object(throughput), Value::Object(phases)) =
        (&mut throughput, phases_json(&lead.phases))
    {
        throughput.extend(phases);
    }
    throughput
}

/// Rank 0's mean time per timed step in each phase, in milliseconds.
fn phases_json(phases: &PhaseTimes) -> Value {
    let steps = phases.steps.max(1) as f64;
    let ms = |phase: Phase| round3(1000.0 * phases.seconds[phase as usize] / steps);
    json!({
        "forward_ms": ms(Phase::Forward),
        "backward_ms": ms(Phase::Backward),
        "collective_ms": ms(Phase::Collective),
        "optimizer_ms": ms(Phase::Optimizer),
        "other_ms": ms(Phase::Other),
        "timed_steps": phases.steps,
    })
}

pub(super) fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Peak resident memory of this process so far, from the kernel's
/// high-water mark; None where /proc is absent.
pub(super) fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(round3(kb / 1024.0))
}
