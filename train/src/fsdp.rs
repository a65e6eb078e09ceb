//! Full sharding: `strategy: fsdp`, PyTorch FSDP's `FULL_SHARD` (ZeRO
//! stage 3), the study's `strategy="fsdp"`.
//!
//! The model is cut into units, FSDP's usual wrapping of a transformer:
//! the embeddings, each layer, the head (`SequenceClassifier::unit_of`).
//! Each unit's parameters are flattened (FSDP's `FlatParameter`), padded
//! to `N * ceil(n / N)` elements, and replica `r` keeps part `r` of them,
//! of their gradients and of AdamW's state. Nothing else stays between
//! steps: the model's variables are empty tensors at rest.
//!
//! A micro-batch ([`forward_backward_by_unit`]):
//!
//! 1. **Forward, unit by unit, without autograd.** Each unit's parameters
//!    are all-gathered right before its forward and freed right after it;
//!    only the unit's input (the hidden states) is kept, as activation
//!    checkpointing keeps it. The head runs last with autograd and the
//!    loss on top of it.
//! 2. **Backward, unit by unit from the top.** tch exposes no hook into
//!    autograd, so backward does what FSDP with activation checkpointing
//!    does: gather the unit's parameters again, recompute its forward with
//!    autograd from the saved input (made a leaf that requires grad), and
//!    backward it with the gradient that came down from the unit above
//!    (`(output * grad).sum().backward()`, whose gradient at `output` is
//!    exactly `grad`). The input's gradient goes on down; the unit's
//!    parameter gradients are reduce-scattered at once into this
//!    replica's gradient shard (added to it under gradient accumulation),
//!    and the unit's full parameters and gradients are freed before the
//!    next unit is gathered.
//! 3. **Dropout draws the same masks in the recompute** as in the first
//!    forward: the state of the model's dropout (the count of CPU masks,
//!    and on a GPU its generator's state) is taken before each unit's
//!    first forward and put back before its recompute, then set to where
//!    the whole forward left it, as `torch.utils.checkpoint` preserves the
//!    RNG state. The masks are those of every other strategy, in the same
//!    order.
//!
//! After the micro-batches the optimizer step is that of the other sharded
//! strategies (`crate::shard`): unscale and clip on the shards (flags and
//! squares all-reduced), fused AdamW on the shard; the updated shards stay
//! where they are, to be gathered unit by unit in the next step. At the
//! end of an epoch every unit is gathered for validation and the
//! checkpoint (FSDP's full state dict), and freed at the next step.
//!
//! Memory per replica: P/N parameters, P/N gradients and 2P/N AdamW state
//! at rest; during a step, at most those plus one unit's full parameters
//! and gradients (the largest unit's), plus the activations: one hidden
//! state per unit and one unit's graph. Its
//! [`ShardingStrategy::peak_bytes`] measures the parameter and gradient
//! bytes alive at each gather and after each unit's backward during the
//! first optimizer step. The price is a second forward of every unit but
//! the head (about a third more compute) and two all-gathers of P per
//! micro-batch instead of one per step.
//!
//! Arithmetic: the forward and backward of each unit are the operations of
//! the whole model's, so without gradient accumulation the weights are
//! those of the other strategies to within the order of the sums; under
//! accumulation each micro-batch's gradients are summed across replicas
//! before being added to the previous micro-batches', as FSDP does outside
//! `no_sync`, which rounds differently from ddp's local accumulation.

use std::collections::HashMap;

use tch::{Device, Kind, Reduction, Tensor};

use crate::collective::Collective;
use crate::model::{DropoutState, ModelInput, SequenceClassifier};
use crate::optim::AdamW;
use crate::precision::{AutocastGuard, LossScaler};
use crate::shard::{bytes_of, clear_grad, clip_shards, unscale_shards, variable_bytes};
use crate::strategy::{MemoryUse, MicroBatch, Phase, ShardingStrategy, StrategyError};

/// One unit's variables and this replica's part of them.
struct Unit {
    variables: Vec<Tensor>,
    /// Each variable's offset in the unit's flat order, and its shape.
    offsets: Vec<i64>,
    sizes: Vec<Vec<i64>>,
    numel: i64,
    /// Elements per replica: `ceil(numel / world)`.
    part: i64,
    kind: Kind,
    device: Device,
    /// This replica's part of the flat parameters, which AdamW steps.
    param_shard: Tensor,
    /// The summed gradients of that part, written by the reduce-scatters
    /// of the step's micro-batches; zero past the unit's end.
    grad_shard: Tensor,
    /// Whether the variables hold the full parameters now.
    gathered: bool,
    /// Whether this step's gradients have reached `grad_shard` yet (the
    /// first reduce-scatter writes it, the next ones add to it).
    reduced: bool,
}

