//! The remote cache's transfers as the user sees them, through the real
//! binary and a `file://` remote (and the tests' real S3 server for
//! multipart pushes and ranged pulls): `--json` transfer events of `pipe run`,
//! `pipe cache push` and `pipe cache pull` (a start and a finish per
//! result, progress in between, bytes that add up to the result's size),
//! and `pipe status --remote`, which says which stale stages the remote can
//! restore, before and after a push, with a stage downstream of a stale
//! one, without a remote (a usage error) and with one that is down (one
//! warning, the plain status, exit 0).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

use pipe_test_support::TestProject;
use serde_json::Value;

/// `make` writes 3 MB and a directory holding the same bytes twice (sent
/// once, counted twice); `count` reads it; `stamp` runs every time.
const PIPELINE: &str = r#"stages:
  make:
    run: >-
      dd if=/dev/zero of=big.bin bs=1000 count=3000 status=none &&
      mkdir -p dir && printf one > dir/a.txt && printf one > dir/b.txt
    outs: [big.bin, dir]
  count:
    run: wc -c < big.bin > count.txt
    deps: [big.bin]
    outs: [count.txt]
  stamp:
    run: date +%s%N > stamp.txt
    always_run: true
    outs: [stamp.txt]
"#;

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project
}

type Env = Vec<(String, String)>;

fn remote_env(remote: &Path) -> Env {
    vec![(
        "PIPE_REMOTE".to_string(),
        format!("file://{}", remote.display()),
    )]
}

fn pipe(project: &TestProject, env: &Env, args: &[&str]) -> Output {
    project
        .std_command()
        .envs(env.iter().map(|(key, value)| (key, value)))
        .args(args)
        .output()
        .expect("run pipe")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json_lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
        .collect()
}

/// The bytes of the files at `relative` (a file, or every file below a
/// directory), as the cache sizes an output.
fn size_of(project: &TestProject, relative: &str) -> u64 {
    fn walk(path: &Path) -> u64 {
        if path.is_dir() {
            std::fs::read_dir(path)
                .unwrap()
                .map(|entry| walk(&entry.unwrap().path()))
                .sum()
        } else {
            std::fs::metadata(path).unwrap().len()
        }
    }
    walk(&project.path(relative))
}

