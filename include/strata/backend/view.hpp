#pragma once
// view<T, Space>: a non-owning window onto memory of one memory space (Kokkos' View
// without ownership). The space is part of the type, so a device pointer never reaches
// host code by accident; elements can be dereferenced only where the host can reach them
// (Space::host_accessible).
#include <cstddef>
#include <stdexcept>
#include <type_traits>

namespace strata::backend {

template <class T, class Space>
struct view {
  T* ptr = nullptr;
  std::size_t n = 0;

  constexpr T* data() const noexcept { return ptr; }
  constexpr std::size_t size() const noexcept { return n; }
  constexpr bool empty() const noexcept { return n == 0; }
  constexpr T& operator[](std::size_t i) const noexcept
    requires Space::host_accessible
  {
    return ptr[i];
  }
  constexpr T* begin() const noexcept
    requires Space::host_accessible
  {
    return ptr;
  }
  constexpr T* end() const noexcept
    requires Space::host_accessible
  {
    return ptr + n;
  }

  // Elements [offset, offset + count); throws rather than silently overrunning.
  constexpr view subview(std::size_t offset, std::size_t count) const {
    if (offset > n || count > n - offset) throw std::out_of_range("strata: view::subview out of range");
    return view{ptr + offset, count};
  }
  // view<T> -> view<const T>, never the reverse.
  template <class U = T>
    requires(!std::is_const_v<U>)
  constexpr operator view<const U, Space>() const noexcept {
    return view<const U, Space>{ptr, n};
  }
};

}  // namespace strata::backend
