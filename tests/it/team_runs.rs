//! Runs a team shares: one clone runs and pushes, another pulls, and every
//! way of naming a run (number, uid prefix, `last`, `last~N`, name, tag,
//! a git ref) picks the same run on both sides; what a record says about
//! other runs names them as this history numbers them. Through the real
//! binary, two git clones and a `file://` remote.

use std::collections::BTreeMap;
use std::path::Path;

use pipe_test_support::{git, TestProject};
use serde_json::Value;

fn pipeline(remote: &Path) -> String {
    format!(
        r#"cache:
  remote: file://{}
params:
  n: 1
  depth: 3
key_metrics: [train.accuracy]
stages:
  train:
    run: >-
      printf '{{"accuracy": %s.%s}}' ${{params.n}} ${{params.depth}} > metrics.json;
      echo ${{params.n}} > model.txt
    outs: [model.txt]
    metrics: [metrics.json]
"#,
        remote.display()
    )
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn ok(project: &TestProject, args: &[&str]) -> String {
    let output = project.pipe(args);
    assert!(
        output.status.success(),
        "pipe {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout(&output)
}

/// The uid of the run `selector` names in `project`.
fn uid_of(project: &TestProject, selector: &str) -> String {
    let shown: Value = serde_json::from_str(&ok(project, &["show", selector, "--json"])).unwrap();
    shown["uid"].as_str().unwrap().to_string()
}

/// Run number -> uid, over every run.
fn numbering(project: &TestProject) -> BTreeMap<i64, String> {
    let listed: Value =
        serde_json::from_str(&ok(project, &["runs", "-n", "100", "--json"])).unwrap();
    listed
        .as_array()
        .unwrap()
        .iter()
        .map(|run| {
            (
                run["id"].as_i64().unwrap(),
                run["uid"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A git project on `main` with the pipeline committed, its outputs
/// ignored.
fn committed_project(remote: &Path) -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", &pipeline(remote));
    project.write(".gitignore", "/model.txt\n/metrics.json\n");
    git(project.root(), &["init", "-q", "-b", "main"]);
    git(project.root(), &["add", "-A"]);
    git(project.root(), &["commit", "-qm", "the project"]);
    project
}

/// The first project: 20 runs over two commits (main and a branch), a
/// name, tags, and a run that only restored another's results.
fn first_project(remote: &Path) -> TestProject {
    let project = committed_project(remote);
    project.run_ok(&["--name", "baseline"]);
    for n in 2..=17 {
        project.run_ok(&["-S", &format!("n={n}")]);
    }
    ok(&project, &["tag", "5", "best"]);
    ok(&project, &["tag", "7", "best", "checked"]);
    ok(&project, &["runs", "name", "12", "wide"]);
    // A run that finds n=5's result in the cache: nothing runs, and its
    // record says whose results it restored.
    project.run_ok(&["-S", "n=5"]);
    git(project.root(), &["checkout", "-q", "-b", "feature"]);
    project.write(
        "pipe.yaml",
        &pipeline(remote).replace("depth: 3", "depth: 4"),
    );
    git(project.root(), &["commit", "-qam", "deeper"]);
    project.run_ok(&[]);
    project.run_ok(&["-S", "n=41"]);
    git(project.root(), &["checkout", "-q", "main"]);
    project
}

#[test]
fn twenty_runs_pushed_and_pulled_keep_their_identity_numbers_names_and_refs() {
    let remote = tempfile::tempdir().unwrap();
    let first = first_project(remote.path());
    let ran = numbering(&first);
    assert_eq!(ran.len(), 20, "{ran:?}");
    ok(&first, &["cache", "push", "--all"]);

    let second = TestProject::new();
    git(
        second.root(),
        &["clone", "-q", &first.root().display().to_string(), "."],
    );
    let pulled = second.pipe(&["cache", "pull"]);
    let said = String::from_utf8_lossy(&pulled.stderr);
    assert!(said.contains("20 run records, 20 new here"), "{said}");
    assert_eq!(
        numbering(&second),
        ran,
        "the same runs under the same numbers: numbered by when they ran"
    );
    for selector in [
        "last", "last~3", "baseline", "wide", "best", "checked", "main", "#9",
    ] {
        assert_eq!(
            uid_of(&first, selector),
            uid_of(&second, selector),
            "`{selector}` names the same run on both sides"
        );
    }
    assert_eq!(
        uid_of(&first, "best"),
        ran[&7],
        "a tag names its newest run"
    );
    assert_eq!(
        uid_of(&first, "main"),
        ran[&1],
        "a ref names its own configuration, not an experiment on it"
    );
    assert_eq!(uid_of(&first, "feature"), ran[&19]);
    assert_eq!(uid_of(&second, "origin/feature"), ran[&19]);
    let prefix = &ran[&9][..6];
    assert_eq!(uid_of(&second, prefix), ran[&9], "a uid prefix selects");

    // What a record says of other runs names them in this history.
    let restored = ok(&second, &["show", "18"]);
    assert!(
        restored.contains("restored the results of run #5: nothing ran"),
        "{restored}"
    );
    let diff: Value =
        serde_json::from_str(&ok(&second, &["diff", "main", "origin/feature", "--json"])).unwrap();
    assert_eq!(
        (diff["a"].as_i64(), diff["b"].as_i64()),
        (Some(1), Some(19))
    );
    let commits = &diff["commits"];
    assert_ne!(commits[0]["commit"], commits[1]["commit"], "{diff}");
    let text = ok(&second, &["diff", "main", "origin/feature"]);
    assert!(text.contains("the code differs too"), "{text}");
    // Each side as a reviewer knows it, base first, in the PR comment too.
    let short = |id: i64| -> String {
        let shown: Value =
            serde_json::from_str(&ok(&second, &["show", &id.to_string(), "--json"])).unwrap();
        shown["git_commit"].as_str().unwrap()[..7].to_string()
    };
    let (main_side, feature_side) = (
        format!("baseline: main @ {} (#1)", short(1)),
        format!("feature @ {} (#19)", short(19)),
    );
    assert_eq!(diff["labels"], serde_json::json!([main_side, feature_side]));
    let md = ok(&second, &["diff", "main", "origin/feature", "--md"]);
    let title = md.lines().next().unwrap_or_default();
    assert!(
        title.contains(&main_side.replace('#', "\\#"))
            && title.contains(&feature_side.replace('#', "\\#")),
        "{md}"
    );

    // A clone that ran before it pulled: its own run keeps #1, the pulled
    // ones follow in the order they ran, and references still name the
    // right runs, by this clone's numbers.
    let third = TestProject::new();
    git(
        third.root(),
        &["clone", "-q", &first.root().display().to_string(), "."],
    );
    third.run_ok(&["-S", "n=99"]);
    ok(&third, &["cache", "pull"]);
    let mine = numbering(&third);
    assert!(
        !ran.values().any(|uid| *uid == mine[&1]),
        "#1 is its own run"
    );
    let local_of = |uid: &str| {
        mine.iter()
            .find(|(_, seen)| *seen == uid)
            .map(|(id, _)| *id)
            .unwrap()
    };
    assert_eq!(local_of(&ran[&5]), 6);
    let restored = ok(&third, &["show", &ran[&18][..8]]);
    assert!(
        restored.contains("restored the results of run #6: nothing ran"),
        "the record's reference in this clone's numbers: {restored}"
    );
}

#[test]
fn names_tags_and_removal_travel_and_are_refused_when_they_would_mislead() {
    let remote = tempfile::tempdir().unwrap();
    let first = TestProject::new();
    first.write("pipe.yaml", &pipeline(remote.path()));
    first.run_ok(&["--name", "baseline"]);
    first.run_ok(&["-S", "n=2"]);
    ok(&first, &["cache", "push", "--all"]);
    let second = TestProject::new();
    second.write("pipe.yaml", &first.read("pipe.yaml"));
    ok(&second, &["cache", "pull"]);

    // A name taken here and a label that reads as another reference.
    let taken = first.run(&["-S", "n=3", "--name", "baseline"]);
    assert_eq!(taken.code, 2, "{}", taken.stderr);
    assert!(
        taken.stderr.contains("the name `baseline` is run #1's"),
        "{}",
        taken.stderr
    );
    for bad in ["12", "last", "a b"] {
        let refused = first.pipe(&["tag", "2", bad]);
        assert_eq!(refused.status.code(), Some(2), "{bad}");
    }

    // Labels given after a push reach a clone that has the record.
    ok(&first, &["tag", "2", "promising"]);
    ok(&first, &["runs", "name", "2", "deeper"]);
    ok(&first, &["cache", "push", "--all"]);
    ok(&second, &["cache", "pull"]);
    assert_eq!(uid_of(&second, "promising"), uid_of(&first, "2"));
    assert_eq!(uid_of(&second, "deeper"), uid_of(&first, "2"));
    let listed = ok(&second, &["runs"]);
    assert!(listed.contains("deeper #promising"), "{listed}");

    // The later change wins: a tag taken away here stays away.
    ok(&second, &["tag", "deeper", "--rm", "promising"]);
    ok(&second, &["cache", "pull"]);
    assert_eq!(second.pipe(&["show", "promising"]).status.code(), Some(2));

    // A removed run says what becomes of its results, and a pull does not
    // bring it back.
    let removed = ok(&second, &["runs", "rm", "baseline"]);
    assert!(removed.contains("removed run #1"), "{removed}");
    assert!(removed.contains("`pipe cache gc`"), "{removed}");
    ok(&second, &["cache", "pull"]);
    assert_eq!(numbering(&second).len(), 1);
    assert_eq!(second.pipe(&["show", "1"]).status.code(), Some(2));

    // `compare --where` selects by name and tag.
    let compared: Value = serde_json::from_str(&ok(
        &first,
        &["compare", "--where", "tag=promising", "--json"],
    ))
    .unwrap();
    let runs: Vec<&Value> = compared["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| &row["run"])
        .collect();
    assert_eq!(runs, [&Value::from(2)], "{compared}");
}

#[test]
fn a_ci_job_on_a_detached_head_files_its_run_under_the_branch_it_builds() {
    let remote = tempfile::tempdir().unwrap();
    let origin = committed_project(remote.path());
    git(origin.root(), &["checkout", "-q", "-b", "lr-tune"]);
    origin.write(
        "pipe.yaml",
        &pipeline(remote.path()).replace("n: 1", "n: 3"),
    );
    git(origin.root(), &["commit", "-qam", "tuned"]);
    git(origin.root(), &["checkout", "-q", "main"]);

    // The job: a detached checkout, the branch named by the CI only.
    let job = TestProject::new();
    git(
        job.root(),
        &["clone", "-q", &origin.root().display().to_string(), "."],
    );
    git(
        job.root(),
        &["checkout", "-q", "--detach", "origin/lr-tune"],
    );
    let ran = job
        .command()
        .env("GITHUB_HEAD_REF", "lr-tune")
        .args(["run"])
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let shown: Value = serde_json::from_str(&ok(&job, &["show", "last", "--json"])).unwrap();
    assert_eq!(shown["branch"], "lr-tune");
    ok(&job, &["cache", "push", "--all"]);

    // A laptop with only main checked out: `lr-tune` is no local ref, yet
    // it names the run the CI filed under it; a ref the laptop does not
    // have at all says which one it has.
    let laptop = TestProject::new();
    git(
        laptop.root(),
        &["clone", "-q", &origin.root().display().to_string(), "."],
    );
    ok(&laptop, &["cache", "pull"]);
    assert_eq!(uid_of(&laptop, "lr-tune"), shown["uid"].as_str().unwrap());
    git(origin.root(), &["branch", "feat-a"]);
    git(laptop.root(), &["fetch", "-q", "origin"]);
    let missing = laptop.pipe(&["show", "feat-a"]);
    assert_eq!(missing.status.code(), Some(2));
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(
        said.contains("`origin/feat-a` is a ref here and no local branch is"),
        "{said}"
    );
}

#[test]
fn a_pull_requests_merge_commit_run_is_found_by_the_branch_head_people_know() {
    let remote = tempfile::tempdir().unwrap();
    let origin = committed_project(remote.path());
    git(origin.root(), &["checkout", "-q", "-b", "lr-small"]);
    origin.write("notes.txt", "smaller steps\n");
    git(origin.root(), &["add", "notes.txt"]);
    git(origin.root(), &["commit", "-qm", "notes"]);
    git(origin.root(), &["checkout", "-q", "main"]);
    origin.write("README", "main moved on\n");
    git(origin.root(), &["add", "README"]);
    git(origin.root(), &["commit", "-qm", "readme"]);

    // GitHub's checkout of a pull request: a merge commit of the branch
    // into main, which no branch names.
    let job = TestProject::new();
    git(
        job.root(),
        &["clone", "-q", &origin.root().display().to_string(), "."],
    );
    git(
        job.root(),
        &[
            "-c",
            "user.name=ci",
            "-c",
            "user.email=ci@example.com",
            "merge",
            "-q",
            "--no-ff",
            "--no-edit",
            "origin/lr-small",
        ],
    );
    git(job.root(), &["checkout", "-q", "--detach"]);
    let ran = job
        .command()
        .env("GITHUB_EVENT_NAME", "pull_request")
        .env("GITHUB_HEAD_REF", "lr-small")
        .args(["run"])
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let shown: Value = serde_json::from_str(&ok(&job, &["show", "last", "--json"])).unwrap();
    let head = git(origin.root(), &["rev-parse", "lr-small"])
        .trim()
        .to_string();
    assert_eq!(shown["head_commit"], head.as_str());
    assert_ne!(shown["git_commit"], head.as_str(), "it ran the merge");
    ok(&job, &["cache", "push", "--all"]);

    let laptop = TestProject::new();
    git(
        laptop.root(),
        &["clone", "-q", &origin.root().display().to_string(), "."],
    );
    ok(&laptop, &["cache", "pull"]);
    assert_eq!(
        uid_of(&laptop, "origin/lr-small"),
        shown["uid"].as_str().unwrap()
    );
}
