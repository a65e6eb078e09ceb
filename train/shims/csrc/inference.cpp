// libtorch's inference mode (`torch.inference_mode()`, c10::InferenceMode)
// for pipe-train's src/inference.rs: tch binds only no_grad. Inference
// mode also skips the version counters and view tracking every tensor
// made under no_grad still carries, which a forward that never meets
// autograd does not need.
//
// c10::InferenceMode is an RAII guard of thread-local state: the Rust side
// holds one on the heap for as long as its own guard lives, on the thread
// that made it, and releases them in reverse order.
//
// C++ exceptions never unwind into Rust (guarded.h).

#include <c10/core/InferenceMode.h>

#include "guarded.h"

extern "C" int pipe_inference_mode_enter(void** guard, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    *guard = new c10::InferenceMode(true);
    return 0;
  });
}

// Restores the modes that were on when `guard` was made.
extern "C" void pipe_inference_mode_exit(void* guard) {
  delete static_cast<c10::InferenceMode*>(guard);
}

extern "C" int pipe_inference_mode_is_enabled() {
  return c10::InferenceMode::is_enabled() ? 1 : 0;
}
