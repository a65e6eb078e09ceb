//! The sharded data-parallel strategies: DeepSpeed's ZeRO stage 2
//! (`deepspeed_stage_2`) and FSDP's `SHARD_GRAD_OP` (`fsdp_shard_grad_op`).
//!
//! Both run the replicas of `ddp` (one per device, each on its shard of
//! every batch) and differ from it in who keeps what between steps:
//!
//! - **ddp**: every replica holds all parameters, all gradients and the
//!   whole optimizer state (AdamW's two moments), and every replica makes
//!   the same update.
//! - **deepspeed_stage_2**: after backward the gradients are
//!   reduce-scattered, so each replica keeps the summed gradients of its
//!   1/N shard only (the full gradients are freed); it holds AdamW's state
//!   for that shard only, updates that shard of the parameters in place,
//!   and the updated shards are all-gathered back into every replica's full
//!   parameters.
//! - **fsdp_shard_grad_op**: as ZeRO-2, and the parameters are sharded at
//!   rest as well: between steps a replica keeps only its shard of them;
//!   at the start of a step the shards are all-gathered into full
//!   parameters, which live through forward and backward and are freed
//!   after the gradients are reduce-scattered.
//!
//! What neither achieves: PyTorch's `FULL_SHARD` also frees each layer's
//! gathered parameters right after that layer's forward and gathers them
//! again for its backward, so that the peak holds one layer's parameters
//! rather than all. Here the full parameters and the full gradients are
//! both alive at the end of backward; the savings are the optimizer state
//! and the gradients at rest (both), and the parameters at rest
//! (`fsdp_shard_grad_op`). Full sharding is `crate::fsdp`, which runs the
//! model unit by unit and recomputes each unit's forward in backward.
//!
//! Shards are cut per bucket of `crate::ddp::GradientBuckets`' grouping
//! (the same order and cap as ddp's all-reduce): bucket `b` of `n`
//! elements is padded to `N * ceil(n / N)` and replica `r` owns the `r`-th
//! part. A part may cut a parameter in two; the optimizer then steps the
//! two views separately, which AdamW, being element-wise, does not notice.
//! So with the same seed and no gradient clipping the weights are those of
//! ddp: the reduce-scatter adds in ddp's order, the update is the same
//! arithmetic per element. Bit for bit in the tests; where a part cuts a
//! parameter the fused AdamW kernel may round a few elements' last bit
//! differently (its vectorised body and scalar tail fall elsewhere), which
//! shows on MiniLM in the ninth digit of the validation loss. Clipping's
//! global norm is summed in another order and may differ in the last bits.

use std::ffi::{c_char, c_int, c_void};

use tch::{Device, Kind, Tensor};

use crate::collective::Collective;
use crate::ddp::bucket_indices;
use crate::optim::{clip_coefficient, foreach, AdamW};
use crate::precision::LossScaler;
use crate::shard_layout::{DecayGroups, ShardLayout};
use crate::strategy::{MemoryUse, Phase, ShardingStrategy, StrategyError};

extern "C" {
    fn pipe_clear_grad(tensor: *mut c_void, error: *mut c_char, error_size: usize) -> c_int;
}

/// Which of the sharded strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharding {
    /// Gradients and optimizer state sharded; parameters replicated.
    Zero2,
    /// Gradients, optimizer state and, between steps, parameters sharded.
    ShardGradOp,
}

pub(crate) fn bytes_of(tensor: &Tensor) -> usize {
    if tensor.defined() {
        tensor.numel() * tensor.kind().elt_size_in_bytes()
    } else {
        0
    }
}

/// Bytes of the variables' data and of their gradients, as held now.
pub fn variable_bytes(variables: &[Tensor]) -> (usize, usize) {
    variables.iter().fold((0, 0), |(params, grads), variable| {
        (
            params + bytes_of(variable),
            grads + bytes_of(&variable.grad()),
        )
    })
}

/// Drops a variable's gradient (`param.grad = None`): tch can only zero it.
pub fn clear_grad(variable: &Tensor) -> Result<(), StrategyError> {
    // SAFETY: a live tensor handle; the shim resets its grad field and
    // reports C++ exceptions through the buffer.
    crate::ffi::call_shim(|error, size| unsafe {
        pipe_clear_grad(variable.as_ptr() as *mut c_void, error, size)
    })
    .map_err(StrategyError::ClearGrad)
}

/// A variable's data as one flat view, outside autograd: what the shards
/// are cut from and gathered back into.
fn flat(variable: &Tensor) -> Result<Tensor, tch::TchError> {
    variable.f_detach()?.f_view([-1])
}

