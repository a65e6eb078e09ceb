//! `fsdp` as the training loop sees it: [`ShardingStrategy`] over the
//! units' passes (`super::passes`) and state (`super::state`).

use tch::{Device, Kind, Tensor};

use super::passes;
use super::state::FullShard;
use crate::collective::Collective;
use crate::model::SequenceClassifier;
use crate::optim::AdamW;
use crate::precision::LossScaler;
use crate::shard::{bytes_of, clip_shards, unscale_shards, variable_bytes};
use crate::strategy::{MemoryUse, MicroBatch, Phase, ShardingStrategy, StrategyError, WireBytes};

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
