//! Full sharding: `strategy: fsdp`, PyTorch FSDP's `FULL_SHARD` (ZeRO
//! stage 3), the study's `strategy="fsdp"`.
//!
//! The model is cut into units, FSDP's usual wrapping of a transformer:
//! the embeddings, each layer, the head (`SequenceClassifier::unit_of`).
//! Each unit's parameters are flattened (FSDP's `FlatParameter`), padded
//! to `N * ceil(n / N)` elements, and replica `r` keeps part `r` of them,
//! of their gradients and of AdamW's state. Nothing else stays between
//! steps: the model's variables are empty tensors at rest, and no moment
//! of the run, validation and the checkpoint included, holds more than two
//! units' full parameters.
//!
//! A micro-batch (`passes::forward_backward_by_unit`):
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
//!    and the unit's full parameters and gradients are freed.
//! 3. **Prefetch.** The all-gather of the unit that runs next is started
//!    before the current unit computes, on c10d's own threads, and waited
//!    for only when that unit starts (FSDP's `forward_prefetch` and
//!    `BackwardPrefetch.BACKWARD_PRE`); the wait is what the step-time
//!    breakdown counts as collective time. One gather is in flight at a
//!    time, so a replica holds at most two units' parameters.
//! 4. **Dropout draws the same masks in the recompute** as in the first
//!    forward: the state of the model's dropout (the count of CPU masks,
//!    and on a GPU its generator's state) is taken before each unit's
//!    first forward and put back before its recompute, then set to where
//!    the whole forward left it, as `torch.utils.checkpoint` preserves the
//!    RNG state. The masks are those of every other strategy, in the same
//!    order.
//!
//! **Communication precision** (`communication_dtype: bfloat16`, FSDP's
//! `MixedPrecision(param_dtype=bf16, reduce_dtype=bf16)`): the fp32 shards
//! stay the master copy AdamW steps; a step's gathers carry the shard cast
//! to bf16, so the unit computes with bf16 parameters, its gradients are
//! bf16 and are reduce-scattered as bf16, then added into the fp32
//! gradient shard. Half the bytes on the wire and in the gathered units.
//! The checkpoint is gathered in fp32 whatever this says.
//!
//! After the micro-batches the optimizer step is that of the other sharded
//! strategies (`crate::shard`): unscale and clip on the shards (flags and
//! squares all-reduced), fused AdamW on the shard; the updated shards stay
//! where they are, to be gathered unit by unit in the next step.
//!
//! **Validation and the checkpoint** never gather the whole model:
//! validation runs the units in turn as training's forward does
//! ([`ShardingStrategy::eval_forward`]), and the checkpoint is written by
//! handing each gathered unit's tensors to a writer
//! ([`ShardingStrategy::visit_weights`]) that puts them at their place in
//! the safetensors file on rank 0, before the unit is freed.
//!
//! Memory per replica: P/N parameters, P/N gradients and 2P/N AdamW state
//! at rest; during a step, at most those plus two units' parameters (the
//! one computing, the one arriving) and one unit's gradients, plus the
//! activations: one hidden state per unit and one unit's graph.
//! [`ShardingStrategy::peak_bytes`] measures the parameter and gradient
//! bytes alive at each gather and after each unit's backward during the
//! first optimizer step, the first validation batch and the checkpoint.
//! The price is a second forward of every unit but the head (about a third
//! more compute) and two all-gathers of P per micro-batch instead of one
//! per step.
//!
//! Arithmetic: the forward and backward of each unit are the operations of
//! the whole model's, so without gradient accumulation and with fp32
//! communication the weights are those of the other strategies to within
//! the order of the sums; under accumulation each micro-batch's gradients
//! are summed across replicas before being added to the previous
//! micro-batches', as FSDP does outside `no_sync`, which rounds
//! differently from ddp's local accumulation.

mod passes;
mod units;

use std::collections::HashMap;

use tch::{Device, Kind, Tensor};

use crate::collective::{Collective, Started};
use crate::model::SequenceClassifier;
use crate::optim::AdamW;
use crate::precision::LossScaler;
use crate::shard::{bytes_of, clip_shards, unscale_shards, variable_bytes};
use crate::strategy::{MemoryUse, MicroBatch, Phase, ShardingStrategy, StrategyError, WireBytes};

/// How a step's collectives travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Communication {
    /// The kind of a step's gathers and reduce-scatters when it is not
    /// the parameters' own (bf16 for fp32 parameters); None: their own.
    pub kind: Option<Kind>,
    /// Gather the next unit while this one computes.
    pub prefetch: bool,
}

impl Default for Communication {
    fn default() -> Communication {
        Communication {
            kind: None,
            prefetch: true,
        }
    }
}

