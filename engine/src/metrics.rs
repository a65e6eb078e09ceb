//! What a metric's value means when it changes: which way is better, which
//! metrics matter most, and how to print a number so that two values can
//! be told apart. Shared by `pipe diff` and `pipe compare`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Which way a metric improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Higher,
    Lower,
    Unknown,
}

/// Whether a change made things better, by the metric's direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Better,
    Worse,
    Same,
    /// Changed, but the metric's direction is unknown.
    Changed,
}

/// Result words, matched as whole words of a metric's last dotted
/// segment. Only results get a built-in direction: whether a longer step
/// time, more memory or a higher throughput is better or worse depends on
/// what the run was for (a larger batch trades memory for speed), so
/// timings, memory, rates, FLOPs and MFU are judged only when the
/// pipeline's `directions:` or `--higher`/`--lower` name them.
const LOWER_WORDS: &[&str] = &["loss", "losses", "error", "errors", "err"];
const HIGHER_WORDS: &[&str] = &["acc", "accuracy", "f1", "precision", "recall", "auc"];
/// The metrics a comparison shows even when they are equal everywhere.
const KEY_WORDS: &[&str] = &["acc", "accuracy", "f1", "loss"];

impl Direction {
    /// The built-in rule, from the metric's last dotted segment: result
    /// metrics only (`val.loss`, `error_rate` lower-is-better;
    /// `test.accuracy`, `macro_f1` higher-is-better); anything else,
    /// `step_ms` and `peak_rss_bytes` among them, is
    /// [`Direction::Unknown`].
    pub fn of(metric: &str) -> Direction {
        let name = last_segment(metric).to_ascii_lowercase();
        let has_word = |words: &[&str]| words_of(&name).any(|word| words.contains(&word));
        if has_word(LOWER_WORDS) {
            Direction::Lower
        } else if has_word(HIGHER_WORDS) {
            Direction::Higher
        } else {
            Direction::Unknown
        }
    }

    /// What going from `before` to `after` means.
    pub fn verdict(self, before: f64, after: f64) -> Verdict {
        if before == after {
            return Verdict::Same;
        }
        match (self, after > before) {
            (Direction::Unknown, _) => Verdict::Changed,
            (Direction::Higher, true) | (Direction::Lower, false) => Verdict::Better,
            _ => Verdict::Worse,
        }
    }

    /// `higher` or `lower`, as a pipeline's `directions:` writes them.
    pub fn parse_declared(text: &str) -> Option<Direction> {
        match text {
            "higher" => Some(Direction::Higher),
            "lower" => Some(Direction::Lower),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Higher => "higher",
            Direction::Lower => "lower",
            Direction::Unknown => "unknown",
        }
    }
}

/// The built-in directions with the user's `--higher`/`--lower` on top.
/// A name given by the user matches a metric by its full name
/// (`train.val_acc`), its name inside the stage (`val_acc`) or its last
/// dotted segment.
#[derive(Debug, Clone, Default)]
pub struct DirectionRules {
    higher: Vec<String>,
    lower: Vec<String>,
    /// What the pipelines of the runs declared (`directions:`), below the
    /// command line's.
    declared: Vec<(String, Direction)>,
}

impl DirectionRules {
    pub fn new(higher: Vec<String>, lower: Vec<String>) -> DirectionRules {
        DirectionRules {
            higher,
            lower,
            declared: Vec::new(),
        }
    }

    /// Adds what a run's pipeline declared; the first declaration of a
    /// name wins, so give the newest run's first.
    pub fn declared(mut self, directions: &BTreeMap<String, Direction>) -> DirectionRules {
        for (name, direction) in directions {
            if !self.declared.iter().any(|(known, _)| known == name) {
                self.declared.push((name.clone(), *direction));
            }
        }
        self
    }

    /// The direction of `metric` of `stage` (a base stage name).
    pub fn direction(&self, stage: &str, metric: &str) -> Direction {
        let matches = |name: &String| names_metric(name, stage, metric);
        if self.lower.iter().any(matches) {
            Direction::Lower
        } else if self.higher.iter().any(matches) {
            Direction::Higher
        } else if let Some((_, direction)) = self
            .declared
            .iter()
            .find(|(name, direction)| *direction != Direction::Unknown && matches(name))
        {
            *direction
        } else {
            Direction::of(metric)
        }
    }
}

/// Whether `name`, as `directions:` or `--higher` write it, is `metric`
/// of `stage`: in full, within its stage, or by its last segment.
fn names_metric(name: &str, stage: &str, metric: &str) -> bool {
    name == metric
        || name == last_segment(metric)
        || name
            .strip_prefix(stage)
            .and_then(|rest| rest.strip_prefix('.'))
            == Some(metric)
}

impl DirectionRules {
    /// Whether a pipeline's `directions:` or the command line's
    /// `--higher`/`--lower` name `metric` of `stage`: the metrics a run
    /// declares as results that matter, shown first and always.
    pub fn names(&self, stage: &str, metric: &str) -> bool {
        self.higher
            .iter()
            .chain(&self.lower)
            .chain(self.declared.iter().map(|(name, _)| name))
            .any(|name| names_metric(name, stage, metric))
    }
}

