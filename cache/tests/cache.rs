use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use pipe_cache::{
    ActionKey, ActionResult, Artifact, ArtifactKind, Cache, CacheError, LinkMode, ObjectDigest,
    StatCache,
};
use pipe_protocol::ProjectPath;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    cache: Cache,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    let cache = Cache::open(&root.join("cache")).expect("open cache");
    Fixture {
        _dir: dir,
        root,
        cache,
    }
}

fn write(path: &Path, content: &[u8]) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).expect("mkdir");
    }
    fs::write(path, content).expect("write");
}

/// Moves a file's mtime out of the racy window so the stat cache trusts it.
fn age(path: &Path) {
    let file = fs::File::open(path).expect("open for set_modified");
    file.set_modified(SystemTime::now() - Duration::from_secs(60))
        .expect("set_modified");
}

fn age_tree(path: &Path) {
    if path.is_dir() {
        for entry in fs::read_dir(path).expect("read_dir") {
            age_tree(&entry.expect("entry").path());
        }
    } else {
        age(path);
    }
}

/// Every file under `path` with content and executable bit, keyed by
/// relative path; directories appear with `None`.
fn snapshot(path: &Path) -> BTreeMap<String, Option<(Vec<u8>, bool)>> {
    fn walk(base: &Path, path: &Path, out: &mut BTreeMap<String, Option<(Vec<u8>, bool)>>) {
        let relative = path
            .strip_prefix(base)
            .expect("prefix")
            .to_string_lossy()
            .into_owned();
        let metadata = fs::symlink_metadata(path).expect("stat");
        if metadata.is_dir() {
            out.insert(relative, None);
            for entry in fs::read_dir(path).expect("read_dir") {
                walk(base, &entry.expect("entry").path(), out);
            }
        } else {
            let executable = metadata.permissions().mode() & 0o100 != 0;
            out.insert(relative, Some((fs::read(path).expect("read"), executable)));
        }
    }
    let mut out = BTreeMap::new();
    walk(path, path, &mut out);
    out
}

