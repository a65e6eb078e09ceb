//! `./pipe`, the README's first command: it builds `pipe` with cargo's
//! output in a log and a line of its own on stderr, then runs it; a failed
//! build names the log and shows its end. The cargo here is a fake on
//! PATH that prints what cargo prints and puts the real `pipe` in place,
//! or fails as rustc does, so nothing compiles.

use std::path::{Path, PathBuf};
use std::process::Output;

fn launcher() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pipe")
}

/// A directory holding a `cargo` whose `build` runs `build`.
fn fake_cargo(dir: &Path, build: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        format!("#!/bin/sh\ncase \"$1\" in\nbuild)\n{build}\n;;\n*) exit 1 ;;\nesac\n"),
    )
    .expect("write cargo");
    let mut permissions = std::fs::metadata(&cargo).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&cargo, permissions).unwrap();
    bin
}

fn launch(dir: &Path, bin: &Path, args: &[&str]) -> Output {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    std::process::Command::new(launcher())
        .current_dir(dir)
        .env("PATH", std::env::join_paths(paths).unwrap())
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .args(args)
        .output()
        .expect("run ./pipe")
}

const COMPILED: &str = r#"echo '   Compiling serde v1.0.0' >&2
echo '{"reason":"compiler-artifact","package_id":"serde 1.0.0","fresh":false}'
echo '{"reason":"compiler-artifact","package_id":"serde 1.0.0","fresh":false}'
echo '   Compiling pipe v0.1.0' >&2
echo '{"reason":"compiler-artifact","package_id":"pipe 0.1.0","fresh":false}'"#;

#[test]
fn the_launcher_builds_pipe_with_one_line_of_its_own_then_runs_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let real = assert_cmd::cargo::cargo_bin("pipe");
    let bin = fake_cargo(
        dir.path(),
        &format!(
            "{COMPILED}\nmkdir -p \"$CARGO_TARGET_DIR/release\"\ncp '{}' \"$CARGO_TARGET_DIR/release/pipe\"",
            real.display()
        ),
    );
    let output = launch(dir.path(), &bin, &["--version"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with("pipe "),
        "{output:?}"
    );
    assert!(!stderr.contains("Compiling"), "{stderr}");
    // Two crates: a build script's artifact and its library's are one.
    assert!(
        stderr.contains("building pipe (cargo, release): "),
        "{stderr}"
    );
    assert!(stderr.contains("built pipe in "), "{stderr}");
    assert!(stderr.ends_with(" (2 crates)\n"), "{stderr}");
    let log = std::fs::read_to_string(dir.path().join("target/release/pipe.build.log"))
        .expect("the build's log");
    assert_eq!(log, "   Compiling serde v1.0.0\n   Compiling pipe v0.1.0\n");
}

#[test]
fn a_failed_build_names_its_log_and_shows_its_end() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bin = fake_cargo(
        dir.path(),
        &format!(
            "{COMPILED}\necho 'error[E0425]: cannot find value `rows` in this scope' >&2\n\
             echo 'error: could not compile `pipe` (bin \"pipe\") due to 1 previous error' >&2\n\
             exit 101"
        ),
    );
    let output = launch(dir.path(), &bin, &["run"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(101), "{stderr}");
    assert!(output.stdout.is_empty(), "{output:?}");
    assert!(
        stderr.contains("building pipe failed after ")
            && stderr.contains(
                "(cargo exit code 101); the end of its log, target/release/pipe.build.log:\n"
            ),
        "{stderr}"
    );
    assert!(
        stderr.ends_with(
            "    │    Compiling pipe v0.1.0\n\
             \x20   │ error[E0425]: cannot find value `rows` in this scope\n\
             \x20   │ error: could not compile `pipe` (bin \"pipe\") due to 1 previous error\n"
        ),
        "{stderr}"
    );
}

/// A checkout of its own holding the launcher and the libtorch bootstrap
/// (no `.venv/`), a pipeline file `pipe.yaml` of `stages` in it, and a
/// cargo whose build runs `build` and then puts in place a `pipe` that
/// says how it was run.
fn checkout_with(dir: &Path, stages: &str, build: &str) -> (PathBuf, PathBuf) {
    let checkout = dir.join("checkout");
    std::fs::create_dir_all(checkout.join("scripts")).expect("checkout");
    for file in ["pipe", "scripts/bootstrap-libtorch.sh"] {
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(file),
            checkout.join(file),
        )
        .expect("copy");
    }
    std::fs::write(checkout.join("pipe.yaml"), stages).expect("pipeline");
    let bin = fake_cargo(
        dir,
        &format!(
            "{build}\nmkdir -p \"$CARGO_TARGET_DIR/release\"\n\
             printf '#!/bin/sh\\necho \"pipe $*\"\\n' > \"$CARGO_TARGET_DIR/release/pipe\"\n\
             chmod +x \"$CARGO_TARGET_DIR/release/pipe\""
        ),
    );
    (checkout, bin)
}

