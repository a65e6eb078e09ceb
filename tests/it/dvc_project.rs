//! A DVC user's own project brought over by hand: scripts that read
//! `params.yaml` themselves, outputs the user never listed in a
//! `.gitignore`, a metrics file kept in git (`cache: false`), and the
//! habits that come with it: seeing what a script printed, bringing the
//! best run back (`pipe apply`), many stages at a glance (`status
//! --stale`). Every check goes through the real binary.

use pipe_test_support::{git, TestProject};

use crate::params_overrides::python;

const PARAMS: &str =
    "# the experiment's knobs\nprepare:\n  split: 0.25   # test fraction\ntrain:\n  n_est: 50\n  max_depth: 4\n";

/// prepare -> train -> evaluate, each script reading its section of
/// `params.yaml` with PyYAML as DVC's example project does.
fn dvc_shaped_project() -> TestProject {
    let project = TestProject::new();
    project.write("params.yaml", PARAMS);
    project.write(
        "src/prepare.py",
        "import json, yaml\np = yaml.safe_load(open('params.yaml'))['prepare']\nrows = [[i / 100, i % 3 == 0] for i in range(100)]\nn = int(len(rows) * p['split'])\njson.dump(rows[n:], open('data/train.json', 'w'))\njson.dump(rows[:n], open('data/test.json', 'w'))\nprint('prepared', len(rows) - n, 'train rows')\n",
    );
    project.write(
        "src/train.py",
        "import json, yaml\np = yaml.safe_load(open('params.yaml'))['train']\njson.dump({'threshold': p['n_est'] / 100 + p['max_depth'] / 100}, open('model.json', 'w'))\nprint('trained with n_est', p['n_est'])\n",
    );
    project.write(
        "src/evaluate.py",
        "import json, os\nm = json.load(open('model.json'))\nrows = json.load(open('data/test.json'))\nacc = sum((x > m['threshold']) == y for x, y in rows) / len(rows)\nos.makedirs('eval', exist_ok=True)\njson.dump({'accuracy': acc}, open('eval/metrics.json', 'w'))\nfor i in range(30):\n    print('progress line', i)\nprint('accuracy', acc)\n",
    );
    let python = python();
    let python = python.display();
    project.write(
        "pipe.yaml",
        &format!(
            "stages:
  prepare:
    run: mkdir -p data && {python} src/prepare.py
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
    metrics:
      - eval/metrics.json: {{cache: false}}
"
        ),
    );
    git(project.root(), &["init", "-q"]);
    git(project.root(), &["add", "-A"]);
    git(
        project.root(),
        &["commit", "-qm", "the project, ported by hand"],
    );
    project
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn a_hand_ported_project_keeps_pipes_state_and_cached_outputs_out_of_git() {
    let project = dvc_shaped_project();
    let run = project.pipe(&["run"]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(
        stderr(&run).contains(".gitignore: added /data/test.json /data/train.json /model.json"),
        "the run says what it added: {}",
        stderr(&run)
    );
    let ignore = project.read(".pipe/.gitignore");
    assert!(ignore.lines().any(|line| line == "*"), "{ignore}");
    // What `git add -A` would take: the new .gitignore and the metrics
    // the user keeps in git, nothing of .pipe/ and no cached output.
    let untracked = git(
        project.root(),
        &["status", "--porcelain", "--untracked-files=all"],
    );
    let listed: Vec<&str> = untracked.lines().map(|line| &line[3..]).collect();
    assert_eq!(listed, [".gitignore", "eval/metrics.json"], "{untracked}");

    git(project.root(), &["add", "-A"]);
    git(project.root(), &["commit", "-qm", "first results"]);
    let again = project.run_ok(&["-S", "train.n_est=60"]);
    let mut ran = again.ran();
    ran.sort_unstable();
    assert_eq!(ran, ["evaluate", "train"], "{}", again.stderr);
    assert!(
        !again.stderr.contains(".gitignore: added"),
        "{}",
        again.stderr
    );
    let shown = project.show_settled("last");
    assert_eq!(
        shown["git_dirty"],
        serde_json::json!(false),
        "a committed port records clean runs: {shown}"
    );
}

#[test]
fn pipe_apply_brings_a_runs_params_and_outputs_back_and_every_stage_is_fresh() {
    let project = dvc_shaped_project();
    project.run_ok(&[]);
    git(project.root(), &["add", "-A"]);
    git(project.root(), &["commit", "-qm", "first results"]);
    project.run_ok(&["-S", "train.n_est=70", "-S", "train.max_depth=8"]);
    let best_metrics = project.read("eval/metrics.json");
    assert_eq!(
        project.read("params.yaml"),
        PARAMS,
        "a run puts params.yaml back"
    );

    let apply = project.pipe(&["apply", "2"]);
    assert!(apply.status.success(), "{}", stderr(&apply));
    let said = stdout(&apply);
    assert!(
        said.contains("params.yaml:5: train.n_est 50 -> 70"),
        "{said}"
    );
    assert!(
        said.contains("params.yaml:6: train.max_depth 4 -> 8"),
        "{said}"
    );
    assert!(said.contains("status: all 3 stages fresh"), "{said}");
    assert_eq!(
        project.read("params.yaml"),
        PARAMS
            .replace("n_est: 50", "n_est: 70")
            .replace("max_depth: 4", "max_depth: 8"),
        "edited in place, comments kept"
    );
    assert_eq!(project.read("eval/metrics.json"), best_metrics);
    let status = project.pipe(&["status", "--json"]);
    let states: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    for state in states.as_array().expect("a list") {
        assert_eq!(state["freshness"], "fresh", "{states}");
    }

    // Back to run 1 while params.yaml holds edits git has not committed:
    // refused, naming the file, nothing changed.
    let refused = project.pipe(&["apply", "1"]);
    assert_eq!(refused.status.code(), Some(5), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("params.yaml has edits git has not committed"),
        "{}",
        stderr(&refused)
    );
    assert!(project.read("params.yaml").contains("n_est: 70"));
    git(project.root(), &["commit", "-qam", "the best run"]);
    let back = project.pipe(&["apply", "1"]);
    assert!(back.status.success(), "{}", stderr(&back));
    assert_eq!(project.read("params.yaml"), PARAMS);
    assert!(
        stdout(&back).contains("status: all 3 stages fresh"),
        "{}",
        stdout(&back)
    );
}

#[test]
fn a_param_set_in_the_pipeline_file_is_applied_there() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params:\n  word: hello   # what to say\nstages:\n  say:\n    run: echo ${params.word} > said.txt\n    outs: [said.txt]\n",
    );
    project.run_ok(&[]);
    project.run_ok(&["-S", "word=goodbye"]);
    let apply = project.pipe(&["apply", "last"]);
    assert!(apply.status.success(), "{}", stderr(&apply));
    assert!(
        project
            .read("pipe.yaml")
            .contains("  word: \"goodbye\"   # what to say\n"),
        "{}",
        project.read("pipe.yaml")
    );
    assert_eq!(project.read("said.txt"), "goodbye\n");
    assert!(
        stdout(&apply).contains("status: all 1 stages fresh"),
        "{}",
        stdout(&apply)
    );
}

