//! The runs `pipe diff` chooses from when none is named, and the
//! pipelines `--pipeline` may name.

use super::db::RunDb;
use super::query::RunSelection;
use super::record::RunRecord;
use crate::Result;
use pipe_protocol::record::RunStatus;

impl RunDb {
    /// The newest runs that succeeded, of `pipeline` when given, newest
    /// first: what `pipe diff` chooses from.
    pub fn succeeded_runs(&self, pipeline: Option<&str>, limit: usize) -> Result<Vec<RunRecord>> {
        let succeeded = RunSelection {
            pipeline: pipeline.map(str::to_string),
            statuses: Some(vec![RunStatus::Succeeded]),
            ..RunSelection::default()
        };
        self.newest_runs(succeeded, limit)
    }

    /// The names of the pipelines with a recorded run, in order.
    pub fn pipelines(&self) -> Result<Vec<String>> {
        let mut statement = self
            .connection
            .prepare("SELECT DISTINCT pipeline FROM runs ORDER BY pipeline")
            .map_err(|e| self.error(e))?;
        let names = statement
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(|e| self.error(e))?
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| self.error(e))?;
        Ok(names)
    }
}
