//! Where a restored result came from: the run that made it. A run that
//! only restored results is that run's results again, and `pipe runs`,
//! `pipe show` and their JSON say so, instead of listing it as if it had
//! produced them.

use std::collections::BTreeMap;

use rusqlite::{params, OptionalExtension};
use serde::Serialize;

use super::db::RunDb;
use super::record::RunRecord;
use crate::run_id::RunId;
use crate::Result;
use pipe_protocol::record::StageStatus;

/// The runs whose results a run restored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RestoredFrom {
    /// Each restored stage and the latest earlier run that ran it with the
    /// same key and recorded the same outputs; a stage restored from a
    /// result no run here made (pulled from a remote) is absent.
    pub stages: BTreeMap<String, RunId>,
    /// Nothing ran: every result the run has was restored.
    pub nothing_ran: bool,
}

impl RestoredFrom {
    /// The runs it restored from, each once, in order.
    pub fn runs(&self) -> Vec<RunId> {
        let mut runs: Vec<RunId> = self.stages.values().copied().collect();
        runs.sort();
        runs.dedup();
        runs
    }

    /// The runs a run that ran nothing restored, for one line about it:
    /// `None` when it ran something or restored nothing.
    pub fn only_restored(&self) -> Option<Vec<RunId>> {
        (self.nothing_ran && !self.stages.is_empty()).then(|| self.runs())
    }
}

impl RunDb {
    /// Where each restored stage of `run` came from. One indexed lookup
    /// per restored stage, over the runs that recorded its key (under any
    /// name of the stage), back from `run` to the latest that ran it: the
    /// result a restore finds is the last one stored under its key.
    pub fn restored_from(&self, run: &RunRecord) -> Result<RestoredFrom> {
        let mut restored = RestoredFrom {
            stages: BTreeMap::new(),
            nothing_ran: !run
                .stages
                .iter()
                .any(|stage| stage.status == StageStatus::Ran),
        };
        let mut statement = self
            .connection
            .prepare_cached(
                // Earlier by when runs started, not by number: a pulled run
                // may be numbered after the runs here that restored its
                // results. Found through the key's index, whatever the
                // stage was named in the run that made it: a plain run of a
                // sweep's values restores what `train@lr=2` made as `train`.
                "SELECT s.run_id FROM stage_runs s JOIN runs r ON r.id = s.run_id \
                 WHERE s.key = ?2 AND s.status = ?3 AND s.outputs = ?4 \
                 AND (r.started_ms < ?5 OR (r.started_ms = ?5 AND r.id < ?1)) \
                 ORDER BY r.started_ms DESC, r.id DESC LIMIT 1",
            )
            .map_err(|e| self.error(e))?;
        for stage in &run.stages {
            if stage.status != StageStatus::Restored {
                continue;
            }
            let Some(key) = &stage.key else {
                continue;
            };
            let outputs = super::migrate::json(&stage.outputs);
            let origin: Option<RunId> = statement
                .query_row(
                    params![
                        run.id,
                        key.to_hex(),
                        StageStatus::Ran.as_str(),
                        outputs,
                        run.started_ms as i64
                    ],
                    |row| row.get(0),
                )
                .optional()
                .map_err(|e| self.error(e))?;
            if let Some(origin) = origin {
                restored.stages.insert(stage.stage.clone(), origin);
            }
        }
        Ok(restored)
    }
}
