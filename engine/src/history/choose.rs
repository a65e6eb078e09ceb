//! Which runs `pipe diff` and `pipe compare` show when the user names
//! none: runs of one pipeline, as `dvc exp diff` compares experiments of
//! one project. Runs of several pipelines side by side are mostly
//! `(absent) -> …`; they are compared only when named, with a warning.

use std::collections::BTreeMap;
use std::path::Path;

use super::resolve::History;
use crate::runs::{RunId, RunRecord, RunSelection};
use crate::{Result, UsageError};

/// The two runs `pipe diff` compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffPair {
    pub a: RunId,
    pub b: RunId,
    /// For stderr: the two runs are of different pipelines.
    pub warning: Option<String>,
}

/// The runs `pipe compare` shows, and what to say about the choice.
#[derive(Debug, Clone)]
pub struct ComparedSelection {
    pub runs: Vec<RunRecord>,
    /// For stderr: runs of other pipelines left out, or named runs of
    /// several pipelines.
    pub notes: Vec<String>,
}

const PIPELINE_HINT: &str =
    "`--pipeline NAME` (or a pipeline file) chooses the pipeline whose runs are compared";

impl History {
    /// The pipeline `--pipeline` names: a pipeline with runs recorded
    /// here, or a pipeline file (the pipeline its `name:` or file name
    /// gives).
    pub fn pipeline_named(&self, text: &str) -> Result<String> {
        let recorded = self.db.pipelines()?;
        if recorded.iter().any(|name| name == text) {
            return Ok(text.to_string());
        }
        let file = Path::new(text);
        if file.is_file() {
            return crate::pipefile::pipeline_name(file);
        }
        let suggestion = crate::suggest::did_you_mean(text, recorded.iter().map(String::as_str))
            .map(str::to_string);
        Err(UsageError::UnknownPipeline {
            name: text.to_string(),
            suggestion,
            recorded,
        }
        .into())
    }

    /// The runs `pipe diff [A] [B] [--pipeline P]` compares. Unnamed, B
    /// is the newest successful run of the pipeline (P, else A's, else
    /// that of the newest successful run) and A the successful run of B's
    /// pipeline before it: failed and interrupted runs are skipped unless
    /// named.
    pub fn runs_to_diff(
        &self,
        a: Option<RunId>,
        b: Option<RunId>,
        pipeline: Option<&str>,
    ) -> Result<DiffPair> {
        let record = |id: RunId| self.db.resolved_run(id);
        let named_a = a.map(record).transpose()?;
        let named_b = b.map(record).transpose()?;
        let pipeline = match (pipeline, &named_a, &named_b) {
            (Some(pipeline), _, _) => Some(pipeline.to_string()),
            (None, _, Some(run)) | (None, Some(run), None) => Some(run.pipeline.clone()),
            (None, None, None) => None,
        };
        let (a, b) = match (named_a, named_b) {
            (Some(a), Some(b)) => (a, b),
            (Some(a), None) => {
                let b = self.newest_succeeded(pipeline.as_deref(), None)?;
                if b.id == a.id {
                    return Err(UsageError::NothingAfter {
                        run: a.id,
                        pipeline: a.pipeline,
                    }
                    .into());
                }
                (a, b)
            }
            (None, Some(b)) => {
                let a = self.newest_succeeded(pipeline.as_deref(), Some(&b))?;
                (a, b)
            }
            (None, None) => {
                let b = self.newest_succeeded(pipeline.as_deref(), None)?;
                let a = self.newest_succeeded(Some(&b.pipeline), Some(&b))?;
                (a, b)
            }
        };
        // `pipe diff 3 last` when run #3 is the last: a diff with nothing
        // in it that could read as "the runs agree".
        if a.id == b.id {
            return Ok(DiffPair {
                a: a.id,
                b: b.id,
                warning: Some(format!(
                    "both runs named are run #{}: it is compared with itself, so nothing differs",
                    a.id
                )),
            });
        }
        let warning = (a.pipeline != b.pipeline).then(|| {
            format!(
                "run #{} is of pipeline `{}` and run #{} of `{}`: most params and metrics will read as absent in one of them; without run names, `pipe diff` compares the last two successful runs of one pipeline (`--pipeline NAME` chooses which)",
                a.id, a.pipeline, b.id, b.pipeline
            )
        });
        Ok(DiffPair {
            a: a.id,
            b: b.id,
            warning,
        })
    }

