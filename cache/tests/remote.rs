//! The remote cache's transfers between two local caches through a
//! `file://` remote: what arrives is checked before the local cache takes
//! it, a corrupt remote entry is a miss and is rewritten by the next push,
//! and a result another writer put first is left alone.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use pipe_cache::remote::{Pulled, Remote, RemoteConfig};
use pipe_cache::{ActionKey, ActionResult, Cache, CacheError, ObjectDigest, StatCache};
use pipe_protocol::ProjectPath;

struct Side {
    cache_root: PathBuf,
    cache: Cache,
    stat: StatCache,
}

fn side(dir: &Path, name: &str) -> Side {
    let cache_root = dir.join(name).join("cache");
    let cache = Cache::open(&cache_root).unwrap();
    let stat = StatCache::open(&dir.join(name).join("stat.db")).unwrap();
    Side {
        cache_root,
        cache,
        stat,
    }
}

fn remote(dir: &Path, side: &Side) -> Remote {
    let url = format!("file://{}", dir.join("remote").display());
    Remote::new(&RemoteConfig::new(url), &side.cache_root).unwrap()
}

/// A result with a file and a directory output, stored in `side`'s cache.
fn stored_result(dir: &Path, side: &Side, key: &str, content: &str) -> ActionResult {
    let work = dir.join(format!("work-{key}"));
    fs::create_dir_all(work.join("tree/sub")).unwrap();
    fs::write(work.join("file.txt"), content).unwrap();
    fs::write(work.join("tree/a.txt"), format!("a {content}")).unwrap();
    fs::write(work.join("tree/sub/b.txt"), format!("b {content}")).unwrap();
    let mut outputs = BTreeMap::new();
    for name in ["file.txt", "tree"] {
        let artifact = side.cache.store(&work.join(name), &side.stat).unwrap();
        outputs.insert(ProjectPath::stored(name).unwrap(), artifact);
    }
    let result = ActionResult {
        key: ActionKey::of(key.as_bytes()),
        outputs,
        manifest: pipe_cache::manifest_of(&serde_json::json!({
            "key": key,
            "outs": { "file": "file.txt", "tree": "tree" },
        })),
        created_unix_ms: 0,
        duration_ms: 1,
    };
    side.cache.put_action(&result).unwrap();
    result
}

#[test]
fn an_incoming_object_enters_the_cache_only_when_its_bytes_match_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::open(dir.path()).unwrap();
    let digest = ObjectDigest::of(b"hello world");

    let mut wrong = cache.incoming_object(&digest).unwrap();
    wrong.write(b"hello wor1d").unwrap();
    assert!(matches!(
        wrong.finish(Some(11)),
        Err(CacheError::Corrupt { .. })
    ));
    let mut short = cache.incoming_object(&digest).unwrap();
    short.write(b"hello world").unwrap();
    assert!(matches!(
        short.finish(Some(12)),
        Err(CacheError::Corrupt { .. })
    ));
    assert!(!cache.has_object(&digest, 11));
    assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);

    let mut good = cache.incoming_object(&digest).unwrap();
    good.write(b"hello ").unwrap();
    good.write(b"world").unwrap();
    good.finish(Some(11)).unwrap();
    assert!(cache.has_object(&digest, 11));
    let object = cache.object_path(&digest);
    assert_eq!(fs::read(&object).unwrap(), b"hello world");
    assert_eq!(
        fs::metadata(&object).unwrap().permissions().mode() & 0o777,
        0o444
    );
}

#[test]
fn a_pushed_result_is_pulled_whole_into_another_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (side(dir.path(), "a"), side(dir.path(), "b"));
    let result = stored_result(dir.path(), &a, "k1", "one");
    let pusher = remote(dir.path(), &a);
    assert_eq!(pusher.push_results(vec![result.clone()]), 1);
    let report = pusher.finish();
    // file.txt, the two tree listings and the two files in them.
    assert_eq!(report.objects_pushed, 5, "{report:?}");

    let puller = remote(dir.path(), &b);
    assert!(matches!(
        puller.pull_result(&result.key),
        Pulled::Hit { objects: 5, .. }
    ));
    assert_eq!(b.cache.get_action(&result.key), Some(result.clone()));
    let restored = dir.path().join("restored");
    b.cache
        .restore(
            &result.outputs["tree"],
            &restored,
            &[pipe_cache::LinkMode::Copy],
            &b.stat,
        )
        .unwrap();
    assert_eq!(
        fs::read_to_string(restored.join("sub/b.txt")).unwrap(),
        "b one"
    );
    assert!(matches!(
        puller.pull_result(&ActionKey::of(b"unknown")),
        Pulled::Miss
    ));

    // A second push finds every object there and the action written.
    let again = remote(dir.path(), &a);
    again.push_results(vec![result]);
    let report = again.finish();
    assert_eq!(
        (
            report.objects_pushed,
            report.objects_present,
            report.results_already_present
        ),
        (0, 5, 1),
        "{report:?}"
    );
}

