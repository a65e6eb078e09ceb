// AdamW through libtorch's fused kernel (`torch.optim.AdamW(fused=True)`),
// for pipe-train's src/optim.rs. tch wraps only the
// C++ `torch::optim::AdamW`, which makes about five passes over every
// parameter per step; `at::_fused_adamw_` makes one. tch's tensors are
// `at::Tensor*` behind its opaque pointers, so they pass through as is.
//
// C++ exceptions never unwind into Rust (guarded.h): errors come back as a
// nonzero code with the message copied into the caller's buffer.

// One header per operator called, not <ATen/ATen.h> (every operator): 5.5 s
// of g++ (-O1) for this file instead of 12.6 s, on the training worker's
// first build. A call to an operator not included fails to compile.
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_foreach_zero.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <c10/core/GradMode.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "guarded.h"

namespace {

std::vector<at::Tensor> tensors(void* const* pointers, int count) {
  std::vector<at::Tensor> out;
  out.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    out.push_back(*static_cast<const at::Tensor*>(pointers[i]));
  }
  return out;
}

}  // namespace

// One step of every parameter in the lists, as torch.optim's
// `_fused_adamw` does it: the step counts (float tensors on the
// parameters' device) go up by one in a single `_foreach_add_`, not a
// kernel per parameter, and the fused kernel reads them. Every gradient
// must be defined: the caller leaves out parameters without one, as
// torch.optim does.
extern "C" int pipe_fused_adamw(void* const* params, void* const* grads, void* const* exp_avgs,
                                void* const* exp_avg_sqs, void* const* steps, int count,
                                double lr, double beta1, double beta2, double weight_decay,
                                double eps, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10::AutoGradMode no_grad(false);
    auto step_list = tensors(steps, count);
    at::_foreach_add_(step_list, 1);
    at::_fused_adamw_(tensors(params, count), tensors(grads, count), tensors(exp_avgs, count),
                      tensors(exp_avg_sqs, count), {}, step_list, lr, beta1, beta2,
                      weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
    return 0;
  });
}

// `param.grad = None`, which tch cannot say (it only zeroes): the sharded
// strategies free a replica's full gradients once they are reduce-scattered.
extern "C" int pipe_clear_grad(void* tensor, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    static_cast<at::Tensor*>(tensor)->mutable_grad().reset();
    return 0;
  });
}

// `optimizer.zero_grad()` as torch.optim has done it by default since 2.0
// (`set_to_none=True`): every parameter's gradient is freed, so that
// backward writes fresh ones instead of adding into zeroed buffers (no
// zeroing kernels, and the memory is free between steps).
extern "C" int pipe_clear_grads(void* const* params, int count, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    for (int i = 0; i < count; ++i) {
      static_cast<at::Tensor*>(params[i])->mutable_grad().reset();
    }
    return 0;
  });
}

// Seeds the default generator of one CUDA device. `torch.manual_seed`
// seeds every device alike, which gives replicas on different GPUs the
// same dropout masks; ddp wants each rank its own.
extern "C" int pipe_seed_cuda_device(int index, uint64_t seed, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    auto generator = at::globalContext().defaultGenerator(
        c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(index)));
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(seed);
    return 0;
  });
}

// The optimizer phase as torch.optim does it since 2.x: one foreach call
// per list instead of a kernel (or several) per gradient, and nothing that
// waits for the device. BERT-base has about 200 gradient tensors; under
// 16-mixed the per-tensor path launched about 2,000 kernels per step and
// read the clipping norm and the overflow count back to the host.

// `optimizer.zero_grad(set_to_none=False)`; the optimizer frees gradients
// instead (pipe_clear_grads).
extern "C" int pipe_foreach_zero(void* const* grads, int count, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10::AutoGradMode no_grad(false);
    auto list = tensors(grads, count);
    at::_foreach_zero_(list);
    return 0;
  });
}

// The global L2 norm of every tensor, in fp32 whatever their dtype, into
// `out` (a 0-dim float tensor on their device), as clip_grad_norm_ sums it.
extern "C" int pipe_foreach_norm(void* const* grads, int count, void* out, char* error,
                                 size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10::AutoGradMode no_grad(false);
    auto list = tensors(grads, count);
    auto norms = at::_foreach_norm(list, 2, at::kFloat);
    auto total = at::linalg_vector_norm(at::stack(norms), 2);
    static_cast<at::Tensor*>(out)->copy_(total);
    return 0;
  });
}

// Every tensor times `factor`, a 0-dim tensor on their device (the clip
// coefficient, computed there).
extern "C" int pipe_foreach_mul(void* const* grads, int count, void* factor, char* error,
                                size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10::AutoGradMode no_grad(false);
    auto list = tensors(grads, count);
    at::_foreach_mul_(list, *static_cast<const at::Tensor*>(factor));
    return 0;
  });
}

// GradScaler's unscale: every gradient times `inv_scale` (a 1-element
// float tensor), `found_inf` (likewise) set to 1 where any is inf or NaN.
extern "C" int pipe_foreach_unscale(void* const* grads, int count, void* found_inf, void* inv_scale,
                                    char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10::AutoGradMode no_grad(false);
    auto list = tensors(grads, count);
    at::_amp_foreach_non_finite_check_and_unscale_(list, *static_cast<at::Tensor*>(found_inf),
                                                   *static_cast<const at::Tensor*>(inv_scale));
    return 0;
  });
}
