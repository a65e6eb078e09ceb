//! The strategies that keep everything on every replica: `single`, and
//! `ddp` (`crate::ddp`): every replica holds all parameters, all
//! gradients and the whole optimizer state, and makes the same update
//! with the gradients summed across replicas.

use tch::Tensor;

use crate::c10d::{ProcessGroup, Reducer};
use crate::collective::Collective;
use crate::ddp::GradientBuckets;
use crate::optim::AdamW;
use crate::precision::LossScaler;
use crate::shard::variable_bytes;
use crate::strategy::{MemoryUse, Phase, ShardingStrategy, StrategyError};

/// One AdamW over the whole model; under ddp the gradients all-reduced in
/// buckets.
pub struct Replicated {
    optimizer: AdamW,
    /// The model's trainable variables, which the loss scaler unscales.
    variables: Vec<Tensor>,
    /// None on one replica: nothing to sum.
    buckets: Option<GradientBuckets>,
    /// Between processes: the buckets' all-reduces started from
    /// backward's hooks, overlapping the rest of backward, as DDP's.
    reducer: Option<Reducer>,
}

impl Replicated {
    /// `variables`: the model's trainable variables, those `optimizer`
    /// steps. With more than one replica (`world`) the gradients are
    /// summed in buckets, and with a process group the sums start during
    /// backward.
    pub fn new(
        optimizer: AdamW,
        variables: Vec<Tensor>,
        world: usize,
        process_group: Option<&ProcessGroup>,
    ) -> Result<Replicated, StrategyError> {
        let buckets = (world > 1)
            .then(|| GradientBuckets::new(&variables, GradientBuckets::DEFAULT_CAP_BYTES));
        let reducer = match (&buckets, process_group) {
            (Some(buckets), Some(group)) => Some(Reducer::new(group, buckets)?),
            _ => None,
        };
        Ok(Replicated {
            optimizer,
            variables,
            buckets,
            reducer,
        })
    }
}

impl ShardingStrategy for Replicated {
    fn begin_step(
        &mut self,
        lr: f64,
        _collective: &dyn Collective,
        _lap: &mut dyn FnMut(Phase),
    ) -> Result<(), StrategyError> {
        self.optimizer.set_lr(lr);
        self.optimizer.zero_grad()?;
        Ok(())
    }

    /// The step's last backward sums its gradients as backward produces
    /// them (DDP's `no_sync` before it).
    fn before_last_backward(&mut self) -> Result<(), StrategyError> {
        if let Some(reducer) = &mut self.reducer {
            reducer.arm()?;
        }
        Ok(())
    }

    fn reduce_gradients(
        &mut self,
        collective: &dyn Collective,
        lap: &mut dyn FnMut(Phase),
    ) -> Result<(), StrategyError> {
        match (self.reducer.as_mut(), self.buckets.as_ref()) {
            (Some(reducer), _) => {
                reducer.finish()?;
            }
            (None, Some(buckets)) => buckets.all_reduce_sum(collective)?,
            (None, None) => {}
        }
        lap(Phase::Collective);
        Ok(())
    }

    /// After the all-reduce every replica sees the same gradients, and so
    /// makes the same overflow decision without asking the others.
    fn unscale(
        &mut self,
        scaler: &LossScaler,
        _collective: &dyn Collective,
    ) -> Result<bool, StrategyError> {
        Ok(scaler.unscale(&self.variables)?)
    }

    fn clip_grad_norm(
        &mut self,
        max_norm: f64,
        _collective: &dyn Collective,
    ) -> Result<Tensor, StrategyError> {
        Ok(self.optimizer.clip_grad_norm(max_norm)?)
    }

    fn step(&mut self) -> Result<(), StrategyError> {
        self.optimizer.step()?;
        Ok(())
    }

    fn optimizer(&self) -> &AdamW {
        &self.optimizer
    }

    fn optimizer_mut(&mut self) -> &mut AdamW {
        &mut self.optimizer
    }

    fn memory(&self) -> MemoryUse {
        let (params_bytes, grads_bytes) = variable_bytes(&self.variables);
        MemoryUse {
            params_bytes,
            grads_bytes,
            optimizer_bytes: self.optimizer.state_bytes(),
        }
    }
}
