//! A run record pulled from a remote is hostile input: anyone who can
//! write the remote wrote it. What it says of a stage's outputs and
//! metrics is taken in only as the remote's checked results prove it.

use pipe_cache::remote::Remote;
use pipe_cache::{ActionKey, ActionResult, Cache, RemoteError};
use pipe_protocol::excerpt as shown;

use crate::runs::RunExport;
use crate::runs::{NOT_IN_REMOTE, SUPERSEDED};
use crate::workspace::BadMetrics;

/// Why a pulled run record is refused; `stage` and `output` are as the
/// record writes them, shortened for a message. (One naming an output the
/// stored rule refuses never gets here: its outputs are read by that rule,
/// and it does not parse.)
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    #[error("stage `{stage}` names outputs but no key")]
    NoKey { stage: String },
    #[error("stage `{stage}`: {source}")]
    Remote { stage: String, source: RemoteError },
    #[error("stage `{stage}` names `{output}`, which its result {key} does not hold")]
    NotHeld {
        stage: String,
        output: String,
        key: String,
    },
    /// A number the history stores as a signed 64-bit integer, or a time
    /// no run could have had: taken in, it would make every listing fail.
    #[error("its `{field}` ({value}) is out of range")]
    OutOfRange { field: String, value: u64 },
    /// A sweep's `-S` settings that cannot be swept again.
    #[error("its `-S` settings: {0}")]
    Settings(crate::UsageError),
    #[error("stage `{stage}`: {source}")]
    Metrics {
        stage: String,
        source: Box<BadMetrics>,
    },
}

/// `export` as far as the results under its keys bear it out, or why it
/// is refused. Each stage that names outputs must name a key; when its
/// result (the local cache's, else the remote's, checked as a pull checks
/// it) is found, it must hold each of them (a different digest marks the
/// stage superseded), and when it is not found, the stage's outputs and
/// metrics are dropped and the stage listed as not in the remote. The
/// metrics shown are read from the result's metrics objects, each hashed,
/// never taken from the record. A stage that names no output shows no metrics. Manifests that
/// do not hash to their key are dropped (`pipe diff` would show them as
/// the stage's params).
pub(super) fn vet(
    mut export: RunExport,
    remote: &Remote,
    cache: &Cache,
) -> Result<RunExport, Refused> {
    in_range(&export)?;
    export.run.settle_sweep().map_err(Refused::Settings)?;
    // What is unverified is worked out here, never taken from a record.
    export.run.unverified.clear();
    export.manifests.retain(|hex, manifest| {
        hex.parse::<ActionKey>()
            .is_ok_and(|key| crate::key::key_of(manifest) == key)
    });
    for stage in &mut export.run.stages {
        let name = shown(&stage.stage);
        // A page is opened by `pipe show --open`: only a file inside an
        // output the record names (one the stored rule refuses was dropped
        // when the record was read).
        let outputs: Vec<String> = stage
            .outputs
            .keys()
            .map(|output| format!("{output}/"))
            .collect();
        stage.identity.pages.retain(|page| {
            outputs
                .iter()
                .any(|output| page.starts_with(output.as_str()))
        });
        if stage.outputs.is_empty() {
            stage.metrics.clear();
            continue;
        }
        let Some(key) = stage.key else {
            return Err(Refused::NoKey { stage: name });
        };
        let result = match result_of(&key, remote, cache) {
            Ok(Some(result)) => result,
            // The run happened, but what it says this stage made is not
            // there to check: a push that failed or was cut short, a
            // result collected since. The rest of the record stands; this
            // stage's outputs and metrics are not shown.
            Ok(None) => {
                stage.outputs.clear();
                stage.metrics.clear();
                export
                    .run
                    .unverified
                    .push(format!("{NOT_IN_REMOTE}{}", stage.stage));
                continue;
            }
            Err(source) => {
                return Err(Refused::Remote {
                    stage: name,
                    source,
                })
            }
        };
        let mut superseded = false;
        for (path, artifact) in &stage.outputs {
            match result.outputs.get(path.as_str()) {
                Some(stored)
                    if stored.digest == artifact.digest && stored.kind == artifact.kind => {}
                // The same output, made otherwise: two runs of one key at
                // once (a timing in a metrics file), and the other's result
                // was stored first. The run happened; what it made is not
                // here to show.
                Some(_) => superseded = true,
                None => {
                    return Err(Refused::NotHeld {
                        stage: name,
                        output: shown(path),
                        key: key.short(),
                    })
                }
            }
        }
        if superseded {
            stage.outputs.clear();
            stage.metrics.clear();
            export
                .run
                .unverified
                .push(format!("{SUPERSEDED}{}", stage.stage));
            continue;
        }
        stage.metrics =
            crate::workspace::read_result_metrics(cache, &result).map_err(|source| {
                Refused::Metrics {
                    stage: name.clone(),
                    source: Box::new(source),
                }
            })?;
    }
    Ok(export)
}

