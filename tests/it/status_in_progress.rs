//! While a run is going, `pipe status` and `pipe show last` describe that
//! run: its pipeline as it runs it (a sweep's merged, not the default
//! pipeline's stages as if never run), what it runs now, and the metrics
//! of the stages it finished so far.

use std::time::{Duration, Instant};

use pipe_test_support::TestProject;
use serde_json::Value;

/// `first` is quick and says its metric; `wait` waits (up to a minute)
/// until the test creates `go`.
const PIPELINE: &str = r#"
params: { lr: 1 }
key_metrics: [first.acc]
stages:
  first:
    run: >-
      echo "{\"acc\": ${params.lr}}" > m-${params.lr}.json
    metrics: ["m-${params.lr}.json"]
  wait:
    run: >-
      for i in $(seq 600); do [ -e go ] && break; sleep 0.1; done;
      cat m-${params.lr}.json > w-${params.lr}.txt
    deps: ["m-${params.lr}.json"]
    outs: ["w-${params.lr}.txt"]
"#;

/// Lets the waiting stages end, however the test ends.
struct Release<'a>(&'a TestProject);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.write("go", "");
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn status_and_show_last_describe_the_run_going_with_its_metrics_so_far() {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    // The sweep's stderr is kept aside, to say why if it ends early.
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut sweep = project
        .std_command()
        .args(["run", "-m", "-S", "lr=1,2", "-j", "4"])
        .stdout(std::process::Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .expect("start the sweep");
    let release = Release(&project);

    // Until both `first`s finished and both `wait`s run: generous, for a
    // CI machine running the suite's other pipes beside it; a sweep that
    // ends first fails at once, with what it said.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        let status = project.pipe(&["status"]);
        let said = text(&status.stdout);
        if said.contains("2 stages finished so far") && said.contains("2 running") {
            break status;
        }
        if let Some(ended) = sweep.try_wait().unwrap() {
            panic!(
                "the sweep ended ({ended}) before both waits ran: {}\nstatus: {said}",
                std::fs::read_to_string(log.path()).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the sweep never got going: {said}\nits stderr so far: {}",
            std::fs::read_to_string(log.path()).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let said = text(&status.stdout);
    let first_line = said.lines().next().unwrap_or_default();
    assert!(
        first_line.starts_with("run #1 is in progress (pid ")
            && first_line
                .ends_with("): 2 stages finished so far; running now: wait@lr=1, wait@lr=2"),
        "{said}"
    );
    assert!(said.contains("\n  first@lr=1  ran       acc 1\n"), "{said}");
    assert!(said.contains("\n  first@lr=2  ran       acc 2\n"), "{said}");
    assert!(
        said.contains("\nwait@lr=2   running  running in run #1 (pid "),
        "{said}"
    );
    assert!(
        said.ends_with("4 stages: 2 fresh, 0 restorable, 0 stale, 2 running\n"),
        "{said}"
    );
    assert!(!said.contains("never run"), "{said}");
    assert!(
        text(&status.stderr).contains("as run #1: pipe.yaml -m -S lr=1,2"),
        "{}",
        text(&status.stderr)
    );

    let show = project.pipe(&["show", "last"]);
    let shown = text(&show.stdout);
    assert!(shown.starts_with("run #1  pipe  running\n"), "{shown}");
    assert!(
        shown.contains(
            "in progress: 2 stages finished so far; running now: wait@lr=1, wait@lr=2 (pid "
        ),
        "{shown}"
    );
    for line in [
        "  lr  first: acc",
        "  1   1",
        "  2   2",
        "  wait@lr=1   running",
    ] {
        assert!(shown.contains(line), "{line}: {shown}");
    }
    let record: Value =
        serde_json::from_slice(&project.pipe(&["show", "last", "--json"]).stdout).unwrap();
    assert_eq!(record["status"], "running", "{record}");
    assert_eq!(
        record["in_progress"]["running"],
        serde_json::json!(["wait@lr=1", "wait@lr=2"]),
        "{record}"
    );

    drop(release);
    assert!(sweep.wait().expect("the sweep ends").success());
    let after = text(&project.pipe(&["status"]).stdout);
    assert!(!after.contains("in progress"), "{after}");
    let shown = text(&project.pipe(&["show", "last"]).stdout);
    assert!(shown.starts_with("run #1  pipe  succeeded\n"), "{shown}");
}