#[test]
fn a_corrupt_remote_object_is_a_miss_and_the_next_push_rewrites_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (side(dir.path(), "a"), side(dir.path(), "b"));
    let result = stored_result(dir.path(), &a, "k2", "two");
    let pusher = remote(dir.path(), &a);
    pusher.push_results(vec![result.clone()]);
    pusher.finish();
    let digest = result.outputs["file.txt"].digest.to_hex();
    let object = dir
        .path()
        .join(format!("remote/objects/{}/{}", &digest[..2], &digest[2..]));
    fs::write(&object, b"twX").unwrap();

    let puller = remote(dir.path(), &b);
    assert!(matches!(
        puller.pull_result(&result.key),
        Pulled::Corrupt(_)
    ));
    assert!(b.cache.get_action(&result.key).is_none());
    assert!(!b.cache.has_object(&result.outputs["file.txt"].digest, 3));

    // The puller rebuilds the stage with other bytes (a nondeterministic
    // stage) and pushes: object and action are both rewritten.
    let mut rebuilt = stored_result(dir.path(), &b, "k2", "TWO");
    rebuilt.key = result.key;
    b.cache.put_action(&rebuilt).unwrap();
    puller.push_results(vec![rebuilt.clone()]);
    assert_eq!(puller.finish().results_pushed, 1);
    let third = side(dir.path(), "c");
    let reader = remote(dir.path(), &third);
    assert!(matches!(
        reader.pull_result(&result.key),
        Pulled::Hit { .. }
    ));
    assert_eq!(third.cache.get_action(&result.key), Some(rebuilt));
}

#[test]
fn a_read_only_remote_is_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let a = side(dir.path(), "a");
    let result = stored_result(dir.path(), &a, "k3", "three");
    let remote_dir = dir.path().join("remote-ro");
    fs::create_dir_all(&remote_dir).unwrap();
    let mut config = RemoteConfig::new(format!("file://{}", remote_dir.display()));
    config.read_only = true;
    let read_only = Remote::new(&config, &a.cache_root).unwrap();
    assert_eq!(read_only.push_results(vec![result]), 0);
    read_only.finish();
    assert_eq!(fs::read_dir(&remote_dir).unwrap().count(), 0);
}

/// Set in the child process of
/// `a_remote_whose_threads_cannot_start_is_unavailable_never_a_panic`.
const NO_FILES_LEFT: &str = "PIPE_CACHE_TEST_NO_FILES_LEFT";

/// The remote's I/O threads need file descriptors (epoll, an eventfd):
/// in a process that has none left, starting them fails. That must give
/// up the remote like a server that is down (a run goes on locally,
/// `pipe cache push|pull` reports it), never panic. The process runs out
/// of descriptors in a child, so no other test sees it.
#[test]
fn a_remote_whose_threads_cannot_start_is_unavailable_never_a_panic() {
    if std::env::var_os(NO_FILES_LEFT).is_none() {
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_remote_whose_threads_cannot_start_is_unavailable_never_a_panic",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(NO_FILES_LEFT, "1")
            .output()
            .unwrap();
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&child.stdout),
            String::from_utf8_lossy(&child.stderr)
        );
        assert!(child.status.success(), "{output}");
        assert!(
            output.contains("1 passed"),
            "the child ran no test: {output}"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (side(dir.path(), "a"), side(dir.path(), "b"));
    let result = stored_result(dir.path(), &a, "k4", "four");
    let pusher = remote(dir.path(), &a);
    let puller = remote(dir.path(), &b);

    // SAFETY: plain libc calls on a stack struct; only this child process
    // is limited.
    let limited = unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && {
            limit.rlim_cur = limit.rlim_cur.min(256);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0
        }
    };
    assert!(limited, "cannot lower RLIMIT_NOFILE");
    let mut held = Vec::new();
    while let Ok(file) = fs::File::open("/dev/null") {
        held.push(file);
    }

    assert!(matches!(
        puller.pull_result(&result.key),
        Pulled::Unavailable
    ));
    let reason = puller.unavailable().expect("the remote is given up on");
    assert!(
        matches!(reason, pipe_cache::RemoteError::NoThreads { .. }),
        "{reason:?}"
    );
    assert!(reason.to_string().contains("I/O threads"), "{reason}");
    assert!(puller.presence(&result.key).is_err());
    assert!(puller.list_run_records(None).is_err());
    assert!(puller.get_run_record("runs/x/y.json").is_err());

    assert_eq!(pusher.push_results(vec![result.clone()]), 0);
    pusher.push_in_background(result.clone());
    assert!(pusher.put_run_record(None, "uid", b"{}".to_vec()).is_err());
    let report = pusher.finish();
    assert_eq!(report.results_not_pushed, 2, "{report:?}");
    assert!(report.unavailable.is_some(), "{report:?}");

    drop(held);
    assert!(!dir.path().join("remote/actions").exists());
}

