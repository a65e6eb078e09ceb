// The few Gloo names that torch's ProcessGroupGloo.hpp mentions, declared
// so that the header parses. The torch wheel ships Gloo compiled into
// libtorch_cpu but not Gloo's headers, and the distributions' Gloo
// packages are years older than the copy libtorch carries, so their
// headers would describe other classes. Nothing here is defined or
// instantiated by pipe: every ProcessGroupGloo member holds these types
// behind a pointer, so the class's size and layout do not depend on them,
// and pipe only calls the constructor and the c10d::Backend interface,
// whose code lives in libtorch. csrc/c10d.cpp says more.

#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gloo {

// ProcessGroupGloo::setTimeout, an inline virtual in the header, calls
// this; pipe never emits that function (the class's vtable is libtorch's).
class Context {
 public:
  void setTimeout(std::chrono::milliseconds timeout);
};

namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport

namespace rendezvous {

// The virtual functions ProcessGroupGloo::GlooStore overrides (without
// GLOO_STORE_HAS_STORE_V2, which pipe leaves undefined). GlooStore is never
// constructed by pipe, so its vtable is never emitted here.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) = 0;
};

}  // namespace rendezvous
}  // namespace gloo