#[test]
fn dvcs_per_output_options_are_mapped_or_refused_at_their_key() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  a:\n    run: echo a > a.txt\n    outs:\n      - a.txt: {persist: true, cach: false}\n  b:\n    run: echo b > b.txt\n    outs:\n      main: {path: b.txt, cache: maybe}\n",
    );
    let status = project.pipe(&["status"]);
    assert_eq!(status.status.code(), Some(2));
    let said = stderr(&status);
    assert!(
        said.contains(
            "error[unsupported-option]: output `a.txt` of stage `a` is declared `persist: true`"
        ) && said.contains("--> pipe.yaml:5:17"),
        "{said}"
    );
    assert!(
        said.contains("did you mean `cache`?") && said.contains("--> pipe.yaml:5:32"),
        "{said}"
    );
    assert!(
        said.contains("must be true or false") && said.contains("--> pipe.yaml:9:34"),
        "{said}"
    );

    project.write(
        "pipe.yaml",
        "stages:\n  a:\n    run: echo a > a.txt\n    outs:\n      - a.txt:\n          cache: false\n          desc: the letter\n      - b.txt\n",
    );
    assert!(project.pipe(&["status"]).status.success());
    // DVC's flow form: a single-pair mapping inside a flow list.
    project.write(
        "pipe.yaml",
        "stages:\n  a:\n    run: echo '{}' > m.json\n    metrics: [m.json: {cache: false}]\n",
    );
    let run = project.pipe(&["run"]);
    assert!(run.status.success(), "{}", stderr(&run));
}

