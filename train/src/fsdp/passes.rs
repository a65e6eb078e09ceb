//! The passes over the units: a training micro-batch's forward and
//! backward, validation's forward, the checkpoint's walk. Each gathers a
//! unit right before it runs, starts the next unit's gather, and frees the
//! unit right after.

use tch::{Device, Kind, Reduction, Tensor};

use super::state::FullShard;
use crate::collective::Collective;
use crate::model::{DropoutState, ModelInput, SequenceClassifier};
use crate::precision::AutocastGuard;
use crate::strategy::{Phase, StrategyError};

fn autocast_guard(
    autocast: Option<(Device, Kind)>,
) -> Result<Option<AutocastGuard>, StrategyError> {
    Ok(autocast
        .map(|(device, kind)| AutocastGuard::new(device, kind))
        .transpose()?)
}

fn check_units(model: &SequenceClassifier, shard: &FullShard) -> Result<usize, StrategyError> {
    let head = model.unit_count() - 1;
    if shard.units.len() != head + 1 {
        return Err(StrategyError::Internal(format!(
            "{} shards for a model of {} units",
            shard.units.len(),
            head + 1
        )));
    }
    Ok(head)
}

/// Forward and backward of one micro-batch under full sharding (see the
/// module's documentation): the gradient of its mean cross-entropy loss
/// times `weight` ends up reduce-scattered into every replica's gradient
/// shards. Returns the logits and the mean loss (before `weight`),
/// detached. With `autocast` each unit's forward (and the loss) runs under
/// it, backward after it. Every replica calls this together.
#[allow(clippy::too_many_arguments)]
pub(super) fn forward_backward_by_unit(
    model: &SequenceClassifier,
    shard: &mut FullShard,
    collective: &dyn Collective,
    input: &ModelInput,
    labels: &Tensor,
    weight: f64,
    autocast: Option<(Device, Kind)>,
    lap: &mut dyn FnMut(Phase),
) -> Result<(Tensor, Tensor), StrategyError> {
    let head = check_units(model, shard)?;
    // Forward below the head without autograd, keeping each unit's input
    // and where dropout's draws stood before it.
    let mut saved: Vec<(Option<Tensor>, DropoutState)> = Vec::with_capacity(head);
    let mut hidden: Option<Tensor> = None;
    for unit in 0..head {
        shard.gather(unit, shard.step_kind(unit), collective)?;
        shard.prefetch(Some(unit + 1), shard.step_kind(unit + 1), collective)?;
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

    // The head with autograd, the loss, and its backward; the last layer's
    // gather for its recompute travels meanwhile.
    shard.gather(head, shard.step_kind(head), collective)?;
    let below = head.checked_sub(1);
    shard.prefetch(
        below,
        below.map_or(Kind::Float, |b| shard.step_kind(b)),
        collective,
    )?;
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

    // Down the units: gather (started while the unit above ran), start
    // the next one's, recompute with the first forward's dropout, backward
    // with the gradient from above, reduce-scatter, free.
    let after_forward = model.dropout_state()?;
    for unit in (0..head).rev() {
        shard.gather(unit, shard.step_kind(unit), collective)?;
        let below = unit.checked_sub(1);
        shard.prefetch(
            below,
            below.map_or(Kind::Float, |b| shard.step_kind(b)),
            collective,
        )?;
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
        let grad_in_kind = grad.f_to_kind(output.kind())?;
        output
            .f_mul(&grad_in_kind)?
            .f_sum(None::<Kind>)?
            .f_backward()?;
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

/// The logits of a batch without dropout or autograd, the units gathered
/// in turn as in training's forward (the caller holds the no-grad and
/// autocast guards). Every replica calls this together.
pub(super) fn eval_forward_by_unit(
    model: &SequenceClassifier,
    shard: &mut FullShard,
    collective: &dyn Collective,
    input_ids: &Tensor,
    attention_mask: Option<&Tensor>,
) -> Result<Tensor, StrategyError> {
    let head = check_units(model, shard)?;
    let input = model.prepare(input_ids, attention_mask, None)?;
    let mut hidden: Option<Tensor> = None;
    for unit in 0..=head {
        shard.gather(unit, shard.step_kind(unit), collective)?;
        let next = (unit < head).then_some(unit + 1);
        shard.prefetch(
            next,
            next.map_or(Kind::Float, |n| shard.step_kind(n)),
            collective,
        )?;
        shard.sample();
        let output = model.forward_unit(unit, &input, hidden.as_ref(), false)?;
        shard.release(unit)?;
        hidden = Some(output);
    }
    hidden.ok_or_else(|| StrategyError::Internal("a model without units".into()))
}

/// Hands each unit's variables, gathered in the parameters' own kind, to
/// `visit`, one unit at a time. Every replica calls this together.
pub(super) fn visit_by_unit(
    shard: &mut FullShard,
    collective: &dyn Collective,
    visit: &mut dyn FnMut(&str, &Tensor) -> Result<(), StrategyError>,
) -> Result<(), StrategyError> {
    let count = shard.units.len();
    for unit in 0..count {
        let kind = shard.units[unit].kind;
        shard.gather(unit, kind, collective)?;
        let next = (unit + 1 < count).then_some(unit + 1);
        let next_kind = next.map_or(kind, |next| shard.units[next].kind);
        shard.prefetch(next, next_kind, collective)?;
        shard.sample();
        let members: Vec<(String, Tensor)> = shard.units[unit]
            .names
            .iter()
            .cloned()
            .zip(
                shard.units[unit]
                    .variables
                    .iter()
                    .map(Tensor::shallow_clone),
            )
            .collect();
        for (name, variable) in members {
            visit(&name, &variable)?;
        }
        shard.release(unit)?;
    }
    Ok(())
}