/// A replica's parameters, gradients and optimizer under full sharding.
pub struct FullShard {
    units: Vec<Unit>,
    optimizer: AdamW,
    /// For each optimizer slot, in its order: the variable (unit, index)
    /// it is a piece of.
    slot_owners: Vec<(usize, usize)>,
    /// Whether each variable (unit, index) had a gradient in any of this
    /// step's micro-batches: one unused by the forward is not stepped.
    had_grad: Vec<Vec<bool>>,
    world: i64,
    /// Steps begun; the first is measured.
    steps: u64,
    /// The most parameter and gradient bytes alive at once, over the
    /// moments sampled in the first step.
    peak_bytes: usize,
}

/// The model's trainable `variables` (creation order, with whether weight
/// decay applies) grouped by unit (`SequenceClassifier::unit_of`), each
/// unit's in creation order. Call while the variables are whole.
pub fn units_of(
    model: &SequenceClassifier,
    variables: Vec<(Tensor, bool)>,
) -> Result<Vec<Vec<(Tensor, bool)>>, StrategyError> {
    let names: HashMap<usize, String> = model
        .vs
        .variables()
        .into_iter()
        .map(|(name, tensor)| (tensor.data_ptr() as usize, name))
        .collect();
    let mut units: Vec<Vec<(Tensor, bool)>> = (0..model.unit_count()).map(|_| Vec::new()).collect();
    for (tensor, decays) in variables {
        let name = names.get(&(tensor.data_ptr() as usize)).ok_or_else(|| {
            StrategyError::Internal("a trainable variable has no name in the store".into())
        })?;
        units[model.unit_of(name)].push((tensor, decays));
    }
    Ok(units)
}

impl FullShard {
    /// Shards `units` (see [`units_of`]) over `world` replicas, keeps part
    /// `rank` of each and frees the full parameters. Every replica must
    /// pass the same shapes in the same order, holding the same values.
    pub fn new(
        units: Vec<Vec<(Tensor, bool)>>,
        rank: usize,
        world: usize,
        lr: f64,
        weight_decay: f64,
        (beta1, beta2, eps): (f64, f64, f64),
    ) -> Result<FullShard, StrategyError> {
        let world = world as i64;
        let mut built = Vec::with_capacity(units.len());
        let (mut decayed, mut undecayed) = (Vec::new(), Vec::new());
        let (mut decayed_owners, mut undecayed_owners) = (Vec::new(), Vec::new());
        let mut had_grad = Vec::with_capacity(units.len());
        let _no_grad = tch::no_grad_guard();
        for (unit_index, members) in units.into_iter().enumerate() {
            let (kind, device) = members
                .first()
                .map_or((Kind::Float, Device::Cpu), |(t, _)| (t.kind(), t.device()));
            if let Some((odd, _)) = members
                .iter()
                .find(|(t, _)| t.kind() != kind || t.device() != device)
            {
                return Err(StrategyError::Internal(format!(
                    "unit {unit_index} mixes {kind:?} on {device:?} with {:?} on {:?}",
                    odd.kind(),
                    odd.device()
                )));
            }
            let mut offsets = Vec::with_capacity(members.len());
            let mut numel = 0i64;
            for (variable, _) in &members {
                offsets.push(numel);
                numel += variable.numel() as i64;
            }
            let part = (numel + world - 1) / world;
            let (low, high) = (rank as i64 * part, ((rank as i64 + 1) * part).min(numel));
            let param_shard = Tensor::f_zeros([part], (kind, device))?;
            let grad_shard = Tensor::f_zeros([part], (kind, device))?;
            for (index, (variable, decays)) in members.iter().enumerate() {
                let start = offsets[index];
                let end = start + variable.numel() as i64;
                let (from, to) = (start.max(low), end.min(high));
                if from >= to {
                    continue;
                }
                let mut param = param_shard.f_narrow(0, from - low, to - from)?;
                param.f_copy_(&variable.f_detach()?.f_reshape([-1])?.f_narrow(
                    0,
                    from - start,
                    to - from,
                )?)?;
                let grad = grad_shard.f_narrow(0, from - low, to - from)?;
                if *decays {
                    decayed.push((param, grad));
                    decayed_owners.push((unit_index, index));
                } else {
                    undecayed.push((param, grad));
                    undecayed_owners.push((unit_index, index));
                }
            }
            had_grad.push(vec![false; members.len()]);
            built.push(Unit {
                sizes: members.iter().map(|(t, _)| t.size()).collect(),
                variables: members.into_iter().map(|(t, _)| t).collect(),
                offsets,
                numel,
                part,
                kind,
                device,
                param_shard,
                grad_shard,
                gathered: true,
                reduced: false,
            });
        }
        let mut slot_owners = decayed_owners;
        slot_owners.extend(undecayed_owners);
        let mut shard = FullShard {
            units: built,
            optimizer: AdamW::with_gradients(
                vec![(decayed, weight_decay), (undecayed, 0.0)],
                lr,
                beta1,
                beta2,
                eps,
            ),
            slot_owners,
            had_grad,
            world,
            steps: 0,
            peak_bytes: 0,
        };
        for unit in 0..shard.units.len() {
            shard.release(unit)?;
        }
        Ok(shard)
    }

