//! Classification metrics, the learning-rate schedule and the checkpoint /
//! early-stopping bookkeeping of training: plain numbers, no tensors, so
//! they are tested without libtorch and shared by `train/classifier` and
//! `eval/classifier`.

use serde::Serialize;

use crate::{Result, StageError};

/// Accuracy, per-class and averaged precision/recall/F1, and the confusion
/// matrix (`confusion[true][predicted]`), as scikit-learn computes them
/// with `zero_division=0`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassificationReport {
    pub rows: u64,
    pub accuracy: f64,
    pub per_class: Vec<ClassScores>,
    pub macro_precision: f64,
    pub macro_recall: f64,
    pub macro_f1: f64,
    /// For two classes: the scores of class 1 (scikit-learn's
    /// `average="binary"`), the figures papers quote for sentiment.
    pub binary: Option<ClassScores>,
    pub confusion: Vec<Vec<u64>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassScores {
    pub class: usize,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    /// Rows whose true label is this class.
    pub support: u64,
}

/// `labels` and `predictions` are class ids below `classes`, one each per row.
pub fn classification_report(
    labels: &[usize],
    predictions: &[usize],
    classes: usize,
) -> Result<ClassificationReport> {
    if labels.len() != predictions.len() {
        return Err(StageError::Other(format!(
            "internal: {} labels but {} predictions",
            labels.len(),
            predictions.len()
        )));
    }
    let mut confusion = vec![vec![0u64; classes]; classes];
    for (row, (&label, &prediction)) in labels.iter().zip(predictions).enumerate() {
        if label >= classes || prediction >= classes {
            return Err(StageError::input(
                format!("row {row}: label {label} or prediction {prediction} is not a class below {classes}"),
                "labels must be class ids 0..num_labels-1; check the dataset's labels and the model's `num_labels`",
            ));
        }
        confusion[label][prediction] += 1;
    }
    let rows = labels.len() as u64;
    let correct: u64 = (0..classes).map(|class| confusion[class][class]).sum();
    let ratio = |numerator: u64, denominator: u64| {
        if denominator == 0 {
            0.0
        } else {
            numerator as f64 / denominator as f64
        }
    };
    let per_class: Vec<ClassScores> = (0..classes)
        .map(|class| {
            let true_positive = confusion[class][class];
            let predicted: u64 = (0..classes).map(|row| confusion[row][class]).sum();
            let support: u64 = confusion[class].iter().sum();
            let precision = ratio(true_positive, predicted);
            let recall = ratio(true_positive, support);
            let f1 = if precision + recall == 0.0 {
                0.0
            } else {
                2.0 * precision * recall / (precision + recall)
            };
            ClassScores {
                class,
                precision,
                recall,
                f1,
                support,
            }
        })
        .collect();
    let mean = |value: fn(&ClassScores) -> f64| {
        if classes == 0 {
            0.0
        } else {
            per_class.iter().map(value).sum::<f64>() / classes as f64
        }
    };
    Ok(ClassificationReport {
        rows,
        accuracy: ratio(correct, rows),
        macro_precision: mean(|scores| scores.precision),
        macro_recall: mean(|scores| scores.recall),
        macro_f1: mean(|scores| scores.f1),
        binary: (classes == 2).then(|| per_class[1].clone()),
        per_class,
        confusion,
    })
}

/// Linear warmup from 0 to the peak rate over `warmup_steps`, then linear
/// decay to 0 at `total_steps` (Hugging Face's
/// `get_linear_schedule_with_warmup`). Returns the multiplier of the peak
/// rate for the optimizer step `step` (0-based).
pub fn linear_warmup_decay(step: u64, warmup_steps: u64, total_steps: u64) -> f64 {
    if step < warmup_steps {
        return step as f64 / warmup_steps.max(1) as f64;
    }
    let remaining = total_steps.saturating_sub(step) as f64;
    let decay_steps = total_steps.saturating_sub(warmup_steps).max(1) as f64;
    (remaining / decay_steps).max(0.0)
}

/// Which epoch to keep and when to stop, on a validation score where higher
/// is better (Lightning's `ModelCheckpoint(mode="max")` and
/// `EarlyStopping(patience=..., min_delta=...)`).
#[derive(Debug, Clone)]
pub struct BestEpoch {
    patience: Option<u32>,
    min_delta: f64,
    best: Option<(u32, f64)>,
    epochs_without_improvement: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpochVerdict {
    /// A new best: save this epoch's weights.
    Improved,
    /// Not better; training goes on.
    NoImprovement,
    /// Not better for `patience` epochs in a row: stop.
    Stop,
}

impl BestEpoch {
    /// `patience: None` never stops early.
    pub fn new(patience: Option<u32>, min_delta: f64) -> BestEpoch {
        BestEpoch {
            patience,
            min_delta,
            best: None,
            epochs_without_improvement: 0,
        }
    }

