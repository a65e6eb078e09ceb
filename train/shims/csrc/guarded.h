// What every C++ shim of pipe-train needs at the FFI boundary: a C++
// exception must never unwind into Rust frames (undefined behaviour), so
// each entry point takes `char* error, size_t error_size` and runs its body
// under `guarded`, which turns an exception into the return code 2 and its
// message into that buffer (`copy_message` for a shim's own refusals). The
// Rust side of it is src/ffi.rs.

#pragma once

#include <cstddef>
#include <cstring>
#include <exception>

namespace pipe_shim {

inline void copy_message(const char* text, char* buffer, size_t size) {
  if (buffer == nullptr || size == 0) {
    return;
  }
  std::strncpy(buffer, text, size - 1);
  buffer[size - 1] = '\0';
}

template <typename F>
int guarded(char* error, size_t error_size, F body) {
  try {
    return body();
  } catch (const std::exception& e) {
    copy_message(e.what(), error, error_size);
    return 2;
  } catch (...) {
    copy_message("unknown C++ exception", error, error_size);
    return 2;
  }
}

}  // namespace pipe_shim