    /// Before a step's first micro-batch: frees what `materialize` gathered
    /// and starts the step's gradients afresh.
    fn begin_unsharded_step(&mut self) -> Result<(), StrategyError> {
        for unit in 0..self.units.len() {
            self.release(unit)?;
            self.units[unit].reduced = false;
        }
        for flags in &mut self.had_grad {
            flags.fill(false);
        }
        self.steps += 1;
        self.sample();
        Ok(())
    }

    /// All-gathers unit `index`'s parameters into the model's variables
    /// (every replica calls this together).
    fn gather(&mut self, index: usize, collective: &dyn Collective) -> Result<(), StrategyError> {
        let world = self.world;
        let unit = &mut self.units[index];
        if unit.gathered {
            return Ok(());
        }
        let _no_grad = tch::no_grad_guard();
        let mut full = Tensor::f_empty([unit.part * world], (unit.kind, unit.device))?;
        if unit.numel > 0 {
            collective.all_gather(&unit.param_shard, &mut full)?;
        }
        for ((variable, &offset), size) in unit.variables.iter().zip(&unit.offsets).zip(&unit.sizes)
        {
            let numel: i64 = size.iter().product();
            // Views into the gathered unit: one allocation, freed when the
            // last variable lets go of it.
            let data = full.f_narrow(0, offset, numel)?.f_view(size.as_slice())?;
            variable.shallow_clone().f_set_data(&data)?;
        }
        unit.gathered = true;
        Ok(())
    }

    /// Frees unit `index`'s full parameters (each variable an empty tensor).
    fn release(&mut self, index: usize) -> Result<(), StrategyError> {
        let unit = &mut self.units[index];
        if !unit.gathered {
            return Ok(());
        }
        for variable in &unit.variables {
            let empty = Tensor::f_empty([0], (unit.kind, unit.device))?;
            variable.shallow_clone().f_set_data(&empty)?;
        }
        unit.gathered = false;
        Ok(())
    }

    /// After unit `index`'s backward: sums its gradients across replicas
    /// into each replica's gradient shard (adding to the step's earlier
    /// micro-batches') and frees the full gradients.
    fn reduce(&mut self, index: usize, collective: &dyn Collective) -> Result<(), StrategyError> {
        let world = self.world;
        let unit = &mut self.units[index];
        let _no_grad = tch::no_grad_guard();
        let mut parts = Vec::with_capacity(unit.variables.len() + 1);
        for (variable, had) in unit.variables.iter().zip(self.had_grad[index].iter_mut()) {
            let grad = variable.grad();
            parts.push(if grad.defined() {
                *had = true;
                grad.f_reshape([-1])?
            } else {
                Tensor::f_zeros([variable.numel() as i64], (unit.kind, unit.device))?
            });
        }
        let padding = unit.part * world - unit.numel;
        if padding > 0 {
            parts.push(Tensor::f_zeros([padding], (unit.kind, unit.device))?);
        }
        if unit.numel > 0 {
            let flat = Tensor::f_cat(&parts, 0)?;
            drop(parts);
            if unit.reduced {
                let mut sum = Tensor::f_empty([unit.part], (unit.kind, unit.device))?;
                collective.reduce_scatter_sum(&flat, &mut sum)?;
                let _ = unit.grad_shard.f_add_(&sum)?;
            } else {
                collective.reduce_scatter_sum(&flat, &mut unit.grad_shard)?;
            }
        }
        unit.reduced = true;
        for variable in &unit.variables {
            clear_grad(variable)?;
        }
        Ok(())
    }

