//! One data-parallel copy of the model and how it turns gradients into
//! an update: AdamW whole (single, ddp: `crate::replicated`) or sharded
//! (`crate::shard`, `crate::fsdp`), behind `crate::strategy`.

use std::collections::HashSet;

use tch::nn::VarStore;
use tch::{Device, Kind, Tensor};

use pipe_stages::{Result, StageError};

use super::errors::{collective_error, strategy_error};
use super::params::{Strategy, TrainParams};
use super::peers::Peers;
use super::phases::PhaseTimes;
use crate::ddp::GradientBuckets;
use crate::fsdp::{self, Communication, FullShard};
use crate::model::SequenceClassifier;
use crate::optim::AdamW;
use crate::precision::{LossScaler, Precision};
use crate::replicated::Replicated;
use crate::shard::ShardedOptimizer;
use crate::strategy::{MemoryUse, ShardingStrategy};

/// One data-parallel copy of the model with its own optimizer state. Under
/// `single` there is one, and no buckets.
pub(super) struct Replica {
    pub(super) rank: usize,
    pub(super) device: Device,
    pub(super) model: SequenceClassifier,
    /// How it turns its gradients into an update.
    pub(super) strategy: Box<dyn ShardingStrategy>,
    pub(super) scaler: Option<LossScaler>,
    /// What the replica held after its first optimizer step.
    pub(super) memory: Option<MemoryUse>,
    /// The most parameter and gradient bytes it held at once during its
    /// first optimizer step (see `Replica::peak_bytes`).
    pub(super) peak_bytes: usize,
    /// Where its steps' time went.
    pub(super) phases: PhaseTimes,
    /// `peak_bytes` as the interrupted run that this one resumes measured
    /// it in its first step, which this run does not take.
    pub(super) restored_peak_bytes: Option<usize>,
}

impl Replica {
    /// The replica of this process around its loaded `model`. Every
    /// replica starts from rank 0's weights, fresh head included, as DDP
    /// broadcasts them at construction.
    pub(super) fn create(
        settings: &TrainParams,
        mut model: SequenceClassifier,
        device: Device,
        peers: &Peers,
    ) -> Result<Replica> {
        let collective = peers.collective();
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
        let strategy = strategy_for(settings, &model, peers)?;
        Ok(Replica {
            rank,
            device,
            model,
            strategy,
            scaler: (settings.precision == Precision::Fp16Mixed).then(LossScaler::default),
            memory: None,
            peak_bytes: 0,
            phases: PhaseTimes::default(),
            restored_peak_bytes: None,
        })
    }

    /// The most parameter and gradient bytes held at once during the first
    /// optimizer step: under `fsdp` measured unit by unit; otherwise what
    /// the replica holds after a micro-batch's backward (every parameter
    /// and gradient, and the shards), sampled after each.
    pub(super) fn peak_bytes(&self) -> usize {
        self.restored_peak_bytes
            .unwrap_or_else(|| self.strategy.peak_bytes().unwrap_or(self.peak_bytes))
    }
}

/// The strategy of `settings` around `model`, whose variables must be
/// rank 0's and of their training kind by now.
fn strategy_for(
    settings: &TrainParams,
    model: &SequenceClassifier,
    peers: &Peers,
) -> Result<Box<dyn ShardingStrategy>> {
    let collective = peers.collective();
    let (rank, world) = (collective.rank(), collective.world_size());
    Ok(match settings.strategy.sharding() {
        None if settings.strategy == Strategy::Fsdp => Box::new(
            FullShard::new(
                fsdp::units_of(model, decay_flags(&model.vs)?).map_err(strategy_error)?,
                rank,
                world,
                Communication {
                    kind: settings.communication,
                    prefetch: settings.fsdp_prefetch,
                },
                settings.lr,
                settings.weight_decay,
                ADAM_BETAS,
            )
            .map_err(strategy_error)?,
        ),
        None => Box::new(
            Replicated::new(
                adamw(&model.vs, settings.lr, settings.weight_decay)?,
                model.vs.trainable_variables(),
                world,
                peers.process_group(),
            )
            .map_err(strategy_error)?,
        ),
        Some(sharding) => Box::new(
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
            .map_err(strategy_error)?,
        ),
    })
}

/// Every variable by name, sorted: the same order on every replica.
pub(super) fn named_variables(vs: &VarStore) -> Vec<(String, Tensor)> {
    let mut variables: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    variables.sort_by(|a, b| a.0.cmp(&b.0));
    variables
}

/// AdamW as Hugging Face's Trainer sets it up: no weight decay on biases
/// and LayerNorm weights (names as the Trainer's
/// `get_decay_parameter_names`), betas 0.9/0.999, eps 1e-8; fused
/// (`crate::optim`). Parameters in the store's creation order.
pub(super) fn adamw(vs: &VarStore, lr: f64, weight_decay: f64) -> Result<AdamW> {
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
pub(super) const ADAM_BETAS: (f64, f64, f64) = (0.9, 0.999, 1e-8);

/// The trainable variables in creation order, each with whether weight
/// decay applies to it (not to biases and LayerNorm weights).
pub(super) fn decay_flags(vs: &VarStore) -> Result<Vec<(Tensor, bool)>> {
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