/// One unit's variables and this replica's part of them.
struct Unit {
    /// The variables' names in the store, for the checkpoint.
    names: Vec<String>,
    variables: Vec<Tensor>,
    /// Each variable's offset in the unit's flat order, and its shape.
    offsets: Vec<i64>,
    sizes: Vec<Vec<i64>>,
    numel: i64,
    /// Elements per replica: `ceil(numel / world)`.
    part: i64,
    /// The parameters' own kind, that of the shards.
    kind: Kind,
    device: Device,
    /// This replica's part of the flat parameters, which AdamW steps.
    param_shard: Tensor,
    /// The summed gradients of that part, written by the reduce-scatters
    /// of the step's micro-batches; zero past the unit's end.
    grad_shard: Tensor,
    /// The kind the variables hold the full parameters in now; None while
    /// they are freed.
    gathered: Option<Kind>,
    /// Whether this step's gradients have reached `grad_shard` yet (the
    /// first reduce-scatter writes it, the next ones add to it).
    reduced: bool,
}

/// An all-gather started and not yet waited on: the next unit's.
struct Prefetch {
    /// Declared first: dropped first, it waits for the collective before
    /// the tensors it reads and writes are freed.
    started: Started,
    unit: usize,
    kind: Kind,
    full: Tensor,
    /// What it reads: the shard, or its cast to `kind`.
    _input: Tensor,
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
    communication: Communication,
    in_flight: Option<Prefetch>,
    /// Steps begun; the first is measured.
    steps: u64,
    /// Whether the pass running now samples the bytes alive: the first
    /// step's, the first validation batch's, every checkpoint's.
    measuring: bool,
    eval_measured: bool,
    /// The most parameter and gradient bytes alive at once, over the
    /// moments sampled.
    peak_bytes: usize,
    /// Whether a step is under way (between `begin_step` and `end_step`).
    in_step: bool,
    /// What the first step's gathers and reduce-scatters carried.
    wire: WireBytes,
}

/// The model's trainable `variables` (creation order, with whether weight
/// decay applies) grouped by unit (`SequenceClassifier::unit_of`), each
/// unit's in creation order and named. Call while the variables are whole.
pub fn units_of(
    model: &SequenceClassifier,
    variables: Vec<(Tensor, bool)>,
) -> Result<Vec<Vec<(String, Tensor, bool)>>, StrategyError> {
    let names: HashMap<usize, String> = model
        .vs
        .variables()
        .into_iter()
        .map(|(name, tensor)| (tensor.data_ptr() as usize, name))
        .collect();
    let mut units: Vec<Vec<(String, Tensor, bool)>> =
        (0..model.unit_count()).map(|_| Vec::new()).collect();
    for (tensor, decays) in variables {
        let name = names.get(&(tensor.data_ptr() as usize)).ok_or_else(|| {
            StrategyError::Internal("a trainable variable has no name in the store".into())
        })?;
        units[model.unit_of(name)].push((name.clone(), tensor, decays));
    }
    Ok(units)
}