/// A remote object is hostile input: cut short, grown, or with a byte
/// flipped (a file or a tree listing), it is a miss that names the
/// object, and the local cache takes neither it nor the result.
#[test]
fn a_truncated_grown_or_flipped_remote_object_is_a_miss_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = side(dir.path(), "a");
    let result = stored_result(dir.path(), &a, "k5", "five");
    let pusher = remote(dir.path(), &a);
    assert_eq!(pusher.push_results(vec![result.clone()]), 1);
    pusher.finish();
    let remote_object = |digest: &ObjectDigest| {
        let hex = digest.to_hex();
        dir.path()
            .join(format!("remote/objects/{}/{}", &hex[..2], &hex[2..]))
    };
    let file = result.outputs["file.txt"].digest;
    let tree = result.outputs["tree"].digest;
    type Damage = fn(&mut Vec<u8>);
    let damages: [(&str, ObjectDigest, Damage); 4] = [
        ("truncated", file, |bytes| bytes.truncate(bytes.len() - 1)),
        ("grown", file, |bytes| bytes.push(b'!')),
        ("flipped", file, |bytes| bytes[0] ^= 1),
        ("flipped tree", tree, |bytes| {
            let last = bytes.len() - 1;
            bytes[last] ^= 1
        }),
    ];
    for (index, (damage, digest, damage_bytes)) in damages.into_iter().enumerate() {
        let path = remote_object(&digest);
        let good = fs::read(&path).unwrap();
        let mut bad = good.clone();
        damage_bytes(&mut bad);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        fs::write(&path, &bad).unwrap();

        let local = side(dir.path(), &format!("reader-{index}"));
        let puller = remote(dir.path(), &local);
        match puller.pull_result(&result.key) {
            Pulled::Corrupt(reason) => {
                assert!(reason.contains(&digest.short()), "{damage}: {reason}")
            }
            other => panic!("{damage}: {other:?}"),
        }
        assert!(local.cache.get_action(&result.key).is_none(), "{damage}");
        assert!(!local.cache.object_path(&digest).exists(), "{damage}");
        assert_eq!(
            fs::read_dir(local.cache_root.join("tmp")).unwrap().count(),
            0,
            "{damage}: a rejected object is left in tmp/"
        );
        fs::write(&path, &good).unwrap();
    }
}

/// A tree object of the local cache that rotted is fetched again by the
/// next pull that needs it: the pull is a hit and the local object good.
/// Trusted for being present, it would fail every pull of the result and
/// have the remote's good result marked corrupt.
#[test]
fn a_pull_replaces_a_local_tree_object_that_rotted() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (side(dir.path(), "a"), side(dir.path(), "b"));
    let result = stored_result(dir.path(), &a, "k6", "six");
    let pusher = remote(dir.path(), &a);
    assert_eq!(pusher.push_results(vec![result.clone()]), 1);
    pusher.finish();
    let puller = remote(dir.path(), &b);
    assert!(matches!(
        puller.pull_result(&result.key),
        Pulled::Hit { .. }
    ));

    let tree = b.cache.object_path(&result.outputs["tree"].digest);
    let mut bytes = fs::read(&tree).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::set_permissions(&tree, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&tree, &bytes).unwrap();
    fs::remove_file(b.cache.action_path(&result.key)).unwrap();

    let again = remote(dir.path(), &b);
    match again.pull_result(&result.key) {
        Pulled::Hit { objects, .. } => assert_eq!(objects, 1, "only the tree is fetched"),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.cache.get_action(&result.key), Some(result.clone()));
    let restored = dir.path().join("restored-k6");
    b.cache
        .restore(
            &result.outputs["tree"],
            &restored,
            &[pipe_cache::LinkMode::Copy],
            &b.stat,
        )
        .unwrap();
    assert_eq!(fs::read_to_string(restored.join("a.txt")).unwrap(), "a six");
}
