//! The two ways to install pipe (docs/install.md), through the real
//! commands.
//!
//! The `cargo install` route:
//! `pipe` and `pipe-stage` installed from this repository into a temporary
//! root, then used in an empty directory outside the repository with
//! nothing of the checkout on PATH: `pipe init`, then the quickstart, which
//! runs every stage but training and says at the training stage what to
//! install; then the training worker installed beside them, and the same
//! run finishes with a test accuracy.
//!
//! It installs from the checkout (`cargo install --path`, the clone's form
//! in docs/install.md) in debug, with the workspace's target directory, so
//! that it reuses what the suite compiled and takes seconds. (The `--git`
//! form builds the same crates from a clone cargo makes; its cold time is
//! in docs/performance.md.)
//!
//! The wheel route: scripts/build-wheel.sh packs the suite's debug build
//! into the wheel `pipe-ml`, its binaries stripped as the release wheel's
//! are (their line tables beside the wheel), which is installed into a fresh virtual
//! environment without torch (every stage but training runs; training
//! says to install the `train` extra), then with the suite's torch made
//! visible to it by a `.pth` file rather than downloaded again, and the
//! extra installed offline: the run finishes with a test accuracy.
//!
//! Both run the quickstart with small validation and test splits (1% and
//! 2%): what is tested is the installation, not the model.

use std::path::{Path, PathBuf};
use std::process::Command;

