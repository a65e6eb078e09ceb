//! The `curves` and `steps` outputs: CSV lines per epoch and every few
//! optimizer steps.

use std::fmt::Write as _;
use std::path::Path;

use pipe_stages::{Result, StageError};
use serde::{Deserialize, Serialize};

use super::metrics::EpochStats;
use super::resume_files::bits;
use super::steps::StepDone;
use super::totals::LazySum;

/// The `steps` output: a line every `every` optimizer steps (global
/// numbering from 1) and at the last step of each epoch, so that a short
/// run still has a curve. Each line sums up the steps since the line
/// before it.
pub(super) struct StepCurve {
    every: u64,
    lines: Vec<StepLine>,
    since_last: StepWindow,
}

/// One line of the curve; a resume state keeps them, floats to the bit.
#[derive(Serialize, Deserialize)]
pub(super) struct StepLine {
    pub(super) step: u64,
    pub(super) epoch: u64,
    /// Mean training loss over rank 0's rows since the line before.
    #[serde(with = "bits")]
    loss: f64,
    /// The learning rate of this line's step.
    #[serde(with = "bits")]
    lr: f64,
    /// Every replica's rows since the line before, over the time their
    /// steps took (validation and checkpoints between epochs excluded).
    #[serde(with = "bits")]
    samples_per_s: f64,
}

/// What the steps since the last line add up to.
#[derive(Default)]
pub(super) struct StepWindow {
    loss_sum: LazySum,
    lead_rows: usize,
    rows: usize,
    seconds: f64,
    lr: f64,
}

impl StepCurve {
    pub(super) fn new(every: u64) -> StepCurve {
        StepCurve {
            every: every.max(1),
            lines: Vec::new(),
            since_last: StepWindow::default(),
        }
    }

    /// Adds optimizer step `global_step` (from 1) of `epoch` (from 1), and
    /// makes a line of the window when the step is one of every `every` or
    /// the epoch's last.
    pub(super) fn record(
        &mut self,
        epoch: u64,
        global_step: u64,
        done: &StepDone,
        ends_epoch: bool,
    ) -> Result<()> {
        let window = &mut self.since_last;
        window.loss_sum.add(&done.step.loss_sum)?;
        window.lead_rows += done.step.rows;
        window.rows += done.rows;
        window.seconds += done.seconds;
        window.lr = done.lr;
        if !global_step.is_multiple_of(self.every) && !ends_epoch {
            return Ok(());
        }
        let window = std::mem::take(&mut self.since_last);
        self.lines.push(StepLine {
            step: global_step,
            epoch,
            loss: window.loss_sum.value()? / window.lead_rows.max(1) as f64,
            lr: window.lr,
            samples_per_s: window.rows as f64 / window.seconds.max(1e-9),
        });
        Ok(())
    }

    /// The curve of a resumed run: the lines its interrupted attempt had
    /// made, all of whole epochs (an epoch's last step always ends a line,
    /// so nothing was pending).
    pub(super) fn resumed(every: u64, lines: Vec<StepLine>) -> StepCurve {
        StepCurve {
            lines,
            ..StepCurve::new(every)
        }
    }

    pub(super) fn lines(&self) -> &[StepLine] {
        &self.lines
    }

    pub(super) fn write(&self, path: &Path) -> Result<()> {
        let mut text = String::from("step,epoch,loss,lr,samples_per_s\n");
        for line in &self.lines {
            // `{}` on the rate prints the shortest text that reads back
            // as the same f64, never an exponent: the schedule exactly.
            let _ = writeln!(
                text,
                "{},{},{:.6},{},{:.3}",
                line.step, line.epoch, line.loss, line.lr, line.samples_per_s
            );
        }
        std::fs::write(path, text).map_err(|e| StageError::io(path, e))
    }
}

pub(super) fn write_curves(path: &Path, epochs: &[EpochStats]) -> Result<()> {
    let mut text =
        String::from("epoch,train_loss,train_acc,val_loss,val_acc,epoch_seconds,samples_per_s\n");
    for s in epochs {
        let _ = writeln!(
            text,
            "{},{:.6},{:.6},{:.6},{:.6},{:.3},{:.3}",
            s.epoch,
            s.train_loss,
            s.train_acc,
            s.val_loss,
            s.val_acc,
            s.epoch_seconds,
            s.samples_per_s
        );
    }
    std::fs::write(path, text).map_err(|e| StageError::io(path, e))
}
