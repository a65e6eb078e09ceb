//! The C++ shims of `pipe-train` (csrc/: autocast, the fused optimizer,
//! c10d, the CUDA generator's state; their error convention is
//! csrc/guarded.h), as a static library. The Rust side declares and calls
//! them (`pipe_train::ffi` and its users); this crate only compiles them,
//! in its build script, against the headers of the libtorch torch-sys
//! links. `pipe-train` names it with `extern crate` so that it is linked.
