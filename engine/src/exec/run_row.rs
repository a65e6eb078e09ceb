//! The run's row in the run database, written when the run first does
//! something: a run whose stages are all fresh never opens the database,
//! writes nothing to it, and leaves its write-ahead log as it was (every
//! no-op used to insert a row and delete it, growing the log that the
//! next open reads back whole).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use crate::metrics::Direction;
use crate::overrides::ParamOverride;
use crate::project_files::ProjectPath;
use crate::runs::{RunDb, RunId, RunStart};
use crate::{EngineError, Result};

/// What the row says of the run's start, taken when the run started.
pub(super) struct RunStartFacts<'a> {
    pub(super) pipeline: &'a str,
    pub(super) file: Option<ProjectPath>,
    pub(super) argv: &'a [String],
    pub(super) overrides: &'a [ParamOverride],
    pub(super) sweep: bool,
    pub(super) params: &'a Value,
    pub(super) directions: &'a BTreeMap<String, Direction>,
    pub(super) git_commit: Option<String>,
    pub(super) name: Option<&'a str>,
    pub(super) branch: Option<String>,
    pub(super) head_commit: Option<String>,
    pub(super) started_ms: u64,
}

enum RowState {
    NotWritten,
    Written {
        db: RunDb,
        id: RunId,
    },
    /// The database could not take the row; the run stops with this.
    Failed(String),
}

/// The run's row, written once by whichever thread needs the run's id
/// first (a stage's log, its `PIPE_RUN_ID`, the record of what it did).
pub(super) struct RunRow<'a> {
    path: PathBuf,
    facts: RunStartFacts<'a>,
    state: Mutex<RowState>,
    error: Mutex<Option<EngineError>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<'a> RunRow<'a> {
    /// A row not written yet. A name asked for is checked now, so that a
    /// taken name stops the run before any stage starts.
    pub(super) fn new(path: PathBuf, facts: RunStartFacts<'a>) -> Result<RunRow<'a>> {
        if let Some(name) = facts.name {
            crate::runs::check_label("name", name)?;
            if let Some(db) = RunDb::open_existing(&path)? {
                db.check_name_free(name)?;
            }
        }
        Ok(RunRow {
            path,
            facts,
            state: Mutex::new(RowState::NotWritten),
            error: Mutex::new(None),
        })
    }

    /// The run's id, writing its row first if nobody has. A failure is
    /// kept for the run to end with (`take_error`); a stage that needed
    /// the id fails with its words.
    pub(super) fn id(&self) -> std::result::Result<RunId, String> {
        let mut state = lock(&self.state);
        match &*state {
            RowState::Written { id, .. } => return Ok(*id),
            RowState::Failed(message) => return Err(message.clone()),
            RowState::NotWritten => {}
        }
        match self.write() {
            Ok((db, id)) => {
                *state = RowState::Written { db, id };
                Ok(id)
            }
            Err(error) => {
                let message = format!("cannot record the run: {error}");
                *state = RowState::Failed(message.clone());
                *lock(&self.error) = Some(error);
                Err(message)
            }
        }
    }

    /// The id for a stage about to start, its failure if the row cannot
    /// be written.
    pub(super) fn id_for_stage(&self) -> std::result::Result<RunId, super::StageFailure> {
        self.id().map_err(super::StageFailure::NotRecorded)
    }

    /// The id, if the row is written.
    pub(super) fn written_id(&self) -> Option<RunId> {
        match &*lock(&self.state) {
            RowState::Written { id, .. } => Some(*id),
            _ => None,
        }
    }

    /// Runs `use_db` on the database holding the row, writing the row
    /// first if it is not.
    pub(super) fn with_db<T>(
        &self,
        use_db: impl FnOnce(&mut RunDb, RunId) -> Result<T>,
    ) -> Result<T> {
        if let Err(message) = self.id() {
            return Err(self.take_error().unwrap_or(EngineError::Internal(message)));
        }
        match &mut *lock(&self.state) {
            RowState::Written { db, id } => use_db(db, *id),
            _ => Err(EngineError::Internal("the run's row vanished".into())),
        }
    }

    /// Runs `use_db` only if the row was written.
    pub(super) fn if_written<T>(
        &self,
        use_db: impl FnOnce(&mut RunDb, RunId) -> Result<T>,
    ) -> Result<Option<T>> {
        match &mut *lock(&self.state) {
            RowState::Written { db, id } => use_db(db, *id).map(Some),
            _ => Ok(None),
        }
    }

    /// Why the row could not be written, once: the run ends with it.
    pub(super) fn take_error(&self) -> Option<EngineError> {
        lock(&self.error).take()
    }

    fn write(&self) -> Result<(RunDb, RunId)> {
        let db = RunDb::open(&self.path)?;
        let facts = &self.facts;
        let id = db.start_run(&RunStart {
            pipeline: facts.pipeline,
            file: facts.file.as_deref(),
            argv: facts.argv,
            overrides: facts.overrides,
            sweep: facts.sweep,
            params: facts.params,
            directions: facts.directions,
            git_commit: facts.git_commit.as_deref(),
            name: facts.name,
            branch: facts.branch.as_deref(),
            head_commit: facts.head_commit.as_deref(),
            started_ms: facts.started_ms,
        })?;
        Ok((db, id))
    }
}
