//! What the training loop asks of a data-parallel strategy, whichever it
//! is: [`ShardingStrategy`], implemented by the replicated strategies
//! (`single`, `ddp`: `crate::replicated`), the sharded ones
//! (`deepspeed_stage_2`, `fsdp_shard_grad_op`: `crate::shard`) and full
//! sharding (`fsdp`: `crate::fsdp`), with their one error type.
//!
//! A step is the same sequence under every strategy, and the loop owns
//! it: [`ShardingStrategy::begin_step`], then per micro-batch
//! [`ShardingStrategy::forward_backward`] (announced by
//! [`ShardingStrategy::before_last_backward`] for the last one), then
//! [`ShardingStrategy::reduce_gradients`], the loss scaler's unscale,
//! clipping and [`ShardingStrategy::step`] (both skipped on overflow), and
//! [`ShardingStrategy::end_step`]. Where the strategies differ is who
//! holds what between those calls.

use tch::{Device, Kind, Reduction, Tensor};

use crate::collective::{Collective, CollectiveError};
use crate::model::{ModelError, SequenceClassifier};
use crate::optim::{AdamW, OptimError};
use crate::precision::{AutocastGuard, LossScaler, PrecisionError};

#[derive(Debug, thiserror::Error)]
pub enum StrategyError {
    #[error(transparent)]
    Collective(#[from] CollectiveError),
    #[error(transparent)]
    Optim(#[from] OptimError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Precision(#[from] PrecisionError),
    #[error("libtorch: {0}")]
    Torch(#[from] tch::TchError),
    #[error("freeing a gradient: {0}")]
    ClearGrad(String),
    #[error("internal: {0}")]
    Internal(String),
}

/// Where a step's time goes, as the strategy tells the loop's phase clock:
/// each call ends the phase running since the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Forward,
    /// Under `fsdp` the recomputed forwards count here, with backward
    /// proper.
    Backward,
    /// All-reduces, all-gathers and reduce-scatters.
    Collective,
}

/// Bytes a replica holds, between two optimizer steps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryUse {
    pub params_bytes: usize,
    pub grads_bytes: usize,
    pub optimizer_bytes: usize,
}

impl MemoryUse {
    /// The larger of each figure: what the most loaded replica needs.
    pub fn max(self, other: MemoryUse) -> MemoryUse {
        MemoryUse {
            params_bytes: self.params_bytes.max(other.params_bytes),
            grads_bytes: self.grads_bytes.max(other.grads_bytes),
            optimizer_bytes: self.optimizer_bytes.max(other.optimizer_bytes),
        }
    }
}

/// The bytes a replica's collectives of one optimizer step carried, as
/// the tensors handed to them count them: under `fsdp`, the units it
/// all-gathered and the gradients it reduce-scattered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireBytes {
    pub gathered: u64,
    pub reduce_scattered: u64,
}

/// One micro-batch of this replica, on its device.
pub struct MicroBatch<'a> {
    pub input_ids: &'a Tensor,
    pub attention_mask: Option<&'a Tensor>,
    pub labels: &'a Tensor,
    /// What the mean loss is multiplied by before backward, so that the
    /// step's accumulated gradient is that of the mean over all the step's
    /// rows (times the loss scale under 16-mixed).
    pub weight: f64,
    /// With it, the forward and the loss run under autocast, backward
    /// after it, as PyTorch's AMP recipe has it.
    pub autocast: Option<(Device, Kind)>,
}

/// How a replica turns its micro-batches into an update, with the other
/// replicas. Every replica makes the same calls in the same order: most
/// of them are collective.
pub trait ShardingStrategy {
    /// Before a step's first micro-batch: the step's learning rate, the
    /// last step's gradients gone, and the parameters present for the
    /// forward.
    fn begin_step(
        &mut self,
        lr: f64,
        collective: &dyn Collective,
        lap: &mut dyn FnMut(Phase),
    ) -> Result<(), StrategyError>;

    /// Before the backward of the step's last micro-batch, for a strategy
    /// that sums the gradients as backward produces them.
    fn before_last_backward(&mut self) -> Result<(), StrategyError> {
        Ok(())
    }

    /// One micro-batch's forward and backward; returns the logits and the
    /// mean loss (before `weight`). By default the model's own forward and
    /// backward, all parameters present.
    fn forward_backward(
        &mut self,
        model: &SequenceClassifier,
        _collective: &dyn Collective,
        batch: &MicroBatch,
        lap: &mut dyn FnMut(Phase),
    ) -> Result<(Tensor, Tensor), StrategyError> {
        whole_model_forward_backward(model, batch, lap)
    }

    /// After the step's last backward: every replica's gradients summed
    /// into what this replica keeps of them.
    fn reduce_gradients(
        &mut self,
        collective: &dyn Collective,
        lap: &mut dyn FnMut(Phase),
    ) -> Result<(), StrategyError>;

    /// Unscales the gradients this replica keeps (16-mixed); true when any
    /// replica found inf or NaN, so that all skip the step or none does.
    fn unscale(
        &mut self,
        scaler: &LossScaler,
        collective: &dyn Collective,
    ) -> Result<bool, StrategyError>;

