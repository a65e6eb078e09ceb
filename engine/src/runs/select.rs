//! The runs `pipe diff` chooses from when none is named, and the
//! pipelines `--pipeline` may name.

use rusqlite::params;

use super::db::RunDb;
use super::record::RunRecord;
use super::record::{run_columns, run_from_row};
use crate::Result;
use pipe_protocol::record::RunStatus;

impl RunDb {
    /// The newest runs that succeeded, of `pipeline` when given, newest
    /// first (without their stages): what `pipe diff` chooses from.
    pub fn succeeded_runs(&self, pipeline: Option<&str>, limit: usize) -> Result<Vec<RunRecord>> {
        let query = format!(
            "SELECT {} FROM runs r WHERE r.status = ?1 AND (?2 IS NULL OR r.pipeline = ?2)
             ORDER BY r.started_ms DESC, r.id DESC LIMIT ?3",
            run_columns("r")
        );
        let mut statement = self.connection.prepare(&query).map_err(|e| self.error(e))?;
        let mut rows = statement
            .query(params![
                RunStatus::Succeeded.as_str(),
                pipeline,
                limit.min(i64::MAX as usize) as i64
            ])
            .map_err(|e| self.error(e))?;
        let mut runs = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.error(e))? {
            runs.push(run_from_row(row, &self.path)?);
        }
        Ok(runs)
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
