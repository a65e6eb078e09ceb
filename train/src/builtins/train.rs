//! `train/classifier@1`: fine-tunes a BERT or DistilBERT sequence classifier
//! on the token files of `text/tokenize@1` and writes the best epoch's
//! weights as a Hugging Face checkpoint.
//!
//! The loop is the one `batches` was built for: length-bucketed batches
//! padded per batch, gradient accumulation weighted by rows, AdamW with
//! linear warmup and decay per optimizer step, validation after every
//! epoch, the best epoch by validation accuracy kept in memory (as
//! Lightning's `ModelCheckpoint(monitor="val_acc", mode="max")`) and early
//! stopping. Precision as Lightning's (see `crate::precision`); strategy
//! `single`, `ddp` (see `crate::ddp`), or one of the sharded ones,
//! `deepspeed_stage_2` and `fsdp_shard_grad_op` (see `crate::shard`) and
//! `fsdp` (see `crate::fsdp`). Validation is the prediction
//! loop that `eval/classifier@1` uses too (`super::classifier`).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pipe_protocol::{OutputKind, OutputSpec, ParamKind, ParamSpec};
use safetensors::{Dtype, View};
use serde_json::{json, Map, Value};
use tch::nn::VarStore;
use tch::{Device, Kind, Reduction, Tensor};

use pipe_stages::batches::{
    accumulation_steps, limit, micro_batch_weights, pad_id, Batch, BucketSampler, Collator,
};
use pipe_stages::classification::{linear_warmup_decay, BestEpoch, EpochVerdict};
use pipe_stages::token_file::{open_split, TokenizedSplit, TOKENIZER_FILE};
use pipe_stages::{BuiltinStage, Result, StageContext, StageError, StageInfo};

use super::classifier::{
    batch_tensors, check_labels, check_lengths, check_pad_id, device, precision_error, predict,
    torch,
};
use crate::c10d::{self, ProcessGroup, Reducer};
use crate::ddp::{Collective, CollectiveError, GradientBuckets, Solo};
use crate::distributed::{self, RankPlace, Role};
use crate::fsdp::{self, FsdpError, FullShard};
use crate::hardware::{self, PeakFlops};
use crate::launch;
use crate::model::{Architecture, SequenceClassifier};
use crate::optim::{AdamW, OptimError};
use crate::precision::{self, AutocastGuard, LossScaler, Precision};
use crate::shard::{variable_bytes, MemoryUse, ShardError, ShardedOptimizer, Sharding};

pub struct TrainClassifier;

const CHECKPOINT: &str = "checkpoint";
const CURVES: &str = "curves";
const STEPS: &str = "steps";
const UNIT: &str = "steps";
pub(super) const STRATEGIES: &[&str] = &[
    "single",
    "ddp",
    "deepspeed_stage_2",
    "fsdp_shard_grad_op",
    "fsdp",
];
const PROCESS_GROUP_BACKENDS: &[&str] = &["auto", "gloo", "nccl"];
/// Tokenizer files of a model directory that `AutoTokenizer` reads besides
/// tokenizer.json; copied into the checkpoint when the model has them.
const TOKENIZER_EXTRAS: &[&str] = &[
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
];

impl BuiltinStage for TrainClassifier {
    fn info(&self) -> StageInfo {
        StageInfo {
            name: "train/classifier".into(),
            version: 1,
            // 2: CPU dropout masks from our own generator, fused QKV.
            // 3: fused AdamW kernel (float rounding of every update).
            // 4: replicas are processes; c10d (Gloo, NCCL) sums the gradients.
            implementation: 4,
            summary: "Fine-tune a BERT/DistilBERT sequence classifier (libtorch) and keep the best epoch by val accuracy"
                .into(),
            params: vec![
                ParamSpec::new(
                    "tokens",
                    ParamKind::Path,
                    None,
                    "the output of text/tokenize@1: train.safetensors, val.safetensors and tokenizer.json",
                ),
                ParamSpec::new(
                    "model",
                    ParamKind::Path,
                    None,
                    "a Hugging Face model directory with config.json and model.safetensors (BERT or DistilBERT)",
                ),
                ParamSpec::new("num_labels", ParamKind::Integer, Some(json!(2)), "number of classes (labels 0..num_labels-1)"),
                ParamSpec::new("epochs", ParamKind::Integer, Some(json!(3)), "passes over the training rows"),
                ParamSpec::new(
                    "batch_size",
                    ParamKind::Integer,
                    Some(json!(12)),
                    "rows per micro-batch on each device (as Lightning's: a step sees batch_size x devices x accumulate_grad_batches rows)",
                ),
                ParamSpec::new("lr", ParamKind::Number, Some(json!(5e-5)), "peak learning rate of AdamW"),
                ParamSpec::new(
                    "weight_decay",
                    ParamKind::Number,
                    Some(json!(0.01)),
                    "AdamW weight decay, on every weight but biases and LayerNorm weights (as Hugging Face's Trainer)",
                ),
                ParamSpec::new(
                    "warmup_ratio",
                    ParamKind::Number,
                    Some(json!(0.0)),
                    "fraction of the optimizer steps spent warming the learning rate up from 0; it then decays linearly to 0",
                ),
                ParamSpec::new(
                    "accumulate_grad_batches",
                    ParamKind::Integer,
                    Some(json!(1)),
                    "micro-batches per optimizer step (gradient accumulation)",
                ),
                ParamSpec::new(
                    "gradient_clip_val",
                    ParamKind::Number,
                    Some(Value::Null),
                    "clip the gradients' global L2 norm to this; unset: no clipping",
                ),
                ParamSpec::seed(
                    "seed of the head's initialisation, dropout and batch order; unset: the pipeline's `seed` param (else 0)",
                ),
                ParamSpec::new(
                    "limit_train_samples",
                    ParamKind::Integer,
                    Some(Value::Null),
                    "train on this many rows chosen at random (by seed) for quick runs; unset: all rows",
                ),
                ParamSpec::new(
                    "early_stopping_patience",
                    ParamKind::Integer,
                    Some(Value::Null),
                    "stop after this many epochs without a better val accuracy; unset: never stop early",
                ),
                ParamSpec::new(
                    "log_every_n_steps",
                    ParamKind::Integer,
                    Some(json!(50)),
                    "a line of the `steps` curve every this many optimizer steps (and at the last step of each epoch)",
                )
                .at_least(1.0),
                ParamSpec::new(
                    "tf32",
                    ParamKind::Bool,
                    Some(json!(false)),
                    "under 32-true on a GPU, run fp32 matmuls on TF32 tensor cores (Ampere and newer: about 3x faster on Hopper, 10-bit mantissa in the products; torch.set_float32_matmul_precision(\"high\")); off by default, as in PyTorch. Refused on the CPU and with other precisions",
                ),
                ParamSpec::choice(
                    "precision",
                    precision::NAMES,
                    "numeric precision, as Lightning's: 32-true; bf16-mixed and 16-mixed (fp32 weights, forward under autocast; 16-mixed with dynamic loss scaling, GPU only); bf16-true (bf16 weights and optimizer). The checkpoint is always fp32",
                ),
                ParamSpec::choice(
                    "strategy",
                    STRATEGIES,
                    "single: one device; ddp: `devices` replicas, each on its shard of every batch, gradients summed before each step (the GPUs of `resources.gpus`, else CPU replicas for testing); deepspeed_stage_2: as ddp, with gradients reduce-scattered and AdamW's state sharded 1/N per replica (ZeRO stage 2); fsdp_shard_grad_op: as deepspeed_stage_2, and the parameters sharded between steps too (FSDP's SHARD_GRAD_OP); fsdp: full sharding (FSDP's FULL_SHARD, ZeRO-3): parameters, gradients and AdamW state 1/N per replica at all times, each layer's parameters gathered for its forward and again for its backward (recomputing its forward) and freed after",
                ),
                ParamSpec::new(
                    "devices",
                    ParamKind::Integer,
                    Some(json!(1)),
                    "replicas per node under ddp and the sharded strategies, one process each (1 under single); with GPUs, equal to the stage's `resources.gpus`",
                ),
                ParamSpec::new(
                    "num_nodes",
                    ParamKind::Integer,
                    Some(json!(1)),
                    "nodes the replicas span, `devices` on each (Lightning's `num_nodes`); above 1 only on Slurm, equal to the stage's `resources.nodes`",
                )
                .at_least(1.0),
                ParamSpec::choice(
                    "process_group_backend",
                    PROCESS_GROUP_BACKENDS,
                    "the torch.distributed backend between replicas: auto is NCCL between GPUs and Gloo between CPU replicas; gloo or nccl to choose (Lightning's `process_group_backend`)",
                ),
                ParamSpec::new(
                    "collective_timeout",
                    ParamKind::Integer,
                    Some(json!(60)),
                    "seconds a replica waits for the others (to start, or in a collective) before the run fails, naming the replica that stopped answering",
                )
                .at_least(1.0),
            ],
            outputs: vec![
                OutputSpec {
                    name: CHECKPOINT.into(),
                    kind: OutputKind::Dir,
                    doc: "the best epoch as a Hugging Face checkpoint: model.safetensors, config.json (with id2label), tokenizer files"
                        .into(),
                },
                OutputSpec {
                    name: CURVES.into(),
                    kind: OutputKind::File,
                    doc: "CSV, one line per epoch: epoch, train_loss, train_acc (over the epoch's training rows), val_loss, val_acc (after the epoch), epoch_seconds (its training steps), samples_per_s"
                        .into(),
                },
                OutputSpec {
                    name: STEPS.into(),
                    kind: OutputKind::File,
                    doc: "CSV, one line every `log_every_n_steps` optimizer steps and at the last step of each epoch: step, epoch, loss (mean since the line before), lr, samples_per_s"
                        .into(),
                },
            ],
            metrics: [
                "best_epoch",
                "val_acc",
                "val_loss",
                "epochs_run",
                "stopped_early",
                "peak_rss_mb",
                "train_seconds",
                "samples_per_s",
                "memory.params_bytes",
                "memory.grads_bytes",
                "memory.optimizer_bytes",
                "memory.peak_params_grads_bytes",
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
                "memory.peak_rss_bytes",
                "hardware.cpu",
                "hardware.cpus",
                "hardware.gpus",
                "hardware.libtorch",
                "epochs.<n>.train_loss",
                "epochs.<n>.train_acc",
                "epochs.<n>.val_loss",
                "epochs.<n>.val_acc",
                "epochs.<n>.epoch_seconds",
                "epochs.<n>.samples_per_s",
                "epochs.<n>.tokens_per_s",
            ]
            .iter()
            .map(|name| name.to_string())
            .collect(),
            devices_param: Some("devices".into()),
            nodes_param: Some("num_nodes".into()),
            reads_run: false,
        }
    }

