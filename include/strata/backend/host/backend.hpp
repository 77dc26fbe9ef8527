#pragma once
// The host backend as one type, strata::backend::Host, for code written against
// `template <class Backend>` (the executor, the layers), checked against the Backend
// concept: memory, queues and every kernel family.
#include <cstring>
#include <type_traits>

#include "strata/backend/host/host.hpp"
#include "strata/backend/host/kernels.hpp"
#include "strata/core/backend.hpp"

namespace strata::backend {

// The host backend as a single type, for `template <class Backend>` plans.
struct Host {
  static constexpr const char* name = "host";
  // Memory the CPU can dereference directly (a device backend says false).
  static constexpr bool host_accessible = true;

  template <class T>
  using buffer = host::buffer<T>;
  template <class T>
  using view = host::view<T>;
  using queue = host::queue;
  using event = host::event;

  template <class T>
  static buffer<T> allocate(std::size_t n) {
    return buffer<T>(n);
  }
  // The memory offloaded state lives in: on this backend an allocation of its own, which
  // the code moves to and from `allocate`'s memory with upload/download exactly as a
  // device backend's code moves pinned host memory (so CI runs offload's code path).
  template <class T>
  using host_buffer = host::buffer<T>;
  template <class T>
  static host_buffer<T> allocate_host(std::size_t n) {
    return host_buffer<T>(n);
  }
  static event record(queue& q) noexcept { return host::record(q); }
  static void wait(queue& q, const event& e) noexcept { host::wait(q, e); }
  static bool query(const event& e) noexcept { return host::query(e); }
  static void synchronize(queue& q) noexcept { q.synchronize(); }
  // Whole-device barrier: every host queue is always idle.
  static void synchronize() noexcept {}

  // Host <-> backend memory transfers, mirroring device backends so generic
  // code can stage data the same way; here a plain copy, done on return.
  template <class T>
  static void upload(queue&, const T* host, std::size_t n, T* dst) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (n) std::memmove(dst, host, n * sizeof(T));
  }
  template <class T>
  static void download(queue&, const T* src, std::size_t n, T* host) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (n) std::memmove(host, src, n * sizeof(T));
  }
};

}  // namespace strata::backend

static_assert(strata::Backend<strata::backend::Host>, "the host backend must model strata::Backend");
