// Autocast for any device type and dtype, for pipe-train's
// src/precision.rs. tch only wraps CUDA fp16 autocast, and
// CPU bf16 autocast (what `bf16-mixed` needs without a GPU) lives behind
// the per-device-type API below. The functions mirror the steps of Python's
// `torch.autocast.__enter__`/`__exit__` so that the Rust guard can nest
// and restore state exactly as Python does.
//
// Every function catches C++ exceptions: one unwinding into Rust frames is
// undefined behaviour. Errors come back as nonzero codes with the message
// copied into the caller's buffer.

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>

#include "guarded.h"

#include <cstring>
#include <exception>

namespace {

// The values the Rust side passes: kept apart from c10's enum numbering so
// that a libtorch renumbering cannot silently change the meaning.
constexpr int kDeviceCpu = 0;
constexpr int kDeviceCuda = 1;
constexpr int kDtypeBFloat16 = 0;
constexpr int kDtypeHalf = 1;
constexpr int kDtypeFloat = 2;

bool device_type(int device, c10::DeviceType* out) {
  switch (device) {
    case kDeviceCpu:
      *out = c10::DeviceType::CPU;
      return true;
    case kDeviceCuda:
      *out = c10::DeviceType::CUDA;
      return true;
    default:
      return false;
  }
}

bool scalar_type(int dtype, c10::ScalarType* out) {
  switch (dtype) {
    case kDtypeBFloat16:
      *out = c10::ScalarType::BFloat16;
      return true;
    case kDtypeHalf:
      *out = c10::ScalarType::Half;
      return true;
    case kDtypeFloat:
      *out = c10::ScalarType::Float;
      return true;
    default:
      return false;
  }
}

int dtype_code(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::BFloat16:
      return kDtypeBFloat16;
    case c10::ScalarType::Half:
      return kDtypeHalf;
    case c10::ScalarType::Float:
      return kDtypeFloat;
    default:
      return -1;
  }
}

}  // namespace

extern "C" {

// Turns autocast on for `device` with `dtype` and reports the previous
// enabled flag, dtype and cache flag for pipe_autocast_exit. 1: bad
// device or dtype code; 2: libtorch threw.
int pipe_autocast_enter(int device, int dtype, int* previous_enabled,
                        int* previous_dtype, int* previous_cache,
                        char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10::DeviceType type;
    c10::ScalarType scalar;
    if (!device_type(device, &type) || !scalar_type(dtype, &scalar)) {
      pipe_shim::copy_message("unknown device or dtype code", error, error_size);
      return 1;
    }
    *previous_enabled = at::autocast::is_autocast_enabled(type) ? 1 : 0;
    *previous_dtype = dtype_code(at::autocast::get_autocast_dtype(type));
    *previous_cache = at::autocast::is_autocast_cache_enabled() ? 1 : 0;
    at::autocast::set_autocast_enabled(type, true);
    at::autocast::set_autocast_dtype(type, scalar);
    at::autocast::increment_nesting();
    // The cache keeps one low-precision copy of each weight per forward
    // instead of casting it at every use; Python's autocast enables it too.
    at::autocast::set_autocast_cache_enabled(true);
    return 0;
  });
}

// Undoes pipe_autocast_enter. The cast cache holds copies of the weights
// taken before the optimizer changes them, so the outermost exit must
// empty it, as Python's __exit__ does.
int pipe_autocast_exit(int device, int previous_enabled, int previous_dtype,
                       int previous_cache, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10::DeviceType type;
    if (!device_type(device, &type)) {
      pipe_shim::copy_message("unknown device code", error, error_size);
      return 1;
    }
    if (at::autocast::decrement_nesting() == 0) {
      at::autocast::clear_cache();
    }
    at::autocast::set_autocast_enabled(type, previous_enabled != 0);
    c10::ScalarType scalar;
    if (scalar_type(previous_dtype, &scalar)) {
      at::autocast::set_autocast_dtype(type, scalar);
    }
    at::autocast::set_autocast_cache_enabled(previous_cache != 0);
    return 0;
  });
}

// Whether autocast is on for `device` on this thread (autocast state is
// thread-local): 1 or 0, or -1 for a bad device code.
int pipe_autocast_is_enabled(int device) {
  c10::DeviceType type;
  if (!device_type(device, &type)) {
    return -1;
  }
  try {
    return at::autocast::is_autocast_enabled(type) ? 1 : 0;
  } catch (...) {
    return -1;
  }
}

}  // extern "C"

// `torch.set_float32_matmul_precision("high")`: fp32 matmuls may run on
// TF32 tensor cores. The train stage's `tf32` opt-in under 32-true.
extern "C" int pipe_allow_tf32(char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    at::globalContext().setFloat32MatmulPrecision("high");
    return 0;
  });
}
