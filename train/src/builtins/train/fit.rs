//! One replica's run, start to end: its place among the others, the
//! model, the epochs (each the step loop of `super::steps` and a
//! validation), and on rank 0 the outputs and metrics.

use std::time::Instant;

use tch::{Device, Tensor};

use pipe_stages::batches::{accumulation_steps, limit, pad_id, BucketSampler, Collator};
use pipe_stages::classification::{BestEpoch, EpochVerdict};
use pipe_stages::token_file::{open_split, TOKENIZER_FILE};
use pipe_stages::{Result, StageContext, StageError};

use super::super::classifier::{check_labels, check_lengths, check_pad_id, predict, torch};
use super::checkpoint::{write_checkpoint, Snapshot};
use super::curves::{write_curves, StepCurve};
use super::devices::describe_devices;
use super::errors::collective_error;
use super::metrics::{memory_json, metrics_json, EpochStats, Summary};
use super::params::TrainParams;
use super::peers::Peers;
use super::replica::Replica;
use super::steps::{check_in_step, replica_steps, EpochPlan, StepDone};
use super::totals::TrainTotals;
use super::{CHECKPOINT, CURVES, STEPS};
use crate::collective::Collective;
use crate::distributed::RankPlace;
use crate::hardware;
use crate::model::SequenceClassifier;

/// The unit of the epochs' progress bars.
const UNIT: &str = "steps";

/// Trains one replica: the only one (`place` None), or rank `place.rank`
/// of a process group. Rank 0 writes the outputs.
pub(super) fn train(
    context: &StageContext,
    settings: &TrainParams,
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
    let tokens = &settings.tokens;
    let train = open_split(tokens, "train")?;
    let val = open_split(tokens, "val")?;
    check_labels(&train, settings.num_labels)?;
    check_labels(&val, settings.num_labels)?;
    let pad = pad_id(&tokens.join(TOKENIZER_FILE))?;
    let collator = Collator::new(pad);

    // Seeds the head's fresh initialisation here and dropout below.
    tch::manual_seed(settings.seed as i64);
    let (model, report) =
        SequenceClassifier::from_pretrained(&settings.model, Some(settings.num_labels), device)?;
    check_lengths(&train, &model)?;
    check_lengths(&val, &model)?;
    check_pad_id(pad, tokens, &model)?;
    // Every id of both splits and the pad are in the vocabulary.
    model.vouch_for_ids();
    if lead && !report.missing.is_empty() {
        context.message(format!(
            "initialised fresh (seed {}): {}",
            settings.seed,
            report.missing.join(", ")
        ));
    }
    let peers = Peers::join(context, settings, device, place)?;
    let collective = peers.collective();
    let mut replica = Replica::create(settings, model, device, &peers)?;

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
    if lead {
        if let Some(note) = hardware::bf16_note(settings.precision.compute_kind(), device) {
            context.message(note);
        }
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
        let phase = format!("train epoch {}/{}", epoch + 1, settings.epochs);
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
    write_checkpoint(
        &checkpoint,
        &weights,
        model,
        &settings.model,
        &settings.tokens,
    )?;
    write_curves(&context.output(CURVES), &epochs)?;
    step_curve.write(&context.output(STEPS))?;

    context.write_metrics(&metrics_json(&Summary {
        settings,
        devices,
        replica: &replica,
        world,
        epochs: &epochs,
        best_epoch,
        best_acc,
        stopped_early,
        train_rows,
        optimizer_steps: global_step,
        train_seconds,
        memory,
        peak: &peak,
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
