// The state of one CUDA device's default generator, read and put back, for
// src/model/units.rs: full sharding (src/fsdp.rs) recomputes a unit's
// forward in backward, and libtorch's dropout and fused attention must
// draw the masks they drew the first time, as
// torch.utils.checkpoint(preserve_rng_state=True) arranges with
// torch.cuda.get_rng_state / set_rng_state. tch binds neither.
//
// C++ exceptions never unwind into Rust (guarded.h).
//
// The headers of what is used, not <ATen/ATen.h>: that one declares every
// operator and took this file from 3.4 s to 9.2 s of g++ (-O1), on the
// training worker's first build.

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/Generator.h>

#include <mutex>

#include "guarded.h"

namespace {

at::Generator cuda_generator(int index) {
  return at::globalContext().defaultGenerator(
      c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)));
}

}  // namespace

// Assigns the generator's state (a CPU uint8 tensor) to `out`, an
// at::Tensor behind tch's handle.
extern "C" int pipe_cuda_rng_get_state(int index, void* out, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    auto generator = cuda_generator(index);
    std::lock_guard<std::mutex> lock(generator.mutex());
    *static_cast<at::Tensor*>(out) = generator.get_state();
    return 0;
  });
}

// Puts back a state that pipe_cuda_rng_get_state gave.
extern "C" int pipe_cuda_rng_set_state(int index, void* state, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    auto generator = cuda_generator(index);
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(*static_cast<const at::Tensor*>(state));
    return 0;
  });
}
