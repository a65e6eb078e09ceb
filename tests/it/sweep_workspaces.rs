//! A sweep of a DVC-shaped project, whose scripts read `params.yaml`
//! themselves and write fixed paths: one run, each combination's command
//! stages in a work tree of its own where `params.yaml` holds its values,
//! in parallel under `-j`, what the combinations share run once, the
//! user's files untouched; then one combination brought back whole
//! (`pipe apply RUN --row`).

use std::collections::BTreeMap;
use std::path::Path;

use pipe_test_support::{git, TestProject};
use serde_json::Value;

use crate::params_overrides::python;

const PARAMS: &str =
    "prepare:\n  split: 0.2   # test fraction\ntrain:\n  n_est: 50\n  max_depth: 4\n";

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("params.yaml", PARAMS);
    project.write(
        "src/prepare.py",
        "import json, os, yaml\np = yaml.safe_load(open('params.yaml'))['prepare']\nos.makedirs('data', exist_ok=True)\nrows = [[i / 50, i % 3 == 0] for i in range(50)]\nn = int(len(rows) * p['split'])\njson.dump(rows[n:], open('data/train.json', 'w'))\njson.dump(rows[:n], open('data/test.json', 'w'))\n",
    );
    // Sleeps, so that two trainings under -j 2 are seen to overlap.
    project.write(
        "src/train.py",
        "import json, os, time, yaml\nstart = time.time()\np = yaml.safe_load(open('params.yaml'))['train']\ntime.sleep(0.5)\njson.dump({'threshold': p['n_est'] / 200 + p['max_depth'] / 100, 'start': start, 'end': time.time(), 'cwd': os.getcwd()}, open('model.json', 'w'))\n",
    );
    project.write(
        "src/evaluate.py",
        "import json, os, yaml\nparams = yaml.safe_load(open('params.yaml'))\nm = json.load(open('model.json'))\nrows = json.load(open('data/test.json'))\nacc = sum((x > m['threshold']) == y for x, y in rows) / len(rows)\nos.makedirs('eval', exist_ok=True)\njson.dump({'accuracy': acc, 'n_est': params['train']['n_est'], 'max_depth': params['train']['max_depth'], 'split': params['prepare']['split'], 'test_rows': len(rows), 'start': m['start'], 'end': m['end'], 'cwd': m['cwd']}, open('eval/metrics.json', 'w'))\n",
    );
    let python = python();
    let python = python.display();
    project.write(
        "pipe.yaml",
        &format!(
            "stages:
  prepare:
    run: {python} src/prepare.py
    deps: [src/prepare.py]
    params: [prepare]
    outs: [data/train.json, data/test.json]
  train:
    run: {python} src/train.py
    deps: [src/train.py, data/train.json]
    params: [train]
    outs: [model.json]
  evaluate:
    run: {python} src/evaluate.py
    deps: [src/evaluate.py, model.json, data/test.json]
    params: [train, prepare]
    metrics:
      - eval/metrics.json: {{cache: false}}
  report:
    uses: report/html@1
"
        ),
    );
    git(project.root(), &["init", "-q"]);
    git(project.root(), &["add", "-A"]);
    git(project.root(), &["commit", "-qm", "a DVC-shaped project"]);
    project
}

/// Every file of the project outside `.pipe/` and `.git/`, with its bytes.
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, found: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            let relative = path.strip_prefix(root).unwrap().display().to_string();
            if relative == ".pipe" || relative == ".git" {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, found);
            } else {
                found.insert(relative, std::fs::read(&path).expect("read"));
            }
        }
    }
    let mut found = BTreeMap::new();
    walk(root, root, &mut found);
    found
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_sweep_of_params_yaml_is_one_parallel_run_in_work_trees_and_leaves_the_project_untouched() {
    let project = project();
    project.run_ok(&[]);
    git(project.root(), &["add", "-A"]);
    git(project.root(), &["commit", "-qm", "first results"]);
    let before = files(project.root());

    let sweep = project.pipe(&[
        "run",
        "-m",
        "-j",
        "2",
        "-S",
        "train.n_est=20,100",
        "-S",
        "train.max_depth=4,12",
        "-S",
        "prepare.split=0.2,0.3",
    ]);
    let said = stderr(&sweep);
    assert!(sweep.status.success(), "{said}");
    assert!(
        said.contains("sweep: 8 combinations as one run, each in a work tree of its own under .pipe/workspaces/ (your files are not touched): prepare ×2, train ×8, evaluate ×8"),
        "{said}"
    );
    assert_eq!(
        files(project.root()),
        before,
        "the project's files are as they were"
    );
    assert!(!project.exists(".pipe/workspaces"), "the trees are removed");

    let runs: Value = serde_json::from_slice(&project.pipe(&["runs", "--json"]).stdout).unwrap();
    assert_eq!(
        runs.as_array().map(Vec::len),
        Some(2),
        "one run for the sweep: {runs}"
    );
    let record = project.show_settled("2");
    let stages = record["stages"].as_array().expect("stages");
    // The split of 0.2 is the first run's: restored, not run again.
    let prepares: Vec<&Value> = stages
        .iter()
        .filter(|stage| stage["base_name"] == "prepare")
        .collect();
    assert_eq!(prepares.len(), 2, "{record}");
    let mut intervals = Vec::new();
    for stage in stages
        .iter()
        .filter(|stage| stage["base_name"] == "evaluate")
    {
        let name = stage["stage"].as_str().unwrap();
        let metrics = &stage["metrics"];
        // Each command read its own combination's values from params.yaml.
        let expected = format!(
            "evaluate@n_est={},max_depth={},split={}",
            metrics["n_est"], metrics["max_depth"], metrics["split"]
        );
        assert_eq!(name, expected, "{record}");
        let split = metrics["split"].as_f64().unwrap();
        assert_eq!(
            metrics["test_rows"].as_f64(),
            Some((50.0 * split).floor()),
            "{name}"
        );
        let cwd = metrics["cwd"].as_str().unwrap();
        assert!(cwd.contains("/.pipe/workspaces/2/"), "{name} ran in {cwd}");
        intervals.push((
            metrics["start"].as_f64().unwrap(),
            metrics["end"].as_f64().unwrap(),
        ));
    }
    assert_eq!(intervals.len(), 8, "{record}");
    let overlapping = intervals.iter().enumerate().any(|(i, (start, end))| {
        intervals[i + 1..]
            .iter()
            .any(|(other_start, other_end)| start < other_end && other_start < end)
    });
    assert!(
        overlapping,
        "two trainings ran at once under -j 2: {intervals:?}"
    );

    // Each result is what a plain run of its values makes: restored.
    let plain = project.run_ok(&[
        "-S",
        "train.n_est=100",
        "-S",
        "train.max_depth=12",
        "-S",
        "prepare.split=0.3",
    ]);
    for stage in ["prepare", "train", "evaluate"] {
        assert_eq!(plain.status(stage), "restored", "{}", plain.stderr);
    }
}

