//! What a run's human output says about its stages when there are
//! hundreds: every stage that ran, failed or was skipped on a line of its
//! own, with the count of stages done so far; fresh stages only counted;
//! restored ones on a line each for the first few of a matrix, the rest
//! folded into one line at the end (`↺ restored clean ×197 more`); and
//! the failed stages named in the final line.

use std::collections::BTreeMap;

use pipe_engine::StageStatus;

use crate::views::diff_fold::base_of;

/// Restored stages of one matrix base shown one by one before the rest
/// are folded.
const SHOWN_PER_BASE: usize = 3;
/// Failed stages named in the final line.
const FAILED_NAMED: usize = 3;

#[derive(Debug, Default)]
pub struct RunTally {
    /// The stages the run selected (`RunStarted`).
    pub total: usize,
    pub done: usize,
    pub counts: BTreeMap<&'static str, usize>,
    /// Per matrix base, how many stages ended fresh.
    fresh: BTreeMap<String, usize>,
    /// Per matrix base and detail (`from cache`, `from s3://…`), how many
    /// restored stages were shown and how many folded.
    restored: BTreeMap<(String, String), (usize, usize)>,
    failed: Vec<String>,
}

/// How one finished stage is shown.
#[derive(Debug, PartialEq, Eq)]
pub enum Shown {
    /// On a line of its own, with `[done/total]` after it.
    Line { counter: String },
    /// Counted only, said in the summary at the end.
    Folded,
}

impl RunTally {
    pub fn start(total: usize) -> RunTally {
        RunTally {
            total,
            ..RunTally::default()
        }
    }

    /// Counts a finished stage and says how to show it; `every` shows
    /// every stage on a line (`-v`).
    pub fn finished(
        &mut self,
        stage: &str,
        status: StageStatus,
        detail: Option<&str>,
        every: bool,
    ) -> Shown {
        self.done += 1;
        *self.counts.entry(status.as_str()).or_default() += 1;
        let base = base_of(stage).to_string();
        let shown = match status {
            StageStatus::Fresh => {
                *self.fresh.entry(base).or_default() += 1;
                every
            }
            StageStatus::Restored => {
                let detail = detail.unwrap_or("from cache").to_string();
                let (shown, folded) = self.restored.entry((base, detail)).or_default();
                if every || *shown < SHOWN_PER_BASE {
                    *shown += 1;
                    true
                } else {
                    *folded += 1;
                    false
                }
            }
            StageStatus::Failed | StageStatus::Interrupted => {
                self.failed.push(stage.to_string());
                true
            }
            StageStatus::Ran | StageStatus::Skipped => true,
        };
        match shown {
            true => Shown::Line {
                counter: self.counter(),
            },
            false => Shown::Folded,
        }
    }

    /// `[12/602]`.
    pub fn counter(&self) -> String {
        format!("[{}/{}]", self.done, self.total.max(self.done))
    }

    /// The lines that end a run before its verdict: the folded restored
    /// stages, then the fresh ones, by matrix base (`· fresh    clean ×597,
    /// aggregate`), cut to `width` columns.
    pub fn summary_lines(&self, width: usize) -> Vec<(&'static str, String)> {
        let mut lines = Vec::new();
        for ((base, detail), (_, folded)) in &self.restored {
            if *folded > 0 {
                lines.push(("restored", format!("{base} ×{folded} more  {detail}")));
            }
        }
        if !self.fresh.is_empty() {
            let parts: Vec<String> = self
                .fresh
                .iter()
                .map(|(base, count)| match count {
                    1 => base.clone(),
                    n => format!("{base} ×{n}"),
                })
                .collect();
            lines.push(("fresh", cut(&parts.join(", "), width.saturating_sub(12))));
        }
        lines
    }

    /// ` (train@lr=1, eval)` after the failed count of the final line.
    pub fn failed_names(&self) -> String {
        if self.failed.is_empty() {
            return String::new();
        }
        let mut named: Vec<&str> = self
            .failed
            .iter()
            .take(FAILED_NAMED)
            .map(String::as_str)
            .collect();
        let more = self.failed.len().saturating_sub(FAILED_NAMED);
        let more = (more > 0).then(|| format!("{more} more"));
        named.extend(more.as_deref());
        format!(" ({})", named.join(", "))
    }
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max.max(20) {
        return text.to_string();
    }
    let kept: String = text.chars().take(max.max(20) - 1).collect();
    format!("{kept}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_of_fresh_and_restored_stages_folds_into_a_few_lines() {
        let mut tally = RunTally::start(203);
        for sample in 0..200 {
            let stage = format!("clean@sample=S{sample:03}");
            let status = if sample < 190 {
                StageStatus::Fresh
            } else {
                StageStatus::Restored
            };
            tally.finished(&stage, status, None, false);
        }
        assert_eq!(
            tally.finished("featurize", StageStatus::Ran, None, false),
            Shown::Line {
                counter: "[201/203]".to_string()
            }
        );
        tally.finished("shard@sample=S001", StageStatus::Failed, None, false);
        let summary = tally.summary_lines(100);
        assert_eq!(
            summary,
            [
                ("restored", "clean ×7 more  from cache".to_string()),
                ("fresh", "clean ×190".to_string())
            ]
        );
        assert_eq!(tally.failed_names(), " (shard@sample=S001)");
    }
}