    fn run(&self, context: &StageContext) -> Result<()> {
        let settings = Settings::read(context)?;
        let per_node = if settings.strategy == Strategy::Single {
            1
        } else {
            settings.devices
        };
        let environment: HashMap<String, String> = std::env::vars().collect();
        let role = distributed::role(per_node, settings.nodes, settings.timeout, &environment)
            .map_err(|problem| {
                StageError::input(
                format!("cannot tell this replica's place in the run: {problem}"),
                "under Slurm, give the stage `resources: {nodes: M, gpus: G}` with `devices: G`, \
                 and let pipe submit it; by hand, run one srun task per device",
            )
            })?;
        let devices = replica_devices(context, &settings)?;
        if settings.tf32 {
            if devices.contains(&Device::Cpu) {
                return Err(StageError::param(
                    "tf32",
                    "is true, but the stage trains on the CPU, which has no TF32",
                    "give the stage a GPU (`resources.gpus`), or leave tf32 out",
                ));
            }
            precision::allow_tf32().map_err(precision_error)?;
        }
        for &device in &devices {
            settings
                .precision
                .check_device(device)
                .map_err(precision_error)?;
        }
        match role {
            Role::Launcher => launch::run_ranks(context, devices.len(), settings.timeout),
            Role::Solo => train(context, &settings, &devices, None),
            Role::Rank(place) => train(context, &settings, &devices, Some(&place)),
        }
    }
}

/// Trains one replica: the only one (`place` None), or rank `place.rank`
/// of a process group. Rank 0 writes the outputs.
fn train(
    context: &StageContext,
    settings: &Settings,
    devices: &[Device],
    place: Option<&RankPlace>,
) -> Result<()> {
    let rank = place.map_or(0, |place| place.rendezvous.rank);
    let lead = rank == 0;
    if let Some(place) = place.filter(|place| place.launched_by == "srun" && !lead) {
        // Every srun task's stdout lands in the one event stream the
        // engine reads; only rank 0 speaks the protocol there. The
        // others' lines go to stderr, which reaches the stage log.
        pipe_stages::events_to_stderr(format!("[rank{}] ", place.rendezvous.rank));
    }
    let device = match place {
        None => devices[0],
        Some(place) => *devices.get(place.local_rank).ok_or_else(|| {
            StageError::Other(format!(
                "internal: local rank {} of {} devices",
                place.local_rank,
                devices.len()
            ))
        })?,
    };
    tch::set_num_threads(context.threads() as i32);
    let tokens = context.input("tokens")?;
    let train = open_split(&tokens, "train")?;
    let val = open_split(&tokens, "val")?;
    check_labels(&train, settings.num_labels)?;
    check_labels(&val, settings.num_labels)?;
    let pad = pad_id(&tokens.join(TOKENIZER_FILE))?;
    let collator = Collator::new(pad);

    let model_dir = context.input("model")?;
    // Seeds the head's fresh initialisation here and dropout below.
    tch::manual_seed(settings.seed as i64);
    let (model, report) =
        SequenceClassifier::from_pretrained(&model_dir, Some(settings.num_labels), device)?;
    check_lengths(&train, &model)?;
    check_lengths(&val, &model)?;
    check_pad_id(pad, &tokens, &model)?;
    // Every id of both splits and the pad are in the vocabulary.
    model.vouch_for_ids();
    if lead && !report.missing.is_empty() {
        context.message(format!(
            "initialised fresh (seed {}): {}",
            settings.seed,
            report.missing.join(", ")
        ));
    }
    let collective: Box<dyn Collective> = match place {
        None => Box::new(Solo),
        Some(place) => {
            let backend = settings.backend_for(device)?;
            let group = ProcessGroup::join(&place.rendezvous, backend).map_err(|error| {
                StageError::input(
                    format!(
                        "rank {} of {} could not join the others at {}:{}: {error}",
                        place.rendezvous.rank,
                        place.rendezvous.world_size,
                        place.rendezvous.host,
                        place.rendezvous.port
                    ),
                    "every rank must start within `collective_timeout` seconds; under Slurm, \
                         the first node must be reachable from the others on that port",
                )
            })?;
            // Every rank says so: a rank that fails later is then named
            // with a last line of its own.
            context.message(format!(
                "rank {} of {} joined over {} on {} ({} node{}, started by {})",
                place.rendezvous.rank,
                place.rendezvous.world_size,
                backend.name(),
                device_name(device),
                place.nodes,
                if place.nodes == 1 { "" } else { "s" },
                place.launched_by
            ));
            Box::new(group)
        }
    };
    let collective = collective.as_ref();
    let mut replica = Replica::create(settings, model, device, collective)?;

    let world = collective.world_size();
    let rows = limit(
        train.len(),
        settings.limit_train_samples.unwrap_or(usize::MAX),
        settings.seed,
    );
    let train_rows = rows.len();
    // One global batch per step of every replica together, cut into
    // equal shards (Lightning's batch_size is per device).
    let sampler = BucketSampler::subset(
        rows,
        &train.lengths(),
        settings.batch_size * world,
        settings.seed,
    )?
    .multiple_of(world);
    let steps_per_epoch = sampler.batches_per_epoch().div_ceil(settings.accumulate) as u64;
    let total_steps = steps_per_epoch * settings.epochs;
    let warmup_steps = (settings.warmup_ratio * total_steps as f64).ceil() as u64;
    if lead {
        context.message(format!(
                "training on {train_rows} rows ({} batches of {}, {steps_per_epoch} optimizer steps per epoch), \
                 validating on {} rows, {} on {} in {}",
                sampler.batches_per_epoch(),
                settings.batch_size * world,
                val.len(),
                replica.model.config.architecture.model_type(),
                describe_devices(settings.strategy, devices),
                settings.precision,
            ));
    }
    let peak = hardware::peak_flops(
        devices,
        settings.precision.compute_kind(),
        settings.tf32,
        context.threads(),
    );

    let mut best = BestEpoch::new(settings.patience, 0.0);
    let mut best_weights: Option<Snapshot> = None;
    let mut epochs: Vec<EpochStats> = Vec::new();
    let mut global_step = 0u64;
    let mut stopped_early = false;
    let mut step_curve = StepCurve::new(settings.log_every_n_steps);
    let loop_started = Instant::now();
    for epoch in 0..settings.epochs {
        let phase = format!("train epoch {}", epoch + 1);
        let started = Instant::now();
        if lead {
            context.progress(&phase, 0, Some(steps_per_epoch), UNIT);
        }
        let steps = accumulation_steps(sampler.epoch(epoch), settings.accumulate)?;
        let plan = EpochPlan {
            steps: &steps,
            first_step: global_step,
            total_steps,
            warmup_steps,
            settings,
            split: &train,
            collator: &collator,
            world,
        };
        // The running mean loss and the rate, beside the bar. Rank 0's
        // rows only: the other replicas' are added up at the epoch's end.
        let live = |totals: &TrainTotals, replicas: usize| {
            let seconds = started.elapsed().as_secs_f64().max(1e-9);
            format!(
                "loss {:.4}  {:.1} samples/s",
                totals.mean_loss().unwrap_or(f64::NAN),
                (totals.rows * replicas) as f64 / seconds
            )
        };
        let last_step = steps.len() as u64;
        let mut report = |done: &StepDone| -> Result<()> {
            step_curve.record(
                epoch + 1,
                plan.first_step + done.index,
                done,
                done.index == last_step,
            )?;
            context.progress_with(&phase, done.index, Some(steps_per_epoch), UNIT, || {
                Some(live(done.epoch, world))
            });
            Ok(())
        };
        let totals = replica_steps(
            &mut replica,
            &plan,
            collective,
            if lead { Some(&mut report) } else { None },
        )?;
        let totals = totals.summed(collective)?;
        global_step += steps.len() as u64;
        if lead {
            context.progress_done_with(&phase, steps_per_epoch, UNIT, Some(live(&totals, 1)));
        }
        let train_seconds = started.elapsed().as_secs_f64();
        if world > 1 {
            check_in_step(&replica, collective, epoch + 1)?;
        }

        // Every rank validates (no rank waits on rank 0 longer than a
        // collective may), and all take rank 0's figures, so that they
        // agree on the best epoch and on stopping.
        let validation = predict(
            &replica.model,
            &val,
            &collator,
            settings.batch_size,
            settings.precision.autocast_kind(),
            replica.device,
        )?;
        let (val_loss, val_acc) =
            rank0_pair(collective, validation.mean_loss(), validation.accuracy())?;
        let stats = EpochStats {
            epoch: epoch + 1,
            train_loss: totals.mean_loss()?,
            train_acc: totals.correct.value()? / totals.rows.max(1) as f64,
            val_loss,
            val_acc,
            epoch_seconds: train_seconds,
            val_seconds: started.elapsed().as_secs_f64() - train_seconds,
            rows: totals.rows,
            tokens: totals.tokens,
            padded_tokens: totals.padded_tokens,
            flops: totals.flops,
            steps: steps.len() as u64,
            samples_per_s: totals.rows as f64 / train_seconds.max(1e-9),
            tokens_per_s: totals.tokens as f64 / train_seconds.max(1e-9),
        };
        let verdict = best.record(epoch as u32 + 1, stats.val_acc);
        if verdict == EpochVerdict::Improved && lead {
            best_weights = Some(Snapshot::of(&replica.model.vs)?);
        }
        if lead {
            context.message(format!(
                "epoch {}/{}: train loss {:.4} acc {:.4}, val loss {:.4} acc {:.4}{}, {:.1} s, {:.1} samples/s, {:.0} tokens/s",
                stats.epoch,
                settings.epochs,
                stats.train_loss,
                stats.train_acc,
                stats.val_loss,
                stats.val_acc,
                if verdict == EpochVerdict::Improved { " (best)" } else { "" },
                stats.epoch_seconds,
                stats.samples_per_s,
                stats.tokens_per_s,
            ));
        }
        epochs.push(stats);
        if verdict == EpochVerdict::Stop {
            stopped_early = epoch + 1 < settings.epochs;
            if stopped_early && lead {
                context.message(format!(
                    "early stopping: no better val accuracy for {} epochs",
                    settings.patience.unwrap_or(0)
                ));
            }
            break;
        }
    }
    let train_seconds = loop_started.elapsed().as_secs_f64();
    // Memory: the most any replica held, each process's own peak.
    let memory = memory_json(&replica, collective)?;
    if !lead {
        return Ok(());
    }
    let model = &replica.model;

    let (Some((best_epoch, best_acc)), Some(weights)) = (best.best(), best_weights) else {
        return Err(StageError::Other(
            "internal: training ran no epoch".to_string(),
        ));
    };
    let checkpoint = context.output(CHECKPOINT);
    write_checkpoint(&checkpoint, &weights, model, &model_dir, &tokens)?;
    write_curves(&context.output(CURVES), &epochs)?;
    step_curve.write(&context.output(STEPS))?;

    let best_stats = &epochs[best_epoch as usize - 1];
    let mut per_epoch = Map::new();
    for stats in &epochs {
        per_epoch.insert(stats.epoch.to_string(), stats.to_json());
    }
    context.write_metrics(&json!({
        "best_epoch": best_epoch,
        "val_acc": best_acc,
        "val_loss": best_stats.val_loss,
        "epochs_run": epochs.len(),
        "stopped_early": stopped_early,
        "train_rows": train_rows,
        "optimizer_steps": global_step,
        "precision": settings.precision.name(),
        "tf32": settings.tf32,
        "skipped_steps": replica.scaler.as_ref().map_or(0, LossScaler::skipped_steps),
        "strategy": settings.strategy.name(),
        "devices": devices.iter().map(|device| device_name(*device)).collect::<Vec<_>>(),
        "peak_rss_mb": peak_rss_mb(),
        "train_seconds": round3(train_seconds),
        "samples_per_s": round3(
            epochs.iter().map(|stats| stats.rows as f64).sum::<f64>()
                / epochs.iter().map(|stats| stats.epoch_seconds).sum::<f64>().max(1e-9)
        ),
        "hardware": hardware::describe(devices),
        "memory": memory,
        "throughput": throughput_json(&epochs, &replica, world, &peak),
        "epochs": per_epoch,
    }))?;
    Ok(())
}