    /// Records `score` for `epoch`. The first epoch always improves; a tie
    /// keeps the earlier epoch.
    pub fn record(&mut self, epoch: u32, score: f64) -> EpochVerdict {
        let improved = match self.best {
            None => true,
            Some((_, best)) => score > best + self.min_delta,
        };
        if improved {
            self.best = Some((epoch, score));
            self.epochs_without_improvement = 0;
            return EpochVerdict::Improved;
        }
        self.epochs_without_improvement += 1;
        match self.patience {
            Some(patience) if self.epochs_without_improvement >= patience => EpochVerdict::Stop,
            _ => EpochVerdict::NoImprovement,
        }
    }

    /// The best epoch and its score so far.
    pub fn best(&self) -> Option<(u32, f64)> {
        self.best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn binary_report_matches_scikit_learn() {
        // Worked by hand with scikit-learn's definitions: class 1 has 4 true
        // positives, 1 false positive, 2 false negatives.
        let labels = [1, 0, 1, 1, 0, 0, 1, 0, 1, 1];
        let predictions = [1, 0, 0, 1, 0, 1, 1, 0, 1, 0];
        let report = classification_report(&labels, &predictions, 2).unwrap();
        assert!(close(report.accuracy, 0.7));
        assert_eq!(report.confusion, vec![vec![3, 1], vec![2, 4]]);
        let binary = report.binary.clone().unwrap();
        assert!(close(binary.precision, 0.8));
        assert!(close(binary.recall, 4.0 / 6.0));
        assert!(close(
            binary.f1,
            2.0 * 0.8 * (4.0 / 6.0) / (0.8 + 4.0 / 6.0)
        ));
        assert_eq!(binary.support, 6);
        let class0 = &report.per_class[0];
        assert!(close(class0.precision, 0.6));
        assert!(close(class0.recall, 0.75));
        assert!(close(report.macro_f1, (class0.f1 + binary.f1) / 2.0));
    }

    #[test]
    fn a_class_never_predicted_scores_zero_not_nan() {
        let report = classification_report(&[0, 1, 2], &[0, 0, 0], 3).unwrap();
        assert!(close(report.per_class[1].precision, 0.0));
        assert!(close(report.per_class[2].f1, 0.0));
        assert!(report.binary.is_none());
        assert!(report.macro_f1.is_finite());
        let empty = classification_report(&[], &[], 2).unwrap();
        assert!(classification_report(&[0, 5], &[0, 1], 2).is_err());
        assert!(close(empty.accuracy, 0.0));
    }

    #[test]
    fn the_schedule_warms_up_then_decays_to_zero() {
        assert!(close(linear_warmup_decay(0, 10, 110), 0.0));
        assert!(close(linear_warmup_decay(5, 10, 110), 0.5));
        assert!(close(linear_warmup_decay(10, 10, 110), 1.0));
        assert!(close(linear_warmup_decay(60, 10, 110), 0.5));
        assert!(close(linear_warmup_decay(110, 10, 110), 0.0));
        assert!(close(linear_warmup_decay(500, 10, 110), 0.0));
        // No warmup: decay from the first step.
        assert!(close(linear_warmup_decay(0, 0, 4), 1.0));
        assert!(close(linear_warmup_decay(2, 0, 4), 0.5));
    }

    #[test]
    fn best_epoch_keeps_the_first_maximum_and_stops_after_patience() {
        let mut best = BestEpoch::new(Some(2), 0.0);
        assert_eq!(best.record(0, 0.80), EpochVerdict::Improved);
        assert_eq!(best.record(1, 0.85), EpochVerdict::Improved);
        assert_eq!(best.record(2, 0.85), EpochVerdict::NoImprovement);
        assert_eq!(best.record(3, 0.84), EpochVerdict::Stop);
        assert_eq!(best.best(), Some((1, 0.85)));

        let mut never_stops = BestEpoch::new(None, 0.0);
        never_stops.record(0, 0.9);
        for epoch in 1..10 {
            assert_eq!(never_stops.record(epoch, 0.1), EpochVerdict::NoImprovement);
        }

        let mut with_delta = BestEpoch::new(Some(1), 0.01);
        with_delta.record(0, 0.80);
        assert_eq!(
            with_delta.record(1, 0.805),
            EpochVerdict::Stop,
            "an improvement below min_delta does not count"
        );
    }
}
