//! Trees nested deeper than `MAX_TREE_DEPTH`: a chain of tree objects a
//! hostile remote or a damaged cache could hold, and a real directory
//! that deep. Each walk must end in an error, never in a stack overflow,
//! on the 2 MiB stacks of test threads and rayon's workers.

use std::path::Path;

use super::cache_dir::Cache;
use super::LinkMode;
use crate::artifact::{Artifact, ArtifactKind};
use crate::tree::{self, TreeEntry, MAX_TREE_DEPTH};
use crate::{CacheError, ObjectDigest, StatCache};

fn store_bytes(cache: &Cache, bytes: &[u8]) -> ObjectDigest {
    let digest = ObjectDigest::of(bytes);
    let mut incoming = cache.incoming_object(&digest).unwrap();
    incoming.write(bytes).unwrap();
    incoming.finish(Some(bytes.len() as u64)).unwrap();
    digest
}

/// A file wrapped in `depth` directories, each a tree object in the cache.
fn nested(cache: &Cache, depth: usize) -> Artifact {
    let content = b"deep\n";
    let mut artifact = Artifact {
        kind: ArtifactKind::File,
        digest: store_bytes(cache, content),
        size: content.len() as u64,
        files: 1,
        executable: false,
    };
    for _ in 0..depth {
        let entries = vec![TreeEntry {
            name: b"d".to_vec(),
            artifact,
        }];
        let (size, files) = tree::totals(&entries).unwrap();
        artifact = Artifact {
            kind: ArtifactKind::Dir,
            digest: store_bytes(cache, &tree::encode(&entries)),
            size,
            files,
            executable: false,
        };
    }
    artifact
}

fn cache_in(dir: &Path) -> (Cache, StatCache) {
    let cache = Cache::open(&dir.join("cache")).unwrap();
    let stat = StatCache::open(&dir.join("stat.db")).unwrap();
    (cache, stat)
}

#[test]
fn a_tree_nested_past_the_limit_is_corrupt_to_every_walk_and_crashes_none() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, stat) = cache_in(dir.path());
    let hostile = nested(&cache, 5_000);
    assert!(!cache.contains(&hostile));
    let dest = dir.path().join("out");
    let error = cache
        .restore(&hostile, &dest, &[LinkMode::Copy], &stat)
        .unwrap_err();
    assert!(matches!(error, CacheError::Corrupt { .. }), "{error}");
    assert!(!dest.exists());
    let lost = cache.files_lost_by_restore(&hostile, &dest, &stat).unwrap();
    assert!(lost.is_empty());
    let report = cache
        .gc(&Default::default(), std::time::Duration::ZERO)
        .unwrap();
    assert_eq!(report.actions_kept, 0);
}

#[test]
fn a_tree_at_the_limit_restores_and_a_directory_past_it_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, stat) = cache_in(dir.path());
    let deepest = nested(&cache, MAX_TREE_DEPTH);
    assert!(cache.contains(&deepest));
    let dest = dir.path().join("out");
    cache
        .restore(&deepest, &dest, &[LinkMode::Copy], &stat)
        .unwrap();
    assert_eq!(cache.hash_path(&dest, &stat).unwrap(), deepest);

    let mut deeper = dir.path().join("deeper");
    for _ in 0..=MAX_TREE_DEPTH + 1 {
        deeper.push("d");
    }
    std::fs::create_dir_all(&deeper).unwrap();
    std::fs::write(deeper.join("f"), "x").unwrap();
    let error = cache.store(&dir.path().join("deeper"), &stat).unwrap_err();
    assert!(matches!(error, CacheError::TooDeep { .. }), "{error}");
    assert!(
        error.to_string().contains("more than 128 directories deep"),
        "{error}"
    );
}