/// One bucket's variables and this replica's part of them.
struct Bucket {
    variables: Vec<Tensor>,
    /// Each variable's shape, kept for when its data is released.
    sizes: Vec<Vec<i64>>,
    /// The bucket's cut, and this replica's part of it.
    layout: ShardLayout,
    kind: Kind,
    device: Device,
    /// The summed gradients of this replica's part, written by the
    /// reduce-scatter; zero past the bucket's end.
    grad_shard: Tensor,
    /// This replica's part of the parameters, where they are sharded at
    /// rest (`ShardGradOp`); under `Zero2` the optimizer steps views of
    /// the full parameters instead.
    param_shard: Option<Tensor>,
}

/// A replica's optimizer under a sharded strategy: it owns the gradient
/// exchange, the clipping, the unscaling and the step, in place of
/// `GradientBuckets` and a replica-wide `AdamW`.
pub struct ShardedOptimizer {
    sharding: Sharding,
    buckets: Vec<Bucket>,
    optimizer: AdamW,
    /// For each of the optimizer's slots, in its order: the variable
    /// (bucket, index) it is a piece of, to skip those without gradient.
    slot_owners: Vec<(usize, usize)>,
    /// Whether each variable (bucket, index) had a gradient at the last
    /// exchange: one unused by the forward is not stepped, as in ddp.
    had_grad: Vec<Vec<bool>>,
    /// Whether the full parameters are present (always under `Zero2`).
    materialized: bool,
}

