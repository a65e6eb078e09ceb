//! What a replica's steps add up to: rows, tokens, FLOPs, correct
//! predictions and loss, summed across replicas at an epoch's end.

use tch::Tensor;

use pipe_stages::Result;

use super::super::classifier::torch;
use super::errors::collective_error;
use crate::collective::Collective;

#[derive(Default)]
pub(super) struct TrainTotals {
    pub(super) rows: usize,
    pub(super) tokens: usize,
    /// Positions computed, padding included.
    pub(super) padded_tokens: usize,
    /// Model FLOPs of forward and backward (`SequenceClassifier::train_flops`).
    pub(super) flops: f64,
    pub(super) correct: LazySum,
    pub(super) loss_sum: LazySum,
}

impl TrainTotals {
    pub(super) fn add(&mut self, other: &TrainTotals) -> Result<()> {
        self.rows += other.rows;
        self.tokens += other.tokens;
        self.padded_tokens += other.padded_tokens;
        self.flops += other.flops;
        self.correct.add(&other.correct)?;
        self.loss_sum.add(&other.loss_sum)?;
        Ok(())
    }

    pub(super) fn mean_loss(&self) -> Result<f64> {
        Ok(self.loss_sum.value()? / self.rows.max(1) as f64)
    }

    /// Every rank's totals added up, on every rank.
    pub(super) fn summed(self, collective: &dyn Collective) -> Result<TrainTotals> {
        if collective.world_size() == 1 {
            return Ok(self);
        }
        let mut all = Tensor::from_slice(&[
            self.rows as f64,
            self.tokens as f64,
            self.padded_tokens as f64,
            self.flops,
            self.correct.value()?,
            self.loss_sum.value()?,
        ]);
        collective
            .all_reduce_sum(&mut all)
            .map_err(collective_error)?;
        let all = Vec::<f64>::try_from(&all).map_err(torch)?;
        Ok(TrainTotals {
            rows: all[0].round() as usize,
            tokens: all[1].round() as usize,
            padded_tokens: all[2].round() as usize,
            flops: all[3],
            correct: LazySum {
                host: all[4],
                device: None,
            },
            loss_sum: LazySum {
                host: all[5],
                device: None,
            },
        })
    }
}

/// A sum of per-micro-batch values (loss, correct predictions) kept on the
/// device until someone reads it: reading a GPU value waits for the GPU,
/// and the loop used to do it twice per micro-batch. Read when a step
/// line, a progress line or an epoch's stats need it.
#[derive(Default)]
pub(super) struct LazySum {
    pub(super) host: f64,
    /// A 0-dim f64 tensor on the device, not yet added into `host`.
    pub(super) device: Option<Tensor>,
}

impl LazySum {
    pub(super) fn of(value: Tensor) -> LazySum {
        LazySum {
            host: 0.0,
            device: Some(value),
        }
    }

    pub(super) fn add(&mut self, other: &LazySum) -> Result<()> {
        self.host += other.host;
        let Some(theirs) = &other.device else {
            return Ok(());
        };
        self.device = Some(match self.device.take() {
            // Replicas on different devices add up on the host.
            Some(ours) if ours.device() != theirs.device() => {
                self.host += ours.f_double_value(&[]).map_err(torch)?;
                theirs.shallow_clone()
            }
            Some(ours) => ours.f_add(theirs).map_err(torch)?,
            None => theirs.shallow_clone(),
        });
        Ok(())
    }

    pub(super) fn value(&self) -> Result<f64> {
        Ok(self.host
            + match &self.device {
                Some(tensor) => tensor.f_double_value(&[]).map_err(torch)?,
                None => 0.0,
            })
    }
}
