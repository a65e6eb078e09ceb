//! The remote cache through the real binary against a real S3 server
//! (s3s-fs on 127.0.0.1, which checks signatures and honours If-None-Match)
//! and a `file://` directory: two clones share results and the second runs
//! nothing; concurrent pushes of the same keys; a corrupt remote object; the
//! server killed mid-run; wrong credentials; read-only mode; run records
//! that travel, so `pipe compare main` works on another clone.

use std::path::Path;
use std::process::Output;

use pipe_test_support::git;
use pipe_test_support::s3::{self, Server};
use pipe_test_support::{RunResult, TestProject};
use serde_json::Value;

const PIPELINE: &str = r#"stages:
  prepare:
    run: >-
      mkdir -p data/nested && seq 1 20000 > data/numbers.txt &&
      printf x > data/small.txt && echo deep > data/nested/deep.txt
    outs: [data]
  total:
    run: awk '{ s += $1 } END { print s }' data/numbers.txt > total.txt
    deps: [data]
    outs: [total.txt]
  score:
    run: >-
      echo "{\"total\": $(cat total.txt)}" > score.json
    deps: [total.txt]
    metrics: [score.json]
"#;

const STAGES: [&str; 3] = ["prepare", "score", "total"];

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project
}

type Env = Vec<(String, String)>;

fn pipe_with(project: &TestProject, env: &Env, args: &[&str]) -> Output {
    project
        .std_command()
        .envs(env.iter().map(|(key, value)| (key, value)))
        .args(args)
        .output()
        .expect("run pipe")
}

fn run_with(project: &TestProject, env: &Env, args: &[&str]) -> RunResult {
    project.run_with_env(env, args)
}

fn remote_event(result: &RunResult) -> &Value {
    result
        .events
        .iter()
        .find(|event| event["event"] == "remote")
        .unwrap_or_else(|| panic!("no remote event:\n{:?}\n{}", result.events, result.stderr))
}