impl ShardedOptimizer {
    /// `variables`: the replica's trainable variables in creation order,
    /// each with whether AdamW's weight decay applies to it. Every replica
    /// must pass the same shapes in the same order.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        variables: &[(Tensor, bool)],
        rank: usize,
        world: usize,
        sharding: Sharding,
        cap_bytes: usize,
        lr: f64,
        weight_decay: f64,
        betas: (f64, f64, f64),
    ) -> Result<ShardedOptimizer, StrategyError> {
        let tensors: Vec<Tensor> = variables.iter().map(|(t, _)| t.shallow_clone()).collect();
        let mut buckets = Vec::new();
        let mut groups = DecayGroups::default();
        let mut had_grad = Vec::new();
        tch::no_grad(|| -> Result<(), StrategyError> {
            for (bucket_index, members) in
                bucket_indices(&tensors, cap_bytes).into_iter().enumerate()
            {
                let first = &tensors[members[0]];
                let (kind, device) = (first.kind(), first.device());
                let layout = ShardLayout::new(
                    members.iter().map(|&m| tensors[m].numel() as i64),
                    rank,
                    world,
                );
                let grad_shard = Tensor::f_zeros([layout.part], (kind, device))?;
                let param_shard = match sharding {
                    Sharding::Zero2 => None,
                    Sharding::ShardGradOp => Some(Tensor::f_zeros([layout.part], (kind, device))?),
                };
                for piece in layout.pieces() {
                    let (variable, decays) = &variables[members[piece.index]];
                    let in_variable = flat(variable)?.f_narrow(0, piece.in_variable, piece.len)?;
                    let param = match &param_shard {
                        Some(shard) => {
                            let mut part = shard.f_narrow(0, piece.in_part, piece.len)?;
                            part.f_copy_(&in_variable)?;
                            part
                        }
                        None => in_variable,
                    };
                    let grad = grad_shard.f_narrow(0, piece.in_part, piece.len)?;
                    groups.push(*decays, param, grad, (bucket_index, piece.index));
                }
                had_grad.push(vec![true; members.len()]);
                buckets.push(Bucket {
                    variables: members
                        .iter()
                        .map(|&m| tensors[m].shallow_clone())
                        .collect(),
                    sizes: members.iter().map(|&m| tensors[m].size()).collect(),
                    layout,
                    kind,
                    device,
                    grad_shard,
                    param_shard,
                });
            }
            Ok(())
        })?;
        let (optimizer, slot_owners) = groups.into_optimizer(lr, weight_decay, betas);
        Ok(ShardedOptimizer {
            sharding,
            buckets,
            optimizer,
            slot_owners,
            had_grad,
            materialized: true,
        })
    }

    pub fn set_lr(&mut self, lr: f64) {
        self.optimizer.set_lr(lr);
    }

    /// Makes the full parameters present for forward, validation or a
    /// checkpoint: under `ShardGradOp` the shards are all-gathered (every
    /// replica must call this together); otherwise nothing.
    fn gather_parameters(&mut self, collective: &dyn Collective) -> Result<(), StrategyError> {
        if self.materialized {
            return Ok(());
        }
        tch::no_grad(|| -> Result<(), StrategyError> {
            for bucket in &self.buckets {
                let Some(shard) = &bucket.param_shard else {
                    continue;
                };
                let mut full =
                    Tensor::f_empty([bucket.layout.padded()], (bucket.kind, bucket.device))?;
                collective.all_gather(shard, &mut full)?;
                for ((variable, &offset), size) in bucket
                    .variables
                    .iter()
                    .zip(&bucket.layout.offsets)
                    .zip(&bucket.sizes)
                {
                    let numel: i64 = size.iter().product();
                    // A view into the gathered bucket: one allocation per
                    // bucket, freed when the last variable lets go of it.
                    let data = full.f_narrow(0, offset, numel)?.f_view(size.as_slice())?;
                    variable.shallow_clone().f_set_data(&data)?;
                }
            }
            Ok(())
        })?;
        self.materialized = true;
        Ok(())
    }

    /// Frees the full parameters where they are sharded at rest.
    fn release(&mut self) -> Result<(), StrategyError> {
        if self.sharding != Sharding::ShardGradOp {
            return Ok(());
        }
        for bucket in &self.buckets {
            for variable in &bucket.variables {
                let empty = Tensor::f_empty([0], (bucket.kind, bucket.device))?;
                variable.shallow_clone().f_set_data(&empty)?;
            }
        }
        self.materialized = false;
        Ok(())
    }

    /// After backward: sums the gradients across replicas into each
    /// replica's shard and frees the full gradients.
    fn reduce_scatter_gradients(
        &mut self,
        collective: &dyn Collective,
    ) -> Result<(), StrategyError> {
        tch::no_grad(|| -> Result<(), StrategyError> {
            for (bucket, had_grad) in self.buckets.iter_mut().zip(&mut self.had_grad) {
                let mut parts = Vec::with_capacity(bucket.variables.len() + 1);
                for (variable, had) in bucket.variables.iter().zip(had_grad.iter_mut()) {
                    let grad = variable.grad();
                    *had = grad.defined();
                    parts.push(if grad.defined() {
                        grad.f_reshape([-1])?
                    } else {
                        Tensor::f_zeros([variable.numel() as i64], (bucket.kind, bucket.device))?
                    });
                }
                let padding = bucket.layout.padding();
                if padding > 0 {
                    parts.push(Tensor::f_zeros([padding], (bucket.kind, bucket.device))?);
                }
                let flat = Tensor::f_cat(&parts, 0)?;
                drop(parts);
                collective.reduce_scatter_sum(&flat, &mut bucket.grad_shard)?;
                for variable in &bucket.variables {
                    clear_grad(variable)?;
                }
            }
            Ok(())
        })
    }

    fn shard_gradients(&self) -> Vec<Tensor> {
        self.buckets
            .iter()
            .map(|b| b.grad_shard.shallow_clone())
            .collect()
    }

    /// After the step (or a step skipped for overflow), makes the
    /// parameters what the strategy keeps at rest: every replica's updated
    /// shard gathered into the full parameters (`Zero2`), or only the
    /// shard (`ShardGradOp`).
    fn settle(&mut self, collective: &dyn Collective) -> Result<(), StrategyError> {
        match self.sharding {
            Sharding::Zero2 => self.gather_into_variables(collective),
            Sharding::ShardGradOp => self.release(),
        }
    }

    fn gather_into_variables(&self, collective: &dyn Collective) -> Result<(), StrategyError> {
        tch::no_grad(|| -> Result<(), StrategyError> {
            for bucket in &self.buckets {
                let layout = &bucket.layout;
                // This replica's part of the bucket's flat parameters.
                let mut pieces = Vec::new();
                for piece in layout.pieces() {
                    let variable = &bucket.variables[piece.index];
                    pieces.push(flat(variable)?.f_narrow(0, piece.in_variable, piece.len)?);
                }
                if layout.filled() < layout.part {
                    pieces.push(Tensor::f_zeros(
                        [layout.part - layout.filled()],
                        (bucket.kind, bucket.device),
                    )?);
                }
                let shard = Tensor::f_cat(&pieces, 0)?;
                let mut full = Tensor::f_empty([layout.padded()], (bucket.kind, bucket.device))?;
                collective.all_gather(&shard, &mut full)?;
                for (variable, &offset) in bucket.variables.iter().zip(&layout.offsets) {
                    let numel = variable.numel() as i64;
                    flat(variable)?.f_copy_(&full.f_narrow(0, offset, numel)?)?;
                }
            }
            Ok(())
        })
    }
}

