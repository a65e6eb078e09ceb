//! Reading from the remote: a result pulled into the local cache, every
//! object checked against its digest on the way, and what the remote has
//! of a result without downloading it.

use futures::{StreamExt, TryStreamExt};
use opendal::ErrorKind;

use super::outcomes::Presence;
use super::progress::{count_done, count_transferred, Direction, Outcome, Transfer};
use super::read::{read_capped, Chunks};
use super::shared::{action_path, object_path, Failure, Shared};
use crate::untrusted;
use crate::{ActionKey, ActionResult, Artifact, ArtifactKind, RemoteError};

/// Pulls `key`'s result: (objects, bytes) received.
pub(super) async fn pull_result(shared: &Shared, key: &ActionKey) -> Result<(u64, u64), Failure> {
    let path = action_path(key);
    let bytes = match read_capped(shared, &path, untrusted::ACTION_FILE).await {
        Ok(bytes) => bytes,
        Err(Failure::Corrupt(reason)) => {
            shared.mark_corrupt(&path);
            return Err(Failure::Corrupt(format!(
                "result {}: {reason}",
                key.short()
            )));
        }
        Err(other) => return Err(other),
    };
    // Checked before a single object is fetched: a result naming a path
    // its manifest does not declare is refused here, whoever wrote it.
    let result = match crate::action::decode(&bytes, key) {
        Ok(result) => result,
        Err(reason) => {
            shared.mark_corrupt(&path);
            return Err(Failure::Corrupt(format!(
                "result {}: {reason}",
                key.short()
            )));
        }
    };
    // A directory's size is the sum of its files: the top level's sizes
    // are the result's bytes.
    let total = result
        .outputs
        .values()
        .fold(0u64, |sum, artifact| sum.saturating_add(artifact.size));
    let transfer = Transfer::start(shared.progress.as_ref(), Direction::Pull, &result, total);
    let fetched = fetch_objects(shared, &result, transfer.as_ref()).await;
    if matches!(fetched, Err(Failure::Corrupt(_))) {
        // The result is rebuilt here and pushed again: its action must be
        // overwritten too, in case the rebuild is not byte-identical.
        shared.mark_corrupt(&path);
    }
    let stored = fetched.and_then(|counts| {
        shared.cache.put_action(&result)?;
        Ok(counts)
    });
    if let Some(transfer) = transfer {
        transfer.finish(match stored {
            Ok(_) => Outcome::Done,
            Err(_) => Outcome::Failed,
        });
    }
    stored
}

/// `key`'s result as the remote holds it, checked as a pull checks it,
/// with the objects of its metrics files (small files, not the outputs)
/// brought into the local cache: what a pulled run record's metrics are
/// read from. The action is not stored here; `None` when the remote has
/// none for `key`.
pub(super) async fn pull_metrics(
    shared: &Shared,
    key: &ActionKey,
) -> Result<Option<ActionResult>, Failure> {
    let path = action_path(key);
    let bytes = match read_capped(shared, &path, untrusted::ACTION_FILE).await {
        Ok(bytes) => bytes,
        Err(Failure::NotFound) => return Ok(None),
        Err(Failure::Corrupt(reason)) => {
            return Err(Failure::Corrupt(format!(
                "result {}: {reason}",
                key.short()
            )))
        }
        Err(other) => return Err(other),
    };
    let result = crate::action::decode(&bytes, key)
        .map_err(|reason| Failure::Corrupt(format!("result {}: {reason}", key.short())))?;
    for metrics_path in result.metrics_paths() {
        let artifact = &result.outputs[metrics_path.as_str()];
        if artifact.kind != ArtifactKind::File {
            return Err(Failure::Corrupt(format!(
                "result {}: its metrics file `{metrics_path}` is a directory",
                key.short()
            )));
        }
        if !shared.cache.has_object(&artifact.digest, artifact.size) {
            fetch_object(shared, artifact, None).await?;
        }
    }
    Ok(Some(result))
}