/// Rank 0's two figures on every rank.
fn rank0_pair(collective: &dyn Collective, a: f64, b: f64) -> Result<(f64, f64)> {
    if collective.world_size() == 1 {
        return Ok((a, b));
    }
    let mut pair = Tensor::from_slice(&[a, b]);
    collective
        .broadcast(0, &mut pair)
        .map_err(collective_error)?;
    let values = Vec::<f64>::try_from(&pair).map_err(torch)?;
    Ok((values[0], values[1]))
}

struct Settings {
    num_labels: i64,
    epochs: u64,
    batch_size: usize,
    lr: f64,
    weight_decay: f64,
    warmup_ratio: f64,
    accumulate: usize,
    clip: Option<f64>,
    seed: u64,
    limit_train_samples: Option<usize>,
    patience: Option<u32>,
    log_every_n_steps: u64,
    precision: Precision,
    tf32: bool,
    strategy: Strategy,
    devices: usize,
    nodes: usize,
    backend: Option<c10d::Backend>,
    /// How long a replica waits for the others (`collective_timeout`).
    timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    Single,
    Ddp,
    DeepSpeedStage2,
    FsdpShardGradOp,
    Fsdp,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Single => "single",
            Strategy::Ddp => "ddp",
            Strategy::DeepSpeedStage2 => "deepspeed_stage_2",
            Strategy::FsdpShardGradOp => "fsdp_shard_grad_op",
            Strategy::Fsdp => "fsdp",
        }
    }

    fn sharding(self) -> Option<Sharding> {
        match self {
            Strategy::Single | Strategy::Ddp | Strategy::Fsdp => None,
            Strategy::DeepSpeedStage2 => Some(Sharding::Zero2),
            Strategy::FsdpShardGradOp => Some(Sharding::ShardGradOp),
        }
    }
}

