//! Full sharding's state: the units, their shards, the optimizer, and
//! what the run measures of them (see the module above).

use std::collections::HashMap;

use tch::{Device, Kind, Tensor};

use crate::collective::Started;
use crate::model::SequenceClassifier;
use crate::optim::AdamW;
use crate::shard_layout::{DecayGroups, ShardLayout};
use crate::strategy::{StrategyError, WireBytes};

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
pub(super) struct Unit {
    /// The variables' names in the store, for the checkpoint.
    pub(super) names: Vec<String>,
    pub(super) variables: Vec<Tensor>,
    /// Each variable's shape.
    pub(super) sizes: Vec<Vec<i64>>,
    /// The unit's cut, and this replica's part of it.
    pub(super) layout: ShardLayout,
    /// The parameters' own kind, that of the shards.
    pub(super) kind: Kind,
    pub(super) device: Device,
    /// This replica's part of the flat parameters, which AdamW steps.
    pub(super) param_shard: Tensor,
    /// The summed gradients of that part, written by the reduce-scatters
    /// of the step's micro-batches; zero past the unit's end.
    pub(super) grad_shard: Tensor,
    /// The kind the variables hold the full parameters in now; None while
    /// they are freed.
    pub(super) gathered: Option<Kind>,
    /// Whether this step's gradients have reached `grad_shard` yet (the
    /// first reduce-scatter writes it, the next ones add to it).
    pub(super) reduced: bool,
}

/// An all-gather started and not yet waited on: the next unit's.
pub(super) struct Prefetch {
    /// Declared first: dropped first, it waits for the collective before
    /// the tensors it reads and writes are freed.
    pub(super) started: Started,
    pub(super) unit: usize,
    pub(super) kind: Kind,
    pub(super) full: Tensor,
    /// What it reads: the shard, or its cast to `kind`.
    pub(super) _input: Tensor,
}

/// A replica's parameters, gradients and optimizer under full sharding.
pub struct FullShard {
    pub(super) units: Vec<Unit>,
    pub(super) optimizer: AdamW,
    /// For each optimizer slot, in its order: the variable (unit, index)
    /// it is a piece of.
    pub(super) slot_owners: Vec<(usize, usize)>,
    /// Whether each variable (unit, index) had a gradient in any of this
    /// step's micro-batches: one unused by the forward is not stepped.
    pub(super) had_grad: Vec<Vec<bool>>,
    pub(super) communication: Communication,
    pub(super) in_flight: Option<Prefetch>,
    /// Steps begun; the first is measured.
    pub(super) steps: u64,
    /// Whether the pass running now samples the bytes alive: the first
    /// step's, the first validation batch's, every checkpoint's.
    pub(super) measuring: bool,
    pub(super) eval_measured: bool,
    /// The most parameter and gradient bytes alive at once, over the
    /// moments sampled.
    pub(super) peak_bytes: usize,
    /// Whether a step is under way (between `begin_step` and `end_step`).
    pub(super) in_step: bool,
    /// What the first step's gathers and reduce-scatters carried.
    pub(super) wire: WireBytes,
}

/// A trainable variable: its name in the model, the tensor, and whether
/// weight decay applies to it.
pub type NamedVariable = (String, Tensor, bool);

/// The model's trainable `variables` (creation order, with whether weight
/// decay applies) grouped by unit (`SequenceClassifier::unit_of`), each
/// unit's in creation order and named. Call while the variables are whole.
pub fn units_of(
    model: &SequenceClassifier,
    variables: Vec<(Tensor, bool)>,
) -> Result<Vec<Vec<NamedVariable>>, StrategyError> {
    let names: HashMap<usize, String> = model
        .vs
        .variables()
        .into_iter()
        .map(|(name, tensor)| (tensor.data_ptr() as usize, name))
        .collect();
    let mut units: Vec<Vec<NamedVariable>> = (0..model.unit_count()).map(|_| Vec::new()).collect();
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
        units: Vec<Vec<NamedVariable>>,
        rank: usize,
        world: usize,
        communication: Communication,
        lr: f64,
        weight_decay: f64,
        betas: (f64, f64, f64),
    ) -> Result<FullShard, StrategyError> {
        let mut built = Vec::with_capacity(units.len());
        let mut groups = DecayGroups::default();
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
            let layout = ShardLayout::new(
                members.iter().map(|(_, t, _)| t.numel() as i64),
                rank,
                world,
            );
            let param_shard = Tensor::f_zeros([layout.part], (kind, device))?;
            let grad_shard = Tensor::f_zeros([layout.part], (kind, device))?;
            for piece in layout.pieces() {
                let (_, variable, decays) = &members[piece.index];
                let mut param = param_shard.f_narrow(0, piece.in_part, piece.len)?;
                param.f_copy_(&variable.f_detach()?.f_reshape([-1])?.f_narrow(
                    0,
                    piece.in_variable,
                    piece.len,
                )?)?;
                let grad = grad_shard.f_narrow(0, piece.in_part, piece.len)?;
                groups.push(*decays, param, grad, (unit_index, piece.index));
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
                layout,
                kind,
                device,
                param_shard,
                grad_shard,
                gathered: Some(kind),
                reduced: false,
            });
        }
        let (optimizer, slot_owners) = groups.into_optimizer(lr, weight_decay, betas);
        let mut shard = FullShard {
            units: built,
            optimizer,
            slot_owners,
            had_grad,
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
    pub(super) fn counting(&self) -> bool {
        self.in_step && self.steps == 1
    }

    /// The kind a step's (and validation's) gathers carry for `unit`.
    pub(super) fn step_kind(&self, unit: usize) -> Kind {
        self.communication.kind.unwrap_or(self.units[unit].kind)
    }

    pub(super) fn grad_shards(&self) -> Vec<Tensor> {
        self.units
            .iter()
            .map(|unit| unit.grad_shard.shallow_clone())
            .collect()
    }
}

impl FullShard {
    /// The store's variables no unit holds (none of the models here has
    /// one: every variable is trainable), whole on every replica.
    pub(super) fn unsharded(&self, model: &SequenceClassifier) -> Vec<(String, Tensor)> {
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