/// The last millisecond of the year 9999: no run starts or lasts later.
pub(crate) const LATEST_MS: u64 = 253_402_300_799_999;

/// The latest a change of labels pulled from elsewhere may claim: a day
/// ahead of this clock, for clocks that disagree. A later stamp would win
/// over every change made here until then.
pub(crate) fn latest_labels_ms() -> u64 {
    crate::runs::now_ms().saturating_add(24 * 3600 * 1000)
}

/// Every number of the record the history stores, within what it can
/// store and read back.
fn in_range(export: &RunExport) -> Result<(), Refused> {
    let run = &export.run;
    let mut checks: Vec<(String, u64, u64)> = vec![
        ("started_ms".into(), run.started_ms, LATEST_MS),
        ("ended_ms".into(), run.ended_ms.unwrap_or(0), LATEST_MS),
        (
            "labels_ms".into(),
            run.labels_ms.unwrap_or(0),
            latest_labels_ms(),
        ),
    ];
    for stage in &run.stages {
        let name = shown(&stage.stage);
        checks.push((format!("{name}.duration_ms"), stage.duration_ms, LATEST_MS));
        // A pipeline of more stages than this is refused at load.
        checks.push((
            format!("{name}.position"),
            stage.identity.position as u64,
            u32::MAX as u64,
        ));
    }
    match checks.into_iter().find(|(_, value, most)| value > most) {
        Some((field, value, _)) => Err(Refused::OutOfRange { field, value }),
        None => Ok(()),
    }
}

/// `key`'s result from the local cache, else from the remote; `None`
/// when neither has it.
fn result_of(
    key: &ActionKey,
    remote: &Remote,
    cache: &Cache,
) -> Result<Option<ActionResult>, RemoteError> {
    match cache.get_action(key) {
        Some(result) => Ok(Some(result)),
        None => remote.pull_metrics(key),
    }
}

#[cfg(test)]
mod tests {
    use pipe_cache::{Artifact, ArtifactKind, ObjectDigest};
    use serde_json::{json, Value};

    use crate::runs::RunExport;

    const HOSTILE: [&str; 4] = ["../x", "/etc/passwd", ".git/config", "a/./b"];

    /// A pulled record of one stage with output `out` (a directory) and
    /// the page inside it, edited by `edit`.
    fn record(edit: impl FnOnce(&mut Value)) -> serde_json::Result<RunExport> {
        let artifact = Artifact {
            kind: ArtifactKind::Dir,
            digest: ObjectDigest::of(b"tree"),
            size: 1,
            files: 1,
            executable: false,
        };
        let mut written = json!({
            "format": RunExport::FORMAT,
            "run": {
                "uid": "0123456789abcdef", "pipeline": "pipe", "file": "pipe.yaml",
                "started_ms": 1, "ended_ms": 2, "status": "succeeded",
                "git_commit": null, "git_dirty": null, "argv": ["pipe", "run"],
                "params": {},
                "stages": [{
                    "stage": "report", "key": null, "status": "ran", "duration_ms": 1,
                    "outputs": { "out": artifact }, "metrics": {},
                    "pages": ["out/index.html"],
                }],
            },
            "manifests": {},
        });
        edit(&mut written);
        serde_json::from_value(written)
    }

    #[test]
    fn a_pulled_record_holds_no_path_the_stored_rule_refuses() {
        let plain = record(|_| {}).unwrap();
        assert_eq!(plain.run.file.as_deref(), Some("pipe.yaml"));
        assert_eq!(plain.run.stages[0].identity.pages, ["out/index.html"]);
        for hostile in HOSTILE {
            // An output: the whole record is refused, naming the path.
            let error = record(|written| {
                let stage = &mut written["run"]["stages"][0];
                stage["outputs"][hostile] = stage["outputs"]["out"].clone();
            })
            .expect_err(hostile);
            assert!(error.to_string().contains(hostile), "{hostile}: {error}");
            // A page: dropped, the rest kept.
            let read = record(|written| {
                written["run"]["stages"][0]["pages"] = json!([hostile, "out/index.html"]);
            })
            .unwrap();
            assert_eq!(read.run.stages[0].identity.pages, ["out/index.html"]);
            // The pipeline file: none, the rest kept.
            let read = record(|written| written["run"]["file"] = json!(hostile)).unwrap();
            assert_eq!(read.run.file, None, "{hostile}");
            assert_eq!(read.run.stages[0].outputs.len(), 1);
        }
    }
}
