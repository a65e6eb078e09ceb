// torch.distributed's engine, c10d, for src/c10d.rs: a TCPStore for the
// rendezvous, and libtorch's own ProcessGroupGloo (CPU tensors) or
// ProcessGroupNCCL (CUDA tensors) for the collectives, the same objects
// `torch.distributed.init_process_group` builds. pipe adds no collective of
// its own; this file only constructs the process group and forwards calls
// to its c10d::Backend interface.
//
// Gloo: libtorch_cpu exports ProcessGroupGloo, but the wheel ships no Gloo
// headers, which ProcessGroupGloo.hpp includes. gloo_decl/ declares the
// few Gloo names the header mentions. Every member of ProcessGroupGloo that
// involves Gloo is a pointer, so the class's size is right without Gloo's
// definitions, and the constructor and every virtual call run libtorch's
// own code.
//
// NCCL: only CUDA builds of libtorch have ProcessGroupNCCL (libtorch_cuda),
// and pipe's workers are built once, against whichever libtorch the
// machine has (scripts/gpu-prepare.sh builds them on a CPU machine for a
// GPU one). So the NCCL constructors are found at run time with dlsym, by
// their mangled names (checked against the 2.11 header's declarations,
// which the Itanium ABI turns into exactly these strings), and the object
// is built in storage larger than the class. On a CPU libtorch the symbols
// are absent and asking for NCCL is a clear error.
//
// C++ exceptions never unwind into Rust (guarded.h).

#include <dlfcn.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#define USE_C10D_GLOO 1
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "guarded.h"

namespace {

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  std::chrono::milliseconds timeout;
};

struct PendingWork {
  c10::intrusive_ptr<c10d::Work> work;
  std::chrono::milliseconds timeout;
};

c10::intrusive_ptr<c10d::TCPStore> tcp_store(const char* host, uint16_t port, bool is_server,
                                             int world, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = port;
  options.isServer = is_server;
  if (is_server && world > 0) {
    options.numWorkers = static_cast<size_t>(world);
  }
  // The process group's constructor waits for every rank anyway, with the
  // same timeout; the store need not wait for them first.
  options.waitWorkers = false;
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(std::string(host), options);
}

c10::intrusive_ptr<c10d::Backend> gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int world, const char* interface_host,
                                       std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create_default(timeout);
  std::string host(interface_host == nullptr ? "" : interface_host);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
    // What torch.distributed honours: the interfaces the cluster's admins
    // named (a comma-separated list, `lo,eth0`: one Gloo device each, as
    // torch makes them), whatever the host name resolves to.
    options->devices.clear();
    std::string list(ifname);
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(',', start);
      if (end == std::string::npos) end = list.size();
      std::string name = list.substr(start, end - start);
      if (!name.empty()) {
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
      }
      start = end + 1;
    }
    if (options->devices.empty()) {
      throw std::invalid_argument("GLOO_SOCKET_IFNAME=`" + list + "` names no interface");
    }
  } else if (!host.empty()) {
    options->devices = {c10d::ProcessGroupGloo::createDeviceForHostname(host)};
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
}

// Itanium-ABI names of ProcessGroupNCCL::Options::Options(bool) and
// ProcessGroupNCCL::ProcessGroupNCCL(intrusive_ptr<Store>, int, int,
// intrusive_ptr<Options>) in torch 2.11's ProcessGroupNCCL.hpp.
constexpr const char* kNcclOptionsCtor = "_ZN4c10d16ProcessGroupNCCL7OptionsC1Eb";
constexpr const char* kNcclCtor =
    "_ZN4c10d16ProcessGroupNCCLC1EN3c1013intrusive_ptrINS_5StoreENS1_6detail34intrusive_"
    "target_default_null_typeIS3_EEEEiiNS2_INS0_7OptionsENS5_IS8_EEEE";
// Upper bounds of sizeof(ProcessGroupNCCL::Options) and
// sizeof(ProcessGroupNCCL) (a few hundred bytes and a few KiB in 2.11):
// the objects are placed in storage this large, and freed through their
// virtual destructors, whose sized delete ends in free().
constexpr size_t kNcclOptionsStorage = 16 << 10;
constexpr size_t kNcclStorage = 256 << 10;

