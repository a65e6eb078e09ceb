//! A stage found fresh on the scheduler's own thread, before any worker
//! thread is woken: the common case of a rerun. Handing each of a no-op's
//! hundred stages to the pool cost two thread wake-ups a stage, which on a
//! loaded machine waited for a core each time (as much wall time as the
//! checks themselves).
//!
//! Only what costs no reading of content is done here: every dependency
//! and output a regular file whose content the stat cache knows, the
//! result in the local cache and fitting the stage, the outputs in place.
//! Anything else (a file to hash, a directory, a miss, a restore, a remote
//! to ask) is the pool's, whose full check (`stage::execute_stage`) comes to
//! the same verdict on what this one accepts.

use std::time::Instant;

use super::context::{Context, StageOutcome};
use super::stage::keyed_manifest;
use crate::key::{self, DepDigests};
use crate::pipeline::StageKind;
use crate::runs::{StageRecord, StageStatus};
use crate::workspace::{check_action_fits, read_metrics};

/// Stage `index`'s outcome when it is fresh by the stat cache alone;
/// `None` to leave it to the pool.
pub(super) fn fresh_without_reading(context: &Context<'_>, index: usize) -> Option<StageOutcome> {
    let started = Instant::now();
    let stage = &context.pipeline.stages[index];
    if stage.always_run {
        return None;
    }
    let mut digests = DepDigests::new();
    for dep in &stage.deps {
        let producer = dep
            .producer
            .as_ref()
            .map(|producer| producer.stage.as_str());
        let path = context.dep_place(stage, &dep.path, producer);
        let artifact = context.cache.known_file_artifact(&path, &context.stat)?;
        digests.insert(dep.name.clone(), artifact);
    }
    let manifest = keyed_manifest(context, index, stage, &digests);
    let key = key::key_of(&manifest);
    let result = context.cache.get_action(&key)?;
    check_action_fits(stage, &result).ok()?;
    let root = context.root_of(stage);
    for (path, artifact) in &result.outputs {
        let current = context
            .cache
            .known_file_artifact(&root.join(path), &context.stat)?;
        if current.digest != artifact.digest || current.kind != artifact.kind {
            return None;
        }
    }
    let metrics = read_metrics(&context.cache, stage, &result).ok()?;
    // As the pool's check does: a state an interrupted attempt left is
    // never resumed once the result is in place.
    if let StageKind::Worker(_) = stage.kind {
        context.project.remove_resume_dir(&key);
    }
    Some(StageOutcome {
        index,
        record: StageRecord {
            key: Some(key),
            duration_ms: started.elapsed().as_millis() as u64,
            outputs: result.outputs.clone(),
            metrics,
            ..StageRecord::new(&stage.name, stage.identity(), StageStatus::Fresh)
        },
        manifest: Some(manifest),
        compute_ms: Some(result.duration_ms),
    })
}
