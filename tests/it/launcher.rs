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
