#pragma once
// The memory policy of host communicators (self, MPI) for the communicator suite
// (comm_suite.hpp): buffers are std::vectors, moving data is a copy.
#include <algorithm>
#include <cstddef>
#include <vector>

namespace comm_suite {

struct host_memory {
  template <class T>
  using buffer = std::vector<T>;
  template <class T>
  static std::vector<T> allocate(std::size_t n) {
    return std::vector<T>(n);
  }
  template <class T, class Comm>
  static void upload(Comm&, const T* host, std::size_t n, T* dst) {
    std::copy_n(host, n, dst);
  }
  template <class T, class Comm>
  static void download(Comm&, const T* src, std::size_t n, T* host) {
    std::copy_n(src, n, host);
  }
};

}  // namespace comm_suite
