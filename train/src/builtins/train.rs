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

mod checkpoint;
mod curves;
mod devices;
mod errors;
mod fit;
mod metrics;
mod names;
mod params;
mod peers;
mod phases;
mod replica;
mod resume;
mod resume_files;
mod stage_time;
mod steps;
mod totals;
mod weights_file;

use std::collections::HashMap;

use pipe_protocol::{OutputKind, ParamKind, ParamSpec};
use serde_json::{json, Value};
use tch::Device;

use pipe_stages::{BuiltinStage, Result, StageContext, StageError, StageInfo, StageInfoBuilder};

use super::classifier::precision_error;
use crate::distributed::{self, Role};
use crate::launch;
use crate::precision;
use devices::replica_devices;
use fit::train;
use names::{CHECKPOINT, COMMUNICATION_DTYPES, CURVES, PROCESS_GROUP_BACKENDS, STEPS, STRATEGIES};
use params::{Strategy, TrainParams};

pub struct TrainClassifier;

impl BuiltinStage for TrainClassifier {
    fn info(&self) -> StageInfo {
        StageInfoBuilder::new(
            "train/classifier",
            1,
            "Fine-tune a BERT/DistilBERT sequence classifier (libtorch) and keep the best epoch by val accuracy",
        )
        // 2: CPU dropout masks from our own generator, fused QKV.
        // 3: fused AdamW kernel (float rounding of every update).
        // 4: replicas are processes; c10d (Gloo, NCCL) sums the gradients.
        // 5: validation in wide length-sorted batches (float rounding of
        //    val_loss), no resume state after the last epoch, the last
        //    layer computed at the first position only.
        .implementation(5)
        .params(data_and_model_params())
        .params(optimization_params())
        .params(hardware_params())
        .rules(params::rules())
        .output(
            CHECKPOINT,
            OutputKind::Dir,
            "the best epoch as a Hugging Face checkpoint: model.safetensors, config.json (with id2label), tokenizer files",
        )
        .output(
            CURVES,
            OutputKind::File,
            "CSV, one line per epoch: epoch, train_loss, train_acc (over the epoch's training rows), val_loss, val_acc (after the epoch), epoch_seconds (its training steps), samples_per_s",
        )
        .output(
            STEPS,
            OutputKind::File,
            "CSV, one line every `log_every_n_steps` optimizer steps and at the last step of each epoch: step, epoch, loss (mean since the line before), lr, samples_per_s",
        )
        .metrics(metrics::DECLARED.iter().copied())
        .replicas_params("devices", "num_nodes")
        .seed_param("seed")
        .precision_param("precision")
        .detail_metrics(&["epochs"])
        .key_metrics(&["val_acc", "val_loss", "train_seconds"])
        .hardware_metrics(&["hardware", "devices"])
        .build()
    }

    fn run(&self, context: &StageContext) -> Result<()> {
        let settings = TrainParams::read(context)?;
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

/// What is trained, on what: the token files, the model, the classes.
fn data_and_model_params() -> Vec<ParamSpec> {
    vec![
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
            ParamSpec::new("num_labels", ParamKind::Integer, Some(json!(2)), "number of classes (labels 0..num_labels-1); 2 for binary sentiment")
                .at_least(2.0),
    ]
}

/// How the model is trained: epochs, batches, AdamW and its schedule,
/// clipping, the seed, and when to stop or log.
fn optimization_params() -> Vec<ParamSpec> {
    vec![
            ParamSpec::new("epochs", ParamKind::Integer, Some(json!(3)), "passes over the training rows; 3 is usual for fine-tuning")
                .at_least(1.0),
            ParamSpec::new(
                "batch_size",
                ParamKind::Integer,
                Some(json!(12)),
                "rows per micro-batch on each device (as Lightning's: a step sees batch_size x devices x accumulate_grad_batches rows); 12 to 32 is usual",
            )
            .at_least(1.0),
            ParamSpec::new("lr", ParamKind::Number, Some(json!(5e-5)), "peak learning rate of AdamW, above 0; 5e-5 is usual for fine-tuning BERT")
                .above(0.0)
                .at_most(1.0),
            ParamSpec::new(
                "weight_decay",
                ParamKind::Number,
                Some(json!(0.01)),
                "AdamW weight decay, on every weight but biases and LayerNorm weights (as Hugging Face's Trainer); 0.01 is usual",
            )
            .at_least(0.0)
            .at_most(1.0),
            ParamSpec::new(
                "warmup_ratio",
                ParamKind::Number,
                Some(json!(0.0)),
                "fraction of the optimizer steps spent warming the learning rate up from 0; it then decays linearly to 0. 0.0 or 0.1 are usual",
            )
            .at_least(0.0)
            .at_most(1.0),
            ParamSpec::new(
                "accumulate_grad_batches",
                ParamKind::Integer,
                Some(json!(1)),
                "micro-batches per optimizer step (gradient accumulation); 1 means none",
            )
            .at_least(1.0),
            ParamSpec::new(
                "gradient_clip_val",
                ParamKind::Number,
                Some(Value::Null),
                "clip the gradients' global L2 norm to this, above 0 (1.0 is usual); unset: no clipping",
            )
            .above(0.0),
            ParamSpec::seed(
                "seed of the head's initialisation, dropout and batch order; unset: the pipeline's `seed` param (else 0)",
            ),
            ParamSpec::new(
                "limit_train_samples",
                ParamKind::Integer,
                Some(Value::Null),
                "train on this many rows chosen at random (by seed) for quick runs; unset: all rows",
            )
            .at_least(1.0),
            ParamSpec::new(
                "early_stopping_patience",
                ParamKind::Integer,
                Some(Value::Null),
                "stop after this many epochs without a better val accuracy; unset: never stop early",
            )
            .at_least(1.0),
            ParamSpec::new(
                "log_every_n_steps",
                ParamKind::Integer,
                Some(json!(50)),
                "a line of the `steps` curve every this many optimizer steps (and at the last step of each epoch)",
            )
            .at_least(1.0),
    ]
}

/// Where and in what precision: the numeric formats, the data-parallel
/// strategy and its replicas, and how the replicas talk.
fn hardware_params() -> Vec<ParamSpec> {
    vec![
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
            ParamSpec::choice(
                "communication_dtype",
                COMMUNICATION_DTYPES,
                "under fsdp, the dtype its all-gathers and reduce-scatters carry (FSDP's MixedPrecision param_dtype and reduce_dtype): float32, or bfloat16 to halve the bytes on the wire and in the gathered layers, each layer then computing with bf16 weights while AdamW keeps fp32 master shards. The checkpoint is gathered in fp32 either way",
            ),
            ParamSpec::new(
                "fsdp_prefetch",
                ParamKind::Bool,
                Some(json!(true)),
                "under fsdp, gather the next layer's parameters while this one computes, in forward and backward (FSDP's forward_prefetch and BACKWARD_PRE); false waits for each gather, to measure what prefetch hides",
            ),
            ParamSpec::new(
                "devices",
                ParamKind::Integer,
                Some(json!(1)),
                "replicas per node under ddp and the sharded strategies, one process each (1 under single); with GPUs, equal to the stage's `resources.gpus`",
            )
            .at_least(1.0),
            ParamSpec::new(
                "num_nodes",
                ParamKind::Integer,
                Some(json!(1)),
                "nodes the replicas span, `devices` on each (Lightning's `num_nodes`); above 1 when Slurm starts the ranks (equal to the stage's `resources.nodes`) or a launcher of torchrun's convention does (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)",
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
    ]
}
