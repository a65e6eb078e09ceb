//! Writing to the remote: a result's objects (those the remote lacks),
//! each hashed on the way so a local object that rotted is not spread,
//! then its action, conditionally.

use std::io::Read;

use futures::{StreamExt, TryStreamExt};
use opendal::ErrorKind;

use super::progress::{count_done, count_transferred, Direction, Outcome, Transfer};
use super::shared::{action_path, lock, object_path, Failure, Shared, CHUNK, PARTS_IN_FLIGHT};
use crate::{ActionResult, Artifact, ArtifactKind, CacheError, ObjectDigest, RemoteError};

/// Pushes one result and counts it; false when it did not reach the remote.
pub(super) async fn push_and_count(shared: &Shared, result: &ActionResult) -> bool {
    let _busy = shared.pushing.enter();
    if shared.is_unavailable() || shared.push_refused() {
        lock(&shared.report).results_not_pushed += 1;
        return false;
    }
    shared.sweep_tmp_once();
    match push_result(shared, result).await {
        Ok(_) => true,
        Err(failure) => {
            match failure {
                Failure::Remote(error) if error.kind() == ErrorKind::PermissionDenied => {
                    shared.refuse_pushes(&error)
                }
                Failure::Remote(error) => {
                    shared.give_up(&error);
                }
                Failure::NotFound => {
                    tracing::warn!(
                        "remote cache {}: result {} names an object the local cache no longer has; not pushed",
                        shared.url,
                        result.key.short()
                    );
                }
                Failure::Corrupt(reason) | Failure::Local(CacheError::Corrupt { reason, .. }) => {
                    tracing::warn!(
                        "remote cache {}: result {} not pushed: {reason} (`pipe cache verify --repair` removes it)",
                        shared.url,
                        result.key.short()
                    );
                }
                Failure::Local(error) => {
                    tracing::warn!(
                        "remote cache {}: result {} not pushed: {error}",
                        shared.url,
                        result.key.short()
                    );
                }
            }
            lock(&shared.report).results_not_pushed += 1;
            false
        }
    }
}

/// Pushes one result, reporting its progress when there is a sink.
async fn push_result(shared: &Shared, result: &ActionResult) -> Result<Outcome, Failure> {
    let objects = objects_of(shared, result)?;
    // Files named twice (the same bytes at two paths) are sent once: the
    // second naming is in place as soon as the first is.
    let total = objects.named_bytes;
    let transfer = Transfer::start(shared.progress.as_ref(), Direction::Push, result, total);
    count_done(
        transfer.as_ref(),
        total.saturating_sub(objects.unique_bytes),
    );
    let pushed = send_result(shared, result, objects.unique, transfer.as_ref()).await;
    if let Some(transfer) = transfer {
        transfer.finish(match &pushed {
            Ok(outcome) => *outcome,
            Err(_) => Outcome::Failed,
        });
    }
    pushed
}

/// Every object a result names, trees included, once each.
struct Objects {
    /// Digest, and size for a file (a tree listing's is not in the action).
    unique: Vec<(ObjectDigest, Option<u64>)>,
    /// File bytes as the result names them, and once per object.
    named_bytes: u64,
    unique_bytes: u64,
}

fn objects_of(shared: &Shared, result: &ActionResult) -> Result<Objects, Failure> {
    // Every object the result names, trees included, from the local cache.
    let mut objects: Vec<(ObjectDigest, Option<u64>)> = Vec::new();
    let mut level: Vec<Artifact> = result.outputs.values().cloned().collect();
    while !level.is_empty() {
        let mut next = Vec::new();
        for artifact in &level {
            match artifact.kind {
                ArtifactKind::File => objects.push((artifact.digest, Some(artifact.size))),
                ArtifactKind::Dir => {
                    objects.push((artifact.digest, None));
                    let entries = shared.cache.read_tree(artifact)?;
                    next.extend(entries.into_iter().map(|(_, child)| child));
                }
            }
        }
        level = next;
    }
    // Saturating: the sizes come from tree listings, which a damaged local
    // cache could make absurd; the push then fails on the object itself.
    let file_bytes = |objects: &[(ObjectDigest, Option<u64>)]| {
        objects
            .iter()
            .filter_map(|(_, size)| *size)
            .fold(0u64, u64::saturating_add)
    };
    let named_bytes = file_bytes(&objects);
    objects.sort_unstable_by_key(|(digest, _)| *digest);
    objects.dedup_by_key(|(digest, _)| *digest);
    let unique_bytes = file_bytes(&objects);
    Ok(Objects {
        unique: objects,
        named_bytes,
        unique_bytes,
    })
}

