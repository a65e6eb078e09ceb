//! What a command can know before anything runs, it says before anything
//! runs, located: inputs no stage makes that are not there (`validate`,
//! `status`, `why`, `run` and `--dry-run`), and `--force` names that name
//! no stage, in a dry run as in a run.

use pipe_test_support::TestProject;

fn project() -> TestProject {
    let project = TestProject::new();
    project.write(
        "pipe.yaml",
        "stages:\n  prepare:\n    run: cp raw.csv clean.csv\n    deps: [raw.csv]\n    outs: [clean.csv]\n  train:\n    run: wc -l clean.csv > model.txt\n    deps: [clean.csv]\n    outs: [model.txt]\n",
    );
    project
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_input_no_stage_makes_and_that_is_absent_is_refused_where_written_before_anything_runs() {
    let project = project();
    for args in [
        &["validate"][..],
        &["status"],
        &["why", "train"],
        &["run", "--dry-run"],
        &["run"],
    ] {
        let output = project.pipe(args);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {text}");
        assert!(
            text.contains("error[missing-input]: stage `prepare` depends on `raw.csv`, which is not there and which no stage makes")
                && text.contains("--> pipe.yaml:4:12"),
            "{args:?}: {text}"
        );
        // `clean.csv` is made by a stage: not an input to check.
        assert!(!text.contains("`clean.csv`"), "{args:?}: {text}");
    }
    assert!(!project.exists("clean.csv"), "nothing ran");
    // What only reads the pipeline's shape still works.
    assert!(project.pipe(&["dag"]).status.success());

    project.write("raw.csv", "a\n");
    assert!(project.pipe(&["validate"]).status.success());
    project.run_ok(&[]);
}

#[test]
fn a_force_that_names_no_stage_is_refused_in_a_dry_run_and_a_named_one_is_shown_forced() {
    let project = project();
    project.write("raw.csv", "a\n");
    project.run_ok(&[]);
    let typo = project.pipe(&["run", "--force", "trian", "--dry-run"]);
    assert_eq!(typo.status.code(), Some(2), "{}", stderr(&typo));
    assert!(
        stderr(&typo).contains("did you mean `train`?"),
        "{}",
        stderr(&typo)
    );

    let forced = project.pipe(&["run", "--force", "train", "--dry-run"]);
    let text = String::from_utf8_lossy(&forced.stdout);
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert!(
        text.contains("train    would run  forced (--force)"),
        "{text}"
    );
    assert!(text.contains("prepare  fresh"), "{text}");
    let all = project.pipe(&["run", "--force-all", "--dry-run"]);
    let text = String::from_utf8_lossy(&all.stdout);
    assert!(
        text.contains("prepare  would run  forced (--force-all)"),
        "{text}"
    );
}

#[test]
fn every_command_finds_its_pipeline_file_by_one_rule() {
    let project = TestProject::new();
    // A repository: its root is the project's, wherever the pipeline is.
    std::fs::create_dir(project.path(".git")).unwrap();
    project.write(
        "pipelines/clean.yaml",
        "stages:\n  clean:\n    run: echo ok > clean.txt\n    outs: [clean.txt]\n",
    );
    // Without its extension: said, not taken for a stage.
    for args in [
        &["run", "pipelines/clean"][..],
        &["status", "pipelines/clean"],
    ] {
        let output = project.pipe(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&output).contains("did you mean `pipelines/clean.yaml`?"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    // No pipe.yaml and no run yet: said so.
    let none = project.pipe(&["status"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(
        stderr(&none).contains("no pipeline file"),
        "{}",
        stderr(&none)
    );

    project.run_ok(&["pipelines/clean.yaml"]);
    // Then the pipeline of the last run, said on stderr, for every command.
    for args in [&["status"][..], &["why", "clean"], &["validate"], &["dag"]] {
        let output = project.pipe(args);
        assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(
                "no pipe.yaml here: using pipelines/clean.yaml, the pipeline file of the last run (#1)"
            ),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    // `why` takes the file positionally too, as `run` and `status` do.
    let why = project.pipe(&["why", "pipelines/clean.yaml", "clean"]);
    assert!(why.status.success(), "{}", stderr(&why));
    assert!(String::from_utf8_lossy(&why.stdout).contains("stage `clean` is fresh"));
}

/// The rules between a built-in stage's params that its catalog declares
/// (the split's sizes make a whole; `strategy: single` trains on one
/// device) are checked when the pipeline loads, located at the param, by
/// every command that loads it: no run needed to learn the fractions sum
/// to 0.75.
#[test]
fn rules_between_a_stages_params_are_checked_at_load_by_validate_dry_run_and_status() {
    let project = TestProject::new();
    project.write("data.jsonl", "{\"text\": \"a\", \"label\": 0}\n");
    project.write(
        "pipe.yaml",
        "params:\n  split: { train: 0.7, val: 0.1, test: 0.2 }\nstages:\n  split:\n    uses: data/split@1\n    with:\n      dataset: data.jsonl\n      train: ${params.split.train}\n      val: ${params.split.val}\n      test: ${params.split.test}\n",
    );
    assert!(project.pipe(&["validate"]).status.success());
    let overrides = ["-S", "split.val=0.02", "-S", "split.test=0.03"];
    for command in [
        &["validate"][..],
        &["run", "--dry-run"],
        &["status"],
        &["run"],
    ] {
        let args: Vec<&str> = command.iter().chain(&overrides).copied().collect();
        let output = project.pipe(&args);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {text}");
        assert!(
            text.contains("error[bad-stage-param]: stage `split`: the fractions train + val + test sum to 0.75, not 1 (train 0.7, val 0.02, test 0.03)")
                && text.contains("--> pipe.yaml:8:14")
                && text.contains("all as fractions that sum to 1"),
            "{args:?}: {text}"
        );
    }
    assert!(!project.exists(".pipe/out"), "nothing ran");
    let mixed = project.pipe(&["validate", "-S", "split.val=500"]);
    assert!(
        stderr(&mixed).contains(
            "param `val` is a count (500) while another of train, val, test is a fraction"
        ) && stderr(&mixed).contains("--> pipe.yaml:9:12"),
        "{}",
        stderr(&mixed)
    );

    // The training stage's catalog, built into pipe, says the same of
    // `strategy: single` on two devices, without its worker.
    project.write(
        "pipe.yaml",
        "stages:\n  train:\n    uses: train/classifier@1\n    with:\n      tokens: tokens\n      model: model\n      strategy: single\n      devices: 2\n",
    );
    let output = project.pipe(&["validate"]);
    let text = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains(
            "stage `train`: param `devices` is 2, but strategy `single` trains on one device"
        ) && text.contains("--> pipe.yaml:8:16")
            && text.contains("use `strategy: ddp`"),
        "{text}"
    );
}
