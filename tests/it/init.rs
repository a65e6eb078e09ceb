//! `pipe init` through the real binary: each template gives a project that
//! loads (and the command template runs) where it was created, even inside
//! another git repository; nothing existing is overwritten.

use std::path::Path;

use pipe_test_support::TestProject;

fn init(cwd: &Path, args: &[&str]) -> std::process::Output {
    let project = TestProject::new();
    project
        .std_command()
        .current_dir(cwd)
        .arg("init")
        .args(args)
        .output()
        .expect("pipe init")
}

#[test]
fn the_command_template_runs_where_it_was_created_even_inside_another_repository() {
    let outer = TestProject::new();
    std::fs::create_dir(outer.path(".git")).expect("a repository around it");
    let output = init(outer.root(), &["experiment", "--template", "commands"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("cd experiment") && stdout.contains("pipe run"),
        "{stdout}"
    );

    let project = outer.path("experiment");
    let gitignore = std::fs::read_to_string(project.join(".gitignore")).expect(".gitignore");
    assert!(gitignore.lines().any(|line| line == "/out/"), "{gitignore}");
    let state_ignore =
        std::fs::read_to_string(project.join(".pipe/.gitignore")).expect(".pipe/.gitignore");
    assert!(
        state_ignore.lines().any(|line| line == "*"),
        "{state_ignore}"
    );
    let run = outer
        .std_command()
        .current_dir(&project)
        .args(["run", "--json"])
        .output()
        .expect("pipe run");
    let result = pipe_test_support::RunResult::from_output(run);
    assert_eq!(result.code, 0, "{}", result.stderr);
    assert_eq!(result.ran().len(), 5, "{:?}", result.stages);
    let metrics = std::fs::read_to_string(project.join("out/metrics.json")).expect("metrics");
    assert!(metrics.contains("accuracy"), "{metrics}");
    assert!(
        !outer.exists("out"),
        "outputs belong to the new project, not the repository around it"
    );

    // The next step init suggests reruns training and moves a metric: a
    // demo whose diff says "(unchanged)" teaches nothing.
    let suggested = stdout
        .split_whitespace()
        .find(|word| word.starts_with("train.smoothing="))
        .unwrap_or_else(|| panic!("no -S step in {stdout}"));
    let rerun = outer
        .std_command()
        .current_dir(&project)
        .args(["run", "--json", "-S", suggested])
        .output()
        .expect("pipe run -S");
    let rerun = pipe_test_support::RunResult::from_output(rerun);
    assert_eq!(rerun.code, 0, "{}", rerun.stderr);
    let diff = outer
        .std_command()
        .current_dir(&project)
        .args(["diff", "--json"])
        .output()
        .expect("pipe diff");
    let diff: serde_json::Value = serde_json::from_slice(&diff.stdout).expect("diff --json");
    let moved = diff["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .filter(|metric| metric["delta"].as_f64().is_some_and(|delta| delta != 0.0))
        .count();
    assert!(moved > 0, "{suggested} moved no metric: {diff:#}");
}

#[test]
fn init_never_overwrites_and_adds_only_missing_ignore_lines() {
    let project = TestProject::new();
    project.write("pipe.yaml", "mine\n");
    let output = init(project.root(), &[]);
    assert_eq!(output.status.code(), Some(5));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("would overwrite 1 file") && stderr.contains("pipe.yaml"),
        "{stderr}"
    );
    assert_eq!(project.read("pipe.yaml"), "mine\n");
    assert!(
        !project.exists("scripts/fetch_wheel_file.py"),
        "nothing is written when anything would be overwritten"
    );

    let other = TestProject::new();
    other.write(".gitignore", "target/\n.pipe/");
    let output = init(other.root(), &["--template", "quickstart"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let gitignore = other.read(".gitignore");
    assert!(gitignore.starts_with("target/\n.pipe/\n"), "{gitignore}");
    assert_eq!(gitignore.matches(".pipe/").count(), 1, "{gitignore}");
    assert!(
        gitignore.lines().any(|line| line == "/data/"),
        "{gitignore}"
    );

    // Run again over what it wrote: nothing to add.
    std::fs::remove_file(other.path("pipe.yaml")).expect("pipe.yaml");
    std::fs::remove_file(other.path("scripts/fetch_wheel_file.py")).expect("script");
    let again = init(other.root(), &["--template", "quickstart"]);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("already ignores"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    assert_eq!(other.read(".gitignore"), gitignore);
}

/// In a real git repository: what `pipe init` and a run write is kept
/// out of `git add -A` but the project's own files, and a `.gitignore`
/// that is a link to an endless device is refused as every `.gitignore`
/// pipe reads is, never read without end: a warning, the project written.
#[test]
fn git_adds_the_projects_files_and_none_of_what_pipe_keeps() {
    let project = TestProject::new();
    let git = |args: &[&str]| pipe_test_support::git(project.root(), args);
    git(&["init", "-q"]);
    let output = init(project.root(), &["--template", "commands"]);
    assert!(output.status.success(), "{output:?}");
    let run = project
        .std_command()
        .current_dir(project.root())
        .args(["run", "--json"])
        .output()
        .expect("pipe run");
    let run = pipe_test_support::RunResult::from_output(run);
    assert_eq!(run.code, 0, "{}", run.stderr);
    git(&["add", "-A"]);
    let staged = git(&["diff", "--cached", "--name-only"]);
    let mut staged: Vec<&str> = staged.lines().collect();
    staged.sort_unstable();
    assert_eq!(
        staged,
        [
            ".gitignore",
            "pipe.yaml",
            "scripts/evaluate.py",
            "scripts/features.py",
            "scripts/prepare.py",
            "scripts/train.py"
        ]
    );

    let linked = TestProject::new();
    std::os::unix::fs::symlink("/dev/zero", linked.path(".gitignore")).expect("link");
    let output = init(linked.root(), &["--template", "commands"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("warning: ")
            && stderr.contains(".gitignore")
            && stderr.contains("device"),
        "{stderr}"
    );
    assert!(
        linked.exists("pipe.yaml"),
        "the project is written all the same"
    );
}

#[test]
fn the_quickstart_template_is_the_repositorys_quickstart_and_loads() {
    let project = TestProject::new();
    let output = init(project.root(), &[]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let original =
        std::fs::read_to_string(repo.join("pipelines/quickstart.yaml")).expect("quickstart");
    let written = project.read("pipe.yaml");
    assert_eq!(
        written,
        original.replace("./pipe run pipelines/quickstart.yaml", "pipe run")
    );
    assert_eq!(
        project.read("scripts/fetch_wheel_file.py"),
        std::fs::read_to_string(repo.join("scripts/fetch_wheel_file.py")).expect("helper")
    );
    let dag = project.pipe(&["dag"]);
    assert!(
        dag.status.success(),
        "{}",
        String::from_utf8_lossy(&dag.stderr)
    );
    let dag = String::from_utf8_lossy(&dag.stdout);
    for stage in [
        "corpus", "model", "dataset", "split", "tokenize", "train", "evaluate",
    ] {
        assert!(dag.contains(stage), "{stage} missing from:\n{dag}");
    }
}
