//! `pipe completions SHELL` completes what the project holds: stage names,
//! run ids and param paths, asked of `pipe` itself at each TAB through the
//! variable clap_complete's scripts set (`COMPLETE=SHELL pipe -- WORDS`).

use pipe_test_support::TestProject;

const PIPELINE: &str = r#"name: completing
params:
  seed: 7
  train: { lr: 0.1 }
stages:
  prepare:
    desc: Write the data
    run: echo ${params.seed} > data.txt
    outs: [data.txt]
  features:
    matrix: { n: [1, 2] }
    run: echo ${matrix.n} > f${matrix.n}.txt
    outs: ["f${matrix.n}.txt"]
  train:
    run: cat data.txt f1.txt > model.txt; echo ${params.train.lr} >> model.txt
    deps: [data.txt, f1.txt]
    outs: [model.txt]
"#;

/// The candidates `pipe` gives for the last of `words`, as fish asks: one
/// per line, a tab before its help.
fn candidates(project: &TestProject, dir: &std::path::Path, words: &[&str]) -> Vec<String> {
    let output = project
        .command()
        .current_dir(dir)
        .env("COMPLETE", "fish")
        .arg("--")
        .args(words)
        .output()
        .expect("run pipe");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.split('\t').next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn completions_offer_stage_names_run_ids_and_params() {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project.run_ok(&[]);
    project.run_ok(&["-S", "seed=8"]);
    let root = project.root();

    let stages = candidates(&project, root, &["pipe", "why", ""]);
    for stage in [
        "prepare",
        "features",
        "features@n=1",
        "features@n=2",
        "train",
    ] {
        assert!(stages.contains(&stage.to_string()), "{stage}: {stages:?}");
    }
    assert_eq!(
        candidates(&project, root, &["pipe", "why", "tr"]),
        ["train"]
    );
    let targets = candidates(&project, root, &["pipe", "run", "pipe.yaml", "fea"]);
    assert_eq!(targets, ["features", "features@n=1", "features@n=2"]);
    let forced = candidates(&project, root, &["pipe", "run", "--force", "pre"]);
    assert_eq!(forced, ["prepare"]);

    for words in [
        &["pipe", "show", ""][..],
        &["pipe", "diff", ""],
        &["pipe", "checkout", ""],
        &["pipe", "compare", ""],
    ] {
        let runs = candidates(&project, root, words);
        assert!(
            runs.starts_with(&["2".to_string(), "1".to_string(), "last".to_string()]),
            "{words:?}: the newest run first: {runs:?}"
        );
    }

    let params = candidates(&project, root, &["pipe", "run", "-S", ""]);
    assert_eq!(params, ["seed=", "train.lr="]);
    let filtered = candidates(&project, root, &["pipe", "compare", "--where", "tr"]);
    assert_eq!(filtered, ["train.lr="]);

    // From a subdirectory, the project around it.
    let sub = project.path("notes");
    std::fs::create_dir_all(&sub).unwrap();
    assert_eq!(
        candidates(&project, &sub, &["pipe", "why", "tr"]),
        ["train"]
    );
    assert!(candidates(&project, &sub, &["pipe", "show", ""]).contains(&"2".to_string()));

    // `-C DIR`: the project in DIR.
    let empty = TestProject::new();
    let elsewhere = root.to_str().unwrap();
    assert_eq!(
        candidates(
            &project,
            empty.root(),
            &["pipe", "-C", elsewhere, "why", "tr"]
        ),
        ["train"]
    );
    assert!(candidates(
        &project,
        empty.root(),
        &["pipe", "-C", elsewhere, "show", ""]
    )
    .contains(&"2".to_string()));

    // Outside any project: only the flags, and no error in the command line.
    let flags = candidates(&empty, empty.root(), &["pipe", "why", ""]);
    assert!(flags.iter().all(|flag| flag.starts_with('-')), "{flags:?}");
}

#[test]
fn every_shell_gets_a_script_and_subcommands_complete() {
    let project = TestProject::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let output = project.pipe(&["completions", shell]);
        assert_eq!(output.status.code(), Some(0), "{shell}");
        let script = String::from_utf8_lossy(&output.stdout);
        assert!(script.contains("COMPLETE"), "{shell}: {script}");
    }
    let commands = candidates(&project, project.root(), &["pipe", "che"]);
    assert_eq!(commands, ["checkout"]);
}

#[test]
fn the_bash_script_asks_pipe_for_stage_names() {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    let script = project.pipe(&["completions", "bash"]);
    assert!(script.status.success());
    let script = String::from_utf8(script.stdout).unwrap();
    assert!(script.contains("COMPLETE=\"bash\""), "{script}");
    project.write("completion.bash", &script);
    // What bash does at `pipe why tr<TAB>`.
    let output = std::process::Command::new("bash")
        .current_dir(project.root())
        .env("NO_COLOR", "1")
        .arg("-c")
        .arg(
            "source completion.bash; COMP_WORDS=(pipe why tr); COMP_CWORD=2; COMP_TYPE=9; \
             _clap_complete_pipe pipe tr why; printf '%s\\n' \"${COMPREPLY[@]}\"",
        )
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.trim(), "train", "{output:?}");
}