/// Brings every object `result` names into the local cache, level by
/// level: a directory's entries are known once its tree is in.
async fn fetch_objects(
    shared: &Shared,
    result: &ActionResult,
    transfer: Option<&Transfer>,
) -> Result<(u64, u64), Failure> {
    let mut level: Vec<Artifact> = result.outputs.values().cloned().collect();
    let (mut objects, mut bytes) = (0, 0);
    while !level.is_empty() {
        let mut wanted = Vec::new();
        for artifact in &level {
            let local = match artifact.kind {
                ArtifactKind::File => shared.cache.has_object(&artifact.digest, artifact.size),
                // A local tree that rotted would fail the pull at every
                // try (and be blamed on the remote): it is fetched again.
                ArtifactKind::Dir => shared.cache.has_good_tree(artifact),
            };
            if !local {
                wanted.push(artifact);
            } else if artifact.kind == ArtifactKind::File {
                count_done(transfer, artifact.size);
            }
        }
        let fetched: Vec<u64> = futures::stream::iter(wanted)
            .map(|artifact| fetch_object(shared, artifact, transfer))
            .buffer_unordered(shared.concurrency)
            .try_collect()
            .await?;
        objects += fetched.len() as u64;
        bytes += fetched.iter().sum::<u64>();
        let mut next = Vec::new();
        for artifact in level.iter().filter(|a| a.kind == ArtifactKind::Dir) {
            let entries = shared.cache.read_tree(artifact)?;
            next.extend(entries.into_iter().map(|(_, child)| child));
        }
        level = next;
    }
    Ok((objects, bytes))
}

/// Streams one object into the local cache, checking size and digest.
async fn fetch_object(
    shared: &Shared,
    artifact: &Artifact,
    transfer: Option<&Transfer>,
) -> Result<u64, Failure> {
    let _permit = shared
        .transfers
        .acquire()
        .await
        .map_err(|_| Failure::Local(RemoteError::TransferPoolClosed.into()))?;
    let path = object_path(&artifact.digest);
    let mut chunks = match Chunks::open(shared, &path, true).await {
        Err(Failure::Corrupt(reason)) => {
            shared.mark_corrupt(&path);
            return Err(Failure::Corrupt(reason));
        }
        other => other?,
    };
    let mut incoming = shared.cache.incoming_object(&artifact.digest)?;
    // A file's size is declared; a tree listing's is not, but it is
    // bounded by what one directory can hold. Nothing past either is
    // written, however much the remote has.
    let (limit, is_file) = match artifact.kind {
        ArtifactKind::File => (artifact.size, true),
        ArtifactKind::Dir => (untrusted::TREE_OBJECT.bytes, false),
    };
    let mut received = 0u64;
    while let Some(chunk) = chunks.next(shared).await? {
        received += chunk.len() as u64;
        if received > limit {
            shared.mark_corrupt(&path);
            let declared = match artifact.kind {
                ArtifactKind::File => format!("its {} bytes", artifact.size),
                ArtifactKind::Dir => format!(
                    "{}, the most {} can hold",
                    untrusted::human(limit),
                    untrusted::TREE_OBJECT.what
                ),
            };
            return Err(Failure::Corrupt(format!(
                "object {}: longer than {declared}",
                artifact.digest.short(),
            )));
        }
        incoming.write(&chunk)?;
        count_transferred(transfer, chunk.len() as u64);
        if is_file {
            count_done(transfer, chunk.len() as u64);
        }
    }
    match incoming.finish(is_file.then_some(limit)) {
        Ok(()) => Ok(received),
        Err(error) => {
            shared.mark_corrupt(&path);
            Err(error.into())
        }
    }
}

/// What the remote has of `key`'s result: its action read and checked,
/// then a `HEAD` of each top-level object.
pub(super) async fn presence(shared: &Shared, key: &ActionKey) -> Result<Presence, opendal::Error> {
    let bytes = match read_capped(shared, &action_path(key), untrusted::ACTION_FILE).await {
        Ok(bytes) => bytes,
        Err(Failure::NotFound) => return Ok(Presence::Absent),
        Err(Failure::Remote(error)) => return Err(error),
        Err(Failure::Corrupt(_) | Failure::Local(_)) => return Ok(Presence::Incomplete),
    };
    let Ok(result) = crate::action::decode(&bytes, key) else {
        return Ok(Presence::Incomplete);
    };
    // Top-level objects only: a directory's entries would mean fetching trees.
    for artifact in result.outputs.values() {
        match shared.operator().stat(&object_path(&artifact.digest)).await {
            Ok(metadata)
                if artifact.kind == ArtifactKind::Dir
                    || metadata.content_length() == artifact.size => {}
            Ok(_) => return Ok(Presence::Incomplete),
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(Presence::Incomplete),
            Err(error) => return Err(error),
        }
    }
    Ok(Presence::Complete)
}

/// `presence` of each key, `concurrency` keys at a time, in the keys'
/// order; the first failure of the remote ends it.
pub(super) async fn presence_of_all(
    shared: &Shared,
    keys: &[ActionKey],
) -> Result<Vec<Presence>, opendal::Error> {
    futures::stream::iter(keys)
        .map(|key| async move {
            // The same pool as transfers: a status beside a run's pulls
            // keeps the remote's load where `concurrency` puts it.
            let _permit = shared.transfers.acquire().await;
            presence(shared, key).await
        })
        .buffered(shared.concurrency)
        .try_collect()
        .await
}
