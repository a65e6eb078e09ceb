//! libtorch's inference mode, `torch.inference_mode()`, through a C++ shim
//! (shims/csrc/inference.cpp): tch binds only `no_grad`. Validation and
//! evaluation run their forwards under it (`builtins::classifier::predict`):
//! no autograd graph, and none of the version counters and view tracking
//! that tensors made under `no_grad` still carry.
//!
//! Tensors made under it are inference tensors, which autograd refuses
//! later; nothing made inside may outlive the guard into training.

use std::ffi::{c_char, c_int, c_void};
use std::marker::PhantomData;

use crate::ffi::call_shim;

extern "C" {
    fn pipe_inference_mode_enter(
        guard: *mut *mut c_void,
        error: *mut c_char,
        error_size: usize,
    ) -> c_int;
    fn pipe_inference_mode_exit(guard: *mut c_void);
    fn pipe_inference_mode_is_enabled() -> c_int;
}

/// Inference mode on this thread while it lives. Not `Send`: libtorch's
/// guard is thread-local state, restored where it was set.
#[must_use = "inference mode is off again as soon as the guard is dropped"]
pub struct InferenceModeGuard {
    guard: *mut c_void,
    /// Keeps the guard on its thread (a raw pointer already does; this
    /// says so).
    _thread: PhantomData<*mut c_void>,
}

impl InferenceModeGuard {
    pub fn new() -> Result<InferenceModeGuard, String> {
        let mut guard = std::ptr::null_mut();
        // SAFETY: the shim writes a heap guard into `guard` or an error
        // into the helper's buffer, and catches every C++ exception.
        call_shim(|error, size| unsafe { pipe_inference_mode_enter(&mut guard, error, size) })?;
        Ok(InferenceModeGuard {
            guard,
            _thread: PhantomData,
        })
    }

    /// Whether inference mode is on for this thread.
    pub fn is_enabled() -> bool {
        // SAFETY: reads a thread-local flag.
        unsafe { pipe_inference_mode_is_enabled() == 1 }
    }
}

impl Drop for InferenceModeGuard {
    fn drop(&mut self) {
        // SAFETY: `guard` came from the shim's enter on this thread (the
        // type is not Send) and is released once.
        unsafe { pipe_inference_mode_exit(self.guard) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind, Tensor};

    #[test]
    fn inference_mode_is_on_while_the_guard_lives_and_its_tensors_are_inference_tensors() {
        assert!(!InferenceModeGuard::is_enabled());
        let weight = Tensor::ones([2, 2], (Kind::Float, Device::Cpu)).set_requires_grad(true);
        let made = {
            let _guard = InferenceModeGuard::new().unwrap();
            assert!(InferenceModeGuard::is_enabled());
            let product = weight.matmul(&weight);
            assert!(!product.requires_grad(), "no graph under inference mode");
            assert!(product.is_inference());
            product
        };
        assert!(!InferenceModeGuard::is_enabled(), "the mode before is back");
        assert_eq!(made.double_value(&[0, 0]), 2.0);
        // Autograd works again once the guard is gone.
        weight.matmul(&weight).sum(Kind::Float).backward();
        assert!(weight.grad().defined());
    }
}
