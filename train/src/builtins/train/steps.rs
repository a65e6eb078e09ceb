//! The optimizer steps of one epoch on one replica: each micro-batch's
//! forward and backward, the gradients summed across replicas, unscale,
//! clip and step; and the check that the replicas still agree.

use std::time::Instant;

use tch::{Device, Kind, Tensor};

use pipe_stages::batches::{micro_batch_weights, Batch, Collator};
use pipe_stages::classification::linear_warmup_decay;
use pipe_stages::token_file::TokenizedSplit;
use pipe_stages::{Result, StageError};

use super::super::classifier::{batch_tensors, torch};
use super::errors::{collective_error, strategy_error};
use super::params::TrainParams;
use super::phases::{Phase, PhaseClock, PHASE_SAMPLE};
use super::replica::{named_variables, Replica};
use super::totals::{LazySum, TrainTotals};
use crate::collective::Collective;
use crate::model::SequenceClassifier;
use crate::precision::LossScaler;
use crate::strategy::MicroBatch;

/// One epoch's optimizer steps, the same on every replica.
pub(super) struct EpochPlan<'a> {
    /// Each step's micro-batches, as global batches (all replicas' rows).
    pub(super) steps: &'a [Vec<Vec<usize>>],
    pub(super) first_step: u64,
    pub(super) total_steps: u64,
    pub(super) warmup_steps: u64,
    pub(super) settings: &'a TrainParams,
    pub(super) split: &'a TokenizedSplit,
    pub(super) collator: &'a Collator,
    pub(super) world: usize,
}

/// What rank 0 tells after each optimizer step.
pub(super) struct StepDone<'a> {
    /// 1-based, within the epoch.
    pub(super) index: u64,
    /// The learning rate the step used.
    pub(super) lr: f64,
    /// The step's rows on every replica.
    pub(super) rows: usize,
    /// The step's time on rank 0, from collating its first micro-batch to
    /// the optimizer's update (after the all-reduce, so every replica's).
    pub(super) seconds: f64,
    /// Rank 0's rows and loss in this step.
    pub(super) step: &'a TrainTotals,
    /// Rank 0's totals so far this epoch.
    pub(super) epoch: &'a TrainTotals,
}

/// Called by rank 0 after each step.
pub(super) type StepReport<'a> = &'a mut dyn FnMut(&StepDone) -> Result<()>;

/// The steps of one epoch on one replica: its shard of each micro-batch
/// forward and backward, the gradients summed across replicas, then
/// unscale (16-mixed), clip and step, which every replica does alike.
pub(super) fn replica_steps(
    replica: &mut Replica,
    plan: &EpochPlan,
    collective: &dyn Collective,
    mut report: Option<StepReport>,
) -> Result<TrainTotals> {
    let mut totals = TrainTotals::default();
    for (index, step) in plan.steps.iter().enumerate() {
        let step_started = Instant::now();
        let global_step = plan.first_step + index as u64;
        // Phases are timed on every CPU step; on a GPU only on every
        // PHASE_SAMPLE-th, because timing one needs a device sync per phase.
        let timed = replica.device == Device::Cpu || global_step.is_multiple_of(PHASE_SAMPLE);
        let mut clock = PhaseClock::new(replica.device, timed);
        let scale = linear_warmup_decay(global_step, plan.warmup_steps, plan.total_steps);
        let lr = plan.settings.lr * scale;
        let step_totals = optimizer_step(replica, plan, collective, step, lr, &mut clock)?;
        if replica.memory.is_none() {
            replica.memory = Some(replica.strategy.memory());
        }
        replica
            .phases
            .add(&clock, step_started.elapsed().as_secs_f64());
        totals.add(&step_totals)?;
        if let Some(report) = report.as_mut() {
            report(&StepDone {
                index: index as u64 + 1,
                lr,
                rows: step.iter().map(Vec::len).sum(),
                seconds: step_started.elapsed().as_secs_f64(),
                step: &step_totals,
                epoch: &totals,
            })?;
        }
    }
    // Validation and the checkpoint read rank 0's full parameters.
    replica
        .strategy
        .materialize(collective)
        .map_err(strategy_error)?;
    Ok(totals)
}

