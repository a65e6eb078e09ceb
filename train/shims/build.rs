//! Compiles csrc/ against libtorch's headers, found as torch-sys finds
//! them (LIBTORCH_USE_PYTORCH=1 with a python that has torch, else
//! LIBTORCH or LIBTORCH_INCLUDE), without waiting for torch-sys' build
//! script: pipe-train's build script then checks that both found the same
//! libtorch. The symbols the shims call resolve against the libraries
//! torch-sys links.

use std::env;
use std::path::PathBuf;

const SOURCES: &[&str] = &[
    "csrc/autocast.cpp",
    "csrc/optim.cpp",
    "csrc/c10d.cpp",
    "csrc/rng.cpp",
    "csrc/inference.cpp",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for source in SOURCES {
        println!("cargo:rerun-if-changed={source}");
    }
    println!("cargo:rerun-if-changed=csrc/guarded.h");
    println!("cargo:rerun-if-changed=csrc/gloo_decl");
    for name in [
        "LIBTORCH_USE_PYTORCH",
        "LIBTORCH",
        "LIBTORCH_INCLUDE",
        "VIRTUAL_ENV",
    ] {
        println!("cargo:rerun-if-env-changed={name}");
    }
    if env::var("CARGO_CFG_TARGET_OS").unwrap_or_default() != "linux" {
        // macOS and Windows are not targets of pipe yet (train/build.rs).
        return;
    }
    let root = libtorch_root();
    let include = root.join("include");
    let mut build = cc::Build::new();
    build.cpp(true);
    for source in SOURCES {
        build.file(source);
    }
    build
        // Declarations of the Gloo names torch's ProcessGroupGloo.hpp
        // mentions; the wheel ships Gloo's code, not its headers.
        .include("csrc/gloo_decl")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .std("c++17")
        // The PyPI wheels since torch 2.6 are built with the new libstdc++
        // ABI (torch.compiled_with_cxx11_abi() is True); a mismatch would
        // still compile and then fail to link std::string-taking symbols.
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        // libtorch's headers warn by the hundred under -Wall; our own
        // files are small enough to keep clean by reading them.
        .warnings(false)
        .compile("pipe_autocast");
    println!("cargo:root={}", root.display());
}

/// The libtorch directory holding `include/` and `lib/`: torch's own
/// package directory under LIBTORCH_USE_PYTORCH (as torch-sys, asking the
/// venv's `python`, else `python3`), else LIBTORCH_INCLUDE or LIBTORCH.
fn libtorch_root() -> PathBuf {
    if env::var_os("LIBTORCH_USE_PYTORCH").is_some() {
        let python = if env::var_os("VIRTUAL_ENV").is_some() {
            "python"
        } else {
            "python3"
        };
        let output = std::process::Command::new(python)
            .args([
                "-c",
                "import os, torch; print(os.path.dirname(torch.__file__))",
            ])
            .output()
            .unwrap_or_else(|e| panic!("LIBTORCH_USE_PYTORCH is set, but `{python}` fails: {e}"));
        if !output.status.success() {
            panic!(
                "LIBTORCH_USE_PYTORCH is set, but `{python}` cannot import torch: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        return PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    }
    match env::var_os("LIBTORCH_INCLUDE").or_else(|| env::var_os("LIBTORCH")) {
        Some(root) => PathBuf::from(root),
        None => panic!(
            "no libtorch: set LIBTORCH_USE_PYTORCH=1 with a python that has torch, or LIBTORCH \
             (scripts/bootstrap-libtorch.sh --print-env; docs/libtorch.md)"
        ),
    }
}