c10::intrusive_ptr<c10d::Backend> nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int world, std::chrono::milliseconds timeout) {
  using OptionsCtor = void (*)(void*, bool);
  using GroupCtor = void (*)(void*, c10::intrusive_ptr<c10d::Store>, int, int,
                             c10::intrusive_ptr<c10d::Backend::Options>);
  auto options_ctor = reinterpret_cast<OptionsCtor>(dlsym(RTLD_DEFAULT, kNcclOptionsCtor));
  auto group_ctor = reinterpret_cast<GroupCtor>(dlsym(RTLD_DEFAULT, kNcclCtor));
  if (options_ctor == nullptr || group_ctor == nullptr) {
    throw std::runtime_error(
        "this libtorch has no NCCL process group (ProcessGroupNCCL is in CUDA builds of "
        "libtorch only)");
  }
  void* options_storage = ::operator new(kNcclOptionsStorage);
  options_ctor(options_storage, false);
  auto options = c10::intrusive_ptr<c10d::Backend::Options>::unsafe_steal_from_new(
      static_cast<c10d::Backend::Options*>(options_storage));
  options->timeout = timeout;
  void* group_storage = ::operator new(kNcclStorage);
  try {
    group_ctor(group_storage, store, rank, world, std::move(options));
  } catch (...) {
    ::operator delete(group_storage);
    throw;
  }
  return c10::intrusive_ptr<c10d::Backend>::unsafe_steal_from_new(
      static_cast<c10d::Backend*>(group_storage));
}

Group* group(void* handle) {
  return static_cast<Group*>(handle);
}

at::Tensor& tensor(void* handle) {
  return *static_cast<at::Tensor*>(handle);
}

// Either hands the work back (`pending` not null) or waits for it here.
int finish(const Group& group, c10::intrusive_ptr<c10d::Work> work, void** pending) {
  if (pending != nullptr) {
    *pending = new PendingWork{std::move(work), group.timeout};
    return 0;
  }
  work->wait(group.timeout);
  return 0;
}

}  // namespace

// A store server on `port` (0: any free port, written to `bound_port`) on
// every interface, for a launcher that hosts the rendezvous of the ranks it
// starts, as torchrun's agent does.
extern "C" int pipe_c10d_store_serve(uint16_t port, int64_t timeout_ms, void** store,
                                     uint16_t* bound_port, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    auto server = tcp_store("127.0.0.1", port, true, 0, std::chrono::milliseconds(timeout_ms));
    *bound_port = server->getPort();
    *store = new c10::intrusive_ptr<c10d::TCPStore>(std::move(server));
    return 0;
  });
}

extern "C" void pipe_c10d_store_free(void* store) {
  delete static_cast<c10::intrusive_ptr<c10d::TCPStore>*>(store);
}

// Joins the group of `world` ranks that meet at host:port. The store server
// runs in this process when `serve_store` is set (rank 0 under Slurm),
// else elsewhere (the launcher). `backend` is "gloo" or "nccl";
// `interface_host`, when not empty, is the address Gloo binds (127.0.0.1
// for ranks on one machine).
// `prefix`, when not empty, scopes every key of the group under it, as
// torch does on a store another process hosts (torchrun's agent:
// `/worker/attempt_N`, so that a restarted attempt never reads the keys of
// the one before).
extern "C" int pipe_c10d_group_new(const char* host, uint16_t port, int serve_store, int rank,
                                   int world, const char* backend, const char* interface_host,
                                   const char* prefix, int64_t timeout_ms, void** out,
                                   char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    auto timeout = std::chrono::milliseconds(timeout_ms);
    c10::intrusive_ptr<c10d::Store> store = tcp_store(host, port, serve_store != 0, world, timeout);
    if (prefix != nullptr && *prefix) {
      store = c10::make_intrusive<c10d::PrefixStore>(std::string(prefix), store);
    }
    std::string name(backend);
    c10::intrusive_ptr<c10d::Backend> process_group;
    if (name == "gloo") {
      process_group = gloo_group(store, rank, world, interface_host, timeout);
    } else if (name == "nccl") {
      process_group = nccl_group(store, rank, world, timeout);
    } else {
      throw std::invalid_argument("unknown process group backend `" + name + "`");
    }
    *out = new Group{std::move(store), std::move(process_group), timeout};
    return 0;
  });
}

