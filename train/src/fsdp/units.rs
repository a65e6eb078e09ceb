//! A unit's parameters gathered, prefetched, freed, and its gradients
//! reduce-scattered into the shards.

use tch::{Kind, Tensor};

use super::state::{FullShard, Prefetch};
use crate::collective::Collective;
use crate::shard::{bytes_of, clear_grad, variable_bytes};
use crate::strategy::StrategyError;

impl FullShard {
    /// All-gathers unit `index`'s parameters, in `kind`, into the model's
    /// variables (every replica calls this together): waits for its
    /// prefetch if one is in flight, else gathers it now.
    pub(super) fn gather(
        &mut self,
        index: usize,
        kind: Kind,
        collective: &dyn Collective,
    ) -> Result<(), StrategyError> {
        if self.units[index].gathered == Some(kind) {
            return Ok(());
        }
        self.start_gather(index, kind, collective)?;
        self.land()
    }

    /// Starts gathering unit `index` in `kind` when prefetch is on and it is
    /// not already there or on its way; the next `gather` of it waits.
    pub(super) fn prefetch(
        &mut self,
        index: Option<usize>,
        kind: Kind,
        collective: &dyn Collective,
    ) -> Result<(), StrategyError> {
        let Some(index) = index.filter(|_| self.communication.prefetch) else {
            return Ok(());
        };
        if index >= self.units.len() || self.units[index].gathered == Some(kind) {
            return Ok(());
        }
        self.start_gather(index, kind, collective)?;
        self.sample();
        Ok(())
    }

    /// Starts the all-gather of unit `index` in `kind`, after landing any
    /// other in flight (one at a time, so two units at most are whole).
    fn start_gather(
        &mut self,
        index: usize,
        kind: Kind,
        collective: &dyn Collective,
    ) -> Result<(), StrategyError> {
        if let Some(prefetch) = &self.in_flight {
            if prefetch.unit == index && prefetch.kind == kind {
                return Ok(());
            }
            self.land()?;
        }
        if self.units[index].gathered.is_some() {
            self.release(index)?;
        }
        let unit = &self.units[index];
        let _no_grad = tch::no_grad_guard();
        let input = if kind == unit.kind {
            unit.param_shard.shallow_clone()
        } else {
            unit.param_shard.f_to_kind(kind)?
        };
        let mut full = Tensor::f_empty([unit.layout.padded()], (kind, unit.device))?;
        if self.counting() {
            self.wire.gathered += bytes_of(&full) as u64;
        }
        let unit = &self.units[index];
        let started = if unit.layout.numel > 0 {
            collective.start_all_gather(&input, &mut full)?
        } else {
            crate::collective::Started::done()
        };
        self.in_flight = Some(Prefetch {
            started,
            unit: index,
            kind,
            full,
            _input: input,
        });
        Ok(())
    }

    /// Waits for the gather in flight and puts its parameters into its
    /// unit's variables, as views of the one gathered buffer (freed when
    /// the last variable lets go of it).
    fn land(&mut self) -> Result<(), StrategyError> {
        let Some(Prefetch {
            started,
            unit: index,
            kind,
            full,
            ..
        }) = self.in_flight.take()
        else {
            return Ok(());
        };
        started.wait()?;
        let _no_grad = tch::no_grad_guard();
        let unit = &mut self.units[index];
        for ((variable, &offset), size) in unit
            .variables
            .iter()
            .zip(&unit.layout.offsets)
            .zip(&unit.sizes)
        {
            let numel: i64 = size.iter().product();
            let data = full.f_narrow(0, offset, numel)?.f_view(size.as_slice())?;
            variable.shallow_clone().f_set_data(&data)?;
        }
        unit.gathered = Some(kind);
        Ok(())
    }

    /// Frees unit `index`'s full parameters (each variable an empty tensor
    /// of the parameters' own kind).
    pub(super) fn release(&mut self, index: usize) -> Result<(), StrategyError> {
        let unit = &mut self.units[index];
        if unit.gathered.is_none() {
            return Ok(());
        }
        for variable in &unit.variables {
            let empty = Tensor::f_empty([0], (unit.kind, unit.device))?;
            variable.shallow_clone().f_set_data(&empty)?;
        }
        unit.gathered = None;
        Ok(())
    }

    /// After unit `index`'s backward: sums its gradients across replicas
    /// into each replica's gradient shard (adding to the step's earlier
    /// micro-batches') and frees the full gradients. The gradients are of
    /// the kind the unit was gathered in, and travel in it.
    pub(super) fn reduce(
        &mut self,
        index: usize,
        collective: &dyn Collective,
    ) -> Result<(), StrategyError> {
        let counting = self.counting();
        let unit = &mut self.units[index];
        let kind = unit.gathered.unwrap_or(unit.kind);
        let _no_grad = tch::no_grad_guard();
        let mut parts = Vec::with_capacity(unit.variables.len() + 1);
        for (variable, had) in unit.variables.iter().zip(self.had_grad[index].iter_mut()) {
            let grad = variable.grad();
            parts.push(if grad.defined() {
                *had = true;
                grad.f_reshape([-1])?.f_to_kind(kind)?
            } else {
                Tensor::f_zeros([variable.numel() as i64], (kind, unit.device))?
            });
        }
        let padding = unit.layout.padding();
        if padding > 0 {
            parts.push(Tensor::f_zeros([padding], (kind, unit.device))?);
        }
        if unit.layout.numel > 0 {
            let flat = Tensor::f_cat(&parts, 0)?;
            drop(parts);
            if counting {
                self.wire.reduce_scattered += bytes_of(&flat) as u64;
            }
            if unit.reduced || kind != unit.kind {
                let mut sum = Tensor::f_empty([unit.layout.part], (kind, unit.device))?;
                collective.reduce_scatter_sum(&flat, &mut sum)?;
                drop(flat);
                if unit.reduced {
                    let _ = unit.grad_shard.f_add_(&sum)?;
                } else {
                    unit.grad_shard.f_copy_(&sum)?;
                }
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

    /// While measuring: records the parameter and gradient bytes alive now
    /// (the shards, whatever the variables hold, a gather in flight), if
    /// more than seen so far.
    pub(super) fn sample(&mut self) {
        if !self.measuring {
            return;
        }
        let units: usize = self
            .units
            .iter()
            .map(|unit| {
                let (params, grads) = variable_bytes(&unit.variables);
                params + grads + bytes_of(&unit.param_shard) + bytes_of(&unit.grad_shard)
            })
            .sum();
        let arriving = self.in_flight.as_ref().map_or(0, |prefetch| {
            // A gather into a unit that is still whole in another kind
            // replaces it; the old one is counted above until then.
            bytes_of(&prefetch.full)
        });
        self.peak_bytes = self.peak_bytes.max(units + arriving);
    }
}
