//! Inputs no stage makes must be there before a run: said where they are
//! written, before anything runs (`pipe validate`, `status`, `why`, `run`
//! and its `--dry-run`), not after other stages ran for minutes. Not part
//! of loading itself, so that `checkout`, `dag` and `gc` still read a
//! pipeline whose raw data is gone.

use std::collections::HashSet;

use crate::pipeline::Pipeline;
use crate::{Diagnostic, EngineError, Result};

/// Every dependency that no stage makes and that is not in the project.
pub fn check_inputs(pipeline: &Pipeline) -> Result<()> {
    let mut checked: HashSet<&str> = HashSet::new();
    let mut missing = Vec::new();
    for stage in &pipeline.stages {
        for dep in &stage.deps {
            if dep.producer.is_some() || !checked.insert(dep.path.as_str()) {
                continue;
            }
            if std::fs::symlink_metadata(pipeline.root.join(&dep.path)).is_err() {
                missing.push(
                    Diagnostic::new(
                        "missing-input",
                        format!(
                            "stage `{}` depends on `{}`, which is not there and which no stage makes",
                            stage.name, dep.path
                        ),
                    )
                    .at(dep.location.clone())
                    .with_hint(
                        "create it, fix the path (relative to the project root), or add the stage that makes it to the pipeline",
                    ),
                );
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(EngineError::Spec(missing))
    }
}
