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
fn pinned_torch() -> String {
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
fn stand_in_wheel(dir: &Path, version: &str) -> PathBuf {
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

#[test]
fn the_bootstrap_installs_torch_from_the_index_pip_is_pointed_at() {
    let version = pinned_torch();
    let dir = tempfile::tempdir().unwrap();
    let wheel = stand_in_wheel(dir.path(), &version);
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
    let server = Server::start(move |request, _| {
        if request.path == "/simple/torch/" {
            Reply::whole(index.as_bytes()).header("Content-Type", "text/html")
        } else {
            match files.get(&request.path) {
                Some(body) => Reply::whole(body),
                None => Reply::status(404),
            }
        }
    });

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
