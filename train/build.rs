//! Link settings of the libtorch worker, its tests and examples.
//!
//! torch-sys finds libtorch (LIBTORCH, or LIBTORCH_USE_PYTORCH=1 with a
//! python that has torch) and puts an rpath on its own C++ shim, but neither
//! it nor tch can pass linker arguments to *our* binaries: `rustc-link-arg`
//! only reaches the targets of the package whose build script prints it. So
//! `pipe-stage-train` and the test binaries would need LD_LIBRARY_PATH, and on a
//! CUDA build the linker would drop libtorch_cuda (nothing references it by
//! symbol; it registers the CUDA backend from static initialisers), leaving
//! a binary that silently sees no GPU. This script repeats what tch's own
//! build.rs does for tch's examples.
//!
//! The C++ shims are compiled by their own crate (train/shims/), whose
//! build script runs beside torch-sys' instead of after it; this one
//! checks that both found the same libtorch.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os != "linux" {
        // macOS and Windows are not targets of pipe yet; their loaders need
        // different flags (@rpath install names, PATH) that nobody has tried.
        return;
    }
    // torch-sys (`links = "tch"`) publishes the directory it linked against
    // as `cargo:libtorch_lib`, which reaches direct dependents as
    // DEP_TCH_LIBTORCH_LIB: the same directory, found the same way, with no
    // second copy of its search logic here. It is absent only under
    // torch-sys' `doc-only` feature, where nothing is linked.
    if let Some(lib_dir) = env::var_os("DEP_TCH_LIBTORCH_LIB") {
        same_libtorch_as_the_shims(std::path::Path::new(&lib_dir));
        libtorch_version(std::path::Path::new(&lib_dir));
        let lib_dir = lib_dir.to_string_lossy();
        // RUNPATH rather than old-style RPATH is what modern ld emits; it is
        // still searched before the system directories, and LD_LIBRARY_PATH
        // can override it, which is what a user with another libtorch wants.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    }
    // libtorch.so is a thin library whose DT_NEEDED entries pull in
    // libtorch_cpu and, on CUDA wheels, libtorch_cuda; forcing it to be
    // needed keeps those even though no symbol of theirs is referenced.
    // The worker, the benchmark examples and the tests all run on a GPU in
    // scripts/gpu-check.sh; tests/it/linking.rs checks that each of them
    // needs libtorch.so.
    println!("cargo:rustc-link-arg-bins=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg-bins=-ltorch");
    println!("cargo:rustc-link-arg-examples=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg-examples=-ltorch");
    // The tests too: tests/it/cuda.rs uses CUDA tensors in the test process
    // itself when scripts/gpu-check.sh runs it on a GPU machine.
    println!("cargo:rustc-link-arg-tests=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg-tests=-ltorch");
}

/// Tells the crate, as PIPE_LIBTORCH_VERSION, the version of the libtorch
/// it links, for the `hardware` metric: read from that libtorch's own files
/// beside `lib/`, so that it names the build really linked (`+cu130`,
/// `+cpu`) rather than the version torch-sys was written for. The libtorch
/// zip has `build-version`; the PyPI wheel's directory has `version.py`;
/// any libtorch has its headers' version macros (without the build tag).
/// Absent when none of them reads: the metric is then null.
fn libtorch_version(lib_dir: &std::path::Path) {
    let root = lib_dir.parent().unwrap_or(lib_dir);
    let build_version = root.join("build-version");
    let wheel_version = root.join("version.py");
    let header = root.join("include/torch/headeronly/version.h");
    // Only those that exist: cargo takes a missing one as changed, and
    // would rebuild this crate on every invocation (the wheel's directory
    // has no `build-version`).
    for file in [&build_version, &wheel_version, &header] {
        if file.exists() {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }
    let version = std::fs::read_to_string(&build_version)
        .ok()
        .map(|text| text.trim().to_string())
        .filter(|text| !text.is_empty() && !text.contains('\n'))
        .or_else(|| {
            let text = std::fs::read_to_string(&wheel_version).ok()?;
            let line = text
                .lines()
                .find(|line| line.trim_start().starts_with("__version__"))?;
            let (_, value) = line.split_once('=')?;
            Some(value.trim().trim_matches(['\'', '"']).to_string())
        })
        .or_else(|| {
            let text = std::fs::read_to_string(&header).ok()?;
            let part = |name: &str| -> Option<u32> {
                text.lines().find_map(|line| {
                    let rest = line.trim().strip_prefix("#define ")?.strip_prefix(name)?;
                    rest.trim().parse().ok()
                })
            };
            Some(format!(
                "{}.{}.{}",
                part("TORCH_VERSION_MAJOR")?,
                part("TORCH_VERSION_MINOR")?,
                part("TORCH_VERSION_PATCH")?
            ))
        })
        .filter(|version| !version.is_empty());
    if let Some(version) = version {
        println!("cargo:rustc-env=PIPE_LIBTORCH_VERSION={version}");
    }
}

/// The shims (train/shims/) were compiled against the headers of the
/// libtorch whose `lib/` torch-sys links: the same directory, or the build
/// stops here rather than link two libtorchs' ABIs together.
fn same_libtorch_as_the_shims(lib_dir: &std::path::Path) {
    let Some(shims_root) = env::var_os("DEP_PIPE_TRAIN_SHIMS_ROOT") else {
        return;
    };
    let canonical = |path: &std::path::Path| path.canonicalize().unwrap_or(path.to_path_buf());
    let linked_root = lib_dir.parent().unwrap_or(lib_dir);
    if canonical(linked_root) != canonical(std::path::Path::new(&shims_root)) {
        panic!(
            "torch-sys links the libtorch in `{}` but the C++ shims were compiled against `{}`: \
             set LIBTORCH_USE_PYTORCH=1 or LIBTORCH, not both to different places",
            linked_root.display(),
            std::path::Path::new(&shims_root).display()
        );
    }
}