/// Per result key, the events of its one transfer in `direction`, checked:
/// a start naming its outputs first, a finish last, at least one progress
/// event between, `done_bytes` never going back nor past the total, and
/// the finish's `done_bytes` equal to the total, which is the size of the
/// outputs in `sizes_from`. Returns each key's outputs and outcome.
fn transfers(
    events: &[Value],
    direction: &str,
    sizes_from: &TestProject,
) -> BTreeMap<String, (Vec<String>, String)> {
    let mut by_key: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for event in events {
        let name = event["event"].as_str().unwrap_or_default();
        if name.starts_with("transfer_") && event["direction"] == direction {
            let key = event["key"].as_str().unwrap().to_string();
            by_key.entry(key).or_default().push(event);
        }
    }
    let mut found = BTreeMap::new();
    for (key, events) in by_key {
        let kinds: Vec<&str> = events
            .iter()
            .map(|event| event["event"].as_str().unwrap())
            .collect();
        assert_eq!(kinds.first(), Some(&"transfer_started"), "{kinds:?}");
        assert_eq!(kinds.last(), Some(&"transfer_finished"), "{kinds:?}");
        assert_eq!(
            kinds.iter().filter(|k| **k == "transfer_started").count(),
            1
        );
        assert_eq!(
            kinds.iter().filter(|k| **k == "transfer_finished").count(),
            1
        );
        assert!(kinds.contains(&"transfer_progress"), "{kinds:?}");
        let outputs: Vec<String> = events[0]["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|path| path.as_str().unwrap().to_string())
            .collect();
        let total: u64 = outputs.iter().map(|path| size_of(sizes_from, path)).sum();
        let mut done = 0;
        for event in &events {
            assert_eq!(event["total_bytes"], total, "{key}: {event}");
            let now = event["done_bytes"].as_u64().unwrap();
            assert!(now >= done && now <= total, "{key}: {event}");
            done = now;
        }
        let finished = events.last().unwrap();
        assert_eq!(finished["done_bytes"], total, "{finished}");
        assert!(finished["duration_ms"].is_u64(), "{finished}");
        assert!(finished["transferred_bytes"].is_u64(), "{finished}");
        let outcome = finished["outcome"].as_str().unwrap().to_string();
        found.insert(key, (outputs, outcome));
    }
    found
}

fn outputs_and_outcomes(found: &BTreeMap<String, (Vec<String>, String)>) -> Vec<(String, &str)> {
    let mut list: Vec<(String, &str)> = found
        .values()
        .map(|(outputs, outcome)| (outputs.join(","), outcome.as_str()))
        .collect();
    list.sort();
    list
}

#[test]
fn json_events_of_pushes_and_pulls_add_up_to_each_results_size() {
    let remote = tempfile::tempdir().unwrap();
    let env = remote_env(remote.path());
    let first = project();
    // `pipe run` pushes what it ran in the background: one transfer per
    // result, the always-run stage's too (the run's record names it).
    let ran = first.run_with_env(&env, &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let pushed = transfers(&ran.events, "push", &first);
    assert_eq!(
        outputs_and_outcomes(&pushed),
        [
            ("big.bin,dir".to_string(), "done"),
            ("count.txt".to_string(), "done"),
            ("stamp.txt".to_string(), "done"),
        ]
    );
    // Nothing was pulled, and what was pushed is what the summary says.
    assert!(transfers(&ran.events, "pull", &first).is_empty());

    // Pushed again by hand: every result is there already.
    let again = pipe(&first, &env, &["cache", "push", "--json"]);
    assert!(again.status.success(), "{}", stderr(&again));
    let events = json_lines(&again);
    let repushed = transfers(&events, "push", &first);
    assert_eq!(
        outputs_and_outcomes(&repushed),
        [
            ("big.bin,dir".to_string(), "already_there"),
            ("count.txt".to_string(), "already_there"),
            ("stamp.txt".to_string(), "already_there"),
        ]
    );
    let summary = events.last().unwrap();
    assert_eq!(summary["event"], "pushed", "{summary}");
    assert_eq!(summary["results_pushed"], 0, "{summary}");
    assert_eq!(summary["results_already_present"], 3, "{summary}");

    // Another clone pulls the run's results with `pipe cache pull 1`.
    let second = project();
    let records = pipe(&second, &env, &["cache", "pull"]);
    assert!(records.status.success(), "{}", stderr(&records));
    let pulled = pipe(&second, &env, &["cache", "pull", "1", "--json"]);
    assert!(pulled.status.success(), "{}", stderr(&pulled));
    let events = json_lines(&pulled);
    // Sizes from the first clone: the second has them only in its cache.
    let found = transfers(&events, "pull", &first);
    assert_eq!(found.len(), 3, "{events:?}");
    assert!(found.values().all(|(_, outcome)| outcome == "done"));
    assert_eq!(events.last().unwrap()["results_pulled"], 3);

    // A third clone's `pipe run` restores through the remote.
    let third = project();
    let restored = third.run_with_env(&env, &[]);
    assert_eq!(restored.code, 0, "{}", restored.stderr);
    assert_eq!(restored.status("make"), "restored");
    let found = transfers(&restored.events, "pull", &third);
    assert_eq!(
        outputs_and_outcomes(&found),
        [
            ("big.bin,dir".to_string(), "done"),
            ("count.txt".to_string(), "done")
        ]
    );
}

#[test]
fn over_s3_a_multipart_push_and_ranged_pull_add_up_chunk_by_chunk() {
    // 20 MB: a push in 8 MiB parts and a pull in 8 MiB ranges, against
    // the real S3 server the remote cache tests use.
    let server = pipe_test_support::s3::Server::start();
    let env = server.env("progress");
    let pipeline = PIPELINE.replace("count=3000", "count=20000");
    let first = project();
    first.write("pipe.yaml", &pipeline);
    let ran = first.run_with_env(&env, &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    // The always-run stage's result too.
    let pushed = transfers(&ran.events, "push", &first);
    assert_eq!(pushed.len(), 3, "{:?}", ran.events);
    assert!(pushed.values().all(|(_, outcome)| outcome == "done"));
    let big = ran
        .events
        .iter()
        .find(|event| event["event"] == "transfer_finished" && event["total_bytes"] == 20_000_006)
        .unwrap_or_else(|| panic!("{:?}", ran.events));
    // The duplicate file went once, the tree listing too.
    let sent = big["transferred_bytes"].as_u64().unwrap();
    assert!(sent > 20_000_003 && sent < 20_001_000, "{big}");

    let second = project();
    second.write("pipe.yaml", &pipeline);
    let restored = second.run_with_env(&env, &[]);
    assert_eq!(restored.code, 0, "{}", restored.stderr);
    assert_eq!(restored.status("make"), "restored");
    let pulled = transfers(&restored.events, "pull", &second);
    assert_eq!(pulled.len(), 2, "{:?}", restored.events);
    assert!(pulled.values().all(|(_, outcome)| outcome == "done"));
}

#[test]
fn quiet_without_json_shows_no_transfer_and_json_shows_no_bars() {
    let remote = tempfile::tempdir().unwrap();
    let env = remote_env(remote.path());
    let first = project();
    let quiet = pipe(&first, &env, &["-q", "run"]);
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert!(quiet.stdout.is_empty());
    for arrow in ["↑", "↓"] {
        assert!(!stderr(&quiet).contains(arrow), "{}", stderr(&quiet));
    }
    // `--json -q`: the events, still; stdout holds nothing else.
    let second = project();
    let output = pipe(&second, &env, &["-q", "run", "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let events = json_lines(&output);
    assert_eq!(transfers(&events, "pull", &first).len(), 2);
}

/// `pipe status --remote --json`: each stage's `remote` field, and the
/// upstream stages a stage waits on.
fn remote_fields(output: &Output) -> BTreeMap<String, (String, Value)> {
    let rows: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    rows.as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["stage"].as_str().unwrap().to_string(),
                (
                    row["remote"].as_str().unwrap_or("null").to_string(),
                    row["upstream"].clone(),
                ),
            )
        })
        .collect()
}

fn remote_of(fields: &BTreeMap<String, (String, Value)>, stage: &str) -> String {
    fields[stage].0.clone()
}

#[test]
fn status_remote_says_which_stale_stages_the_remote_restores() {
    let remote = tempfile::tempdir().unwrap();
    let env = remote_env(remote.path());
    let first = project();
    // Run without the remote: it has nothing yet.
    first.run_ok(&["--remote", "off"]);
    let second = project();
    let before = pipe(&second, &env, &["status", "--remote", "--json"]);
    assert!(before.status.success(), "{}", stderr(&before));
    let fields = remote_fields(&before);
    assert_eq!(remote_of(&fields, "make"), "runs");
    // `count`'s key is made from `big.bin`, which `make` has not written
    // here yet: unknown until it runs, and said so.
    assert_eq!(remote_of(&fields, "count"), "after_upstream");
    assert_eq!(fields["count"].1, serde_json::json!(["make"]));
    assert_eq!(remote_of(&fields, "stamp"), "runs_every_time");

    let push = pipe(&first, &env, &["cache", "push"]);
    assert!(push.status.success(), "{}", stderr(&push));
    let after = pipe(&second, &env, &["status", "--remote"]);
    assert!(after.status.success(), "{}", stderr(&after));
    let text = String::from_utf8_lossy(&after.stdout);
    let line = |stage: &str| {
        text.lines()
            .find(|line| line.starts_with(&format!("{stage} ")))
            .unwrap_or_else(|| panic!("no line for {stage}:\n{text}"))
            .to_string()
    };
    assert!(
        line("make").contains("stale — the remote has it (restores in `pipe run`)"),
        "{text}"
    );
    assert!(line("count").contains("after `make` runs"), "{text}");
    assert!(line("stamp").contains("stale — runs"), "{text}");
    assert!(
        text.contains("3 stages: 0 fresh, 0 restorable, 3 stale (1 the remote has, 1 run, 1 known after an upstream stage runs)"),
        "{text}"
    );

    // `--remote` takes its URL only after `=`: a word after it is the
    // pipeline file, as for `pipe status FILE`.
    let with_file = pipe(
        &second,
        &env,
        &["status", "--remote", "pipe.yaml", "--json"],
    );
    assert!(with_file.status.success(), "{}", stderr(&with_file));
    assert_eq!(remote_of(&remote_fields(&with_file), "make"), "restores");

    // Once `make` is restored, `count`'s key is known, and the remote has it.
    let restored = second.run_with_env(&env, &["make"]);
    assert_eq!(restored.status("make"), "restored", "{}", restored.stderr);
    let fields = remote_fields(&pipe(&second, &env, &["status", "--remote", "--json"]));
    assert_eq!(remote_of(&fields, "make"), "null");
    assert_eq!(remote_of(&fields, "count"), "restores");

    // A changed command: a key the remote has never seen.
    second.write(
        "pipe.yaml",
        &PIPELINE.replace("wc -c < big.bin", "wc -c < big.bin | tr -d ' '"),
    );
    let fields = remote_fields(&pipe(&second, &env, &["status", "--remote", "--json"]));
    assert_eq!(remote_of(&fields, "count"), "runs");
}

#[test]
fn status_remote_without_a_remote_is_a_usage_error_naming_how_to_configure_one() {
    let project = project();
    let output = pipe(&project, &Vec::new(), &["status", "--remote"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("no remote cache is configured"),
        "{message}"
    );
    assert!(message.contains("--remote=s3://BUCKET/PREFIX"), "{message}");
    assert!(message.contains("PIPE_REMOTE"), "{message}");
    assert!(output.stdout.is_empty());
    // `pipe status` itself needs none.
    assert!(pipe(&project, &Vec::new(), &["status"]).status.success());
}

#[test]
fn status_remote_with_the_remote_down_warns_once_and_prints_the_local_status() {
    let project = project();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .unwrap()
        .port();
    let env: Env = [
        ("PIPE_REMOTE", "s3://pipe-cache/p".to_string()),
        ("PIPE_REMOTE_ENDPOINT", format!("http://127.0.0.1:{port}")),
        ("AWS_ACCESS_KEY_ID", "pipe-test-access".to_string()),
        (
            "AWS_SECRET_ACCESS_KEY",
            "pipe-test-secret-0123456789".to_string(),
        ),
    ]
    .map(|(key, value)| (key.to_string(), value))
    .to_vec();
    let output = pipe(&project, &env, &["status", "--remote"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let message = stderr(&output);
    assert_eq!(message.matches("warning:").count(), 1, "{message}");
    assert!(message.contains("unreachable or failing"), "{message}");
    assert!(
        message.contains("showing the local status only"),
        "{message}"
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("3 stages: 0 fresh, 0 restorable, 3 stale\n"),
        "{text}"
    );
    assert!(!text.contains("remote"), "{text}");
    // With --json: the plain JSON, without remote fields.
    let output = pipe(&project, &env, &["status", "--remote", "--json"]);
    assert_eq!(output.status.code(), Some(0));
    let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(rows
        .as_array()
        .unwrap()
        .iter()
        .all(|row| row.get("remote").is_none()));
}
