//! What the libtorch binaries need from the dynamic loader. On a CUDA
//! build nothing references libtorch_cuda by symbol (it registers the CUDA
//! backend from static initialisers), so a binary that does not list
//! libtorch.so, whose own entries pull libtorch_cuda in, silently sees no
//! GPU; train/build.rs forces the entry into every binary, and this checks
//! it on the CPU, where the mistake would otherwise go unnoticed until a
//! GPU machine.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The NEEDED and RUNPATH entries of an ELF file's dynamic section.
fn dynamic_section(binary: &Path) -> (Vec<String>, Vec<String>) {
    let output = Command::new("readelf")
        .arg("-d")
        .arg(binary)
        .output()
        .unwrap_or_else(|e| panic!("readelf (binutils) is needed for this test: {e}"));
    assert!(output.status.success(), "readelf -d {}", binary.display());
    let text = String::from_utf8_lossy(&output.stdout);
    let mut needed = Vec::new();
    let mut runpath = Vec::new();
    for line in text.lines() {
        let value = line
            .split_once('[')
            .and_then(|(_, rest)| rest.split_once(']'))
            .map(|(value, _)| value.to_string());
        match value {
            Some(value) if line.contains("(NEEDED)") => needed.push(value),
            Some(value) if line.contains("(RUNPATH)") || line.contains("(RPATH)") => {
                runpath.extend(value.split(':').map(str::to_string))
            }
            _ => {}
        }
    }
    (needed, runpath)
}

fn assert_links_libtorch(binary: &Path) {
    let (needed, runpath) = dynamic_section(binary);
    assert!(
        needed.iter().any(|lib| lib == "libtorch.so"),
        "{} does not need libtorch.so, so a CUDA libtorch's GPU backend would never load: {needed:?}",
        binary.display()
    );
    assert!(
        runpath
            .iter()
            .any(|dir| Path::new(dir).join("libtorch.so").is_file()),
        "{}'s RUNPATH {runpath:?} has no libtorch.so",
        binary.display()
    );
}

#[test]
fn every_libtorch_binary_needs_libtorch_so_and_finds_it() {
    let worker = PathBuf::from(env!("CARGO_BIN_EXE_pipe-stage-train"));
    assert_links_libtorch(&worker);
    assert_links_libtorch(&std::env::current_exe().unwrap());
    // Examples are built by `cargo test` of the package, not by a run of
    // this test target alone.
    let examples = worker.parent().unwrap().join("examples");
    let example = examples.join("model_throughput");
    if example.is_file() {
        assert_links_libtorch(&example);
    } else {
        eprintln!(
            "{} is not built: checked the worker and the tests only",
            example.display()
        );
    }
}
