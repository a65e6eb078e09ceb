//! The libtorch bootstrap takes torch from the package index pip is
//! pointed at (`PIP_INDEX_URL`), as a user on a CPU-only machine points it
//! at an index of CPU builds: checked with a PEP 503 index on 127.0.0.1
//! serving a stand-in wheel of the version the bootstrap pins.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use pipe_test_support::http::{Reply, Server};

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The torch version scripts/bootstrap-libtorch.sh installs.
pub(crate) fn pinned_torch() -> String {
    let script = std::fs::read_to_string(repository().join("scripts/bootstrap-libtorch.sh"))
        .expect("bootstrap script");
    script
        .lines()
        .find_map(|line| line.strip_prefix("TORCH_VERSION="))
        .expect("TORCH_VERSION= in the bootstrap")
        .trim()
        .to_string()
}

/// A wheel named `torch-VERSION+cpu` (as a CPU index names its builds)
/// holding only its metadata and a module that says what it is.
pub(crate) fn stand_in_wheel(dir: &Path, version: &str) -> PathBuf {
    let name = format!("torch-{version}+cpu-py3-none-any.whl");
    let path = dir.join(&name);
    let made = Command::new("python3")
        .args([
            "-c",
            r#"
import sys, zipfile, hashlib, base64
path, version = sys.argv[1], sys.argv[2]
info = f"torch-{version}+cpu.dist-info"
files = {
    "torch/__init__.py": "STAND_IN = True\n",
    f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}+cpu\n",
    f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: pipe-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
with zipfile.ZipFile(path, "w") as wheel:
    for name, text in files.items():
        data = text.encode()
        wheel.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
"#,
            path.to_str().unwrap(),
            version,
        ])
        .status()
        .expect("python3");
    assert!(made.success());
    path
}

/// A PEP 503 index on 127.0.0.1 serving a stand-in torch wheel of the
/// pinned version (its `/simple/` is what PIP_INDEX_URL points at).
pub(crate) fn torch_index(dir: &Path) -> Server {
    let version = pinned_torch();
    let wheel = stand_in_wheel(dir, &version);
    let wheel_name = wheel.file_name().unwrap().to_str().unwrap().to_string();
    let bytes = std::fs::read(&wheel).unwrap();
    let sha256 = {
        let output = Command::new("sha256sum").arg(&wheel).output().unwrap();
        String::from_utf8(output.stdout).unwrap()[..64].to_string()
    };
    let index = format!(
        "<!DOCTYPE html><html><body><a href=\"/files/{wheel_name}#sha256={sha256}\">{wheel_name}</a></body></html>"
    );
    let files = HashMap::from([
        (
            format!("/files/{}", wheel_name.replace('+', "%2B")),
            bytes.clone(),
        ),
        (format!("/files/{wheel_name}"), bytes),
    ]);
    Server::start(move |request, _| {
        if request.path == "/simple/torch/" {
            Reply::whole(index.as_bytes()).header("Content-Type", "text/html")
        } else {
            match files.get(&request.path) {
                Some(body) => Reply::whole(body),
                None => Reply::status(404),
            }
        }
    })
}

#[test]
fn the_bootstrap_installs_torch_from_the_index_pip_is_pointed_at() {
    let version = pinned_torch();
    let dir = tempfile::tempdir().unwrap();
    let server = torch_index(dir.path());

    // The script as a checkout has it: it makes `.venv/` beside `scripts/`.
    let checkout = dir.path().join("checkout");
    std::fs::create_dir_all(checkout.join("scripts")).unwrap();
    std::fs::copy(
        repository().join("scripts/bootstrap-libtorch.sh"),
        checkout.join("scripts/bootstrap-libtorch.sh"),
    )
    .unwrap();
    let output = Command::new("bash")
        .arg(checkout.join("scripts/bootstrap-libtorch.sh"))
        .arg("--print-env")
        .env("PIP_INDEX_URL", server.url("/simple/"))
        .env("PIP_NO_CACHE_DIR", "1")
        // Only the index given: no configuration of this machine's pip.
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env_remove("LIBTORCH")
        .output()
        .expect("bootstrap");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("torch {version}+cpu in ")),
        "the bootstrap names what it installed: {stderr}"
    );
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert!(
        paths.iter().any(|path| path == "/simple/torch/")
            && paths.iter().any(|path| path.starts_with("/files/torch-")),
        "pip asked the local index: {paths:?}"
    );
    let stand_in = Command::new(checkout.join(".venv/bin/python"))
        .args(["-c", "import torch; print(torch.STAND_IN)"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&stand_in.stdout).trim(), "True");
    // Run again, it leaves the venv alone: the `+cpu` build is the pinned one.
    let again = Command::new("bash")
        .arg(checkout.join("scripts/bootstrap-libtorch.sh"))
        .env("PIP_INDEX_URL", server.url("/simple/"))
        .env_remove("LIBTORCH")
        .output()
        .unwrap();
    assert!(again.status.success());
    let asked = server.requests().len();
    assert_eq!(asked, paths.len(), "a second bootstrap asks no index");
}

/// One install at a time into `.venv/`: a bootstrap started while another
/// holds the script's lock (here a `flock` of the test's, as `./pipe`'s
/// download during its build holds it) says so, waits, then installs.
#[test]
fn a_second_bootstrap_waits_for_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let server = torch_index(dir.path());
    let checkout = dir.path().join("checkout");
    std::fs::create_dir_all(checkout.join("scripts")).unwrap();
    let script = checkout.join("scripts/bootstrap-libtorch.sh");
    std::fs::copy(repository().join("scripts/bootstrap-libtorch.sh"), &script).unwrap();
    let (held, release) = (dir.path().join("held"), dir.path().join("release"));
    let mut holder = Command::new("flock")
        .arg(&script)
        .args([
            "sh",
            "-c",
            "touch \"$1\"; while [ ! -e \"$2\" ]; do sleep 0.05; done",
            "-",
        ])
        .arg(&held)
        .arg(&release)
        .spawn()
        .expect("flock");
    while !held.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut bootstrap = Command::new("bash")
        .arg(&script)
        .env("PIP_INDEX_URL", server.url("/simple/"))
        .env("PIP_NO_CACHE_DIR", "1")
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env_remove("LIBTORCH")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("bootstrap");
    let mut stderr = std::io::BufReader::new(bootstrap.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut first).unwrap();
    assert!(
        first.starts_with("waiting for another install of libtorch into "),
        "{first}"
    );
    assert!(
        server.requests().is_empty(),
        "it asked the index while waiting"
    );
    std::fs::write(&release, "").unwrap();
    assert!(holder.wait().unwrap().success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(bootstrap.wait().unwrap().success(), "{rest}");
    assert!(
        rest.contains(&format!("torch {}+cpu in ", pinned_torch())),
        "{rest}"
    );
}