    /// During the first step: records the parameter and gradient bytes
    /// alive now (the shards, and whatever the variables hold), if more
    /// than seen so far.
    fn sample(&mut self) {
        if self.steps != 1 {
            return;
        }
        let live: usize = self
            .units
            .iter()
            .map(|unit| {
                let (params, grads) = variable_bytes(&unit.variables);
                params + grads + bytes_of(&unit.param_shard) + bytes_of(&unit.grad_shard)
            })
            .sum();
        self.peak_bytes = self.peak_bytes.max(live);
    }

    fn grad_shards(&self) -> Vec<Tensor> {
        self.units
            .iter()
            .map(|unit| unit.grad_shard.shallow_clone())
            .collect()
    }
}

impl ShardingStrategy for FullShard {
    fn begin_step(
        &mut self,
        lr: f64,
        _collective: &dyn Collective,
        _lap: &mut dyn FnMut(Phase),
    ) -> Result<(), StrategyError> {
        self.optimizer.set_lr(lr);
        self.begin_unsharded_step()
    }

    /// Unit by unit, the parameters gathered and freed around each (see
    /// [`forward_backward_by_unit`]).
    fn forward_backward(
        &mut self,
        model: &SequenceClassifier,
        collective: &dyn Collective,
        batch: &MicroBatch,
        lap: &mut dyn FnMut(Phase),
    ) -> Result<(Tensor, Tensor), StrategyError> {
        let input = model.prepare(batch.input_ids, batch.attention_mask, None)?;
        forward_backward_by_unit(
            model,
            self,
            collective,
            &input,
            batch.labels,
            batch.weight,
            batch.autocast,
            lap,
        )
    }

    /// Nothing left to do: each unit's gradients were reduce-scattered
    /// right after its backward.
    fn reduce_gradients(
        &mut self,
        _collective: &dyn Collective,
        _lap: &mut dyn FnMut(Phase),
    ) -> Result<(), StrategyError> {
        Ok(())
    }

    fn unscale(
        &mut self,
        scaler: &LossScaler,
        collective: &dyn Collective,
    ) -> Result<bool, StrategyError> {
        let device = self.units.first().map_or(Device::Cpu, |unit| unit.device);
        unscale_shards(&self.grad_shards(), device, scaler, collective)
    }

    fn clip_grad_norm(
        &mut self,
        max_norm: f64,
        collective: &dyn Collective,
    ) -> Result<Tensor, StrategyError> {
        clip_shards(&self.grad_shards(), max_norm, collective)
    }

    /// AdamW on this replica's shard of every unit; the updated shards stay
    /// where they are, to be gathered unit by unit in the next step.
    fn step(&mut self) -> Result<(), StrategyError> {
        let active: Vec<bool> = self
            .slot_owners
            .iter()
            .map(|&(unit, index)| self.had_grad[unit][index])
            .collect();
        self.optimizer.step_active(Some(&active))?;
        Ok(())
    }

    /// Gathers every unit, for validation or a checkpoint; the next
    /// `begin_step` frees them.
    fn materialize(&mut self, collective: &dyn Collective) -> Result<(), StrategyError> {
        for unit in 0..self.units.len() {
            self.gather(unit, collective)?;
        }
        Ok(())
    }

    /// Between steps: the shards only.
    fn optimizer(&self) -> &AdamW {
        &self.optimizer
    }

    fn optimizer_mut(&mut self) -> &mut AdamW {
        &mut self.optimizer
    }

    fn memory(&self) -> MemoryUse {
        let mut use_ = MemoryUse {
            optimizer_bytes: self.optimizer.state_bytes(),
            ..MemoryUse::default()
        };
        for unit in &self.units {
            let (params, grads) = variable_bytes(&unit.variables);
            use_.params_bytes += params + bytes_of(&unit.param_shard);
            use_.grads_bytes += grads + bytes_of(&unit.grad_shard);
        }
        use_
    }

    /// The shards, plus at a gather one unit's parameters, plus after a
    /// unit's backward its gradients too.
    fn peak_bytes(&self) -> Option<usize> {
        Some(self.peak_bytes)
    }
}