impl DirectionRules {
    /// Whether `metric` of `stage` is a key metric: named by the pipeline
    /// (`key_metrics:`, `directions:`) or the command line, else by its
    /// stage's own `key_metrics`, or, for a stage that declares none, by
    /// its name. Detail (per epoch, per class) never is. The one rule
    /// `compare`, `diff` and `show` lead with.
    pub fn is_key_of(
        &self,
        stage: &str,
        metric: &str,
        roles: Option<&pipe_protocol::record::StageRoles>,
    ) -> bool {
        if self.names(stage, metric) {
            return true;
        }
        if roles.is_some_and(|roles| roles.is_detail_metric(metric)) {
            return false;
        }
        key_by_roles(roles.and_then(|roles| roles.declares_key(metric)), metric)
    }
}

/// What a stage declares of `metric` (`StageRoles::declares_key`), or, when
/// it declares nothing, what its name says.
pub fn key_by_roles(declared: Option<bool>, metric: &str) -> bool {
    declared.unwrap_or_else(|| is_key_metric(metric))
}

/// Accuracy, F1 and loss: what a comparison shows first.
#[allow(clippy::let_and_return)] // `name` must outlive the iterator
pub fn is_key_metric(metric: &str) -> bool {
    let name = last_segment(metric).to_ascii_lowercase();
    let key = words_of(&name).any(|word| KEY_WORDS.contains(&word));
    key
}

fn last_segment(metric: &str) -> &str {
    metric.rsplit('.').next().unwrap_or(metric)
}

fn words_of(name: &str) -> impl Iterator<Item = &str> {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
}

pub use pipe_protocol::format::{
    digits_to_tell_apart, format_percent, format_significant, SIGNIFICANT_DIGITS,
};

/// `(after - before) / |before|`, when it means something.
pub fn relative_change(before: f64, after: f64) -> Option<f64> {
    (before != 0.0 && before.is_finite() && after.is_finite())
        .then(|| (after - before) / before.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_result_metrics_have_a_built_in_direction() {
        for lower in [
            "val.loss",
            "train_loss",
            "error_rate",
            "errors",
            "val.top1_err",
        ] {
            assert_eq!(Direction::of(lower), Direction::Lower, "{lower}");
        }
        for higher in [
            "test.accuracy",
            "val_acc",
            "f1",
            "macro.recall",
            "precision",
            "auc",
        ] {
            assert_eq!(Direction::of(higher), Direction::Higher, "{higher}");
        }
        // Timings, memory, rates, FLOPs and MFU are judged only when
        // declared; `flops_per_step` is no rate either way.
        for unknown in [
            "peak_rss_mb",
            "memory.peak_rss_bytes",
            "step_ms",
            "seconds",
            "epochs.1.epoch_seconds",
            "wall_time",
            "throughput.forward_ms",
            "samples_per_s",
            "bytes_per_second",
            "throughput.flops_per_s",
            "throughput.flops_per_step",
            "throughput.mfu",
            "throughput",
            "rows",
            "best_epoch",
            "train.labels.0",
            "accumulate",
            "terror",
        ] {
            assert_eq!(Direction::of(unknown), Direction::Unknown, "{unknown}");
        }
    }

    #[test]
    fn declared_directions_judge_timings() {
        let declared = BTreeMap::from([("step_ms".to_string(), Direction::Lower)]);
        let rules = DirectionRules::default().declared(&declared);
        assert_eq!(rules.direction("train", "step_ms"), Direction::Lower);
        assert_eq!(
            rules.direction("train", "peak_rss_bytes"),
            Direction::Unknown
        );
        let flags = DirectionRules::new(vec!["throughput.mfu".into()], vec![]);
        assert_eq!(
            flags.direction("train", "throughput.mfu"),
            Direction::Higher
        );
    }

    #[test]
    fn user_rules_win_over_the_built_in_ones() {
        let rules = DirectionRules::new(vec!["train.rows".into()], vec!["val_acc".into()]);
        assert_eq!(rules.direction("train", "rows"), Direction::Higher);
        assert_eq!(rules.direction("split", "rows"), Direction::Unknown);
        assert_eq!(rules.direction("train", "val_acc"), Direction::Lower);
        assert_eq!(rules.direction("train", "val_loss"), Direction::Lower);
    }

    #[test]
    fn verdicts_read_the_direction() {
        assert_eq!(Direction::Lower.verdict(1.0, 0.5), Verdict::Better);
        assert_eq!(Direction::Higher.verdict(1.0, 0.5), Verdict::Worse);
        assert_eq!(Direction::Unknown.verdict(1.0, 0.5), Verdict::Changed);
        assert_eq!(Direction::Higher.verdict(1.0, 1.0), Verdict::Same);
    }

    #[test]
    fn numbers_keep_four_significant_digits_unless_more_tell_them_apart() {
        assert_eq!(format_significant(0.4196236128689813, 4), "0.4196");
        assert_eq!(format_significant(0.5, 4), "0.5");
        assert_eq!(format_significant(25000.0, 4), "25000");
        assert_eq!(format_significant(1234.5678, 4), "1235");
        assert_eq!(format_significant(0.0000123456, 4), "1.235e-5");
        assert_eq!(format_significant(0.9013 - 0.9012, 3), "0.0001");
        let close = [0.4196236128689813, 0.4197249507573691];
        assert_eq!(digits_to_tell_apart(&close), 4);
        let closer = [0.41962361, 0.41962999];
        let digits = digits_to_tell_apart(&closer);
        assert_eq!(digits, 5);
        assert_ne!(
            format_significant(closer[0], digits),
            format_significant(closer[1], digits)
        );
    }

    #[test]
    fn relative_changes_need_a_nonzero_base() {
        assert_eq!(relative_change(0.0, 1.0), None);
        assert_eq!(relative_change(-2.0, -1.0), Some(0.5));
        assert_eq!(relative_change(1.0, f64::NAN), None);
    }
}