impl Settings {
    fn read(context: &StageContext) -> Result<Settings> {
        let at_least_one = |name: &str, hint: &str| -> Result<u64> {
            let value = context.u64(name)?;
            if value == 0 {
                return Err(StageError::param(name, "must be at least 1", hint));
            }
            Ok(value)
        };
        let num_labels = context.u64("num_labels")?;
        if num_labels < 2 {
            return Err(StageError::param(
                "num_labels",
                format!("is {num_labels}; a classifier needs at least 2 classes"),
                "2 for binary sentiment",
            ));
        }
        let number = |name: &str, low: f64, high: f64, hint: &str| -> Result<f64> {
            let value = context.f64(name)?;
            if !(low..=high).contains(&value) {
                return Err(StageError::param(
                    name,
                    format!("is {value}, outside {low}..={high}"),
                    hint,
                ));
            }
            Ok(value)
        };
        let lr = number("lr", 0.0, 1.0, "5e-5 is usual for fine-tuning BERT")?;
        if lr == 0.0 {
            return Err(StageError::param("lr", "must be above 0", "5e-5 is usual"));
        }
        let clip = match context.value("gradient_clip_val")? {
            Value::Null => None,
            _ => Some(number(
                "gradient_clip_val",
                f64::MIN_POSITIVE,
                f64::MAX,
                "1.0 is usual; leave it out for no clipping",
            )?),
        };
        let patience = match context.opt_u64("early_stopping_patience")? {
            None => None,
            Some(0) => {
                return Err(StageError::param(
                    "early_stopping_patience",
                    "must be at least 1",
                    "leave it out to never stop early",
                ))
            }
            Some(patience) => Some(u32::try_from(patience).unwrap_or(u32::MAX)),
        };
        let settings = Settings {
            num_labels: num_labels as i64,
            epochs: at_least_one("epochs", "3 is usual for fine-tuning")?,
            batch_size: at_least_one("batch_size", "12 to 32 is usual")? as usize,
            lr,
            weight_decay: number("weight_decay", 0.0, 1.0, "0.01 is usual")?,
            warmup_ratio: number("warmup_ratio", 0.0, 1.0, "0.0 or 0.1 are usual")?,
            accumulate: at_least_one("accumulate_grad_batches", "1 means no accumulation")?
                as usize,
            clip,
            seed: context.opt_u64("seed")?.unwrap_or(0),
            limit_train_samples: context.opt_u64("limit_train_samples")?.map(|n| n as usize),
            patience,
            log_every_n_steps: at_least_one("log_every_n_steps", "50 is usual; 1 logs every step")?,
            tf32: context.bool("tf32")?,
            strategy: match context.str("strategy")? {
                "single" => Strategy::Single,
                "ddp" => Strategy::Ddp,
                "deepspeed_stage_2" => Strategy::DeepSpeedStage2,
                "fsdp_shard_grad_op" => Strategy::FsdpShardGradOp,
                "fsdp" => Strategy::Fsdp,
                // A Choice param the engine has checked; this guards the day
                // a choice is added to the list before the code handles it.
                other => {
                    return Err(StageError::param(
                        "strategy",
                        format!("`{other}` is not implemented"),
                        format!("use one of {}", STRATEGIES.join(", ")),
                    ))
                }
            },
            devices: at_least_one(
                "devices",
                "1 for one device; N for ddp or a sharded strategy on N devices",
            )? as usize,
            nodes: at_least_one(
                "num_nodes",
                "1 for one machine; M with `resources.nodes: M` on Slurm",
            )? as usize,
            backend: match context.str("process_group_backend")? {
                "gloo" => Some(c10d::Backend::Gloo),
                "nccl" => Some(c10d::Backend::Nccl),
                _ => None,
            },
            timeout: Duration::from_secs(at_least_one(
                "collective_timeout",
                "60 is the default; raise it for slow shared file systems",
            )?),
            precision: {
                let name = context.str("precision")?;
                Precision::parse(name).ok_or_else(|| {
                    StageError::param(
                        "precision",
                        format!("`{name}` is not implemented"),
                        format!("use one of {}", precision::NAMES.join(", ")),
                    )
                })?
            },
        };
        if settings.strategy == Strategy::Single && settings.nodes != 1 {
            return Err(StageError::param(
                "num_nodes",
                format!(
                    "is {}, but strategy `single` trains on one device",
                    settings.nodes
                ),
                "use `strategy: ddp` (or a sharded strategy) to train across nodes",
            ));
        }
        if settings.limit_train_samples == Some(0) {
            return Err(StageError::param(
                "limit_train_samples",
                "must be at least 1",
                "leave it out to train on every row",
            ));
        }
        if settings.tf32 && settings.precision != Precision::Fp32 {
            return Err(StageError::param(
                "tf32",
                format!(
                    "is true, but TF32 is a mode of fp32 matmuls and the precision is {}",
                    settings.precision
                ),
                "set `precision: 32-true`, or leave tf32 out",
            ));
        }
        if settings.strategy == Strategy::Single && settings.devices != 1 {
            return Err(StageError::param(
                "devices",
                format!(
                    "is {}, but strategy `single` trains on one device",
                    settings.devices
                ),
                format!(
                    "use `strategy: ddp` to train on {} devices, or `devices: 1`",
                    settings.devices
                ),
            ));
        }
        Ok(settings)
    }
}

impl Settings {
    /// The process group's backend on `device`: NCCL between GPUs and Gloo
    /// between CPU replicas unless `process_group_backend` says otherwise.
    fn backend_for(&self, device: Device) -> Result<c10d::Backend> {
        match (self.backend, device) {
            (Some(c10d::Backend::Nccl), Device::Cpu) => Err(StageError::param(
                "process_group_backend",
                "is nccl, but the replicas are on the CPU; NCCL moves CUDA tensors only",
                "leave it at auto (Gloo on CPUs), or give the stage GPUs with `resources.gpus`",
            )),
            (Some(backend), _) => Ok(backend),
            (None, Device::Cuda(_)) => Ok(c10d::Backend::Nccl),
            (None, _) => Ok(c10d::Backend::Gloo),
        }
    }
}

/// AdamW as Hugging Face's Trainer sets it up: no weight decay on biases
/// and LayerNorm weights (names as the Trainer's
/// `get_decay_parameter_names`), betas 0.9/0.999, eps 1e-8; fused
/// (`crate::optim`). Parameters in the store's creation order.
fn adamw(vs: &VarStore, lr: f64, weight_decay: f64) -> Result<AdamW> {
    let (mut decayed, mut undecayed) = (Vec::new(), Vec::new());
    for (tensor, decays) in decay_flags(vs)? {
        if decays {
            decayed.push(tensor);
        } else {
            undecayed.push(tensor);
        }
    }
    Ok(AdamW::new(
        vec![(decayed, weight_decay), (undecayed, 0.0)],
        lr,
        ADAM_BETAS.0,
        ADAM_BETAS.1,
        ADAM_BETAS.2,
    ))
}

/// AdamW's betas and eps, as Hugging Face's Trainer has them.
const ADAM_BETAS: (f64, f64, f64) = (0.9, 0.999, 1e-8);

/// The trainable variables in creation order, each with whether weight
/// decay applies to it (not to biases and LayerNorm weights).
fn decay_flags(vs: &VarStore) -> Result<Vec<(Tensor, bool)>> {
    let no_decay = |name: &str| {
        name.ends_with("bias") || name.contains("LayerNorm") || name.contains("layer_norm")
    };
    let variables = vs
        .variables_
        .lock()
        .map_err(|_| StageError::Other("internal: the var store lock is poisoned".into()))?;
    let exempt: HashSet<usize> = variables
        .named_variables
        .iter()
        .filter(|(name, _)| no_decay(name))
        .map(|(_, tensor)| tensor.data_ptr() as usize)
        .collect();
    Ok(variables
        .trainable_variables
        .iter()
        .map(|var| {
            let decays = !exempt.contains(&(var.tensor.data_ptr() as usize));
            (var.tensor.shallow_clone(), decays)
        })
        .collect())
}

fn optim_error(error: OptimError) -> StageError {
    match error {
        OptimError::Torch(error) => torch(error),
        other => StageError::Other(other.to_string()),
    }
}

/// The devices of the replicas, rank order: one under `single` (the
/// engine's GPU, else the CPU); under `ddp`, the engine's GPUs, which must
/// number `devices`, or `devices` CPU replicas when it gave none.
fn replica_devices(context: &StageContext, settings: &Settings) -> Result<Vec<Device>> {
    if settings.strategy == Strategy::Single {
        return Ok(vec![device(context)?]);
    }
    let wanted = settings.devices;
    let given = &context.invocation.devices;
    if given.is_empty() {
        return Ok(vec![Device::Cpu; wanted]);
    }
    if given.len() != wanted {
        return Err(StageError::param(
            "devices",
            format!(
                "is {wanted}, but the stage was given {} GPU{} ({})",
                given.len(),
                if given.len() == 1 { "" } else { "s" },
                given.join(", ")
            ),
            format!("set the stage's `resources.gpus` and `devices` to the same number ({wanted} or {})", given.len()),
        ));
    }
    if !tch::Cuda::is_available() {
        return Err(StageError::input(
            format!(
                "the stage was given GPUs {} but libtorch sees no CUDA device: {}",
                given.join(", "),
                hardware::why_no_cuda()
            ),
            "check the NVIDIA driver (nvidia-smi) and that the worker was built against a CUDA libtorch; \
             or drop `resources.gpus` to train CPU replicas",
        ));
    }
    let visible = usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
    let distinct_given = given.iter().collect::<HashSet<_>>().len();
    if visible < distinct_given {
        return Err(StageError::param(
            "devices",
            format!("is {wanted}, but libtorch sees only {visible} CUDA device(s)"),
            format!("use `devices: {visible}` (and `resources.gpus: {visible}`), or check CUDA_VISIBLE_DEVICES"),
        ));
    }
    // The engine sets CUDA_VISIBLE_DEVICES to the GPUs it gave, so they
    // are cuda:0..N-1 here whatever their numbers on the machine. A GPU
    // named twice (the tests and scripts/gpu-check.sh do it; the engine
    // never does) puts two replicas on it.
    let mut distinct: Vec<&String> = Vec::new();
    let mut indices = Vec::with_capacity(wanted);
    for gpu in given {
        let index = match distinct.iter().position(|seen| *seen == gpu) {
            Some(index) => index,
            None => {
                distinct.push(gpu);
                distinct.len() - 1
            }
        };
        indices.push(index);
    }
    Ok(indices.into_iter().map(Device::Cuda).collect())
}

