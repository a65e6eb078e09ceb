//! Settings layered as flag > environment > pipeline > pipe.config.yaml
//! (the engine's `settings.rs`): a bad value names the source it came from and
//! what to write there, through the real binary.

use pipe_test_support::TestProject;

const PIPELINE: &str = "stages:\n  a:\n    run: echo a > a.txt\n    outs: [a.txt]\n";

fn project() -> TestProject {
    let project = TestProject::new();
    project.write("pipe.yaml", PIPELINE);
    project
}

/// `pipe run ARGS` with `env` set: the exit code and stderr.
fn run(project: &TestProject, env: &[(&str, &str)], args: &[&str]) -> (Option<i32>, String) {
    let output = project
        .command()
        .envs(env.iter().copied())
        .arg("run")
        .args(args)
        .output()
        .expect("run pipe");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_bad_environment_variable_is_named_with_what_to_set_it_to() {
    let project = project();
    let (code, stderr) = run(&project, &[("PIPE_EXECUTOR", "cluster")], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("PIPE_EXECUTOR is `cluster`"), "{stderr}");
    assert!(
        stderr.contains("set PIPE_EXECUTOR to `local` or `slurm`, or unset it"),
        "{stderr}"
    );
    // A flag does not hide a typo in the environment.
    let (code, stderr) = run(&project, &[("PIPE_LINK", "softlink")], &["--link", "copy"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("PIPE_LINK is `softlink`: unknown link mode `softlink`"),
        "{stderr}"
    );
    assert!(!project.exists("a.txt"), "nothing ran");
}

#[test]
fn a_bad_flag_is_named_with_what_it_takes() {
    let project = project();
    let (code, stderr) = run(&project, &[], &["--link", "copy,softlink"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--link is `copy,softlink`"), "{stderr}");
    assert!(stderr.contains("give --link link modes"), "{stderr}");
}

#[test]
fn a_remote_that_cannot_be_used_says_which_source_gave_it() {
    let project = project();
    let (code, stderr) = run(&project, &[], &["--remote", "ftp://host/x"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("the remote cache from --remote:"),
        "{stderr}"
    );
    let (code, stderr) = run(&project, &[("PIPE_REMOTE", "ftp://host/x")], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("the remote cache from PIPE_REMOTE:"),
        "{stderr}"
    );
    assert!(stderr.contains("set PIPE_REMOTE to"), "{stderr}");
}

#[test]
fn the_project_config_gives_way_to_the_pipeline_and_both_to_the_environment() {
    let project = project();
    // pipe.config.yaml sends every pipeline to Slurm; this one says local.
    project.write("pipe.config.yaml", "executor: slurm\n");
    project.write("pipe.yaml", &format!("executor: local\n{PIPELINE}"));
    let (code, stderr) = run(&project, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(project.exists("a.txt"));
    // The environment wins over the pipeline, and its typo is reported.
    let (code, stderr) = run(&project, &[("PIPE_EXECUTOR", "slrum")], &["--force-all"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("PIPE_EXECUTOR is `slrum`"), "{stderr}");
}
