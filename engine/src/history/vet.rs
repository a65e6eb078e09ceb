//! A run record pulled from a remote is hostile input: anyone who can
//! write the remote wrote it. What it says of a stage's outputs and
//! metrics is taken in only as the remote's checked results prove it.

use pipe_cache::remote::Remote;
use pipe_cache::{ActionKey, ActionResult, Cache};
use pipe_protocol::excerpt as shown;

use crate::runs::RunExport;

/// `export` as far as the results under its keys bear it out, or why it
/// is refused. Each stage that names outputs must name a key whose result
/// (the local cache's, else the remote's, checked as a pull checks it)
/// holds each of them with the same digest; its metrics are then read
/// from that result's metrics objects, each hashed, never taken from the
/// record. A stage that names no output shows no metrics. Manifests that
/// do not hash to their key are dropped (`pipe diff` would show them as
/// the stage's params).
pub(super) fn vet(
    mut export: RunExport,
    remote: &Remote,
    cache: &Cache,
) -> Result<RunExport, String> {
    export.manifests.retain(|hex, manifest| {
        hex.parse::<ActionKey>()
            .is_ok_and(|key| crate::key::key_of(manifest) == key)
    });
    for stage in &mut export.run.stages {
        let name = shown(&stage.stage);
        if let Some((output, problem)) = stage.outputs.keys().find_map(|output| {
            pipe_cache::check_relative_path(output)
                .err()
                .map(|problem| (output, problem))
        }) {
            return Err(format!(
                "stage `{name}` names an output `{}` that {problem}",
                shown(output)
            ));
        }
        if stage.outputs.is_empty() {
            stage.metrics.clear();
            continue;
        }
        let Some(key) = stage.key else {
            return Err(format!("stage `{name}` names outputs but no key"));
        };
        let result = result_of(&key, remote, cache)
            .map_err(|problem| format!("stage `{name}`: {problem}"))?;
        for (path, artifact) in &stage.outputs {
            match result.outputs.get(path) {
                Some(stored)
                    if stored.digest == artifact.digest && stored.kind == artifact.kind => {}
                _ => {
                    return Err(format!(
                        "stage `{name}` names `{}`, which its result {} does not hold",
                        shown(path),
                        key.short()
                    ))
                }
            }
        }
        stage.metrics = crate::workspace::read_result_metrics(cache, &result)
            .map_err(|problem| format!("stage `{name}`: {problem}"))?;
    }
    Ok(export)
}

fn result_of(key: &ActionKey, remote: &Remote, cache: &Cache) -> Result<ActionResult, String> {
    if let Some(result) = cache.get_action(key) {
        return Ok(result);
    }
    remote
        .pull_metrics(key)
        .map_err(|error| error.to_string())?
        .ok_or_else(|| format!("its result {} is not in the remote", key.short()))
}