extern "C" void pipe_c10d_group_free(void* handle) {
  delete group(handle);
}

// op: 0 sum, 1 max.
extern "C" int pipe_c10d_all_reduce(void* handle, void* data, int op, void** pending, char* error,
                                    size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10d::AllreduceOptions options;
    options.reduceOp = op == 1 ? c10d::ReduceOp(c10d::ReduceOp::MAX)
                               : c10d::ReduceOp(c10d::ReduceOp::SUM);
    options.timeout = group(handle)->timeout;
    std::vector<at::Tensor> tensors{tensor(data)};
    return finish(*group(handle), group(handle)->backend->allreduce(tensors, options), pending);
  });
}

extern "C" int pipe_c10d_broadcast(void* handle, void* data, int root, char* error,
                                   size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.timeout = group(handle)->timeout;
    std::vector<at::Tensor> tensors{tensor(data)};
    return finish(*group(handle), group(handle)->backend->broadcast(tensors, options), nullptr);
  });
}

// `output` (n elements) gets this rank's n-element part of the sum of every
// rank's `input` (world * n elements).
extern "C" int pipe_c10d_reduce_scatter_sum(void* handle, void* input, void* output,
                                            void** pending, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10d::ReduceScatterOptions options;
    options.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
    options.timeout = group(handle)->timeout;
    return finish(*group(handle),
                  group(handle)->backend->_reduce_scatter_base(tensor(output), tensor(input),
                                                               options),
                  pending);
  });
}

// `output` (world * n elements) gets every rank's `input` (n elements) in
// rank order.
extern "C" int pipe_c10d_all_gather(void* handle, void* input, void* output, void** pending,
                                    char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10d::AllgatherOptions options;
    options.timeout = group(handle)->timeout;
    return finish(*group(handle),
                  group(handle)->backend->_allgather_base(tensor(output), tensor(input), options),
                  pending);
  });
}

extern "C" int pipe_c10d_barrier(void* handle, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    c10d::BarrierOptions options;
    options.timeout = group(handle)->timeout;
    return finish(*group(handle), group(handle)->backend->barrier(options), nullptr);
  });
}

// Waits for work started with a `pending` out-pointer, and frees it.
extern "C" int pipe_c10d_wait(void* pending, char* error, size_t error_size) {
  auto* work = static_cast<PendingWork*>(pending);
  int code = pipe_shim::guarded(error, error_size, [&]() {
    work->work->wait(work->timeout);
    return 0;
  });
  delete work;
  return code;
}

// ---------------------------------------------------------------------------
// The gradient reducer: DDP's overlap of communication with backward. tch
// has no autograd hooks, so they live here: each parameter gets a
// post-accumulate-grad hook (what `Tensor.register_post_accumulate_grad_hook`
// installs), which counts its bucket down; when a bucket's last gradient
// exists, its all-reduce is started while backward goes on with the layers
// below. Buckets are started strictly in order, as DDP's reducer does:
// every rank must issue its collectives in the same sequence, whatever
// order its own backward finishes them in.

namespace {

struct Reducer;

class ReadyHook : public torch::autograd::PostAccumulateGradHook {
 public:
  ReadyHook(Reducer* reducer, size_t bucket) : reducer_(reducer), bucket_(bucket) {}
  void operator()(const torch::autograd::Variable& /*unused*/) override;

 private:
  Reducer* reducer_;
  size_t bucket_;
};

struct Reducer {
  Group* group;
  std::vector<std::vector<at::Tensor>> buckets;
  std::vector<size_t> pending;
  std::vector<at::Tensor> flat;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  size_t next = 0;
  bool armed = false;
  std::mutex mutex;

  // Flattens bucket `b`'s gradients (zeros for a parameter without one:
  // unused by this forward, the same on every rank) and starts its sum.
  void launch(size_t b) {
    std::vector<at::Tensor> parts;
    parts.reserve(buckets[b].size());
    for (const auto& parameter : buckets[b]) {
      const auto& grad = parameter.grad();
      parts.push_back(grad.defined() ? grad.reshape({-1})
                                     : at::zeros({parameter.numel()}, parameter.options()));
    }
    flat[b] = at::cat(parts, 0);
    std::vector<at::Tensor> tensors{flat[b]};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
    options.timeout = group->timeout;
    works[b] = group->backend->allreduce(tensors, options);
  }