    /// Clips the global L2 norm of the gradients to `max_norm`, as
    /// `clip_grad_norm_`; returns the norm, on the device (nothing here
    /// waits for it).
    fn clip_grad_norm(
        &mut self,
        max_norm: f64,
        collective: &dyn Collective,
    ) -> Result<Tensor, StrategyError>;

    /// AdamW on what this replica updates.
    fn step(&mut self) -> Result<(), StrategyError>;

    /// After the step, or a step skipped for overflow: the parameters as
    /// the strategy keeps them at rest.
    fn end_step(
        &mut self,
        _collective: &dyn Collective,
        _lap: &mut dyn FnMut(Phase),
    ) -> Result<(), StrategyError> {
        Ok(())
    }

    /// Makes the full parameters present for validation or a checkpoint,
    /// where the strategy runs those on the whole model.
    fn materialize(&mut self, _collective: &dyn Collective) -> Result<(), StrategyError> {
        Ok(())
    }

    /// Whether the model's variables hold every weight between steps, once
    /// materialized (so the replicas' copies can be compared); `fsdp`'s
    /// hold nothing at rest.
    fn holds_whole_weights(&self) -> bool {
        true
    }

    /// Validation's forward: logits of a batch, without dropout; the
    /// caller holds the no-grad and autocast guards. By default the whole
    /// model's (materialized), under `fsdp` unit by unit. Every replica
    /// calls it together.
    fn eval_forward(
        &mut self,
        model: &SequenceClassifier,
        _collective: &dyn Collective,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
    ) -> Result<Tensor, StrategyError> {
        Ok(model.forward_t(input_ids, attention_mask, None, false)?)
    }

    /// Every weight of the model by name, with its shape and kind, in the
    /// order of the store's names, whether it is present now or not.
    fn weight_layout(&self, model: &SequenceClassifier) -> Vec<(String, Vec<i64>, Kind)> {
        let mut layout: Vec<(String, Vec<i64>, Kind)> = model
            .vs
            .variables()
            .into_iter()
            .map(|(name, tensor)| (name, tensor.size(), tensor.kind()))
            .collect();
        layout.sort_by(|a, b| a.0.cmp(&b.0));
        layout
    }

    /// Hands every weight of [`ShardingStrategy::weight_layout`] to `visit`
    /// while it is present, so that rank 0 can write the checkpoint: by
    /// default the materialized model's, under `fsdp` one gathered unit at
    /// a time. Every replica calls it together.
    fn visit_weights(
        &mut self,
        model: &SequenceClassifier,
        _collective: &dyn Collective,
        visit: &mut dyn FnMut(&str, &Tensor) -> Result<(), StrategyError>,
    ) -> Result<(), StrategyError> {
        let mut variables: Vec<(String, Tensor)> = model.vs.variables().into_iter().collect();
        variables.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, tensor) in variables {
            visit(&name, &tensor)?;
        }
        Ok(())
    }

    /// The optimizer of what this replica updates: its parameters (the
    /// model's variables, or views of this replica's shards) are where the
    /// weights live between steps, so they and its state are what a
    /// resume state saves of the replica.
    fn optimizer(&self) -> &AdamW;

    fn optimizer_mut(&mut self) -> &mut AdamW;

    /// After the optimizer's parameters were restored in place (every
    /// replica together): whatever the strategy keeps beside them made to
    /// agree, as after a step. Then `materialize` gives the full weights.
    fn parameters_restored(&mut self, _collective: &dyn Collective) -> Result<(), StrategyError> {
        Ok(())
    }

    /// What this replica holds now (call between steps).
    fn memory(&self) -> MemoryUse;

    /// The most parameter and gradient bytes held at once over the run,
    /// where the strategy measures it itself (`fsdp`, unit by unit, in its
    /// first step, first validation batch and checkpoints); None leaves it
    /// to the loop, which samples after each micro-batch's backward of the
    /// first step (the other strategies hold no more than that when they
    /// validate or write the checkpoint).
    fn peak_bytes(&self) -> Option<usize> {
        None
    }

    /// What the first optimizer step's collectives carried, where the
    /// strategy counts it (`fsdp`); None elsewhere.
    fn wire_bytes(&self) -> Option<WireBytes> {
        None
    }
}

/// The forward with dropout and the backward of the whole model, for the
/// strategies that keep every parameter present during a step.
fn whole_model_forward_backward(
    model: &SequenceClassifier,
    batch: &MicroBatch,
    lap: &mut dyn FnMut(Phase),
) -> Result<(Tensor, Tensor), StrategyError> {
    let (logits, loss) = {
        let _autocast = batch
            .autocast
            .map(|(device, kind)| AutocastGuard::new(device, kind))
            .transpose()?;
        let logits = model.forward_t(batch.input_ids, batch.attention_mask, None, true)?;
        let loss = logits.f_cross_entropy_loss::<Tensor>(
            batch.labels,
            None,
            Reduction::Mean,
            -100,
            0.0,
        )?;
        (logits, loss)
    };
    lap(Phase::Forward);
    loss.f_mul_scalar(batch.weight)?.f_backward()?;
    lap(Phase::Backward);
    Ok((logits, loss))
}