impl FullShard {
    /// Shards `units` (see [`units_of`]) over `world` replicas, keeps part
    /// `rank` of each and frees the full parameters. Every replica must
    /// pass the same shapes in the same order, holding the same values.
    pub fn new(
        units: Vec<Vec<(String, Tensor, bool)>>,
        rank: usize,
        world: usize,
        communication: Communication,
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
                .map_or((Kind::Float, Device::Cpu), |(_, t, _)| {
                    (t.kind(), t.device())
                });
            if let Some((_, odd, _)) = members
                .iter()
                .find(|(_, t, _)| t.kind() != kind || t.device() != device)
            {
                return Err(StrategyError::Internal(format!(
                    "unit {unit_index} mixes {kind:?} on {device:?} with {:?} on {:?}",
                    odd.kind(),
                    odd.device()
                )));
            }
            let mut offsets = Vec::with_capacity(members.len());
            let mut numel = 0i64;
            for (_, variable, _) in &members {
                offsets.push(numel);
                numel += variable.numel() as i64;
            }
            let part = (numel + world - 1) / world;
            let (low, high) = (rank as i64 * part, ((rank as i64 + 1) * part).min(numel));
            let param_shard = Tensor::f_zeros([part], (kind, device))?;
            let grad_shard = Tensor::f_zeros([part], (kind, device))?;
            for (index, (_, variable, decays)) in members.iter().enumerate() {
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
            let mut names = Vec::with_capacity(members.len());
            let mut variables = Vec::with_capacity(members.len());
            let mut sizes = Vec::with_capacity(members.len());
            for (name, variable, _) in members {
                names.push(name);
                sizes.push(variable.size());
                variables.push(variable);
            }
            built.push(Unit {
                names,
                variables,
                sizes,
                offsets,
                numel,
                part,
                kind,
                device,
                param_shard,
                grad_shard,
                gathered: Some(kind),
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
            communication,
            in_flight: None,
            steps: 0,
            measuring: false,
            eval_measured: false,
            peak_bytes: 0,
            in_step: false,
            wire: WireBytes::default(),
        };
        for unit in 0..shard.units.len() {
            shard.release(unit)?;
        }
        Ok(shard)
    }

    /// Whether the collectives now are the first step's, which
    /// [`WireBytes`] counts.
    fn counting(&self) -> bool {
        self.in_step && self.steps == 1
    }

    /// The kind a step's (and validation's) gathers carry for `unit`.
    fn step_kind(&self, unit: usize) -> Kind {
        self.communication.kind.unwrap_or(self.units[unit].kind)
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
        for unit in &mut self.units {
            unit.reduced = false;
        }
        for flags in &mut self.had_grad {
            flags.fill(false);
        }
        self.steps += 1;
        self.in_step = true;
        self.measuring = self.steps == 1;
        self.sample();
        Ok(())
    }

    fn end_step(
        &mut self,
        _collective: &dyn Collective,
        _lap: &mut dyn FnMut(Phase),
    ) -> Result<(), StrategyError> {
        self.in_step = false;
        self.measuring = false;
        Ok(())
    }

    /// Unit by unit, the parameters gathered and freed around each (see
    /// [`passes::forward_backward_by_unit`]).
    fn forward_backward(
        &mut self,
        model: &SequenceClassifier,
        collective: &dyn Collective,
        batch: &MicroBatch,
        lap: &mut dyn FnMut(Phase),
    ) -> Result<(Tensor, Tensor), StrategyError> {
        let input = model.prepare(batch.input_ids, batch.attention_mask, None)?;
        passes::forward_backward_by_unit(
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
        self.measuring = false;
        Ok(())
    }

    /// Nothing: validation and the checkpoint gather unit by unit.
    fn materialize(&mut self, _collective: &dyn Collective) -> Result<(), StrategyError> {
        Ok(())
    }

    fn holds_whole_weights(&self) -> bool {
        false
    }

    fn eval_forward(
        &mut self,
        model: &SequenceClassifier,
        collective: &dyn Collective,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
    ) -> Result<Tensor, StrategyError> {
        self.measuring = !self.eval_measured;
        self.eval_measured = true;
        let logits =
            passes::eval_forward_by_unit(model, self, collective, input_ids, attention_mask);
        self.measuring = false;
        logits
    }

    fn weight_layout(&self, model: &SequenceClassifier) -> Vec<(String, Vec<i64>, Kind)> {
        let mut layout: Vec<(String, Vec<i64>, Kind)> = self
            .units
            .iter()
            .flat_map(|unit| {
                unit.names
                    .iter()
                    .zip(&unit.sizes)
                    .map(|(name, size)| (name.clone(), size.clone(), unit.kind))
            })
            .collect();
        layout.extend(
            self.unsharded(model)
                .into_iter()
                .map(|(name, tensor)| (name, tensor.size(), tensor.kind())),
        );
        layout
    }

    fn visit_weights(
        &mut self,
        model: &SequenceClassifier,
        collective: &dyn Collective,
        visit: &mut dyn FnMut(&str, &Tensor) -> Result<(), StrategyError>,
    ) -> Result<(), StrategyError> {
        self.measuring = true;
        let visited = passes::visit_by_unit(self, collective, visit);
        self.measuring = false;
        visited?;
        for (name, tensor) in self.unsharded(model) {
            visit(&name, &tensor)?;
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

    /// The shards, plus at a gather one or two units' parameters, plus
    /// after a unit's backward its gradients too.
    fn peak_bytes(&self) -> Option<usize> {
        Some(self.peak_bytes)
    }

    fn wire_bytes(&self) -> Option<WireBytes> {
        Some(self.wire)
    }
}

impl FullShard {
    /// The store's variables no unit holds (none of the models here has
    /// one: every variable is trainable), whole on every replica.
    fn unsharded(&self, model: &SequenceClassifier) -> Vec<(String, Tensor)> {
        let sharded: std::collections::HashSet<&str> = self
            .units
            .iter()
            .flat_map(|unit| unit.names.iter().map(String::as_str))
            .collect();
        let mut rest: Vec<(String, Tensor)> = model
            .vs
            .variables()
            .into_iter()
            .filter(|(name, _)| !sharded.contains(name.as_str()))
            .collect();
        rest.sort_by(|a, b| a.0.cmp(&b.0));
        rest
    }
}