/// One optimizer step of `step`'s micro-batches at learning rate `lr`;
/// returns this replica's totals of it.
fn optimizer_step(
    replica: &mut Replica,
    plan: &EpochPlan,
    collective: &dyn Collective,
    step: &[Vec<usize>],
    lr: f64,
    clock: &mut PhaseClock,
) -> Result<TrainTotals> {
    replica
        .strategy
        .begin_step(lr, collective, &mut |phase| clock.lap(phase.into()))
        .map_err(strategy_error)?;
    let step_totals = micro_batches(replica, plan, collective, step, clock)?;
    replica
        .strategy
        .reduce_gradients(collective, &mut |phase| clock.lap(phase.into()))
        .map_err(strategy_error)?;
    // The scaler unscales before clipping so that the clip threshold
    // applies to the true gradients, as GradScaler users must do by hand.
    // Every replica makes the same overflow decision (the strategy sees to
    // it), and so skips or steps alike.
    let step_ok = match replica.scaler.as_mut() {
        Some(scaler) => {
            let overflow = replica
                .strategy
                .unscale(scaler, collective)
                .map_err(strategy_error)?;
            scaler.update(overflow)
        }
        None => true,
    };
    if step_ok {
        if let Some(max_norm) = plan.settings.clip {
            let _norm = replica
                .strategy
                .clip_grad_norm(max_norm, collective)
                .map_err(strategy_error)?;
        }
        replica.strategy.step().map_err(strategy_error)?;
    }
    clock.lap(Phase::Optimizer);
    replica
        .strategy
        .end_step(collective, &mut |phase| clock.lap(phase.into()))
        .map_err(strategy_error)?;
    Ok(step_totals)
}

/// The forward and backward of `step`'s micro-batches on this replica's
/// shard of each, their gradients accumulated.
fn micro_batches(
    replica: &mut Replica,
    plan: &EpochPlan,
    collective: &dyn Collective,
    step: &[Vec<usize>],
    clock: &mut PhaseClock,
) -> Result<TrainTotals> {
    let mut step_totals = TrainTotals::default();
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
            replica
                .strategy
                .before_last_backward()
                .map_err(strategy_error)?;
        }
        step_totals.add(&micro_batch(
            replica, plan, collective, &batch, weight, clock,
        )?)?;
        if replica.memory.is_none() {
            replica.peak_bytes = replica.peak_bytes.max({
                let held = replica.strategy.memory();
                held.params_bytes + held.grads_bytes
            });
        }
    }
    Ok(step_totals)
}

/// DDP's promise, checked: after an epoch every replica holds rank 0's
/// weights bit for bit. Each rank hashes its weights' bytes and the
/// smallest and largest hash over the ranks must agree. A difference is a
/// bug, not a numeric effect.
pub(super) fn check_in_step(
    replica: &Replica,
    collective: &dyn Collective,
    epoch: u64,
) -> Result<()> {
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

/// One micro-batch's forward and backward as the replica's strategy runs
/// them; its mean loss is scaled by `weight` (see [`MicroBatch`]).
fn micro_batch(
    replica: &mut Replica,
    plan: &EpochPlan,
    collective: &dyn Collective,
    batch: &Batch,
    weight: f64,
    clock: &mut PhaseClock,
) -> Result<TrainTotals> {
    let device = replica.device;
    let (input_ids, attention_mask, labels) = batch_tensors(batch, device)?;
    let micro = MicroBatch {
        input_ids: &input_ids,
        attention_mask: attention_mask.as_ref(),
        labels: &labels,
        weight,
        autocast: plan
            .settings
            .precision
            .autocast_kind()
            .map(|kind| (device, kind)),
    };
    let (logits, loss) = replica
        .strategy
        .forward_backward(&replica.model, collective, &micro, &mut |phase| {
            clock.lap(phase.into())
        })
        .map_err(strategy_error)?;
    micro_batch_totals(&replica.model, batch, &logits, &loss, &labels, clock)
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