#[test]
fn one_combination_of_a_sweep_is_applied_and_every_stage_is_fresh() {
    let project = project();
    project.run_ok(&[]);
    git(project.root(), &["add", "-A"]);
    git(project.root(), &["commit", "-qm", "first results"]);
    let sweep = project.pipe(&[
        "run",
        "-m",
        "-S",
        "train.n_est=20,100",
        "-S",
        "train.max_depth=4,12",
    ]);
    assert!(sweep.status.success(), "{}", stderr(&sweep));

    // Every combination wrote model.json: checkout of the whole run
    // cannot put them all in one place, and says what can.
    let checkout = project.pipe(&["checkout", "2"]);
    assert_eq!(checkout.status.code(), Some(2), "{}", stderr(&checkout));
    assert!(
        stderr(&checkout).contains("`pipe apply 2 --row KEY=VALUE,...`"),
        "{}",
        stderr(&checkout)
    );

    let unnamed = project.pipe(&["apply", "2"]);
    assert_eq!(unnamed.status.code(), Some(2));
    assert!(
        stderr(&unnamed).contains("pipe apply 2 --row n_est=100,max_depth=12"),
        "{}",
        stderr(&unnamed)
    );
    let apply = project.pipe(&["apply", "2", "--row", "n_est=100,max_depth=12"]);
    let said = String::from_utf8_lossy(&apply.stdout).into_owned();
    assert!(apply.status.success(), "{}{said}", stderr(&apply));
    assert!(
        said.contains("params.yaml:4: train.n_est 50 -> 100"),
        "{said}"
    );
    assert!(
        said.contains("params.yaml:5: train.max_depth 4 -> 12"),
        "{said}"
    );
    // The sweep's report showed every combination: this one's is made.
    assert!(
        said.contains("status: all 4 stages fresh (the sweep's report showed every combination: run #3 made this one's)"),
        "{said}"
    );
    let status = String::from_utf8_lossy(&project.pipe(&["status"]).stdout).into_owned();
    assert!(
        status.ends_with("4 stages: 4 fresh, 0 restorable, 0 stale\n"),
        "{status}"
    );
    let metrics: Value = serde_json::from_str(&project.read("eval/metrics.json")).unwrap();
    assert_eq!(metrics["n_est"], 100);
    assert_eq!(metrics["max_depth"], 12);
    // The tree's path is the run's, not the project's.
    assert!(metrics["cwd"]
        .as_str()
        .unwrap()
        .contains(".pipe/workspaces/2/"));
}

/// On Slurm, the combinations' trees go out as one job array, each job's
/// script entering its own tree; what each made is what a plain run of
/// its values makes.
#[test]
fn a_sweep_in_work_trees_goes_out_to_slurm_as_one_array() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params: { n: 1 }\nstages:\n  square:\n    run: echo $(( ${params.n} * ${params.n} )) > sq.txt && pwd > where.txt\n    outs: [sq.txt, where.txt]\n",
    );
    let conf = pipe_test_support::slurm::conf()
        .to_string_lossy()
        .into_owned();
    let env = [("SLURM_CONF".to_string(), conf)];
    let result = project.run_with_env(&env, &["--executor", "slurm", "-m", "-S", "n=2,3,4"]);
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert!(
        !project.exists("sq.txt"),
        "the project's files are not touched"
    );
    let record = project.show_settled("last");
    let ids: Vec<&str> = record["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|stage| stage["job"].as_str().expect("a job id"))
        .collect();
    assert_eq!(ids.len(), 3, "{record}");
    let array = ids[0].split('_').next().unwrap_or_default();
    assert!(
        ids.iter().all(|id| id.starts_with(&format!("{array}_"))),
        "one array: {ids:?}"
    );
    let plain = project.run_ok(&["-S", "n=3"]);
    assert_eq!(plain.status("square"), "restored", "{}", plain.stderr);
    assert_eq!(project.read("sq.txt"), "9\n");
    assert!(
        project.read("where.txt").contains("/.pipe/workspaces/1/"),
        "the job ran in its tree: {}",
        project.read("where.txt")
    );
}
