//! Transfer progress through a `file://` remote: a push and a pull each
//! report one start and one finish per result, with byte counts that end
//! at the result's size whatever was already in place (duplicates, objects
//! the other side has), and a remote without a sink reports nothing.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::progress::{Direction, Outcome, Phase, ProgressSink, TransferEvent};
use super::{Pulled, Remote, RemoteConfig};
use crate::{ActionKey, ActionResult, Cache, StatCache};

type Events = Arc<Mutex<Vec<TransferEvent>>>;

fn remote(dir: &Path, side: &str, events: Option<&Events>) -> Remote {
    let mut config = RemoteConfig::new(format!("file://{}", dir.join("remote").display()));
    if let Some(events) = events {
        let events = events.clone();
        config = config.with_progress(ProgressSink::new(move |event| {
            events.lock().unwrap().push(event.clone())
        }));
    }
    Remote::new(&config, &dir.join(side).join("cache")).unwrap()
}

/// A result with a file, and a directory holding the same bytes twice and
/// another file: 3 files named, 2 objects of file bytes.
fn stored_result(dir: &Path) -> (ActionResult, u64) {
    let cache = Cache::open(&dir.join("a/cache")).unwrap();
    let stat = StatCache::open(&dir.join("a/stat.db")).unwrap();
    let work = dir.join("work");
    fs::create_dir_all(work.join("tree")).unwrap();
    fs::write(work.join("big.bin"), vec![7u8; 3 << 20]).unwrap();
    fs::write(work.join("tree/one.txt"), "same bytes").unwrap();
    fs::write(work.join("tree/two.txt"), "same bytes").unwrap();
    let mut outputs = BTreeMap::new();
    for name in ["big.bin", "tree"] {
        outputs.insert(
            pipe_protocol::ProjectPath::stored(name).unwrap(),
            cache.store(&work.join(name), &stat).unwrap(),
        );
    }
    let result = ActionResult {
        key: ActionKey::of(b"progress"),
        outputs,
        manifest: crate::manifest_of(
            &serde_json::json!({"outs": {"big": "big.bin", "tree": "tree"}}),
        ),
        created_unix_ms: 0,
        duration_ms: 1,
    };
    cache.put_action(&result).unwrap();
    (result, (3 << 20) + 20)
}

/// The one transfer's events: a start first, a finish last, progress in
/// between that never goes back and never passes the total.
fn check_one_transfer(events: &[TransferEvent], direction: Direction, total: u64) -> Outcome {
    assert!(events.len() >= 2, "{events:?}");
    assert!(
        matches!(events[0].phase, Phase::Started { .. }),
        "{events:?}"
    );
    let mut done = 0;
    for event in events {
        assert_eq!(event.direction, direction);
        assert_eq!(event.total_bytes, total);
        assert!(
            event.done_bytes >= done && event.done_bytes <= total,
            "{events:?}"
        );
        done = event.done_bytes;
    }
    let last = events.last().unwrap();
    assert_eq!(last.done_bytes, total, "{events:?}");
    match last.phase {
        Phase::Finished { outcome, .. } => outcome,
        ref other => panic!("the last event is {other:?}"),
    }
}

#[test]
fn a_push_and_a_pull_report_bytes_that_end_at_the_results_size() {
    let dir = tempfile::tempdir().unwrap();
    let (result, size) = stored_result(dir.path());
    let events = Events::default();
    let pusher = remote(dir.path(), "a", Some(&events));
    assert_eq!(pusher.push_results(vec![result.clone()]), 1);
    let pushed = std::mem::take(&mut *events.lock().unwrap());
    assert_eq!(
        check_one_transfer(&pushed, Direction::Push, size),
        Outcome::Done
    );
    let Phase::Finished {
        transferred_bytes, ..
    } = pushed.last().unwrap().phase
    else {
        unreachable!()
    };
    // The duplicate is sent once, and the tree listing goes too.
    let listing = transferred_bytes - (3 << 20) - 10;
    assert!(listing > 0 && listing < 1024, "{transferred_bytes}");
    let Phase::Started { outputs } = &pushed[0].phase else {
        unreachable!()
    };
    assert_eq!(outputs, &["big.bin", "tree"]);

    // Pushed again: every object is there, and the action too.
    pusher.push_results(vec![result.clone()]);
    let again = std::mem::take(&mut *events.lock().unwrap());
    assert_eq!(
        check_one_transfer(&again, Direction::Push, size),
        Outcome::AlreadyThere
    );

    let puller = remote(dir.path(), "b", Some(&events));
    assert!(matches!(
        puller.pull_result(&result.key),
        Pulled::Hit { .. }
    ));
    let pulled = std::mem::take(&mut *events.lock().unwrap());
    assert_eq!(
        check_one_transfer(&pulled, Direction::Pull, size),
        Outcome::Done
    );

    // A miss has no transfer to report.
    assert!(matches!(
        puller.pull_result(&ActionKey::of(b"absent")),
        Pulled::Miss
    ));
    assert!(events.lock().unwrap().is_empty());
}

#[test]
fn a_pull_that_finds_the_remote_object_damaged_finishes_as_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (result, size) = stored_result(dir.path());
    remote(dir.path(), "a", None).push_results(vec![result.clone()]);
    let big = super::object_path(&result.outputs["big.bin"].digest);
    fs::write(dir.path().join("remote").join(big), vec![8u8; 3 << 20]).unwrap();
    let events = Events::default();
    let puller = remote(dir.path(), "b", Some(&events));
    assert!(matches!(
        puller.pull_result(&result.key),
        Pulled::Corrupt(_)
    ));
    let events = events.lock().unwrap();
    let last = events.last().unwrap();
    assert!(matches!(
        last.phase,
        Phase::Finished {
            outcome: Outcome::Failed,
            ..
        }
    ));
    assert_eq!(last.total_bytes, size);
}
