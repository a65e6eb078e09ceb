//! Link settings for the `torch` feature; without it this does nothing.
//!
//! torch-sys finds libtorch (LIBTORCH, or LIBTORCH_USE_PYTORCH=1 with a
//! python that has torch) and puts an rpath on its own C++ shim, but neither
//! it nor tch can pass linker arguments to *our* binaries: `rustc-link-arg`
//! only reaches the targets of the package whose build script prints it. So
//! `pipe-stage` and the test binaries would need LD_LIBRARY_PATH, and on a
//! CUDA build the linker would drop libtorch_cuda (nothing references it by
//! symbol; it registers the CUDA backend from static initialisers), leaving
//! a binary that silently sees no GPU. This script repeats what tch's own
//! build.rs does for tch's examples.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
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
        let lib_dir = lib_dir.to_string_lossy();
        // RUNPATH rather than old-style RPATH is what modern ld emits; it is
        // still searched before the system directories, and LD_LIBRARY_PATH
        // can override it, which is what a user with another libtorch wants.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    }
    // libtorch.so is a thin library whose DT_NEEDED entries pull in
    // libtorch_cpu and, on CUDA wheels, libtorch_cuda; forcing it to be
    // needed keeps those even though no symbol of theirs is referenced.
    // Only the training worker needs CUDA: the data worker `pipe-stage`
    // should carry as little of libtorch as the linker lets it.
    println!("cargo:rustc-link-arg-bin=pipe-stage-train=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg-bin=pipe-stage-train=-ltorch");
}