async fn send_result(
    shared: &Shared,
    result: &ActionResult,
    objects: Vec<(ObjectDigest, Option<u64>)>,
    transfer: Option<&Transfer>,
) -> Result<Outcome, Failure> {
    futures::stream::iter(objects)
        .map(|(digest, size)| send_object(shared, digest, size, transfer))
        .buffer_unordered(shared.concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    // The action last, and only if no one wrote it first, unless what is
    // there was found corrupt by this process.
    let path = action_path(&result.key);
    let json = crate::action::encode(result);
    let overwrite = shared.known_corrupt(&path);
    match shared
        .operator()
        .write_with(&path, json)
        .if_not_exists(!overwrite)
        .await
    {
        Ok(_) => {
            lock(&shared.report).results_pushed += 1;
            Ok(Outcome::Done)
        }
        Err(error) if error.kind() == ErrorKind::ConditionNotMatch => {
            lock(&shared.report).results_already_present += 1;
            Ok(Outcome::AlreadyThere)
        }
        Err(error) => Err(Failure::Remote(error)),
    }
}

/// Uploads one object unless the remote has it at the right size. Its
/// bytes are hashed on the way: a local object that rotted is not spread.
async fn send_object(
    shared: &Shared,
    digest: ObjectDigest,
    size: Option<u64>,
    transfer: Option<&Transfer>,
) -> Result<(), Failure> {
    let _permit = shared
        .transfers
        .acquire()
        .await
        .map_err(|_| Failure::Local(RemoteError::TransferPoolClosed.into()))?;
    let local = shared.cache.object_path(&digest);
    // Opened once, never through a link: a local object replaced by a link
    // to `/dev/zero` would otherwise be sent without end.
    let (file, metadata) =
        crate::untrusted::open_regular(&local).map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => Failure::NotFound,
            std::io::ErrorKind::InvalidData => {
                Failure::Corrupt(format!("local object {} {error}", digest.short()))
            }
            _ => Failure::Local(CacheError::io(&local, error)),
        })?;
    let local_size = metadata.len();
    if size.is_some_and(|size| size != local_size) {
        return Err(Failure::Corrupt(format!(
            "local object {} has {local_size} bytes, expected {}",
            digest.short(),
            size.unwrap_or_default()
        )));
    }
    let path = object_path(&digest);
    if !shared.known_corrupt(&path) {
        match shared.operator().stat(&path).await {
            Ok(metadata) if metadata.content_length() == local_size => {
                lock(&shared.report).objects_present += 1;
                if size.is_some() {
                    count_done(transfer, local_size);
                }
                return Ok(());
            }
            Ok(_) => {}
            Err(error) if error.kind() == ErrorKind::NotFound => {}
            Err(error) => return Err(Failure::Remote(error)),
        }
    }
    // What grows past the size it had when opened is not this object.
    let mut file = file.take(local_size + 1);
    let mut writer = shared
        .operator()
        .writer_with(&path)
        .chunk(CHUNK)
        .concurrent(PARTS_IN_FLIGHT)
        .await?;
    let mut hasher = blake3::Hasher::new();
    let mut sent = 0u64;
    loop {
        let mut buffer = vec![0u8; CHUNK];
        let mut filled = 0;
        while filled < CHUNK {
            let read = file
                .read(&mut buffer[filled..])
                .map_err(|error| Failure::Local(CacheError::io(&local, error)))?;
            if read == 0 {
                break;
            }
            filled += read;
        }
        if filled == 0 {
            break;
        }
        buffer.truncate(filled);
        hasher.update(&buffer);
        sent += filled as u64;
        writer.write(buffer).await?;
        // Handed to the writer, which sends it (up to 4 parts in flight)
        // before `close` returns: close enough for a bar, and free.
        count_transferred(transfer, filled as u64);
        if size.is_some() {
            count_done(transfer, filled as u64);
        }
        if filled < CHUNK {
            break;
        }
    }
    if ObjectDigest::from_bytes(*hasher.finalize().as_bytes()) != digest {
        let _ = writer.abort().await;
        return Err(Failure::Corrupt(format!(
            "local object {} does not match its digest",
            digest.short()
        )));
    }
    writer.close().await?;
    let mut report = lock(&shared.report);
    report.objects_pushed += 1;
    report.bytes_pushed += sent;
    Ok(())
}