fn details(result: &RunResult) -> Vec<(String, String)> {
    result
        .events
        .iter()
        .filter(|event| event["event"] == "stage_finished")
        .map(|event| {
            (
                event["stage"].as_str().unwrap_or_default().to_string(),
                event["detail"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn same_outputs(a: &TestProject, b: &TestProject) {
    for file in [
        "data/numbers.txt",
        "data/small.txt",
        "data/nested/deep.txt",
        "total.txt",
        "score.json",
    ] {
        assert_eq!(
            std::fs::read(a.path(file)).unwrap(),
            std::fs::read(b.path(file)).unwrap(),
            "{file} differs between the clones"
        );
    }
}

/// Every file under `dir`, with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let name = path
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                files.push((name, std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn a_second_clone_restores_every_stage_from_s3_and_runs_nothing() {
    let server = Server::start();
    let env = server.env("team/project");
    let first = project();
    let ran = run_with(&first, &env, &[]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(ran.ran(), STAGES);
    let pushed = remote_event(&ran);
    assert_eq!(pushed["results_pushed"], 3, "{pushed}");
    assert_eq!(pushed["results_not_pushed"], 0, "{pushed}");
    assert_eq!(pushed["record_pushed"], true, "{pushed}");
    // The remote holds the local layout under the prefix.
    let files = server.files();
    assert_eq!(
        files
            .iter()
            .filter(|f| f.starts_with("team/project/actions/"))
            .count(),
        3,
        "{files:?}"
    );
    assert!(files.iter().any(|f| f.starts_with("team/project/objects/")));
    assert_eq!(
        files
            .iter()
            .filter(|f| f.starts_with("team/project/runs/"))
            .count(),
        1
    );

    let second = project();
    let restored = run_with(&second, &env, &[]);
    assert_eq!(restored.code, 0, "{}", restored.stderr);
    assert!(restored.ran().is_empty(), "{:?}", restored.stages);
    for stage in STAGES {
        assert_eq!(restored.status(stage), "restored");
    }
    for (stage, detail) in details(&restored) {
        assert_eq!(
            detail,
            format!("from {}", server.url("team/project")),
            "{stage}"
        );
    }
    assert_eq!(remote_event(&restored)["results_pulled"], 3);
    same_outputs(&first, &second);
    // The pulled metrics are the run's metrics.
    let show: Value =
        serde_json::from_slice(&pipe_with(&second, &env, &["show", "last", "--json"]).stdout)
            .unwrap();
    let score = show["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|stage| stage["stage"] == "score")
        .unwrap();
    assert_eq!(score["metrics"]["total"], 200010000);

    // Now everything is local: a rerun asks the remote nothing.
    let again = run_with(&second, &env, &[]);
    assert_eq!(again.code, 0);
    for stage in STAGES {
        assert_eq!(again.status(stage), "fresh");
    }
    assert_eq!(remote_event(&again)["results_pulled"], 0);
}

#[test]
fn a_file_remote_is_shared_the_same_way() {
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().display());
    let first = project();
    first.write("pipe.yaml", &format!("cache:\n  remote: {url}\n{PIPELINE}"));
    first.run_ok(&[]);
    assert!(shared.path().join("actions").is_dir());
    let second = project();
    second.write("pipe.yaml", &first.read("pipe.yaml"));
    let restored = second.run_ok(&[]);
    assert!(restored.ran().is_empty(), "{:?}", restored.stages);
    same_outputs(&first, &second);
}

/// "pushed N results in T s" is the time pushing took, not the run's: a
/// result pushed in the background while a later stage works for 3 s is
/// not 3 s of pushing (it was, counted from the first push to the end).
#[test]
fn the_push_time_is_the_time_spent_pushing_not_the_stages_that_ran_meanwhile() {
    let shared = tempfile::tempdir().unwrap();
    let url = format!("file://{}", shared.path().display());
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        &format!(
            "cache:\n  remote: {url}\nstages:\n  quick:\n    run: echo quick > quick.txt\n    outs: [quick.txt]\n  slow:\n    run: sleep 3 && cp quick.txt slow.txt\n    deps: [quick.txt]\n    outs: [slow.txt]\n"
        ),
    );
    let first = project.run_ok(&[]);
    let event = remote_event(&first);
    assert_eq!(event["results_pushed"], 2, "{event}");
    let pushing = event["push_seconds"].as_f64().unwrap();
    assert!(pushing > 0.0, "{event}");
    let slow = first
        .events
        .iter()
        .find(|event| event["event"] == "stage_finished" && event["stage"] == "slow")
        .and_then(|event| event["duration_ms"].as_u64())
        .unwrap();
    assert!(slow >= 3000, "{slow}");
    assert!(
        pushing * 1000.0 < slow as f64,
        "two small results took {pushing} s to push beside a stage of {slow} ms"
    );
    assert!(
        first.stderr.contains("pushed 2 results"),
        "{}",
        first.stderr
    );
}

#[test]
fn a_rerun_whose_results_are_all_local_never_touches_the_remote() {
    let project = project();
    project.run_ok(&[]);
    // A port nothing listens on: any request would fail and warn.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env: Env = vec![
        ("PIPE_REMOTE".into(), "s3://nowhere/x".into()),
        (
            "PIPE_REMOTE_ENDPOINT".into(),
            format!("http://127.0.0.1:{closed}"),
        ),
        ("AWS_ACCESS_KEY_ID".into(), "unused".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "unused".into()),
    ];
    let rerun = run_with(&project, &env, &[]);
    assert_eq!(rerun.code, 0, "{}", rerun.stderr);
    assert!(!rerun.stderr.contains("remote"), "{}", rerun.stderr);
    let event = remote_event(&rerun);
    assert_eq!(event["unavailable"], Value::Null, "{event}");
}

/// Every object under `prefix` in the bucket hashes to its name, and every
/// action names objects that are there: what a reader may rely on.
fn assert_remote_consistent(server: &Server, prefix: &str) -> usize {
    let root = server.bucket_dir().join(prefix);
    let objects = snapshot(&root.join("objects"));
    for (name, bytes) in &objects {
        let digest = name.replace('/', "");
        assert_eq!(
            blake3::hash(bytes).to_hex().to_string(),
            digest,
            "object {name}"
        );
    }
    let actions = snapshot(&root.join("actions"));
    for (name, bytes) in &actions {
        let file: Value = serde_json::from_slice(bytes).unwrap();
        assert_eq!(file["format"], "pipe-action-v2", "action {name}");
        for artifact in file["action"]["outputs"].as_object().unwrap().values() {
            let digest = artifact["digest"].as_str().unwrap();
            let object = root.join(format!("objects/{}/{}", &digest[..2], &digest[2..]));
            assert!(object.is_file(), "action {name} names a missing object");
        }
    }
    actions.len()
}

#[test]
fn concurrent_runs_and_pushes_of_the_same_keys_leave_one_consistent_entry_each() {
    let server = Server::start();
    let env = server.env("race");
    let clones: Vec<TestProject> = (0..3).map(|_| project()).collect();
    let results: Vec<RunResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = clones
            .iter()
            .map(|clone| scope.spawn(|| run_with(clone, &env, &[])))
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    });
    for result in &results {
        assert_eq!(result.code, 0, "{}", result.stderr);
        let event = remote_event(result);
        let pushed = event["results_pushed"].as_u64().unwrap();
        let present = event["results_already_present"].as_u64().unwrap();
        let pulled = event["results_pulled"].as_u64().unwrap();
        // Each result was run and pushed (first, or too late) or pulled.
        assert_eq!(pushed + present + pulled, 3, "{event}");
    }
    assert_eq!(assert_remote_consistent(&server, "race"), 3);

    // Once a result is there, a conditional put of it is refused (412):
    // a second push writes no action.
    let again = pipe_with(&clones[1], &env, &["cache", "push"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("(0 pushed, 3 already there;"),
        "{}",
        stderr(&again)
    );

    // Two `pipe cache push` of the same run at once, into an empty prefix.
    let pushes: Vec<Output> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let env = server.env("race-push");
                let clone = &clones[0];
                scope.spawn(move || pipe_with(clone, &env, &["cache", "push"]))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap())
            .collect()
    });
    for push in &pushes {
        assert!(push.status.success(), "{}", stderr(push));
    }
    assert_eq!(assert_remote_consistent(&server, "race-push"), 3);
    let fresh = project();
    let restored = run_with(&fresh, &server.env("race-push"), &[]);
    assert!(restored.ran().is_empty(), "{:?}", restored.stages);
    same_outputs(&clones[0], &fresh);
}

#[test]
fn a_corrupt_remote_object_is_detected_reported_and_rebuilt() {
    let server = Server::start();
    let env = server.env("p");
    let first = project();
    assert_eq!(run_with(&first, &env, &[]).code, 0);
    // Flip one byte of total.txt's object in the bucket, keeping its size.
    let total = first.read("total.txt");
    let digest = blake3::hash(total.as_bytes()).to_hex().to_string();
    let object = server
        .bucket_dir()
        .join(format!("p/objects/{}/{}", &digest[..2], &digest[2..]));
    let mut bytes = std::fs::read(&object).unwrap();
    bytes[0] ^= 0x01;
    std::fs::write(&object, &bytes).unwrap();

    let second = project();
    let result = run_with(&second, &env, &[]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(result.status("prepare"), "restored");
    assert_eq!(result.status("total"), "ran", "{}", result.stderr);
    assert!(result.stderr.contains("corrupt"), "{}", result.stderr);
    assert_eq!(remote_event(&result)["corrupt_found"], 1);
    // Nothing corrupt reached the workspace or the local cache, and the
    // run's push put good bytes back in the remote.
    same_outputs(&first, &second);
    assert_eq!(std::fs::read(&object).unwrap(), total.as_bytes());
    let verify = second.pipe(&["cache", "verify"]);
    assert!(verify.status.success(), "{}", stderr(&verify));

    let third = project();
    let clean = run_with(&third, &env, &[]);
    assert!(clean.ran().is_empty(), "{:?}", clean.stages);
    same_outputs(&first, &third);
}

#[test]
fn a_server_killed_mid_run_leaves_a_complete_local_run_and_one_warning() {
    let mut server = Server::start();
    let env = server.env("p");
    let pipeline = PIPELINE.replace(
        "run: awk",
        &format!("run: kill -9 {} && sleep 0.2 && awk", server.pid()),
    );
    let first = project();
    first.write("pipe.yaml", &pipeline);
    let result = run_with(&first, &env, &[]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(result.ran(), STAGES);
    let event = remote_event(&result);
    assert!(event["unavailable"].is_string(), "{event}");
    assert!(
        event["results_not_pushed"].as_u64().unwrap() >= 1,
        "{event}"
    );
    assert_eq!(
        result
            .stderr
            .matches("going on with the local cache only")
            .count(),
        1,
        "{}",
        result.stderr
    );
    assert!(
        result.stderr.contains("`pipe cache push`"),
        "{}",
        result.stderr
    );

    // While it is down, `pipe cache push` says so with its own exit code.
    let down = pipe_with(&first, &env, &["cache", "push"]);
    assert_eq!(down.status.code(), Some(6), "{}", stderr(&down));

    // Back up: one push sends what the run could not, and a clone runs nothing.
    server.restart();
    let push = pipe_with(&first, &env, &["cache", "push"]);
    assert!(push.status.success(), "{}", stderr(&push));
    let second = project();
    second.write("pipe.yaml", &pipeline);
    let restored = run_with(&second, &env, &[]);
    assert!(
        restored.ran().is_empty(),
        "{:?}\n{}",
        restored.stages,
        restored.stderr
    );
}

#[test]
fn wrong_credentials_degrade_to_local_and_are_never_shown() {
    let server = Server::start();
    let secret = "wrong-secret-that-must-not-leak";
    let mut env = server.env("p");
    for (key, value) in env.iter_mut() {
        if key == "AWS_SECRET_ACCESS_KEY" {
            *value = secret.to_string();
        }
    }
    let project = project();
    let result = run_with(&project, &env, &[]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(result.ran(), STAGES);
    assert!(result.stderr.contains("access denied"), "{}", result.stderr);
    assert!(!result.stderr.contains(secret), "{}", result.stderr);
    assert!(server.files().is_empty(), "{:?}", server.files());
    let push = pipe_with(&project, &env, &["cache", "push"]);
    assert_eq!(push.status.code(), Some(6), "{}", stderr(&push));
    assert!(!stderr(&push).contains(secret));
    // The server's reason as its code and message, never an empty one nor
    // the client's Rust form of it.
    for said in [&result.stderr, &stderr(&push)] {
        assert!(
            said.contains("(check the credentials): SignatureDoesNotMatch"),
            "{said}"
        );
        assert!(!said.contains("S3Error"), "{said}");
        assert!(!said.contains("): ;") && !said.contains(": ;"), "{said}");
    }
    // No credentials at all: read anonymously, which this bucket refuses,
    // and the message says what to set or grant.
    let anonymous: Env = env
        .iter()
        .filter(|(key, _)| !key.starts_with("AWS_"))
        .cloned()
        .collect();
    let none = run_with(&project, &anonymous, &["--force-all"]);
    assert_eq!(none.code, 0, "{}", none.stderr);
    assert!(
        none.stderr
            .contains("no credentials found (AWS_ACCESS_KEY_ID")
            && none.stderr.contains("nothing pushed"),
        "{}",
        none.stderr
    );
    let fresh = TestProject::new();
    fresh.write("pipe.yaml", PIPELINE);
    let looked_up = run_with(&fresh, &anonymous, &[]);
    assert_eq!(looked_up.code, 0, "{}", looked_up.stderr);
    assert!(
        looked_up
            .stderr
            .contains("not reachable without credentials (set AWS_ACCESS_KEY_ID")
            && looked_up.stderr.contains("refuses anonymous reads"),
        "{}",
        looked_up.stderr
    );
    // Nothing under .pipe/ keeps a credential.
    for (name, bytes) in snapshot(&project.path(".pipe")) {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(secret), "{name} holds the secret");
        assert!(!text.contains(s3::SECRET_KEY), "{name} holds the secret");
    }
}

#[test]
fn read_only_mode_pulls_and_never_writes() {
    let server = Server::start();
    let env = server.env("p");
    let first = project();
    assert_eq!(run_with(&first, &env, &[]).code, 0);
    let before = snapshot(&server.bucket_dir());

    // A fork's pull request: it changed the last stage.
    let changed = PIPELINE.replace("{\\\"total\\\"", "{\\\"sum\\\"");
    assert_ne!(changed, PIPELINE);
    let mut read_only = env.clone();
    read_only.push(("PIPE_REMOTE_READ_ONLY".into(), "1".into()));
    let fork = project();
    fork.write("pipe.yaml", &changed);
    let result = run_with(&fork, &read_only, &[]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(result.status("prepare"), "restored");
    assert_eq!(result.status("total"), "restored");
    assert_eq!(result.ran(), ["score"]);
    let event = remote_event(&result);
    assert_eq!(event["read_only"], true);
    assert_eq!(event["record_pushed"], false);
    // The flag does the same, and a pipeline cannot turn it off.
    fork.write(
        "pipe.yaml",
        &format!(
            "cache:\n  remote: {{ url: {}, read_only: false }}\n{}",
            server.url("p"),
            changed.replace("score.json", "score2.json")
        ),
    );
    let flagged = run_with(&fork, &server.env("p"), &["--remote-read-only"]);
    assert_eq!(flagged.code, 0, "{}", flagged.stderr);
    assert_eq!(flagged.ran(), ["score"]);
    let push = pipe_with(&fork, &read_only, &["cache", "push"]);
    assert_eq!(push.status.code(), Some(2), "{}", stderr(&push));
    assert!(stderr(&push).contains("read-only"), "{}", stderr(&push));
    assert_eq!(snapshot(&server.bucket_dir()), before, "the bucket changed");
}

#[test]
fn remote_settings_come_from_the_right_place_and_bad_ones_say_where() {
    let server = Server::start();
    let project = project();
    // pipe.config.yaml names the remote for every pipeline of the project.
    project.write(
        "pipe.config.yaml",
        &format!(
            "cache:\n  remote:\n    url: {}\n    endpoint: {}\n",
            server.url("from-config"),
            server.endpoint()
        ),
    );
    let credentials: Env = vec![
        ("AWS_ACCESS_KEY_ID".into(), s3::ACCESS_KEY.into()),
        ("AWS_SECRET_ACCESS_KEY".into(), s3::SECRET_KEY.into()),
    ];
    let result = run_with(&project, &credentials, &[]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(remote_event(&result)["url"], server.url("from-config"));
    // `--remote off` wins over every other source.
    let off = run_with(&project, &credentials, &["--remote", "off", "--force-all"]);
    assert_eq!(off.code, 0);
    assert!(off.events.iter().all(|event| event["event"] != "remote"));
    // The environment wins over the file.
    let mut env = credentials.clone();
    env.push(("PIPE_REMOTE".into(), server.url("from-env")));
    let from_env = run_with(&project, &env, &["--force-all"]);
    assert_eq!(remote_event(&from_env)["url"], server.url("from-env"));

    // Credentials in a URL are refused where they are written.
    project.write(
        "pipe.yaml",
        &format!("cache:\n  remote: s3://AKIAEXAMPLE:topsecret@bucket/p\n{PIPELINE}"),
    );
    let refused = project.pipe(&["run"]);
    assert_eq!(refused.status.code(), Some(2));
    let message = stderr(&refused);
    assert!(message.contains("pipe.yaml:2:"), "{message}");
    assert!(message.contains("credentials"), "{message}");
    assert!(!message.contains("topsecret"), "{message}");
    project.write(
        "pipe.yaml",
        &format!("cache:\n  remote: {{ url: s3://b/p, regoin: x }}\n{PIPELINE}"),
    );
    let typo = stderr(&project.pipe(&["run"]));
    assert!(typo.contains("region"), "{typo}");
    let flag = project.pipe(&["run", "--remote", "ftp://host/x"]);
    assert_eq!(flag.status.code(), Some(2), "{}", stderr(&flag));
    project.write("pipe.yaml", PIPELINE);
    let none = project.pipe(&["cache", "push", "--remote", "off"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(stderr(&none).contains("no remote cache is configured"));
}

#[test]
fn run_records_travel_so_another_clone_compares_with_main() {
    let server = Server::start();
    let env = server.env("p");
    // CI: a clone of the repository at main runs and pushes.
    let ci = project();
    git(ci.root(), &["init", "-q", "-b", "main"]);
    git(ci.root(), &["add", "pipe.yaml"]);
    git(ci.root(), &["commit", "-qm", "pipeline"]);
    assert_eq!(run_with(&ci, &env, &[]).code, 0);

    // A laptop: another clone, nothing run yet.
    let laptop = TestProject::new();
    git(
        laptop.root(),
        &["clone", "-q", &ci.root().display().to_string(), "."],
    );
    let show = pipe_with(&laptop, &env, &["show", "main", "--json"]);
    assert!(show.status.success(), "{}", stderr(&show));
    assert!(
        stderr(&show).contains("pulled 1 run record"),
        "{}",
        stderr(&show)
    );
    let record: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(record["origin"], server.url("p"));
    let score = record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|stage| stage["stage"] == "score")
        .unwrap();
    assert_eq!(score["metrics"]["total"], 200010000);

    // The laptop changes the pipeline and compares its run with main's.
    laptop.write("pipe.yaml", &PIPELINE.replace("seq 1 20000", "seq 1 10000"));
    let local = run_with(&laptop, &env, &[]);
    assert_eq!(local.code, 0, "{}", local.stderr);
    let compare = pipe_with(&laptop, &env, &["compare", "main", "last", "--json"]);
    assert!(compare.status.success(), "{}", stderr(&compare));
    let text = String::from_utf8_lossy(&compare.stdout);
    assert!(
        text.contains("200010000") && text.contains("50005000"),
        "{text}"
    );
    // `last` is this clone's own run, not the one pulled.
    let last: Value =
        serde_json::from_slice(&pipe_with(&laptop, &env, &["show", "last", "--json"]).stdout)
            .unwrap();
    assert_eq!(last["origin"], Value::Null);

    // `pipe cache pull main` brings main's results; checkout puts them back.
    let pull = pipe_with(&laptop, &env, &["cache", "pull", "main"]);
    assert!(pull.status.success(), "{}", stderr(&pull));
    let checkout = laptop.pipe(&["checkout", "main", "--force"]);
    assert!(checkout.status.success(), "{}", stderr(&checkout));
    assert_eq!(laptop.read("total.txt"), ci.read("total.txt"));
    // Both runs' records are in the remote now, and both are known here.
    let records = pipe_with(&laptop, &env, &["cache", "pull"]);
    assert!(records.status.success(), "{}", stderr(&records));
    assert!(
        stderr(&records).contains(": 2 run records, 0 new here"),
        "{}",
        stderr(&records)
    );
    let all = pipe_with(&laptop, &env, &["cache", "pull", "--all"]);
    assert!(all.status.success(), "{}", stderr(&all));
    assert!(
        stderr(&all).contains("0 not in the remote, 0 corrupt"),
        "{}",
        stderr(&all)
    );
    let status = pipe_with(&laptop, &env, &["cache", "status", "main", "--json"]);
    assert!(status.status.success(), "{}", stderr(&status));
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["record_pushed"], true, "{status}");
    for stage in status["stages"].as_array().unwrap() {
        assert_eq!(stage["remote"], "yes", "{status}");
        assert_eq!(stage["local"], true, "{status}");
    }
}

#[test]
fn the_project_config_sets_link_modes_for_every_pipeline() {
    let project = project();
    project.write("pipe.config.yaml", "cache:\n  link: [symlink, copy]\n");
    project.run_ok(&[]);
    std::fs::remove_file(project.path("total.txt")).unwrap();
    let restored = project.run_ok(&[]);
    assert_eq!(restored.status("total"), "restored");
    let metadata = std::fs::symlink_metadata(project.path("total.txt")).unwrap();
    assert!(metadata.file_type().is_symlink());
    // A pipeline's own `cache.link` wins over the project's.
    project.write("pipe.yaml", &format!("cache:\n  link: [copy]\n{PIPELINE}"));
    std::fs::remove_file(project.path("total.txt")).unwrap();
    project.run_ok(&[]);
    let metadata = std::fs::symlink_metadata(project.path("total.txt")).unwrap();
    assert!(!metadata.file_type().is_symlink());
}