fn make_nested(dir: &Path) {
    write(&dir.join("a.txt"), b"alpha");
    write(&dir.join("empty"), b"");
    write(&dir.join("sub/b.bin"), &vec![7u8; 70_000]);
    write(&dir.join("sub/deeper/c.txt"), b"gamma");
    fs::create_dir_all(dir.join("sub/empty-dir")).expect("mkdir");
    write(&dir.join("run.sh"), b"#!/bin/sh\necho hi\n");
    fs::set_permissions(dir.join("run.sh"), fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn action(key: ActionKey, outputs: &[(&str, &Artifact)]) -> ActionResult {
    ActionResult {
        key,
        outputs: outputs
            .iter()
            .map(|(name, artifact)| (ProjectPath::stored(name).unwrap(), (*artifact).clone()))
            .collect(),
        manifest: pipe_cache::manifest_of(&serde_json::json!({
            "stage": "test",
            "outs": outputs
                .iter()
                .map(|(name, _)| (name.to_string(), serde_json::json!(name)))
                .collect::<serde_json::Map<_, _>>(),
        })),
        created_unix_ms: 1,
        duration_ms: 2,
    }
}

fn make_writable_and_flip(path: &Path, offset: usize) {
    fs::set_permissions(path, fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut bytes = fs::read(path).expect("read object");
    bytes[offset] ^= 0x01;
    fs::write(path, bytes).expect("write object");
}

#[test]
fn open_creates_layout_and_rejects_other_versions() {
    let fixture = fixture();
    let root = fixture.root.join("cache");
    for dir in ["objects", "actions", "tmp"] {
        assert!(root.join(dir).is_dir(), "{dir} missing");
    }
    assert_eq!(
        fs::read_to_string(root.join("VERSION"))
            .expect("VERSION")
            .trim(),
        "pipe-cache-v1"
    );
    Cache::open(&root).expect("reopen");
    fs::write(root.join("VERSION"), "pipe-cache-v0\n").expect("write VERSION");
    match Cache::open(&root) {
        Err(CacheError::Layout { found, .. }) => assert_eq!(found, "pipe-cache-v0"),
        Err(other) => panic!("expected a layout error, got {other}"),
        Ok(_) => panic!("expected a layout error"),
    }
}

#[test]
fn file_digest_is_plain_blake3() {
    let fixture = fixture();
    let stat = StatCache::disabled();
    for size in [0usize, 1, 1023, 70_000, (1 << 20) - 1, 1 << 20, 3 << 20] {
        let content: Vec<u8> = (0..size).map(|index| (index * 31 % 251) as u8).collect();
        let path = fixture.root.join(format!("file-{size}"));
        write(&path, &content);
        let artifact = fixture.cache.hash_path(&path, &stat).expect("hash");
        assert_eq!(artifact.kind, ArtifactKind::File);
        assert_eq!(
            artifact.digest,
            ObjectDigest::from_bytes(*blake3::hash(&content).as_bytes()),
            "size {size}"
        );
        assert_eq!(artifact.size, size as u64);
        assert_eq!(artifact.files, 1);
    }
    assert_eq!(stat.files_hashed(), 7);
}

#[test]
fn directory_totals_and_tree_listing() {
    let fixture = fixture();
    let dir = fixture.root.join("out");
    make_nested(&dir);
    let stat = StatCache::disabled();
    let artifact = fixture.cache.store(&dir, &stat).expect("store");
    assert_eq!(artifact.kind, ArtifactKind::Dir);
    assert_eq!(artifact.files, 5);
    assert_eq!(artifact.size, 5 + 70_000 + 5 + 18);
    let tree_bytes = fs::read(fixture.cache.object_path(&artifact.digest)).expect("tree object");
    assert_eq!(ObjectDigest::of(&tree_bytes), artifact.digest);
    let entries = fixture.cache.read_tree(&artifact).expect("read tree");
    let names: Vec<&str> = entries.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["a.txt", "empty", "run.sh", "sub"]);
    assert!(entries[2].1.executable);
    assert_eq!(
        fixture.cache.hash_path(&dir, &stat).expect("hash").digest,
        artifact.digest
    );
    assert!(fixture.cache.contains(&artifact));
}

#[test]
fn symlink_inside_directory_is_unsupported() {
    let fixture = fixture();
    let dir = fixture.root.join("out");
    write(&dir.join("real"), b"x");
    std::os::unix::fs::symlink("real", dir.join("link")).expect("symlink");
    match fixture.cache.hash_path(&dir, &StatCache::disabled()) {
        Err(CacheError::Unsupported { path }) => assert_eq!(path, dir.join("link")),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[test]
fn round_trip_with_each_link_mode() {
    let cases: [&[LinkMode]; 4] = [
        &[LinkMode::Reflink, LinkMode::Copy],
        &[LinkMode::Hardlink, LinkMode::Copy],
        &[LinkMode::Copy],
        &LinkMode::DEFAULT_ORDER,
    ];
    for modes in cases {
        let fixture = fixture();
        let source = fixture.root.join("source");
        make_nested(&source);
        let single = fixture.root.join("single.bin");
        write(&single, b"single file");
        let stat = StatCache::disabled();
        let dir_artifact = fixture.cache.store(&source, &stat).expect("store dir");
        let file_artifact = fixture.cache.store(&single, &stat).expect("store file");

        // Restore over something awkward: a tree with read-only parts.
        let dest = fixture.root.join("restored/out");
        write(&dest.join("stale/old.txt"), b"old");
        fs::set_permissions(
            dest.join("stale/old.txt"),
            fs::Permissions::from_mode(0o444),
        )
        .expect("chmod");
        fs::set_permissions(dest.join("stale"), fs::Permissions::from_mode(0o555)).expect("chmod");
        fixture
            .cache
            .restore(&dir_artifact, &dest, modes, &stat)
            .expect("restore dir");
        assert_eq!(snapshot(&dest), snapshot(&source), "modes {modes:?}");

        let file_dest = fixture.root.join("restored/single.bin");
        write(&file_dest, b"previous content");
        fixture
            .cache
            .restore(&file_artifact, &file_dest, modes, &stat)
            .expect("restore file");
        assert_eq!(fs::read(&file_dest).expect("read"), b"single file");

        let object = fixture.cache.object_path(&file_artifact.digest);
        let object_metadata = fs::metadata(&object).expect("object");
        assert_eq!(
            object_metadata.permissions().mode() & 0o777,
            0o444,
            "objects are read-only"
        );
        let restored = fs::metadata(&file_dest).expect("restored");
        let hardlinked = restored.ino() == object_metadata.ino();
        if modes[0] == LinkMode::Hardlink {
            assert!(hardlinked, "hard link expected");
        }
        if !modes.contains(&LinkMode::Hardlink) {
            assert!(!hardlinked, "no hard link was allowed");
        }
        let expected_mode = if hardlinked { 0o444 } else { 0o644 };
        assert_eq!(restored.permissions().mode() & 0o777, expected_mode);
        let script = fs::metadata(dest.join("run.sh")).expect("script");
        assert_eq!(script.permissions().mode() & 0o777, 0o755);

        // No staging directories are left next to the destinations.
        let leftovers: Vec<_> = fs::read_dir(fixture.root.join("restored"))
            .expect("read_dir")
            .map(|entry| entry.expect("entry").file_name())
            .filter(|name| name.to_string_lossy().contains("pipe-tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}

#[test]
fn hardlink_only_fails_for_executables_without_copy() {
    let fixture = fixture();
    let script = fixture.root.join("tool.sh");
    write(&script, b"#!/bin/sh\n");
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
    let stat = StatCache::disabled();
    let artifact = fixture.cache.store(&script, &stat).expect("store");
    assert!(artifact.executable);
    let dest = fixture.root.join("tool-restored.sh");
    assert!(fixture
        .cache
        .restore(&artifact, &dest, &[LinkMode::Hardlink], &stat)
        .is_err());
    assert!(!dest.exists());
}

#[test]
fn flipped_byte_is_corrupt_on_restore_and_in_verify() {
    let fixture = fixture();
    let source = fixture.root.join("source");
    make_nested(&source);
    let stat = StatCache::disabled();
    let artifact = fixture.cache.store(&source, &stat).expect("store");
    let key = ActionKey::of(b"stage");
    fixture
        .cache
        .put_action(&action(key, &[("out", &artifact)]))
        .expect("put");

    let big = fixture
        .cache
        .hash_path(&source.join("sub/b.bin"), &stat)
        .expect("hash");
    let object = fixture.cache.object_path(&big.digest);
    make_writable_and_flip(&object, 1234);

    let report = fixture.cache.verify().expect("verify");
    assert_eq!(report.corrupt, vec![big.digest.to_hex()]);
    assert_eq!(report.corrupt_actions, vec![key.to_hex()]);
    assert!(report.objects_checked >= 5);

    // Same size, so the cheap check still finds the action.
    assert!(fixture.cache.get_action(&key).is_some());
    let dest = fixture.root.join("dest");
    write(&dest.join("previous"), b"stale output");
    for modes in [&[LinkMode::Copy][..], &[LinkMode::Hardlink][..]] {
        match fixture.cache.restore(&artifact, &dest, modes, &stat) {
            Err(CacheError::Corrupt { .. }) => {}
            other => panic!("expected Corrupt, got {other:?}"),
        }
        assert!(fs::symlink_metadata(&dest).is_err(), "dest must be absent");
    }
    // The bad object was discarded, so the action is now a miss and the
    // next store puts a good object back.
    assert!(fixture.cache.get_action(&key).is_none());
    fixture.cache.store(&source, &stat).expect("store again");
    fixture
        .cache
        .restore(&artifact, &dest, &[LinkMode::Copy], &stat)
        .expect("restore after repair");
    assert_eq!(snapshot(&dest), snapshot(&source));
    let report = fixture.cache.verify().expect("verify");
    assert!(
        report.corrupt.is_empty() && report.corrupt_actions.is_empty(),
        "{report:?}"
    );
}

#[test]
fn corrupt_tree_object_is_detected() {
    let fixture = fixture();
    let source = fixture.root.join("source");
    make_nested(&source);
    let stat = StatCache::disabled();
    let artifact = fixture.cache.store(&source, &stat).expect("store");
    make_writable_and_flip(&fixture.cache.object_path(&artifact.digest), 20);
    let dest = fixture.root.join("dest");
    assert!(matches!(
        fixture
            .cache
            .restore(&artifact, &dest, &[LinkMode::Copy], &stat),
        Err(CacheError::Corrupt { .. })
    ));
    assert!(!dest.exists());
    assert!(!fixture.cache.contains(&artifact));
}

#[test]
fn get_action_misses_on_truncated_missing_or_bad_entries() {
    let fixture = fixture();
    let source = fixture.root.join("source");
    make_nested(&source);
    let single = fixture.root.join("model.bin");
    write(&single, &vec![3u8; 10_000]);
    let stat = StatCache::disabled();
    let dir_artifact = fixture.cache.store(&source, &stat).expect("store");
    let file_artifact = fixture.cache.store(&single, &stat).expect("store");
    let key = ActionKey::of(b"train");
    let result = action(
        key,
        &[("out", &dir_artifact), ("model.bin", &file_artifact)],
    );
    fixture.cache.put_action(&result).expect("put");
    assert_eq!(fixture.cache.get_action(&key), Some(result.clone()));
    assert!(fixture.cache.get_action(&ActionKey::of(b"other")).is_none());

    // Truncated object (inside the directory).
    let inner = fixture
        .cache
        .hash_path(&source.join("sub/b.bin"), &stat)
        .expect("hash");
    let object = fixture.cache.object_path(&inner.digest);
    fs::set_permissions(&object, fs::Permissions::from_mode(0o644)).expect("chmod");
    let file = fs::OpenOptions::new()
        .write(true)
        .open(&object)
        .expect("open");
    file.set_len(100).expect("truncate");
    assert!(fixture.cache.get_action(&key).is_none());
    fixture.cache.store(&source, &stat).expect("store repairs");
    assert!(fixture.cache.get_action(&key).is_some());

    // Missing object.
    fs::remove_file(fixture.cache.object_path(&file_artifact.digest)).expect("rm");
    assert!(fixture.cache.get_action(&key).is_none());
    fixture.cache.store(&single, &stat).expect("store repairs");
    assert!(fixture.cache.get_action(&key).is_some());

    // Unparsable, and filed under the wrong key.
    let path = fixture.cache.action_path(&key);
    fs::write(&path, b"{\"key\": ").expect("write");
    assert!(fixture.cache.get_action(&key).is_none());
    let other = ActionKey::of(b"someone else");
    fixture
        .cache
        .put_action(&action(other, &[]))
        .expect("put other");
    fs::copy(fixture.cache.action_path(&other), &path).expect("file it under this key");
    fs::remove_file(fixture.cache.action_path(&other)).expect("rm other");
    assert!(fixture.cache.get_action(&key).is_none());
    let report = fixture.cache.verify().expect("verify");
    assert_eq!(report.corrupt_actions, vec![key.to_hex()]);
}

#[test]
fn stat_cache_skips_unchanged_files() {
    let fixture = fixture();
    let data = fixture.root.join("data");
    for index in 0..20 {
        write(
            &data.join(format!("part-{index:02}.txt")),
            format!("row {index}\n").as_bytes(),
        );
    }
    write(&data.join("nested/big.bin"), &vec![9u8; 2 << 20]);
    age_tree(&data);
    let db = fixture.root.join("state/stat.db");

    let first_digest = {
        let stat = StatCache::open(&db).expect("open stat");
        let artifact = fixture.cache.hash_path(&data, &stat).expect("hash");
        assert_eq!(stat.files_hashed(), 21);
        assert_eq!(
            fixture.cache.hash_path(&data, &stat).expect("hash").digest,
            artifact.digest
        );
        assert_eq!(
            stat.files_hashed(),
            21,
            "second hash in the same process rehashed"
        );
        stat.flush().expect("flush");
        artifact.digest
    };

    let stat = StatCache::open(&db).expect("reopen stat");
    assert_eq!(
        fixture.cache.hash_path(&data, &stat).expect("hash").digest,
        first_digest
    );
    assert_eq!(
        stat.files_hashed(),
        0,
        "a fresh process rehashed unchanged files"
    );

    let changed = data.join("part-07.txt");
    write(&changed, b"row seven, edited\n");
    age(&changed);
    let after = fixture.cache.hash_path(&data, &stat).expect("hash");
    assert_ne!(after.digest, first_digest);
    assert_eq!(stat.files_hashed(), 1);

    // Same size, same (old) mtime, new content: ctime still gives it away.
    let before_edit = stat.files_hashed();
    fs::write(&changed, b"row SEVEN, edited\n").expect("write");
    age(&changed);
    let edited = fixture.cache.hash_path(&data, &stat).expect("hash");
    assert_ne!(edited.digest, after.digest);
    assert_eq!(stat.files_hashed(), before_edit + 1);
}

#[test]
fn concurrent_stat_caches_merge_on_flush() {
    let fixture = fixture();
    let db = fixture.root.join("stat.db");
    let first_path = fixture.root.join("one");
    let second_path = fixture.root.join("two");
    write(&first_path, b"1");
    write(&second_path, b"2");
    age(&first_path);
    age(&second_path);
    let first = StatCache::open(&db).expect("open");
    let second = StatCache::open(&db).expect("open");
    fixture.cache.hash_path(&first_path, &first).expect("hash");
    fixture
        .cache
        .hash_path(&second_path, &second)
        .expect("hash");
    first.flush().expect("flush");
    second.flush().expect("flush");
    let third = StatCache::open(&db).expect("open");
    fixture.cache.hash_path(&first_path, &third).expect("hash");
    fixture.cache.hash_path(&second_path, &third).expect("hash");
    assert_eq!(third.files_hashed(), 0);
}

#[test]
fn racily_clean_files_are_not_trusted() {
    let fixture = fixture();
    let path = fixture.root.join("fresh.txt");
    write(&path, b"just written");
    let stat = StatCache::open(&fixture.root.join("stat.db")).expect("open");
    fixture.cache.hash_path(&path, &stat).expect("hash");
    fixture.cache.hash_path(&path, &stat).expect("hash");
    assert_eq!(
        stat.files_hashed(),
        2,
        "a file modified just now must be rehashed"
    );
    let metadata = fs::metadata(&path).expect("stat");
    stat.record(&path, &metadata, ObjectDigest::of(b"just written"));
    assert!(stat.lookup(&path, &metadata).is_none());

    let disabled = StatCache::disabled();
    age(&path);
    let metadata = fs::metadata(&path).expect("stat");
    disabled.record(&path, &metadata, ObjectDigest::of(b"just written"));
    assert!(disabled.lookup(&path, &metadata).is_none());
    stat.record(&path, &metadata, ObjectDigest::of(b"just written"));
    assert_eq!(
        stat.lookup(&path, &metadata),
        Some(ObjectDigest::of(b"just written"))
    );
}

#[test]
fn restore_records_files_in_the_stat_cache() {
    let fixture = fixture();
    let source = fixture.root.join("source");
    make_nested(&source);
    let stat = StatCache::open(&fixture.root.join("stat.db")).expect("open");
    let artifact = fixture.cache.store(&source, &stat).expect("store");
    // Objects written long ago: their hard links are not racily clean.
    age_tree(&fixture.cache.root().join("objects"));
    let dest = fixture.root.join("dest");
    fixture
        .cache
        .restore(
            &artifact,
            &dest,
            &[LinkMode::Hardlink, LinkMode::Copy],
            &stat,
        )
        .expect("restore");
    let before = stat.files_hashed();
    assert_eq!(
        fixture.cache.hash_path(&dest, &stat).expect("hash").digest,
        artifact.digest
    );
    // Only the executable is a fresh copy (hard links cannot carry +x).
    assert_eq!(stat.files_hashed() - before, 1);
}

#[test]
fn gc_keeps_reachable_and_removes_the_rest() {
    let fixture = fixture();
    let stat = StatCache::disabled();
    let kept_dir = fixture.root.join("kept");
    make_nested(&kept_dir);
    let dropped = fixture.root.join("dropped.bin");
    write(&dropped, &vec![1u8; 4096]);
    let kept_artifact = fixture.cache.store(&kept_dir, &stat).expect("store");
    let dropped_artifact = fixture.cache.store(&dropped, &stat).expect("store");
    let keep_key = ActionKey::of(b"keep");
    let drop_key = ActionKey::of(b"drop");
    fixture
        .cache
        .put_action(&action(keep_key, &[("kept", &kept_artifact)]))
        .expect("put");
    fixture
        .cache
        .put_action(&action(drop_key, &[("dropped.bin", &dropped_artifact)]))
        .expect("put");
    let keep: HashSet<ActionKey> = [keep_key].into_iter().collect();

    // Everything is younger than the grace period: nothing goes.
    let report = fixture
        .cache
        .gc(&keep, Duration::from_secs(3600))
        .expect("gc");
    assert_eq!((report.objects_removed, report.actions_removed), (0, 0));
    assert_eq!(report.actions_kept, 2);

    let report = fixture.cache.gc(&keep, Duration::ZERO).expect("gc");
    assert_eq!(report.actions_removed, 1);
    assert_eq!(report.actions_kept, 1);
    assert_eq!(report.objects_removed, 1);
    assert_eq!(report.bytes_removed, 4096);
    // 5 distinct file contents plus 4 trees (root, sub, sub/deeper, the empty dir).
    assert_eq!(report.objects_kept, 5 + 4);
    assert!(fixture.cache.get_action(&keep_key).is_some());
    assert!(fixture.cache.get_action(&drop_key).is_none());
    assert!(!fixture.cache.object_path(&dropped_artifact.digest).exists());
    let dest = fixture.root.join("dest");
    fixture
        .cache
        .restore(&kept_artifact, &dest, &[LinkMode::Copy], &stat)
        .expect("restore");
    assert_eq!(snapshot(&dest), snapshot(&kept_dir));
}

/// gc must not delete what a kept result needs because it could not read
/// the result's action or one of its trees (EIO, EACCES): that is an error
/// naming the file, and nothing is removed. A path that is a directory
/// fails `read` the same way, and is what a test running as root can make.
#[test]
fn gc_fails_naming_a_kept_action_or_tree_it_cannot_read_and_removes_nothing() {
    for unreadable in ["action", "tree"] {
        let fixture = fixture();
        let stat = StatCache::disabled();
        let kept_dir = fixture.root.join("kept");
        make_nested(&kept_dir);
        let kept_artifact = fixture.cache.store(&kept_dir, &stat).expect("store");
        let keep_key = ActionKey::of(b"keep");
        fixture
            .cache
            .put_action(&action(keep_key, &[("kept", &kept_artifact)]))
            .expect("put");
        let path = match unreadable {
            "action" => fixture.cache.action_path(&keep_key),
            _ => {
                let entries = fixture.cache.read_tree(&kept_artifact).expect("tree");
                let (_, sub) = entries.iter().find(|(name, _)| name == "sub").expect("sub");
                fixture.cache.object_path(&sub.digest)
            }
        };
        fs::remove_file(&path).expect("remove");
        std::os::unix::fs::symlink(&fixture.root, &path).expect("symlink");
        let objects_before = files_under(&fixture.root.join("cache/objects"));

        let keep: HashSet<ActionKey> = [keep_key].into_iter().collect();
        match fixture.cache.gc(&keep, Duration::ZERO) {
            Err(CacheError::Io { path: named, .. }) => assert_eq!(named, path, "{unreadable}"),
            other => panic!("{unreadable}: {other:?}"),
        }
        assert_eq!(
            files_under(&fixture.root.join("cache/objects")),
            objects_before,
            "{unreadable}"
        );
    }
}

fn files_under(dir: &Path) -> usize {
    fs::read_dir(dir)
        .expect("read_dir")
        .map(|entry| {
            let entry = entry.expect("entry");
            if entry.file_type().expect("file type").is_dir() {
                files_under(&entry.path())
            } else {
                1
            }
        })
        .sum()
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Spec {
        File(Vec<u8>, bool),
        Dir(BTreeMap<String, Spec>),
    }

    fn spec() -> impl Strategy<Value = Spec> {
        let leaf = (
            proptest::collection::vec(any::<u8>(), 0..3000),
            any::<bool>(),
        )
            .prop_map(|(content, executable)| Spec::File(content, executable));
        leaf.prop_recursive(3, 24, 5, |inner| {
            proptest::collection::btree_map("[a-zA-Z0-9_ -][a-zA-Z0-9._ -]{0,7}", inner, 0..5)
                .prop_map(Spec::Dir)
        })
        .prop_map(|spec| match spec {
            dir @ Spec::Dir(_) => dir,
            file => Spec::Dir([("only".to_string(), file)].into_iter().collect()),
        })
    }

    fn build(spec: &Spec, path: &Path, reverse: bool) {
        match spec {
            Spec::File(content, executable) => {
                fs::write(path, content).expect("write");
                let mode = if *executable { 0o755 } else { 0o644 };
                fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
            }
            Spec::Dir(children) => {
                fs::create_dir(path).expect("mkdir");
                let mut ordered: Vec<_> = children.iter().collect();
                if reverse {
                    ordered.reverse();
                }
                for (name, child) in ordered {
                    build(child, &path.join(name), reverse);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn hashing_is_deterministic_and_restore_reproduces(tree in spec()) {
            let fixture = fixture();
            let first = fixture.root.join("first");
            let second = fixture.root.join("second");
            build(&tree, &first, false);
            build(&tree, &second, true);
            let stat = StatCache::disabled();
            let stored = fixture.cache.store(&first, &stat).expect("store");
            let hashed = fixture.cache.hash_path(&second, &stat).expect("hash");
            prop_assert_eq!(&stored, &hashed);
            for (index, modes) in [&[LinkMode::Copy][..], &LinkMode::DEFAULT_ORDER[..]].into_iter().enumerate() {
                let dest = fixture.root.join(format!("restored-{index}"));
                fixture.cache.restore(&stored, &dest, modes, &stat).expect("restore");
                prop_assert_eq!(snapshot(&dest), snapshot(&first));
                prop_assert_eq!(fixture.cache.hash_path(&dest, &stat).expect("rehash"), stored.clone());
            }
        }
    }
}

#[test]
fn storing_over_a_corrupt_object_replaces_it_by_rename_when_asked_to_rehash() {
    let fixture = fixture();
    let stat = StatCache::disabled();
    let source = fixture.root.join("model.bin");
    let content: Vec<u8> = (0..200_000u32).flat_map(|n| n.to_le_bytes()).collect();
    write(&source, &content);
    let artifact = fixture.cache.store(&source, &stat).expect("store");
    let object = fixture.cache.object_path(&artifact.digest);
    make_writable_and_flip(&object, 4321);
    let corrupt_inode = fs::metadata(&object).expect("object").ino();

    // By default an object of the right size is trusted: no rehash per store.
    fixture.cache.store(&source, &stat).expect("store again");
    assert_ne!(fs::read(&object).expect("read"), content);

    // A project file hard-linked to the corrupt object keeps its own bytes.
    let linked = fixture.root.join("linked.bin");
    fs::hard_link(&object, &linked).expect("hard link");
    let linked_before = fs::read(&linked).expect("read linked");
    fixture
        .cache
        .store_rehashing_existing(&source, &stat)
        .expect("store rehashing");
    assert_eq!(fs::read(&object).expect("read"), content);
    assert_ne!(fs::metadata(&object).expect("object").ino(), corrupt_inode);
    assert_eq!(fs::read(&linked).expect("read linked"), linked_before);
    assert!(fixture.cache.verify().expect("verify").corrupt.is_empty());
}

#[test]
fn an_object_with_another_link_is_rehashed_before_it_is_trusted() {
    let fixture = fixture();
    let stat = StatCache::disabled();
    let source = fixture.root.join("out.txt");
    write(&source, b"what the stage wrote\n");
    let artifact = fixture.cache.store(&source, &stat).expect("store");
    let object = fixture.cache.object_path(&artifact.digest);
    // A hard-linked restore written through (as root would).
    let restored = fixture.root.join("restored.txt");
    fs::hard_link(&object, &restored).expect("hard link");
    make_writable_and_flip(&restored, 0);

    fixture.cache.store(&source, &stat).expect("store again");
    assert_eq!(fs::read(&object).expect("read"), b"what the stage wrote\n");
    assert!(fixture.cache.verify().expect("verify").corrupt.is_empty());
}

#[test]
fn verify_and_repair_removes_corrupt_objects_and_their_actions() {
    let fixture = fixture();
    let source = fixture.root.join("source");
    make_nested(&source);
    let stat = StatCache::disabled();
    let artifact = fixture.cache.store(&source, &stat).expect("store");
    let key = ActionKey::of(b"stage");
    fixture
        .cache
        .put_action(&action(key, &[("out", &artifact)]))
        .expect("put");
    let tree_object = fixture.cache.object_path(&artifact.digest);
    make_writable_and_flip(&tree_object, 20);

    let report = fixture.cache.verify_and_repair().expect("repair");
    assert_eq!(report.corrupt, vec![artifact.digest.to_hex()]);
    assert_eq!(report.corrupt_actions, vec![key.to_hex()]);
    assert_eq!((report.objects_removed, report.actions_removed), (1, 1));
    assert!(!tree_object.exists());
    assert!(fixture.cache.get_action(&key).is_none());
    let after = fixture.cache.verify().expect("verify");
    assert!(after.corrupt.is_empty() && after.corrupt_actions.is_empty());
}