fn device_name(device: Device) -> String {
    match device {
        Device::Cuda(index) => format!("cuda:{index}"),
        Device::Mps => "mps".to_string(),
        Device::Vulkan => "vulkan".to_string(),
        Device::Cpu => "cpu".to_string(),
    }
}

fn describe_devices(strategy: Strategy, devices: &[Device]) -> String {
    match (strategy, devices) {
        (Strategy::Single, [device]) => device_name(*device),
        _ if devices.iter().all(|device| *device == Device::Cpu) => format!(
            "{} over {} CPU replicas (one process each; give the stage GPUs with `resources.gpus`)",
            strategy.name(),
            devices.len()
        ),
        _ => format!(
            "{} over {}",
            strategy.name(),
            devices
                .iter()
                .map(|device| device_name(*device))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// One data-parallel copy of the model with its own optimizer state. Under
/// `single` there is one, and no buckets.
struct Replica {
    rank: usize,
    device: Device,
    model: SequenceClassifier,
    updater: Updater,
    scaler: Option<LossScaler>,
    /// What the replica held after its first optimizer step.
    memory: Option<MemoryUse>,
    /// The most parameter and gradient bytes it held at once during its
    /// first optimizer step (see `Replica::peak_bytes`).
    peak_bytes: usize,
    /// Where its steps' time went.
    phases: PhaseTimes,
}

/// How a replica turns its gradients into an update.
enum Updater {
    /// `single` and `ddp`: the whole optimizer state on every replica, and
    /// under ddp the gradients all-reduced in buckets.
    Replicated {
        optimizer: AdamW,
        buckets: Option<GradientBuckets>,
        /// Between processes: the buckets' all-reduces started from
        /// backward's hooks, overlapping the rest of backward, as DDP's.
        reducer: Option<Reducer>,
    },
    /// `deepspeed_stage_2`, `fsdp_shard_grad_op` (see `crate::shard`).
    Sharded(ShardedOptimizer),
    /// `fsdp` (see `crate::fsdp`): the forward and backward too.
    FullyShard(FullShard),
}

impl Replica {
    /// The replica of this process around its loaded `model`. Every
    /// replica starts from rank 0's weights, fresh head included, as DDP
    /// broadcasts them at construction.
    fn create(
        settings: &Settings,
        mut model: SequenceClassifier,
        device: Device,
        collective: &dyn Collective,
    ) -> Result<Replica> {
        let (rank, world) = (collective.rank(), collective.world_size());
        if world > 1 {
            tch::no_grad(|| -> Result<()> {
                for mut variable in named_variables(&model.vs).into_iter().map(|(_, v)| v) {
                    collective
                        .broadcast(0, &mut variable)
                        .map_err(collective_error)?;
                }
                Ok(())
            })?;
        }
        // Each replica its own masks: the same ones on every replica would
        // correlate the shards' dropout.
        model.seed_dropout(settings.seed ^ (rank as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))?;
        if settings.precision.weight_kind() == Kind::BFloat16 {
            // Before the optimizer exists, so that its state is bf16 too. In
            // place (set_data): the store's variables stay the same tensors,
            // which the optimizer and the no-decay groups rely on.
            model.vs.bfloat16();
        }
        let updater = match settings.strategy.sharding() {
            None if settings.strategy == Strategy::Fsdp => Updater::FullyShard(
                FullShard::new(
                    fsdp::units_of(&model, decay_flags(&model.vs)?).map_err(fsdp_error)?,
                    rank,
                    world,
                    settings.lr,
                    settings.weight_decay,
                    ADAM_BETAS,
                )
                .map_err(fsdp_error)?,
            ),
            None => {
                let buckets = (world > 1).then(|| {
                    GradientBuckets::new(
                        &model.vs.trainable_variables(),
                        GradientBuckets::DEFAULT_CAP_BYTES,
                    )
                });
                let reducer = match (&buckets, collective.as_process_group()) {
                    (Some(buckets), Some(group)) => {
                        Some(Reducer::new(group, buckets).map_err(collective_error)?)
                    }
                    _ => None,
                };
                Updater::Replicated {
                    optimizer: adamw(&model.vs, settings.lr, settings.weight_decay)?,
                    buckets,
                    reducer,
                }
            }
            Some(sharding) => Updater::Sharded(
                ShardedOptimizer::new(
                    &decay_flags(&model.vs)?,
                    rank,
                    world,
                    sharding,
                    GradientBuckets::DEFAULT_CAP_BYTES,
                    settings.lr,
                    settings.weight_decay,
                    ADAM_BETAS,
                )
                .map_err(shard_error)?,
            ),
        };
        Ok(Replica {
            rank,
            device,
            model,
            updater,
            scaler: (settings.precision == Precision::Fp16Mixed).then(LossScaler::default),
            memory: None,
            peak_bytes: 0,
            phases: PhaseTimes::default(),
        })
    }

    /// What this replica holds now, between steps.
    fn memory_now(&self) -> MemoryUse {
        match &self.updater {
            Updater::Replicated { optimizer, .. } => {
                let (params_bytes, grads_bytes) =
                    variable_bytes(&self.model.vs.trainable_variables());
                MemoryUse {
                    params_bytes,
                    grads_bytes,
                    optimizer_bytes: optimizer.state_bytes(),
                }
            }
            Updater::Sharded(sharded) => sharded.memory(),
            Updater::FullyShard(full) => full.memory(),
        }
    }

    /// The most parameter and gradient bytes held at once during the first
    /// optimizer step: under `fsdp` measured unit by unit; otherwise what
    /// the replica holds after a micro-batch's backward (every parameter
    /// and gradient, and the shards), sampled after each.
    fn peak_bytes(&self) -> usize {
        match &self.updater {
            Updater::FullyShard(full) => full.peak_bytes(),
            _ => self.peak_bytes,
        }
    }
}

/// Every variable by name, sorted: the same order on every replica.
fn named_variables(vs: &VarStore) -> Vec<(String, Tensor)> {
    let mut variables: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    variables.sort_by(|a, b| a.0.cmp(&b.0));
    variables
}

fn shard_error(error: ShardError) -> StageError {
    match error {
        ShardError::Collective(error) => collective_error(error),
        ShardError::Optim(error) => optim_error(error),
        ShardError::Torch(error) => torch(error),
        other => StageError::Other(other.to_string()),
    }
}

fn fsdp_error(error: FsdpError) -> StageError {
    match error {
        FsdpError::Shard(error) => shard_error(error),
        FsdpError::Model(error) => error.into(),
        FsdpError::Precision(error) => precision_error(error),
        FsdpError::Internal(message) => StageError::Other(format!("internal: {message}")),
    }
}

fn collective_error(error: CollectiveError) -> StageError {
    match error {
        CollectiveError::Torch(error) => torch(error),
        CollectiveError::Backend(message) => StageError::input(
            format!("torch.distributed: {message}"),
            crate::launch::PEER_FAILURE_HINT,
        ),
        CollectiveError::Shape(_) => StageError::Other(error.to_string()),
    }
}

/// One epoch's optimizer steps, the same on every replica.
struct EpochPlan<'a> {
    /// Each step's micro-batches, as global batches (all replicas' rows).
    steps: &'a [Vec<Vec<usize>>],
    first_step: u64,
    total_steps: u64,
    warmup_steps: u64,
    settings: &'a Settings,
    split: &'a TokenizedSplit,
    collator: &'a Collator,
    world: usize,
}

/// What rank 0 tells after each optimizer step.
struct StepDone<'a> {
    /// 1-based, within the epoch.
    index: u64,
    /// The learning rate the step used.
    lr: f64,
    /// The step's rows on every replica.
    rows: usize,
    /// The step's time on rank 0, from collating its first micro-batch to
    /// the optimizer's update (after the all-reduce, so every replica's).
    seconds: f64,
    /// Rank 0's rows and loss in this step.
    step: &'a TrainTotals,
    /// Rank 0's totals so far this epoch.
    epoch: &'a TrainTotals,
}

/// Called by rank 0 after each step.
type StepReport<'a> = &'a mut dyn FnMut(&StepDone) -> Result<()>;

/// The steps of one epoch on one replica: its shard of each micro-batch
/// forward and backward, the gradients summed across replicas, then
/// unscale (16-mixed), clip and step, which every replica does alike.
fn replica_steps(
    replica: &mut Replica,
    plan: &EpochPlan,
    collective: &dyn Collective,
    mut report: Option<StepReport>,
) -> Result<TrainTotals> {
    let settings = plan.settings;
    let autocast = settings.precision.autocast_kind();
    let mut totals = TrainTotals::default();
    for (index, step) in plan.steps.iter().enumerate() {
        let step_started = Instant::now();
        let global_step = plan.first_step + index as u64;
        // Phases are timed on every CPU step; on a GPU only on every
        // PHASE_SAMPLE-th, because timing one needs a device sync per phase.
        let timed = replica.device == Device::Cpu || global_step.is_multiple_of(PHASE_SAMPLE);
        let mut clock = PhaseClock::new(replica.device, timed);
        let scale = linear_warmup_decay(global_step, plan.warmup_steps, plan.total_steps);
        let lr = settings.lr * scale;
        let mut step_totals = TrainTotals::default();
        match &mut replica.updater {
            Updater::Replicated { optimizer, .. } => {
                optimizer.set_lr(lr);
                optimizer.zero_grad().map_err(optim_error)?;
            }
            Updater::Sharded(sharded) => {
                sharded.set_lr(lr);
                // Gathers the parameters sharded at rest (fsdp_shard_grad_op).
                sharded.materialize(collective).map_err(shard_error)?;
                clock.lap(Phase::Collective);
            }
            Updater::FullyShard(full) => {
                full.set_lr(lr);
                full.begin_step().map_err(fsdp_error)?;
            }
        }
        let sizes: Vec<usize> = step.iter().map(Vec::len).collect();
        for (micro, (rows, weight)) in step.iter().zip(micro_batch_weights(&sizes)).enumerate() {
            let batch = if plan.world == 1 {
                plan.collator.collate(plan.split, rows)?
            } else {
                plan.collator
                    .collate_shards(plan.split, rows, plan.world)?
                    .swap_remove(replica.rank)
            };
            let loss_scale = replica.scaler.as_ref().map_or(1.0, LossScaler::scale);
            clock.lap(Phase::Other);
            // Each shard's mean loss over the world size: summed across
            // replicas, the gradient of the mean over the global batch.
            let weight = weight * loss_scale / plan.world as f64;
            if micro + 1 == sizes.len() {
                // The step's last backward: its gradients are summed as
                // backward produces them (DDP's `no_sync` before it).
                if let Updater::Replicated {
                    reducer: Some(reducer),
                    ..
                } = &mut replica.updater
                {
                    reducer.arm().map_err(collective_error)?;
                }
            }
            step_totals.add(&match &mut replica.updater {
                Updater::FullyShard(full) => fsdp_micro_batch(
                    &replica.model,
                    full,
                    collective,
                    &batch,
                    weight,
                    autocast,
                    replica.device,
                    &mut clock,
                )?,
                _ => train_micro_batch(
                    &replica.model,
                    &batch,
                    weight,
                    autocast,
                    replica.device,
                    &mut clock,
                )?,
            })?;
            if replica.memory.is_none() {
                replica.peak_bytes = replica.peak_bytes.max({
                    let held = replica.memory_now();
                    held.params_bytes + held.grads_bytes
                });
            }
        }
        let step_ok = match &mut replica.updater {
            Updater::Replicated {
                optimizer,
                buckets,
                reducer,
            } => {
                match (reducer.as_mut(), buckets.as_ref()) {
                    (Some(reducer), _) => {
                        reducer.finish().map_err(collective_error)?;
                    }
                    (None, Some(buckets)) => buckets
                        .all_reduce_sum(collective)
                        .map_err(collective_error)?,
                    (None, None) => {}
                }
                clock.lap(Phase::Collective);
                // The scaler unscales before clipping so that the clip
                // threshold applies to the true gradients, as GradScaler
                // users must do by hand. After the all-reduce, every replica
                // sees the same gradients and so makes the same overflow
                // decision.
                let step_ok = match replica.scaler.as_mut() {
                    Some(scaler) => {
                        let overflow = scaler
                            .unscale(&replica.model.vs.trainable_variables())
                            .map_err(torch)?;
                        scaler.update(overflow)
                    }
                    None => true,
                };
                if step_ok {
                    if let Some(max_norm) = settings.clip {
                        let _norm = optimizer.clip_grad_norm(max_norm).map_err(optim_error)?;
                    }
                    optimizer.step().map_err(optim_error)?;
                }
                clock.lap(Phase::Optimizer);
                step_ok
            }
            Updater::Sharded(sharded) => {
                sharded.reduce_gradients(collective).map_err(shard_error)?;
                clock.lap(Phase::Collective);
                // The overflow flag is all-reduced, so every replica skips
                // or steps alike although each saw only its shard.
                let step_ok = match replica.scaler.as_mut() {
                    Some(scaler) => {
                        let overflow = sharded.unscale(scaler, collective).map_err(shard_error)?;
                        scaler.update(overflow)
                    }
                    None => true,
                };
                if step_ok {
                    if let Some(max_norm) = settings.clip {
                        let _norm = sharded
                            .clip_grad_norm(max_norm, collective)
                            .map_err(shard_error)?;
                    }
                    sharded.step().map_err(shard_error)?;
                }
                clock.lap(Phase::Optimizer);
                sharded.settle(collective).map_err(shard_error)?;
                clock.lap(Phase::Collective);
                step_ok
            }
            // The gradients were reduce-scattered unit by unit in backward,
            // and the updated shards stay sharded.
            Updater::FullyShard(full) => {
                let step_ok = match replica.scaler.as_mut() {
                    Some(scaler) => {
                        let overflow = full.unscale(scaler, collective).map_err(fsdp_error)?;
                        scaler.update(overflow)
                    }
                    None => true,
                };
                if step_ok {
                    if let Some(max_norm) = settings.clip {
                        let _norm = full
                            .clip_grad_norm(max_norm, collective)
                            .map_err(fsdp_error)?;
                    }
                    full.step().map_err(fsdp_error)?;
                }
                clock.lap(Phase::Optimizer);
                step_ok
            }
        };
        let _ = step_ok;
        if replica.memory.is_none() {
            replica.memory = Some(replica.memory_now());
        }
        replica
            .phases
            .add(&clock, step_started.elapsed().as_secs_f64());
        totals.add(&step_totals)?;
        if let Some(report) = report.as_mut() {
            report(&StepDone {
                index: index as u64 + 1,
                lr,
                rows: sizes.iter().sum(),
                seconds: step_started.elapsed().as_secs_f64(),
                step: &step_totals,
                epoch: &totals,
            })?;
        }
    }
    // Validation and the checkpoint read rank 0's full parameters.
    match &mut replica.updater {
        Updater::Sharded(sharded) => sharded.materialize(collective).map_err(shard_error)?,
        Updater::FullyShard(full) => full.materialize(collective).map_err(fsdp_error)?,
        Updater::Replicated { .. } => {}
    }
    Ok(totals)
}

/// DDP's promise, checked: after an epoch every replica holds rank 0's
/// weights bit for bit. Each rank hashes its weights' bytes and the
/// smallest and largest hash over the ranks must agree. A difference is a
/// bug, not a numeric effect.
fn check_in_step(replica: &Replica, collective: &dyn Collective, epoch: u64) -> Result<()> {
    let mut hasher = blake3::Hasher::new();
    for (name, tensor) in named_variables(&replica.model.vs) {
        hasher.update(name.as_bytes());
        hasher.update(&host_bytes(&tensor)?);
    }
    let digest = hasher.finalize();
    // Four 16-bit pieces of the hash, and their negations: one all-reduce
    // (max) gives every piece's maximum and minimum over the ranks.
    let pieces: Vec<i64> = digest.as_bytes()[..8]
        .chunks(2)
        .map(|pair| i64::from(u16::from_le_bytes([pair[0], pair[1]])))
        .collect();
    let mut both: Vec<i64> = pieces.clone();
    both.extend(pieces.iter().map(|piece| -piece));
    let mut extremes = Tensor::from_slice(&both);
    collective
        .all_reduce_max(&mut extremes)
        .map_err(collective_error)?;
    let extremes = Vec::<i64>::try_from(&extremes).map_err(torch)?;
    let (highest, lowest) = extremes.split_at(pieces.len());
    if highest.iter().zip(lowest).any(|(high, low)| *high != -*low) {
        return Err(StageError::Other(format!(
            "internal: after epoch {epoch} the replicas no longer hold the same weights (rank {} sees a difference)",
            replica.rank
        )));
    }
    Ok(())
}

fn host_bytes(tensor: &Tensor) -> Result<Vec<u8>> {
    let host = tensor
        .f_detach()
        .and_then(|t| t.f_to_device(Device::Cpu))
        .and_then(|t| t.f_contiguous())
        .map_err(torch)?;
    let numel = host.numel();
    let mut bytes = vec![0u8; numel * host.kind().elt_size_in_bytes()];
    host.f_copy_data_u8(&mut bytes, numel).map_err(torch)?;
    Ok(bytes)
}

#[derive(Default)]
struct TrainTotals {
    rows: usize,
    tokens: usize,
    /// Positions computed, padding included.
    padded_tokens: usize,
    /// Model FLOPs of forward and backward (`SequenceClassifier::train_flops`).
    flops: f64,
    correct: LazySum,
    loss_sum: LazySum,
}

impl TrainTotals {
    fn add(&mut self, other: &TrainTotals) -> Result<()> {
        self.rows += other.rows;
        self.tokens += other.tokens;
        self.padded_tokens += other.padded_tokens;
        self.flops += other.flops;
        self.correct.add(&other.correct)?;
        self.loss_sum.add(&other.loss_sum)?;
        Ok(())
    }

    fn mean_loss(&self) -> Result<f64> {
        Ok(self.loss_sum.value()? / self.rows.max(1) as f64)
    }

    /// Every rank's totals added up, on every rank.
    fn summed(self, collective: &dyn Collective) -> Result<TrainTotals> {
        if collective.world_size() == 1 {
            return Ok(self);
        }
        let mut all = Tensor::from_slice(&[
            self.rows as f64,
            self.tokens as f64,
            self.padded_tokens as f64,
            self.flops,
            self.correct.value()?,
            self.loss_sum.value()?,
        ]);
        collective
            .all_reduce_sum(&mut all)
            .map_err(collective_error)?;
        let all = Vec::<f64>::try_from(&all).map_err(torch)?;
        Ok(TrainTotals {
            rows: all[0].round() as usize,
            tokens: all[1].round() as usize,
            padded_tokens: all[2].round() as usize,
            flops: all[3],
            correct: LazySum {
                host: all[4],
                device: None,
            },
            loss_sum: LazySum {
                host: all[5],
                device: None,
            },
        })
    }
}

/// A sum of per-micro-batch values (loss, correct predictions) kept on the
/// device until someone reads it: reading a GPU value waits for the GPU,
/// and the loop used to do it twice per micro-batch. Read when a step
/// line, a progress line or an epoch's stats need it.
#[derive(Default)]
struct LazySum {
    host: f64,
    /// A 0-dim f64 tensor on the device, not yet added into `host`.
    device: Option<Tensor>,
}

impl LazySum {
    fn of(value: Tensor) -> LazySum {
        LazySum {
            host: 0.0,
            device: Some(value),
        }
    }

    fn add(&mut self, other: &LazySum) -> Result<()> {
        self.host += other.host;
        let Some(theirs) = &other.device else {
            return Ok(());
        };
        self.device = Some(match self.device.take() {
            // Replicas on different devices add up on the host.
            Some(ours) if ours.device() != theirs.device() => {
                self.host += ours.f_double_value(&[]).map_err(torch)?;
                theirs.shallow_clone()
            }
            Some(ours) => ours.f_add(theirs).map_err(torch)?,
            None => theirs.shallow_clone(),
        });
        Ok(())
    }

    fn value(&self) -> Result<f64> {
        Ok(self.host
            + match &self.device {
                Some(tensor) => tensor.f_double_value(&[]).map_err(torch)?,
                None => 0.0,
            })
    }
}

/// Forward with dropout and backward of one micro-batch; its mean loss is
/// scaled by `weight` so that the step's accumulated gradient is that of the
/// mean over all the step's rows (times the loss scale under 16-mixed).
/// With `autocast` the forward and loss run under it and backward after it,
/// as PyTorch's AMP recipe has it.
fn train_micro_batch(
    model: &SequenceClassifier,
    batch: &Batch,
    weight: f64,
    autocast: Option<Kind>,
    device: Device,
    clock: &mut PhaseClock,
) -> Result<TrainTotals> {
    let (ids, mask, labels) = batch_tensors(batch, device)?;
    let (logits, loss) = {
        let _autocast = autocast
            .map(|kind| AutocastGuard::new(device, kind))
            .transpose()
            .map_err(precision_error)?;
        let logits = model.forward_t(&ids, mask.as_ref(), None, true)?;
        let loss = logits
            .f_cross_entropy_loss::<Tensor>(&labels, None, Reduction::Mean, -100, 0.0)
            .map_err(torch)?;
        (logits, loss)
    };
    clock.lap(Phase::Forward);
    loss.f_mul_scalar(weight)
        .and_then(|scaled| scaled.f_backward())
        .map_err(torch)?;
    clock.lap(Phase::Backward);
    micro_batch_totals(model, batch, &logits, &loss, &labels, clock)
}

/// [`train_micro_batch`] under `fsdp`: the same loss and gradients,
/// computed unit by unit with the parameters gathered and freed around
/// each unit (`crate::fsdp::forward_backward`).
#[allow(clippy::too_many_arguments)]
fn fsdp_micro_batch(
    model: &SequenceClassifier,
    full: &mut FullShard,
    collective: &dyn Collective,
    batch: &Batch,
    weight: f64,
    autocast: Option<Kind>,
    device: Device,
    clock: &mut PhaseClock,
) -> Result<TrainTotals> {
    let (ids, mask, labels) = batch_tensors(batch, device)?;
    let input = model.prepare(&ids, mask.as_ref(), None)?;
    let (logits, loss) = fsdp::forward_backward(
        model,
        full,
        collective,
        &input,
        &labels,
        weight,
        autocast.map(|kind| (device, kind)),
        &mut |phase| {
            clock.lap(match phase {
                fsdp::Phase::Forward => Phase::Forward,
                fsdp::Phase::Backward => Phase::Backward,
                fsdp::Phase::Collective => Phase::Collective,
            })
        },
    )
    .map_err(fsdp_error)?;
    micro_batch_totals(model, batch, &logits, &loss, &labels, clock)
}

/// A micro-batch's rows, tokens, FLOPs, correct predictions and summed loss.
fn micro_batch_totals(
    model: &SequenceClassifier,
    batch: &Batch,
    logits: &Tensor,
    loss: &Tensor,
    labels: &Tensor,
    clock: &mut PhaseClock,
) -> Result<TrainTotals> {
    let (correct, loss_sum) = tch::no_grad(|| -> std::result::Result<_, tch::TchError> {
        let correct = logits
            .f_argmax(-1, false)?
            .f_eq_tensor(labels)?
            .f_sum(Kind::Double)?;
        let loss_sum = loss
            .f_detach()?
            .f_to_kind(Kind::Double)?
            .f_mul_scalar(batch.rows as f64)?;
        Ok((LazySum::of(correct), LazySum::of(loss_sum)))
    })
    .map_err(torch)?;
    clock.lap(Phase::Other);
    Ok(TrainTotals {
        rows: batch.rows,
        tokens: batch.real_tokens,
        padded_tokens: batch.padded_tokens(),
        flops: model.train_flops(batch.rows, batch.seq_len),
        correct,
        loss_sum,
    })
}

struct EpochStats {
    epoch: u64,
    train_loss: f64,
    train_acc: f64,
    val_loss: f64,
    val_acc: f64,
    epoch_seconds: f64,
    val_seconds: f64,
    /// Rows trained on, every replica's.
    rows: usize,
    /// Real tokens, positions computed (padding included) and model FLOPs,
    /// every replica's.
    tokens: usize,
    padded_tokens: usize,
    flops: f64,
    /// Optimizer steps.
    steps: u64,
    samples_per_s: f64,
    tokens_per_s: f64,
}

impl EpochStats {
    fn to_json(&self) -> Value {
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

/// On a GPU, phases are timed on one step in this many (see `PhaseClock`).
const PHASE_SAMPLE: u64 = 10;

#[derive(Debug, Clone, Copy)]
enum Phase {
    Forward,
    Backward,
    Collective,
    Optimizer,
    /// Collating, waiting for a CPU replica's turn, the rest.
    Other,
}

/// Splits one step's time into phases. GPU work is asynchronous, so a
/// phase's end is only known after a device sync: a timed step on a GPU
/// syncs at every lap (which slows that step a little), an untimed one
/// records nothing. On the CPU every step is timed, for free.
struct PhaseClock {
    device: Device,
    timed: bool,
    last: Instant,
    seconds: [f64; 5],
}

impl PhaseClock {
    fn new(device: Device, timed: bool) -> PhaseClock {
        PhaseClock {
            device,
            timed,
            last: Instant::now(),
            seconds: [0.0; 5],
        }
    }

    /// Ends the phase running since the last lap, which was `phase`.
    fn lap(&mut self, phase: Phase) {
        if !self.timed {
            return;
        }
        hardware::synchronize(self.device);
        let now = Instant::now();
        self.seconds[phase as usize] += (now - self.last).as_secs_f64();
        self.last = now;
    }
}

/// A replica's phase times summed over its timed steps.
#[derive(Debug, Default)]
struct PhaseTimes {
    steps: u64,
    seconds: [f64; 5],
}

impl PhaseTimes {
    fn add(&mut self, clock: &PhaseClock, step_seconds: f64) {
        if !clock.timed {
            return;
        }
        self.steps += 1;
        let counted: f64 = clock.seconds.iter().sum();
        for (total, phase) in self.seconds.iter_mut().zip(clock.seconds) {
            *total += phase;
        }
        // Whatever no lap caught (the step's bookkeeping) is `other`.
        self.seconds[Phase::Other as usize] += (step_seconds - counted).max(0.0);
    }

    fn to_json(&self) -> Value {
        let steps = self.steps.max(1) as f64;
        let ms = |phase: Phase| round3(1000.0 * self.seconds[phase as usize] / steps);
        json!({
            "forward_ms": ms(Phase::Forward),
            "backward_ms": ms(Phase::Backward),
            "collective_ms": ms(Phase::Collective),
            "optimizer_ms": ms(Phase::Optimizer),
            "other_ms": ms(Phase::Other),
            "timed_steps": self.steps,
        })
    }
}

/// `memory`: the most any replica held between two steps (after its
/// first), in bytes, the most parameter and gradient bytes it held at once
/// during its first step, and the highest peak RSS of the replicas'
/// processes.
fn memory_json(replica: &Replica, collective: &dyn Collective) -> Result<Value> {
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
fn throughput_json(epochs: &[EpochStats], lead: &Replica, world: usize, peak: &PeakFlops) -> Value {
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
        (&mut throughput, lead.phases.to_json())
    {
        throughput.extend(phases);
    }
    throughput
}

fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// The `steps` output: a line every `every` optimizer steps (global
/// numbering from 1) and at the last step of each epoch, so that a short
/// run still has a curve. Each line sums up the steps since the line
/// before it.
struct StepCurve {
    every: u64,
    lines: Vec<StepLine>,
    since_last: StepWindow,
}

struct StepLine {
    step: u64,
    epoch: u64,
    /// Mean training loss over rank 0's rows since the line before.
    loss: f64,
    /// The learning rate of this line's step.
    lr: f64,
    /// Every replica's rows since the line before, over the time their
    /// steps took (validation and checkpoints between epochs excluded).
    samples_per_s: f64,
}

/// What the steps since the last line add up to.
#[derive(Default)]
struct StepWindow {
    loss_sum: LazySum,
    lead_rows: usize,
    rows: usize,
    seconds: f64,
    lr: f64,
}

impl StepCurve {
    fn new(every: u64) -> StepCurve {
        StepCurve {
            every: every.max(1),
            lines: Vec::new(),
            since_last: StepWindow::default(),
        }
    }

    /// Adds optimizer step `global_step` (from 1) of `epoch` (from 1), and
    /// makes a line of the window when the step is one of every `every` or
    /// the epoch's last.
    fn record(
        &mut self,
        epoch: u64,
        global_step: u64,
        done: &StepDone,
        ends_epoch: bool,
    ) -> Result<()> {
        let window = &mut self.since_last;
        window.loss_sum.add(&done.step.loss_sum)?;
        window.lead_rows += done.step.rows;
        window.rows += done.rows;
        window.seconds += done.seconds;
        window.lr = done.lr;
        if !global_step.is_multiple_of(self.every) && !ends_epoch {
            return Ok(());
        }
        let window = std::mem::take(&mut self.since_last);
        self.lines.push(StepLine {
            step: global_step,
            epoch,
            loss: window.loss_sum.value()? / window.lead_rows.max(1) as f64,
            lr: window.lr,
            samples_per_s: window.rows as f64 / window.seconds.max(1e-9),
        });
        Ok(())
    }

    fn write(&self, path: &Path) -> Result<()> {
        let mut text = String::from("step,epoch,loss,lr,samples_per_s\n");
        for line in &self.lines {
            // `{}` on the rate prints the shortest text that reads back
            // as the same f64, never an exponent: the schedule exactly.
            let _ = writeln!(
                text,
                "{},{},{:.6},{},{:.3}",
                line.step, line.epoch, line.loss, line.lr, line.samples_per_s
            );
        }
        std::fs::write(path, text).map_err(|e| StageError::io(path, e))
    }
}

fn write_curves(path: &Path, epochs: &[EpochStats]) -> Result<()> {
    let mut text =
        String::from("epoch,train_loss,train_acc,val_loss,val_acc,epoch_seconds,samples_per_s\n");
    for s in epochs {
        let _ = writeln!(
            text,
            "{},{:.6},{:.6},{:.6},{:.6},{:.3},{:.3}",
            s.epoch,
            s.train_loss,
            s.train_acc,
            s.val_loss,
            s.val_acc,
            s.epoch_seconds,
            s.samples_per_s
        );
    }
    std::fs::write(path, text).map_err(|e| StageError::io(path, e))
}

/// Peak resident memory of this process so far, from the kernel's
/// high-water mark; None where /proc is absent.
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(round3(kb / 1024.0))
}

/// One tensor's bytes, copied off the device: a deep copy that later
/// optimizer steps cannot touch.
struct SavedTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &SavedTensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// Every variable of a store at one moment, by HF name. Kept in host memory
/// rather than written per improved epoch, so a run writes its checkpoint
/// once; the largest model here (BERT-base, 440 MB) fits easily.
struct Snapshot {
    tensors: Vec<(String, SavedTensor)>,
}

impl Snapshot {
    fn of(vs: &VarStore) -> Result<Snapshot> {
        let mut tensors = Vec::new();
        for (name, tensor) in vs.variables() {
            // bf16-true trains bf16 weights, but checkpoints are fp32
            // whatever the precision, as Lightning saves them and
            // `from_pretrained` expects by default; the upcast is exact.
            let tensor = tensor
                .f_detach()
                .and_then(|t| t.f_to_device(Device::Cpu))
                .and_then(|t| {
                    if t.is_floating_point() {
                        t.f_to_kind(Kind::Float)
                    } else {
                        Ok(t)
                    }
                })
                .and_then(|t| t.f_contiguous())
                .map_err(torch)?;
            let dtype = match tensor.kind() {
                Kind::Float => Dtype::F32,
                Kind::BFloat16 => Dtype::BF16,
                Kind::Half => Dtype::F16,
                other => {
                    return Err(StageError::Other(format!(
                    "internal: variable `{name}` has kind {other:?}, which checkpoints do not hold"
                )))
                }
            };
            let numel = tensor.numel();
            let mut data = vec![0u8; numel * tensor.kind().elt_size_in_bytes()];
            tensor.f_copy_data_u8(&mut data, numel).map_err(torch)?;
            let shape = tensor.size().iter().map(|&d| d as usize).collect();
            tensors.push((name, SavedTensor { dtype, shape, data }));
        }
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Snapshot { tensors })
    }

    /// safetensors with `{"format": "pt"}`, as `save_pretrained` writes.
    /// The writer sorts tensors by dtype and name and the metadata has one
    /// key, so the same weights always give the same bytes.
    fn write(&self, path: &Path) -> Result<()> {
        let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
        let views = self
            .tensors
            .iter()
            .map(|(name, tensor)| (name.as_str(), tensor));
        safetensors::serialize_to_file(views, Some(metadata), path)
            .map_err(|e| StageError::Other(format!("cannot write `{}`: {e}", path.display())))
    }
}

/// The model's config.json with the head's labels and architecture, as
/// `save_pretrained` of a `*ForSequenceClassification` writes it.
fn checkpoint_config(model: &SequenceClassifier) -> Value {
    let mut config = model.config.raw.clone();
    let num_labels = model.num_labels();
    let existing = config
        .get("id2label")
        .and_then(Value::as_object)
        .filter(|labels| labels.len() as i64 == num_labels)
        .cloned();
    let id2label = existing.unwrap_or_else(|| {
        (0..num_labels)
            .map(|i| (i.to_string(), json!(format!("LABEL_{i}"))))
            .collect()
    });
    let label2id: Map<String, Value> = id2label
        .iter()
        .filter_map(|(id, label)| {
            Some((label.as_str()?.to_string(), json!(id.parse::<i64>().ok()?)))
        })
        .collect();
    let architecture = match model.config.architecture {
        Architecture::Bert => "BertForSequenceClassification",
        Architecture::DistilBert => "DistilBertForSequenceClassification",
    };
    config.insert("id2label".into(), Value::Object(id2label));
    config.insert("label2id".into(), Value::Object(label2id));
    config.insert("num_labels".into(), json!(num_labels));
    config.insert("architectures".into(), json!([architecture]));
    Value::Object(config)
}

fn write_checkpoint(
    dir: &Path,
    weights: &Snapshot,
    model: &SequenceClassifier,
    model_dir: &Path,
    tokens: &Path,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| StageError::io(dir, e))?;
    weights.write(&dir.join("model.safetensors"))?;
    let config = dir.join("config.json");
    let text = serde_json::to_string_pretty(&checkpoint_config(model))
        .map_err(|e| StageError::Other(e.to_string()))?;
    std::fs::write(&config, text + "\n").map_err(|e| StageError::io(&config, e))?;
    // The tokenizer that made the ids, not whatever the model directory has.
    let mut copies: Vec<(PathBuf, PathBuf)> =
        vec![(tokens.join(TOKENIZER_FILE), dir.join(TOKENIZER_FILE))];
    for name in TOKENIZER_EXTRAS {
        let source = model_dir.join(name);
        if source.is_file() {
            copies.push((source, dir.join(name)));
        }
    }
    for (source, target) in copies {
        std::fs::copy(&source, &target).map_err(|e| StageError::io(&source, e))?;
    }
    Ok(())
}
