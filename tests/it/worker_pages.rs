//! A page a person opens, declared by any worker's description (a
//! project's own, here a Python one written by the test): `pipe run` names
//! it when the run is done, the run's record keeps it, and `pipe show`
//! lists it, also for a teammate who pulled the run. A page that would
//! leave its output is a located error at load; a pulled record's page
//! outside its outputs, or one no project may hold, is dropped.

use std::os::unix::fs::PermissionsExt;

use pipe_test_support::TestProject;

/// `chart@1`: writes `chart/index.html` and declares it the page of its
/// output `chart` (`PAGE` replaces the page's name in the description).
const WORKER: &str = r#"#!/usr/bin/env python3
import json, os, sys
INFO = {
    "name": "chart", "version": 1, "implementation": 1,
    "summary": "Draw a chart page",
    "params": [{"name": "title", "kind": "string", "default": "t", "doc": "its title"}],
    "outputs": [{"name": "chart", "kind": "dir", "doc": "the page and its files",
                 "page": os.environ.get("PAGE", "index.html")}],
}
if sys.argv[1:] == ["describe"]:
    print(json.dumps([INFO]))
    sys.exit(0)
invocation = json.load(open(sys.argv[3]))
out = os.path.join(invocation["output_dir"], "chart")
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "index.html"), "w") as handle:
    handle.write("<h1>%s</h1>\n" % invocation["params"]["title"])
print(json.dumps({"event": "done"}), flush=True)
"#;

fn project(remote: &std::path::Path) -> TestProject {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        &format!(
            "cache:\n  remote: file://{}\nstages:\n  chart:\n    uses: chart@1\n    with: {{ title: hello }}\n",
            remote.display()
        ),
    );
    project.write("workers/pipe-stage-chart", WORKER);
    let worker = project.path("workers/pipe-stage-chart");
    std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
    project
}

fn pipe(project: &TestProject, args: &[&str], page: Option<&str>) -> std::process::Output {
    let mut command = project.std_command();
    command
        .args(args)
        .env("PIPE_STAGE_PATH", project.path("workers"));
    if let Some(page) = page {
        command.env("PAGE", page);
    }
    command.output().unwrap()
}

/// The first file found under `dir`, at any depth.
fn first_file(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(dir).ok()?.flatten().find_map(|entry| {
        let path = entry.path();
        match path.is_dir() {
            true => first_file(&path),
            false => Some(path),
        }
    })
}

fn text(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

#[test]
fn a_project_workers_page_is_named_by_run_and_show_here_and_in_a_teammates_clone() {
    let remote = tempfile::tempdir().unwrap();
    let first = project(remote.path());
    let ran = pipe(&first, &["run"], None);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran));
    let page = ".pipe/out/pipe/chart/chart/index.html";
    assert!(first.exists(page), "{}", text(&ran));
    assert!(
        text(&ran).contains(page),
        "run names the page: {}",
        text(&ran)
    );
    let shown = pipe(&first, &["show", "last"], None);
    assert!(text(&shown).contains(page), "{}", text(&shown));

    let second = project(remote.path());
    let pulled = pipe(&second, &["cache", "pull"], None);
    assert_eq!(pulled.status.code(), Some(0), "{}", text(&pulled));
    let shown = pipe(&second, &["show", "1"], None);
    assert!(text(&shown).contains(page), "{}", text(&shown));
}

#[test]
fn a_page_that_would_leave_its_output_is_a_located_error() {
    let remote = tempfile::tempdir().unwrap();
    // A `.git` inside the output, or a control character, is no name a
    // record's page may hold either. A project each: the worker's
    // description is kept once read.
    for page in ["../../../escape.html", "sub/.git/config", "in\tdex.html"] {
        let project = project(remote.path());
        let refused = pipe(&project, &["run"], Some(page));
        assert_eq!(refused.status.code(), Some(2), "{page}: {}", text(&refused));
        let said = text(&refused);
        assert!(
            said.contains("bad-worker-page") && said.contains("pipe.yaml:"),
            "{page}: {said}"
        );
    }
}

#[test]
fn a_pulled_records_pages_outside_its_outputs_are_dropped_and_the_record_kept() {
    let remote = tempfile::tempdir().unwrap();
    let first = project(remote.path());
    let ran = pipe(&first, &["run"], None);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran));
    let page = ".pipe/out/pipe/chart/chart/index.html";
    let record = first_file(&remote.path().join("runs")).expect("the pushed record");
    let mut written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let hostile = [
        "../../escape.html",
        "/etc/passwd",
        ".git/config",
        ".pipe/out/pipe/chart/chart/./index.html",
        "elsewhere/index.html",
    ];
    let stage = &mut written["run"]["stages"][0];
    assert_eq!(stage["pages"], serde_json::json!([page]), "{stage}");
    stage["pages"] =
        serde_json::json!([hostile[0], hostile[1], page, hostile[2], hostile[3], hostile[4]]);
    std::fs::write(&record, serde_json::to_vec(&written).unwrap()).unwrap();

    let second = project(remote.path());
    let pulled = pipe(&second, &["cache", "pull"], None);
    assert_eq!(pulled.status.code(), Some(0), "{}", text(&pulled));
    let shown = text(&pipe(&second, &["show", "1"], None));
    assert!(shown.contains(page), "{shown}");
    let json: serde_json::Value =
        serde_json::from_slice(&pipe(&second, &["show", "1", "--json"], None).stdout).unwrap();
    assert_eq!(
        json["stages"][0]["pages"],
        serde_json::json!([page]),
        "{json}"
    );
}
