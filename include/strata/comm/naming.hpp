#pragma once
// How the MPI and NCCL communicators name themselves in messages and name the
// sub-communicators they create, worded once for both.
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace strata::comm::detail {

// "communicator 'world.split0' (rank 1 of 4)"; `more` goes inside the parentheses
// ("..., CUDA device 1").
inline std::string where_text(std::string_view name, int rank, int size, std::string_view more = {}) {
  std::string s = "communicator '" + std::string(name) + "' (rank " + std::to_string(rank) + " of " +
                  std::to_string(size);
  if (!more.empty()) s += ", " + std::string(more);
  return s + ")";
}

// `given`, or by default the parent's name with ".split<color>" / ".group<color>".
inline std::string child_name(std::string_view parent, std::string_view how, int color, std::string given) {
  if (!given.empty()) return given;
  return std::string(parent) + "." + std::string(how) + std::to_string(color);
}

// "[0, 2, 5]".
template <class I>
std::string rank_list(std::span<const I> r) {
  std::string s = "[";
  for (std::size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s + "]";
}

}  // namespace strata::comm::detail
