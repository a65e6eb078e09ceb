//! The Rust side of shims/csrc/guarded.h: every C++ shim entry point takes an
//! error buffer (`char* error, size_t error_size`) and returns nonzero
//! with the C++ exception's message in it, since an exception must never
//! unwind into Rust frames.

use std::ffi::{c_char, c_int, CStr};

/// Room for a message: Gloo's and NCCL's name hosts, ranks and timeouts.
const ERROR_SIZE: usize = 4096;

/// Calls a shim with a fresh error buffer and its size; its nonzero return
/// becomes the message it wrote (trimmed; empty if it wrote none).
pub(crate) fn call_shim(call: impl FnOnce(*mut c_char, usize) -> c_int) -> Result<(), String> {
    let mut buffer = vec![0u8; ERROR_SIZE];
    if call(buffer.as_mut_ptr().cast::<c_char>(), buffer.len()) == 0 {
        return Ok(());
    }
    // The shim NUL-terminates within the size it was given, and the buffer
    // starts zeroed, so there is a NUL even if it wrote nothing; a shim
    // that broke that promise still gives no read past the buffer.
    let message = CStr::from_bytes_until_nul(&buffer)
        .map(|text| text.to_string_lossy().trim().to_string())
        .unwrap_or_else(|_| String::from_utf8_lossy(&buffer).trim().to_string());
    Err(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonzero_return_gives_the_message_the_shim_wrote() {
        assert_eq!(call_shim(|_, _| 0), Ok(()));
        let failed = call_shim(|buffer, size| {
            assert_eq!(size, ERROR_SIZE);
            for (at, byte) in b"  Gloo: connection reset\n".iter().enumerate() {
                // SAFETY: within the buffer's `size` bytes.
                unsafe { *buffer.add(at) = *byte as c_char };
            }
            2
        });
        assert_eq!(failed, Err("Gloo: connection reset".to_string()));
        assert_eq!(call_shim(|_, _| 1), Err(String::new()));
    }

    /// The real shims through the helper: a C++ exception's text arrives.
    #[test]
    fn a_cpp_exception_from_a_shim_arrives_as_its_message() {
        use crate::precision::pipe_autocast_exit;
        // SAFETY: plain ints and the helper's buffer; device 99 is refused
        // before libtorch is touched.
        let answer =
            call_shim(|error, size| unsafe { pipe_autocast_exit(99, 0, -1, 1, error, size) });
        assert_eq!(answer, Err("unknown device code".to_string()));
    }
}