fn launch_in(checkout: &Path, bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    std::process::Command::new(checkout.join("pipe"))
        .current_dir(checkout)
        .env("PATH", std::env::join_paths(paths).unwrap())
        .env("CARGO_TARGET_DIR", checkout.join("target"))
        .env("PIP_NO_CACHE_DIR", "1")
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env_remove("LIBTORCH")
        .env_remove("PIPE_REMOTE")
        .envs(env.iter().copied())
        .args(args)
        .output()
        .expect("run ./pipe")
}

const TRAINS: &str = "stages:\n  fit:\n    uses: train/classifier@1\n    with: {}\n";

/// The first build of `pipe` for a run that trains, with no libtorch in the
/// checkout: torch is installed while cargo builds. The fake cargo's build
/// ends only once torch is in `.venv/` (it gives up after two minutes),
/// which an install that waited for the build would never let it see.
#[test]
fn the_first_build_for_a_run_that_trains_installs_libtorch_meanwhile() {
    let dir = tempfile::tempdir().expect("temp dir");
    let index = crate::bootstrap_index::torch_index(dir.path());
    let (checkout, bin) = checkout_with(
        dir.path(),
        TRAINS,
        "for i in $(seq 1200); do\n\
         ls .venv/lib/python3*/site-packages/torch/__init__.py >/dev/null 2>&1 && break\n\
         sleep 0.1\ndone\n\
         ls .venv/lib/python3*/site-packages/torch/__init__.py || exit 1",
    );
    let url = index.url("/simple/");
    let output = launch_in(
        &checkout,
        &bin,
        &["run", "pipe.yaml"],
        &[("PIP_INDEX_URL", url.as_str())],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "pipe run pipe.yaml\n"
    );
    assert!(
        stderr.contains(
            "installing libtorch (torch==2.11.0 into .venv/, 4.6 GB) while pipe builds: this run \
             trains; pip's output: target/release/libtorch.build.log"
        ),
        "{stderr}"
    );
    // Its log says what pip did; the build waited for torch, not for pip
    // to end, so the log may still be growing: read what it says now.
    let log = std::fs::read_to_string(checkout.join("target/release/libtorch.build.log"))
        .expect("the install's log");
    assert!(log.contains("creating "), "{log}");
}

/// A case's environment: what it sets.
type Env<'a> = &'a [(&'a str, &'a str)];

/// No download where the run would not train with it: `pipe` already
/// built, no training stage, a remote cache that may hold the training's
/// result, LIBTORCH given.
#[test]
fn no_libtorch_download_where_the_run_may_not_need_it() {
    let no_training = "stages:\n  a:\n    run: echo a\n";
    let remote_in_file = format!("{TRAINS}cache:\n  remote: s3://bucket/prefix\n");
    let cases: [(&str, &str, Env); 4] = [
        ("no training stage", no_training, &[]),
        ("a remote in the pipeline", &remote_in_file, &[]),
        (
            "PIPE_REMOTE",
            TRAINS,
            &[("PIPE_REMOTE", "s3://bucket/prefix")],
        ),
        ("LIBTORCH", TRAINS, &[("LIBTORCH", "/opt/libtorch")]),
    ];
    for (case, stages, env) in cases {
        let dir = tempfile::tempdir().expect("temp dir");
        let (checkout, bin) = checkout_with(dir.path(), stages, "");
        let output = launch_in(&checkout, &bin, &["run", "pipe.yaml"], env);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{case}: {stderr}");
        assert!(!stderr.contains("installing libtorch"), "{case}: {stderr}");
        assert!(!checkout.join(".venv").exists(), "{case}");
    }
    // Built already: the run's own build of its worker installs libtorch.
    let dir = tempfile::tempdir().expect("temp dir");
    let (checkout, bin) = checkout_with(dir.path(), TRAINS, "");
    launch_in(&checkout, &bin, &["--version"], &[]);
    let output = launch_in(&checkout, &bin, &["run", "pipe.yaml"], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("installing libtorch"), "{stderr}");
    assert!(!checkout.join(".venv").exists());
}