    /// The newest successful run of `pipeline` (any pipeline when `None`),
    /// before `before` when given; a usage error saying what to do when
    /// there is none.
    fn newest_succeeded(
        &self,
        pipeline: Option<&str>,
        before: Option<&RunRecord>,
    ) -> Result<RunRecord> {
        let limit = if before.is_some() { usize::MAX } else { 1 };
        let found = self
            .db
            .succeeded_runs(pipeline, limit)?
            .into_iter()
            .find(|run| before.is_none_or(|before| run.id < before.id));
        if let Some(run) = found {
            return Ok(run);
        }
        let pipeline = pipeline.map(str::to_string);
        Err(match before {
            Some(run) => UsageError::OnlySuccessfulRun {
                run: run.id,
                pipeline,
            },
            None => UsageError::NoSuccessfulRun { pipeline },
        }
        .into())
    }

    /// The runs `pipe compare` shows for `selection`. Unless runs are
    /// named or `selection.pipeline` is set, only runs of one pipeline:
    /// that of the newest selected run; the others are left out and said so.
    pub fn runs_to_compare(&self, selection: &RunSelection) -> Result<ComparedSelection> {
        let mut runs = in_pipeline_order(self.db.runs(selection)?);
        let mut notes = Vec::new();
        let chosen = |run: &&RunRecord| !selection.also.contains(&run.id);
        let mut of_pipeline: BTreeMap<&str, Vec<RunId>> = BTreeMap::new();
        for run in runs.iter().filter(chosen) {
            of_pipeline
                .entry(run.pipeline.as_str())
                .or_default()
                .push(run.id);
        }
        if of_pipeline.len() < 2 {
            return Ok(ComparedSelection { runs, notes });
        }
        if selection.named.is_some() {
            let pipelines: Vec<String> = of_pipeline
                .iter()
                .map(|(name, ids)| format!("`{name}` ({})", run_list(ids)))
                .collect();
            notes.push(format!(
                "the runs named are of {} pipelines: {}; their rows share few columns",
                pipelines.len(),
                pipelines.join(", ")
            ));
            return Ok(ComparedSelection { runs, notes });
        }
        let newest = runs
            .iter()
            .filter(chosen)
            .max_by_key(|run| run.id)
            .map(|run| run.pipeline.clone())
            .unwrap_or_default();
        let left_out: Vec<String> = of_pipeline
            .iter()
            .filter(|(name, _)| **name != newest)
            .map(|(name, ids)| format!("`{name}` ({})", run_list(ids)))
            .collect();
        notes.push(format!(
            "comparing runs of pipeline `{newest}`, the newest run's; left out runs of {}: {PIPELINE_HINT}",
            left_out.join(", ")
        ));
        let narrowed = RunSelection {
            pipeline: Some(newest),
            ..selection.clone()
        };
        runs = in_pipeline_order(self.db.runs(&narrowed)?);
        Ok(ComparedSelection { runs, notes })
    }
}

/// Each run's stages in the pipeline's order (`position`, stable: runs
/// recorded before it was kept stay in the order they were saved), which
/// the table's rows follow; they are read in the order they finished.
fn in_pipeline_order(mut runs: Vec<RunRecord>) -> Vec<RunRecord> {
    for run in &mut runs {
        run.stages.sort_by_key(|stage| stage.identity.position);
    }
    runs
}

/// `#1, #3` (the first few of a long list, then how many more).
fn run_list(ids: &[RunId]) -> String {
    const NAMED: usize = 5;
    let mut text = ids
        .iter()
        .take(NAMED)
        .map(|id| format!("#{id}"))
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() > NAMED {
        text.push_str(&format!(" and {} more", ids.len() - NAMED));
    }
    text
}