impl ShardingStrategy for ShardedOptimizer {
    fn begin_step(
        &mut self,
        lr: f64,
        collective: &dyn Collective,
        lap: &mut dyn FnMut(Phase),
    ) -> Result<(), StrategyError> {
        self.optimizer.set_lr(lr);
        // Gathers the parameters sharded at rest (fsdp_shard_grad_op).
        self.gather_parameters(collective)?;
        lap(Phase::Collective);
        Ok(())
    }

    fn reduce_gradients(
        &mut self,
        collective: &dyn Collective,
        lap: &mut dyn FnMut(Phase),
    ) -> Result<(), StrategyError> {
        self.reduce_scatter_gradients(collective)?;
        lap(Phase::Collective);
        Ok(())
    }

    /// See [`unscale_shards`].
    fn unscale(
        &mut self,
        scaler: &LossScaler,
        collective: &dyn Collective,
    ) -> Result<bool, StrategyError> {
        let device = self.buckets.first().map_or(Device::Cpu, |b| b.device);
        unscale_shards(&self.shard_gradients(), device, scaler, collective)
    }

    /// Over every replica's shard (see [`clip_shards`]).
    fn clip_grad_norm(
        &mut self,
        max_norm: f64,
        collective: &dyn Collective,
    ) -> Result<Tensor, StrategyError> {
        clip_shards(&self.shard_gradients(), max_norm, collective)
    }

    /// Steps this replica's shard of the parameters (AdamW on the views).
    fn step(&mut self) -> Result<(), StrategyError> {
        let active: Vec<bool> = self
            .slot_owners
            .iter()
            .map(|&(bucket, index)| self.had_grad[bucket][index])
            .collect();
        self.optimizer.step_active(Some(&active))?;
        Ok(())
    }

    fn end_step(
        &mut self,
        collective: &dyn Collective,
        lap: &mut dyn FnMut(Phase),
    ) -> Result<(), StrategyError> {
        self.settle(collective)?;
        lap(Phase::Collective);
        Ok(())
    }

    fn materialize(&mut self, collective: &dyn Collective) -> Result<(), StrategyError> {
        self.gather_parameters(collective)
    }

    fn optimizer(&self) -> &AdamW {
        &self.optimizer
    }

    fn optimizer_mut(&mut self) -> &mut AdamW {
        &mut self.optimizer
    }

    /// Each replica restored its own part: under `Zero2` the parts are
    /// gathered into every replica's full parameters, under `ShardGradOp`
    /// the stale full ones freed, as after a step.
    fn parameters_restored(&mut self, collective: &dyn Collective) -> Result<(), StrategyError> {
        self.settle(collective)
    }

    fn memory(&self) -> MemoryUse {
        let mut use_ = MemoryUse {
            optimizer_bytes: self.optimizer.state_bytes(),
            ..MemoryUse::default()
        };
        for bucket in &self.buckets {
            let (params, grads) = variable_bytes(&bucket.variables);
            use_.params_bytes += params + bucket.param_shard.as_ref().map_or(0, bytes_of);
            use_.grads_bytes += grads + bytes_of(&bucket.grad_shard);
        }
        use_
    }
}

/// Unscales every replica's gradient shards (16-mixed) and tells whether
/// any replica found inf or NaN, so that all skip or all step: the flags
/// are all-reduced on the device and read once.
pub(crate) fn unscale_shards(
    grads: &[Tensor],
    device: Device,
    scaler: &LossScaler,
    collective: &dyn Collective,
) -> Result<bool, StrategyError> {
    let mut found = match scaler.unscale_on_device(grads)? {
        Some(found) => found,
        None => Tensor::f_zeros([1], (Kind::Float, device))?,
    };
    collective.all_reduce_sum(&mut found)?;
    Ok(found.f_double_value(&[0])? > 0.0)
}

/// Scales the gradient shards so that the global L2 norm over every
/// replica's shards is at most `max_norm`, as `clip_grad_norm_`; returns
/// the norm, on the device (nothing here waits for it).
pub(crate) fn clip_shards(
    grads: &[Tensor],
    max_norm: f64,
    collective: &dyn Collective,
) -> Result<Tensor, StrategyError> {
    let mut squares = foreach::norm(grads)?.f_square()?.f_reshape([1])?;
    collective.all_reduce_sum(&mut squares)?;
    let total = squares.f_sqrt()?.f_reshape([])?;
    foreach::mul(grads, &clip_coefficient(&total, max_norm)?)?;
    Ok(total)
}