#[test]
fn a_param_holding_a_template_is_refused_where_it_is_used_never_run_literally() {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "params:\n  n: ${env.N}\n  ok: plain\nstages:\n  a:\n    run: echo ${params.n} ${params.ok} > a.txt\n    outs: [a.txt]\n",
    );
    let run = project.pipe(&["run"]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    let said = stderr(&run);
    assert!(
        said.contains("param `n` used in `run` of stage `a` holds `${` (set at pipe.yaml:2:6)"),
        "{said}"
    );
    assert!(said.contains("from_env"), "{said}");
    assert!(!project.exists("a.txt"));
    // From -S too: a value is text.
    project.write(
        "pipe.yaml",
        "params:\n  n: one\nstages:\n  a:\n    run: echo ${params.n} > a.txt\n    outs: [a.txt]\n",
    );
    let run = project.pipe(&["run", "-S", "n=${HOME}"]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    assert!(stderr(&run).contains("(set with -S)"), "{}", stderr(&run));
}

#[test]
fn a_succeeded_commands_last_lines_are_shown_with_its_log_and_can_be_turned_off() {
    let project = dvc_shaped_project();
    let run = project.pipe(&["run"]);
    let said = stderr(&run);
    assert!(run.status.success(), "{said}");
    assert!(said.contains("│ trained with n_est 50"), "{said}");
    assert!(said.contains("│ accuracy"), "{said}");
    // The last 10 lines by default, the full log named.
    assert!(
        said.contains("│ progress line 29") && !said.contains("│ progress line 20\n"),
        "{said}"
    );
    assert!(
        said.contains("full log: .pipe/logs/1/evaluate.log"),
        "{said}"
    );

    let quiet = project.pipe(&["run", "--force-all", "--output-lines", "0"]);
    assert!(quiet.status.success());
    assert!(!stderr(&quiet).contains('│'), "{}", stderr(&quiet));
    let two = project
        .command()
        .env("PIPE_OUTPUT_LINES", "2")
        .args(["run", "--force", "evaluate"])
        .output()
        .expect("pipe");
    let said = stderr(&two);
    assert!(
        said.contains("│ progress line 29\n") && said.contains("│ accuracy"),
        "{said}"
    );
    assert!(!said.contains("│ progress line 28"), "{said}");
}

#[test]
fn status_stale_lists_only_the_stages_a_run_would_do_something_for() {
    let project = TestProject::new();
    let mut pipeline = String::from("stages:\n");
    for i in 0..40 {
        pipeline.push_str(&format!(
            "  s{i}:\n    run: echo {i} > out/{i}.txt\n    outs: [out/{i}.txt]\n"
        ));
    }
    project.write("pipe.yaml", &pipeline);
    std::fs::create_dir_all(project.path("out")).expect("out/");
    project.run_ok(&[]);
    std::fs::remove_file(project.path("out/7.txt")).expect("remove");
    let all = stdout(&project.pipe(&["status"]));
    assert_eq!(all.lines().count(), 41, "{all}");
    assert!(
        all.ends_with("40 stages: 39 fresh, 1 restorable, 0 stale (`pipe status --stale` lists only the others)\n"),
        "{all}"
    );
    let stale = stdout(&project.pipe(&["status", "--stale"]));
    assert_eq!(
        stale.lines().collect::<Vec<_>>(),
        [
            "s7  restorable  output `out/7.txt` is missing or modified; the cache has it",
            "40 stages: 39 fresh, 1 restorable, 0 stale (the fresh ones not listed)"
        ],
        "{stale}"
    );
    let json = project.pipe(&["status", "--stale", "--json"]);
    let states: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(states.as_array().map(Vec::len), Some(1), "{states}");
}
