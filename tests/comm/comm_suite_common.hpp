#pragma once
// Shared pieces of the communicator suite (see comm_suite.hpp): buffers through the
// includer's memory policy, inputs whose reductions are exact in every element type,
// comparisons, and checks that must agree on every rank.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/core/bf16.hpp"
#include "strata/core/f16.hpp"
#include "strata/core/communicator.hpp"

namespace comm_suite {

using strata::bf16;
using strata::f16;
using strata::comm::comm_error;
using strata::comm::no_peer;
using strata::comm::p2p_op;
using strata::comm::recv_op;
using strata::comm::reduce_op;
using strata::comm::send_op;

using P = policy;  // chosen by the file that includes the suite
using C = typename P::comm;
static_assert(strata::comm::Communicator<C>);
template <class T>
using buf = typename P::template buffer<T>;

constexpr reduce_op kOps[] = {reduce_op::sum, reduce_op::max, reduce_op::min};
inline const char* op_name(reduce_op op) { return op == reduce_op::sum ? "sum" : op == reduce_op::max ? "max" : "min"; }

// ---- buffers --------------------------------------------------------------------------
// Memory the communicator reads, holding a copy of h (ordered before later operations).
template <class T>
buf<T> put(C& c, const std::vector<T>& h) {
  buf<T> b = P::template allocate<T>(h.size());
  if (!h.empty()) P::upload(c, h.data(), h.size(), b.data());
  return b;
}
// The first n elements after every operation so far has completed.
template <class T>
std::vector<T> take(C& c, const T* p, std::size_t n) {
  c.synchronize();
  std::vector<T> h(n);
  if (n) P::download(c, p, n, h.data());
  return h;
}

// ---- values -------------------------------------------------------------------------------
// bf16 and f16: 16-bit types reduced through float.
template <class T>
constexpr bool is_half = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

template <class T>
T of(double v) {
  if constexpr (is_half<T>)
    return T(float(v));
  else
    return static_cast<T>(v);
}
template <class T>
bool same(T a, T b) {
  if constexpr (is_half<T>)
    return a.bits == b.bits;
  else
    return a == b;
}
template <class T>
std::size_t count_differences(const std::vector<T>& got, const std::vector<T>& want) {
  std::size_t bad = got.size() == want.size() ? 0 : 1;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) bad += same(got[i], want[i]) ? 0 : 1;
  return bad;
}

// A distinct value per (rank, element) for moves. bf16 and f16 use bit patterns that
// hit every class (normals, subnormals, zeros, infinities, NaNs with payloads): moves
// must keep them bit for bit.
template <class T>
T tagged(int rank, std::size_t i) {
  if constexpr (is_half<T>)
    return T::from_bits(static_cast<std::uint16_t>((static_cast<std::size_t>(rank) * 7919u + i * 131u) & 0xffffu));
  else
    return static_cast<T>(rank * 100000 + static_cast<long>(i % 100000));  // exact in float
}
template <class T>
std::vector<T> tagged_block(int rank, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = tagged<T>(rank, i);
  return v;
}

// Rank q's input at element i for reductions. For bf16 and f16, +-(q+1) k / 4 with k in
// 1..7: for up to 8 ranks every partial sum is a multiple of 1/4 below 64, i.e. at most
// 8 significant bits, so the sum is a bf16 (and an f16) and exact in any order. Other
// types: q + 1 + i.
template <class T>
double reduce_input(int q, std::size_t i) {
  if constexpr (is_half<T>) {
    const double sign = i % 3 == 0 ? -1.0 : 1.0;
    return sign * (q + 1) * static_cast<double>(1 + i % 7) * 0.25;
  } else {
    return q + 1 + static_cast<double>(i % 5000);
  }
}
constexpr int kExactRanks = 8;  // reduce_input's premise for bf16 and f16
inline double combine(reduce_op op, double a, double b) {
  return op == reduce_op::sum ? a + b : op == reduce_op::max ? (a > b ? a : b) : (a < b ? a : b);
}
// The reduction over the ranks `members` (world numbering) of reduce_input at i.
template <class T>
T reduced(reduce_op op, const std::vector<int>& members, std::size_t i) {
  double acc = reduce_input<T>(members.front(), i);
  for (std::size_t k = 1; k < members.size(); ++k) acc = combine(op, acc, reduce_input<T>(members[k], i));
  return of<T>(acc);
}

inline std::vector<int> iota_ranks(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

// ---- agreement across ranks -------------------------------------------------------------
// True on every rank iff it is true on every rank of c.
inline bool all_ranks(C& c, bool ok) {
  auto b = put(c, std::vector<std::int32_t>{ok ? 1 : 0});
  c.all_reduce(b.data(), 1, reduce_op::min);
  return take(c, b.data(), 1)[0] == 1;
}
// True on every rank iff every rank of c holds the same text.
inline bool same_everywhere(C& c, const std::string& s) {
  const auto h = static_cast<std::int64_t>(std::hash<std::string>{}(s) >> 1);
  auto lo = put(c, std::vector<std::int64_t>{h}), hi = put(c, std::vector<std::int64_t>{h});
  c.all_reduce(lo.data(), 1, reduce_op::min);
  c.all_reduce(hi.data(), 1, reduce_op::max);
  return take(c, lo.data(), 1)[0] == take(c, hi.data(), 1)[0];
}

// The message of the comm_error f throws ("" if it throws none).
template <class F>
std::string comm_error_of(F&& f) {
  try {
    f();
  } catch (const comm_error& e) {
    return e.what();
  }
  return {};
}
inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace comm_suite