fn autocast_guard(
    autocast: Option<(Device, Kind)>,
) -> Result<Option<AutocastGuard>, StrategyError> {
    Ok(autocast
        .map(|(device, kind)| AutocastGuard::new(device, kind))
        .transpose()?)
}

/// Forward and backward of one micro-batch under full sharding (see the
/// module's documentation): the gradient of its mean cross-entropy loss
/// times `weight` ends up reduce-scattered into every replica's gradient
/// shards. Returns the logits and the mean loss (before `weight`),
/// detached. With `autocast` each unit's forward (and the loss) runs under
/// it, backward after it. Every replica calls this together.
#[allow(clippy::too_many_arguments)]
fn forward_backward_by_unit(
    model: &SequenceClassifier,
    shard: &mut FullShard,
    collective: &dyn Collective,
    input: &ModelInput,
    labels: &Tensor,
    weight: f64,
    autocast: Option<(Device, Kind)>,
    lap: &mut dyn FnMut(Phase),
) -> Result<(Tensor, Tensor), StrategyError> {
    let head = model.unit_count() - 1;
    if shard.units.len() != head + 1 {
        return Err(StrategyError::Internal(format!(
            "{} shards for a model of {} units",
            shard.units.len(),
            head + 1
        )));
    }
    // Forward below the head without autograd, keeping each unit's input
    // and where dropout's draws stood before it.
    let mut saved: Vec<(Option<Tensor>, DropoutState)> = Vec::with_capacity(head);
    let mut hidden: Option<Tensor> = None;
    for unit in 0..head {
        shard.gather(unit, collective)?;
        shard.sample();
        lap(Phase::Collective);
        let state = model.dropout_state()?;
        let output = {
            let _no_grad = tch::no_grad_guard();
            let _autocast = autocast_guard(autocast)?;
            model.forward_unit(unit, input, hidden.as_ref(), true)?
        };
        shard.release(unit)?;
        saved.push((hidden.replace(output), state));
        lap(Phase::Forward);
    }
    let Some(top) = hidden else {
        return Err(StrategyError::Internal("a model without layers".into()));
    };

    // The head with autograd, the loss, and its backward.
    shard.gather(head, collective)?;
    shard.sample();
    lap(Phase::Collective);
    let top = top.f_detach()?.f_set_requires_grad(true)?;
    let (logits, loss) = {
        let _autocast = autocast_guard(autocast)?;
        let logits = model.forward_unit(head, input, Some(&top), true)?;
        let loss =
            logits.f_cross_entropy_loss::<Tensor>(labels, None, Reduction::Mean, -100, 0.0)?;
        (logits, loss)
    };
    lap(Phase::Forward);
    loss.f_mul_scalar(weight)?.f_backward()?;
    shard.sample();
    let mut grad = top.grad();
    drop(top);
    let (logits, loss) = (logits.f_detach()?, loss.f_detach()?);
    lap(Phase::Backward);
    shard.reduce(head, collective)?;
    shard.release(head)?;
    lap(Phase::Collective);

    // Down the units: gather, recompute with the first forward's dropout,
    // backward with the gradient from above, reduce-scatter, free.
    let after_forward = model.dropout_state()?;
    for unit in (0..head).rev() {
        shard.gather(unit, collective)?;
        shard.sample();
        lap(Phase::Collective);
        let Some((unit_input, state)) = saved.pop() else {
            return Err(StrategyError::Internal(format!(
                "no saved input for unit {unit}"
            )));
        };
        model.restore_dropout_state(&state)?;
        let leaf = match unit_input {
            Some(tensor) => Some(tensor.f_detach()?.f_set_requires_grad(true)?),
            None => None,
        };
        let output = {
            let _autocast = autocast_guard(autocast)?;
            model.forward_unit(unit, input, leaf.as_ref(), true)?
        };
        if output.size() != grad.size() {
            return Err(StrategyError::Internal(format!(
                "unit {unit} recomputed {:?} for a gradient of {:?}",
                output.size(),
                grad.size()
            )));
        }
        output.f_mul(&grad)?.f_sum(None::<Kind>)?.f_backward()?;
        drop(output);
        shard.sample();
        if let Some(leaf) = leaf {
            grad = leaf.grad();
        }
        lap(Phase::Backward);
        shard.reduce(unit, collective)?;
        shard.release(unit)?;
        lap(Phase::Collective);
    }
    model.restore_dropout_state(&after_forward)?;
    Ok((logits, loss))
}