use pipe_test_support::RunResult;

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cargo_install(root: &Path, crate_dir: &str, env: &[(&str, String)]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut command = Command::new(cargo);
    pipe_engine::without_cargo_run_env(&mut command);
    let output = command
        .current_dir(repository())
        .args([
            "install", "--locked", "--debug", "--quiet", "--path", crate_dir, "--root",
        ])
        .arg(root)
        .envs(env.iter().map(|(name, value)| (name, value)))
        .output()
        .expect("run cargo install");
    assert!(
        output.status.success(),
        "cargo install --path {crate_dir} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `pipe` from the installation, in `dir`, with PATH holding only the
/// installation, a Python of its own (for the quickstart's `pip download`)
/// and the system's directories.
fn installed_pipe(root: &Path, python: &Path, dir: &Path, args: &[&str]) -> std::process::Output {
    installed_pipe_with(root, python, dir, args, &[])
}

fn installed_pipe_with(
    root: &Path,
    python: &Path,
    dir: &Path,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> std::process::Output {
    Command::new(root.join("bin/pipe"))
        .current_dir(dir)
        .env_clear()
        .env("HOME", std::env::var("HOME").unwrap_or_default())
        .env("NO_COLOR", "1")
        .env(
            "PATH",
            format!(
                "{}:{}:/usr/local/bin:/usr/bin:/bin",
                root.join("bin").display(),
                python.display()
            ),
        )
        .envs(env.iter().copied())
        .args(args)
        .output()
        .expect("run the installed pipe")
}

#[test]
fn cargo_install_gives_a_pipe_that_starts_and_runs_a_project_anywhere() {
    let root = tempfile::tempdir().expect("install root");
    cargo_install(root.path(), ".", &[]);
    cargo_install(root.path(), "stages", &[]);
    for binary in ["pipe", "pipe-stage"] {
        assert!(
            root.path().join("bin").join(binary).is_file(),
            "{binary} not installed"
        );
    }

    // A Python outside the checkout, with pip, for the wheels the
    // quickstart's first stages fetch.
    let venv = tempfile::tempdir().expect("venv dir");
    fresh_venv(venv.path());
    let python = venv.path().join("bin");

    let (_work, project, first) = init_then_run_without_training(&|dir, args| {
        installed_pipe(root.path(), &python, dir, args)
    });
    assert!(
        first.stderr.contains("which is not installed")
            && first
                .stderr
                .contains("cargo install --locked --git REPO pipe-train"),
        "{}",
        first.stderr
    );
    assert_eq!(first.status("evaluate"), "skipped");

    // The training worker beside them, built against the suite's libtorch
    // (its rpath points there: nothing to set at run time).
    let venv_bin = repository().join(".venv/bin");
    let mut env = vec![];
    if std::env::var_os("LIBTORCH").is_none() {
        env.push(("LIBTORCH_USE_PYTORCH", "1".to_string()));
        env.push((
            "PATH",
            format!(
                "{}:{}",
                venv_bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        ));
    }
    cargo_install(root.path(), "train", &env);

    let second = RunResult::from_output(installed_pipe(root.path(), &python, &project, &QUICK));
    assert_trains_to_a_test_accuracy(&second, &|args| {
        installed_pipe(root.path(), &python, &project, args)
    });
}

/// The quickstart, small: 256 training samples, validation and test 1%
/// and 2% of the corpus.
const QUICK: [&str; 10] = [
    "run",
    "--json",
    "-S",
    "train.limit_train_samples=256",
    "-S",
    "split.train=0.97",
    "-S",
    "split.val=0.01",
    "-S",
    "split.test=0.02",
];

/// `pipe init sentiment` in an empty directory, then the quickstart, which
/// runs every stage but training: the directory, the project and that run.
fn init_then_run_without_training(
    pipe: &dyn Fn(&Path, &[&str]) -> std::process::Output,
) -> (tempfile::TempDir, PathBuf, RunResult) {
    let work = tempfile::tempdir().expect("an empty directory");
    let project = work.path().join("sentiment");
    let init = pipe(work.path(), &["init", "sentiment"]);
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let first = RunResult::from_output(pipe(&project, &QUICK));
    assert_runs_all_but_training(&first);
    (work, project, first)
}

fn assert_runs_all_but_training(first: &RunResult) {
    assert_eq!(first.code, 1, "{}", first.stderr);
    for stage in ["corpus", "model", "dataset", "split", "tokenize"] {
        assert_eq!(first.status(stage), "ran", "{stage}: {}", first.stderr);
    }
    assert_eq!(first.status("train"), "failed");
    assert_eq!(first.status("evaluate"), "skipped");
}

fn assert_trains_to_a_test_accuracy(
    second: &RunResult,
    pipe: &dyn Fn(&[&str]) -> std::process::Output,
) {
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(
        second.ran(),
        ["evaluate", "report", "train"],
        "{:?}",
        second.stages
    );
    let evaluate = last_record_of(pipe, "evaluate");
    let accuracy = evaluate["metrics"]["accuracy"]
        .as_f64()
        .expect("a test accuracy");
    assert!((0.0..=1.0).contains(&accuracy), "{accuracy}");
}

/// `stage`'s record in the last run (`pipe show --json`).
fn last_record_of(
    pipe: &dyn Fn(&[&str]) -> std::process::Output,
    stage: &str,
) -> serde_json::Value {
    let show = pipe(&["show", "--json"]);
    let record: serde_json::Value = serde_json::from_slice(&show.stdout).expect("show --json");
    record["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|found| found["stage"] == stage))
        .unwrap_or_else(|| panic!("no record of `{stage}` in {record:#}"))
        .clone()
}

/// `python3 -m venv DIR`: with PATH as the suite sets it, the Python of
/// the suite's `.venv`, so the same version.
fn fresh_venv(dir: &Path) {
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(dir)
        .status()
        .expect("python3 -m venv");
    assert!(status.success());
}

/// `DIR/lib/python3.X/site-packages`.
fn site_packages(venv: &Path) -> Option<PathBuf> {
    std::fs::read_dir(venv.join("lib"))
        .ok()?
        .flatten()
        .map(|entry| entry.path().join("site-packages"))
        .find(|site| site.is_dir())
}

fn pip_install(venv: &Path, requirement: &str) {
    let output = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--no-index",
            "--quiet",
            "--disable-pip-version-check",
            requirement,
        ])
        .output()
        .expect("pip install");
    assert!(
        output.status.success(),
        "pip install {requirement}:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_wheel_installs_pipe_and_its_workers_and_finds_torch_in_its_environment() {
    let wheels = tempfile::tempdir().expect("wheel dir");
    // The script leaves out what cargo set for this test (CARGO_MANIFEST_DIR):
    // its builds find the suite's own fresh.
    let build = Command::new("bash")
        .arg(repository().join("scripts/build-wheel.sh"))
        .args(["--profile", "dev", "--strip", "--out"])
        .arg(wheels.path())
        .output()
        .expect("scripts/build-wheel.sh");
    assert!(
        build.status.success(),
        "scripts/build-wheel.sh failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let wheel = String::from_utf8(build.stdout).expect("a path");
    let wheel = wheel.trim();
    assert!(
        Path::new(wheel).is_file() && wheel.contains("pipe_ml-"),
        "{wheel}"
    );

    // pip install pipe-ml: no torch.
    let venv = tempfile::tempdir().expect("venv dir");
    fresh_venv(venv.path());
    pip_install(venv.path(), wheel);
    let bin = venv.path().join("bin");
    for binary in ["pipe", "pipe-stage", "pipe-stage-train"] {
        assert!(bin.join(binary).is_file(), "{binary} not installed");
    }
    assert_stripped_with_their_line_tables_beside(wheel, &bin);

    let (_work, project, first) =
        init_then_run_without_training(&|dir, args| installed_pipe(venv.path(), &bin, dir, args));
    assert!(
        first
            .stderr
            .contains("which is not installed in the Python environment")
            && first.stderr.contains("install 'pipe-ml[train]'"),
        "{}",
        first.stderr
    );

    // pip install 'pipe-ml[train]': torch 2.11.0 is the suite's, seen
    // through a .pth file, so pip finds the extra satisfied offline.
    let Some(suite_site) =
        site_packages(&repository().join(".venv")).filter(|site| site.join("torch").is_dir())
    else {
        panic!("the suite's torch is not in .venv/ (scripts/bootstrap-libtorch.sh puts it there)");
    };
    let site = site_packages(venv.path()).expect("the venv's site-packages");
    std::fs::write(
        site.join("suite-torch.pth"),
        format!("{}\n", suite_site.display()),
    )
    .expect("a .pth file");
    pip_install(venv.path(), &format!("{wheel}[train]"));

    let second = RunResult::from_output(installed_pipe(venv.path(), &bin, &project, &QUICK));
    assert_trains_to_a_test_accuracy(&second, &|args| {
        installed_pipe(venv.path(), &bin, &project, args)
    });

    // On the cluster the job starts the worker with the same library
    // path (`env LD_LIBRARY_PATH=… pipe-stage-train run …`).
    let mut args = QUICK.to_vec();
    args.extend(["--executor", "slurm", "--force", "evaluate"]);
    let conf = pipe_test_support::slurm::conf();
    let on_slurm = RunResult::from_output(installed_pipe_with(
        venv.path(),
        &bin,
        &project,
        &args,
        &[("SLURM_CONF", conf.as_os_str())],
    ));
    assert_eq!(on_slurm.code, 0, "{}", on_slurm.stderr);
    assert_eq!(on_slurm.status("evaluate"), "ran", "{}", on_slurm.stderr);
    let evaluate = last_record_of(
        &|args| installed_pipe(venv.path(), &bin, &project, args),
        "evaluate",
    );
    assert!(evaluate["job"].is_string(), "{evaluate:#}");
}

/// What `--strip` promises: the installed binaries carry no line tables
/// but keep their symbols (a backtrace names its functions) and a link to
/// their `.debug` file, and those files are beside the wheel. The rest of
/// the test runs these stripped binaries through the quickstart.
fn assert_stripped_with_their_line_tables_beside(wheel: &str, bin: &Path) {
    for binary in ["pipe", "pipe-stage", "pipe-stage-train"] {
        let sections = elf_section_names(&bin.join(binary));
        // `.debug_gdb_scripts` is loaded with the program (a few bytes
        // naming gdb's pretty-printers): objcopy keeps it, rightly.
        for gone in [".debug_info", ".debug_line", ".debug_str"] {
            assert!(
                !sections.iter().any(|name| name == gone),
                "{binary} still carries {gone}: {sections:?}"
            );
        }
        for kept in [".symtab", ".gnu_debuglink"] {
            assert!(
                sections.iter().any(|name| name == kept),
                "{binary} lost {kept}: {sections:?}"
            );
        }
    }
    let archive = format!("{}.debug.tar.gz", wheel.trim_end_matches(".whl"));
    let listed = Command::new("tar")
        .args(["-tzf", &archive])
        .output()
        .expect("tar");
    assert!(listed.status.success(), "{archive}: {listed:?}");
    let mut names: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["pipe-stage-train.debug", "pipe-stage.debug", "pipe.debug"]
    );
}

/// The names of an ELF64 little-endian file's sections, from its section
/// header table.
fn elf_section_names(path: &Path) -> Vec<String> {
    let elf = std::fs::read(path).expect("the binary");
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap()) as usize;
    assert_eq!(
        &elf[..5],
        b"\x7fELF\x02",
        "{} is no ELF64 file",
        path.display()
    );
    let (table, entry, count) = (u64_at(0x28), u16_at(0x3a), u16_at(0x3c));
    let header = |index: usize| table + index * entry;
    let names_at = u64_at(header(u16_at(0x3e)) + 0x18);
    (0..count)
        .map(|index| {
            let start = names_at + u32_at(header(index));
            let end = start + elf[start..].iter().position(|&b| b == 0).unwrap();
            String::from_utf8_lossy(&elf[start..end]).into_owned()
        })
        .collect()
}

/// pipe knows the built-in stages without starting a worker, from their
/// descriptions built into it (engine/src/workers/data_stages.json and
/// training_stages.json): a run that only restores needs no worker. They
/// must be what the workers themselves describe, or keys and checks would
/// drift: `pipe stages --check` builds both workers in this checkout (as a
/// run that needs them would) and compares.
#[test]
fn the_catalog_built_into_pipe_is_what_the_workers_describe() {
    let project = pipe_test_support::TestProject::new();
    let output = project.pipe(&["stages", "--check"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}\nregenerate with `target/debug/pipe-stage describe > engine/src/workers/data_stages.json` \
         and `target/debug/pipe-stage-train describe > engine/src/workers/training_stages.json`",
        String::from_utf8_lossy(&output.stderr)
    );
    for worker in ["pipe-stage:", "pipe-stage-train:"] {
        assert!(
            stdout.lines().any(
                |line| line.contains(worker) && line.contains("as the catalog built into pipe")
            ),
            "{stdout}"
        );
    }
    // Each is compared with what it really says.
    for (worker, file) in [
        ("pipe-stage", "engine/src/workers/data_stages.json"),
        (
            "pipe-stage-train",
            "engine/src/workers/training_stages.json",
        ),
    ] {
        let binary = assert_cmd::cargo::cargo_bin("pipe").with_file_name(worker);
        let described = Command::new(&binary)
            .arg("describe")
            .output()
            .expect(worker);
        assert!(described.status.success());
        let described: serde_json::Value = serde_json::from_slice(&described.stdout).expect("JSON");
        let built_in: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(repository().join(file)).expect(file))
                .expect("JSON");
        assert_eq!(
            described, built_in,
            "{file} is stale: `{worker} describe > {file}`"
        );
    }
}