  void ready(size_t b) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!armed || pending[b] == 0) {
      return;
    }
    pending[b] -= 1;
    while (next < buckets.size() && pending[next] == 0) {
      launch(next);
      next += 1;
    }
  }
};

void ReadyHook::operator()(const torch::autograd::Variable& /*unused*/) {
  reducer_->ready(bucket_);
}

}  // namespace

// A reducer over `bucket_count` buckets; bucket b holds
// `sizes[b]` parameters, given in order in `parameters`. Installs a hook on
// each parameter (replacing any post-accumulate hook it had).
extern "C" int pipe_c10d_reducer_new(void* handle, void* const* parameters, const size_t* sizes,
                                     size_t bucket_count, void** out, char* error,
                                     size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    auto reducer = std::make_unique<Reducer>();
    reducer->group = group(handle);
    size_t index = 0;
    for (size_t b = 0; b < bucket_count; ++b) {
      std::vector<at::Tensor> bucket;
      for (size_t i = 0; i < sizes[b]; ++i) {
        bucket.push_back(*static_cast<const at::Tensor*>(parameters[index++]));
      }
      reducer->buckets.push_back(std::move(bucket));
    }
    reducer->pending.assign(bucket_count, 0);
    reducer->flat.resize(bucket_count);
    reducer->works.resize(bucket_count);
    for (size_t b = 0; b < bucket_count; ++b) {
      for (const auto& parameter : reducer->buckets[b]) {
        torch::autograd::impl::set_post_acc_grad_hooks(
            parameter, std::make_unique<ReadyHook>(reducer.get(), b));
      }
    }
    *out = reducer.release();
    return 0;
  });
}

// Before the backward whose gradients are to be summed (the last
// micro-batch of a step): from now on, a bucket whose gradients are all
// there starts its all-reduce.
extern "C" int pipe_c10d_reducer_arm(void* handle, char* error, size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    auto* reducer = static_cast<Reducer*>(handle);
    std::lock_guard<std::mutex> lock(reducer->mutex);
    for (size_t b = 0; b < reducer->buckets.size(); ++b) {
      reducer->pending[b] = reducer->buckets[b].size();
      reducer->works[b].reset();
      reducer->flat[b].reset();
    }
    reducer->next = 0;
    reducer->armed = true;
    return 0;
  });
}

// After that backward: starts the buckets backward did not complete
// (parameters it did not reach), waits for every sum, and writes them back
// into the gradients. Returns how many buckets backward itself started.
extern "C" int pipe_c10d_reducer_finish(void* handle, size_t* overlapped, char* error,
                                        size_t error_size) {
  return pipe_shim::guarded(error, error_size, [&]() {
    auto* reducer = static_cast<Reducer*>(handle);
    std::lock_guard<std::mutex> lock(reducer->mutex);
    *overlapped = reducer->next;
    reducer->armed = false;
    while (reducer->next < reducer->buckets.size()) {
      reducer->launch(reducer->next);
      reducer->next += 1;
    }
    at::NoGradGuard no_grad;
    for (size_t b = 0; b < reducer->buckets.size(); ++b) {
      reducer->works[b]->wait(reducer->group->timeout);
      int64_t offset = 0;
      for (auto& parameter : reducer->buckets[b]) {
        const int64_t numel = parameter.numel();
        auto grad = parameter.mutable_grad();
        if (grad.defined()) {
          grad.copy_(reducer->flat[b].narrow(0, offset, numel).view_as(grad));
        }
        offset += numel;
      }
      reducer->works[b].reset();
      reducer->flat[b].reset();
    }
    return 0;
  });
}

// Removes the hooks and frees the reducer.
extern "C" void pipe_c10d_reducer_free(void* handle) {
  auto* reducer = static_cast<Reducer*>(handle);
  for (const auto& bucket : reducer->buckets) {
    for (const auto& parameter : bucket) {
      torch::autograd::impl::set_post_acc_grad_hooks(parameter, nullptr);
    }
  }
  delete reducer;
}
