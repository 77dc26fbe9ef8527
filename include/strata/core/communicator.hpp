#pragma once
// The communicator concept and the vocabulary shared by every communicator (MPI,
// NCCL, one process) and by the executor, which is written against the concept only.
// Plain C++: no MPI, no CUDA (strata/core/bf16.hpp and f16.hpp only add
// __host__ __device__ under nvcc), so a world of size 1 builds and runs with no MPI, no launcher and no GPU.
//
// Execution model (chosen so that an NCCL backend can implement it as-is):
//  * Buffers are plain pointers + element counts; for a device backend they
//    are device pointers.
//  * Operations are issued in program order onto the communicator's queue
//    (MPI and self: executed synchronously; NCCL: enqueued on the
//    communicator's CUDA stream). An operation observes the results of every
//    earlier operation on the same communicator.
//  * The host may only read results / reuse buffers after synchronize().
//  * barrier, agree, split and group_of are host-synchronous.
//  * Collectives must be called by every rank of the communicator in the same
//    order with matching counts; the backends do not (and cannot cheaply)
//    detect a mismatch, which usually shows up as a hang.

#include <algorithm>
#include <functional>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/core/bf16.hpp"
#include "strata/core/f16.hpp"

namespace strata::comm {

namespace detail {
// True when [a, a+na) and [b, b+nb) share a byte; MPI and NCCL forbid aliasing
// other than their own in-place forms. std::less gives a total order on pointers.
template <class T>
bool overlaps(const T* a, std::size_t na, const T* b, std::size_t nb) noexcept {
  if (na == 0 || nb == 0) return false;
  std::less<const T*> lt;
  return lt(a, b + nb) && lt(b, a + na);
}
}  // namespace detail

enum class reduce_op { sum, max, min };

// The only exception type the comm layer throws, so callers can tell
// communication failures apart from shape/plan errors.
class comm_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// What agree(false, ...) throws on every rank: an agreement that completed, as opposed to
// a communication that failed (a watchdog's timeout, a dead peer), which is a comm_error.
class agreement_error : public comm_error {
 public:
  using comm_error::comm_error;
};

// Element types every backend must support. float, double, int32 and int64
// map 1:1 onto MPI and NCCL datatypes; strata::bf16 and strata::f16 map onto
// ncclBfloat16 and ncclFloat16, while MPI (which has neither) moves them as
// 16-bit words and reduces them with user-defined ops. A 16-bit reduction
// converts to float, combines, and rounds back to the 16-bit type at every
// combining step (NCCL's 16-bit partial sums are 16-bit as well), so a sum over
// P ranks carries up to P-1 roundings and, unless the sum is exact, its last
// bits depend on the backend's reduction order. max/min are exact.
template <class T>
concept comm_scalar = std::same_as<T, float> || std::same_as<T, double> ||
                      std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t> ||
                      std::same_as<T, bf16> || std::same_as<T, f16>;

enum class dtype : unsigned char { f32, f64, i32, i64, bf16, f16 };

template <comm_scalar T>
inline constexpr dtype dtype_of = std::same_as<T, float>          ? dtype::f32
                                  : std::same_as<T, double>       ? dtype::f64
                                  : std::same_as<T, std::int32_t> ? dtype::i32
                                  : std::same_as<T, std::int64_t> ? dtype::i64
                                  : std::same_as<T, bf16>         ? dtype::bf16
                                                                  : dtype::f16;

// Names for messages (the watchdogs' descriptions of an operation).
constexpr const char* dtype_name(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f64: return "f64";
    case dtype::i32: return "i32";
    case dtype::i64: return "i64";
    case dtype::bf16: return "bf16";
    case dtype::f16: return "f16";
  }
  return "?";
}
constexpr const char* reduce_name(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::max: return "max";
    case reduce_op::min: return "min";
  }
  return "?";
}

constexpr std::size_t dtype_size(dtype t) noexcept {
  switch (t) {
    case dtype::f32:
    case dtype::i32: return 4;
    case dtype::f64:
    case dtype::i64: return 8;
    case dtype::bf16:
    case dtype::f16: return 2;
  }
  return 0;
}

static_assert(dtype_size(dtype_of<float>) == sizeof(float) &&
              dtype_size(dtype_of<double>) == sizeof(double) &&
              dtype_size(dtype_of<std::int32_t>) == sizeof(std::int32_t) &&
              dtype_size(dtype_of<std::int64_t>) == sizeof(std::int64_t) &&
              dtype_size(dtype_of<bf16>) == sizeof(bf16) && dtype_size(dtype_of<f16>) == sizeof(f16));

// Peer value meaning "no partner": the op is skipped (MPI_PROC_NULL). Lets the
// first/last pipeline stage post the same exchange code as the middle ones.
inline constexpr int no_peer = -1;

// One send or receive inside a grouped exchange. Type-erased so a single
// group can move tensors of different element types (activations + indices).
// Tags must be in [0, 32767] (the MPI-guaranteed range); NCCL ignores them and
// matches by posting order per peer, so code must not rely on tags to reorder
// messages between the same pair of ranks inside one group.
struct p2p_op {
  enum class kind : unsigned char { send, recv };
  kind what;
  dtype type;
  void* data;  // const for sends; never written through by a send
  std::size_t count;
  int peer;
  int tag;
};

template <comm_scalar T>
constexpr p2p_op send_op(const T* buf, std::size_t count, int peer, int tag = 0) noexcept {
  return {p2p_op::kind::send, dtype_of<T>, const_cast<T*>(buf), count, peer, tag};
}

template <comm_scalar T>
constexpr p2p_op recv_op(T* buf, std::size_t count, int peer, int tag = 0) noexcept {
  return {p2p_op::kind::recv, dtype_of<T>, buf, count, peer, tag};
}

// Per-element-type part of the concept (checked for each comm_scalar).
template <class C, class T>
concept communicator_for =
    requires(C& c, T* p, const T* cp, std::size_t n, int i, reduce_op op) {
      { c.all_reduce(p, n, op) } -> std::same_as<void>;  // in place
      // send holds size()*recv_count elements; rank r receives block r.
      { c.reduce_scatter(cp, p, n, op) } -> std::same_as<void>;
      // recv holds size()*send_count elements, block r from rank r.
      { c.all_gather(cp, p, n) } -> std::same_as<void>;
      { c.broadcast(p, n, i) } -> std::same_as<void>;  // (buf, count, root)
      { c.send(cp, n, i, i) } -> std::same_as<void>;   // (buf, count, peer, tag)
      { c.recv(p, n, i, i) } -> std::same_as<void>;
      // (send, send_count, dest, recv, recv_count, source, tag): both posted
      // together, so a ring shift cannot deadlock.
      { c.sendrecv(cp, n, i, p, n, i, i) } -> std::same_as<void>;
      // count elements to/from every peer; block p of send goes to rank p.
      { c.all_to_all(cp, p, n) } -> std::same_as<void>;
    };

template <class C>
concept Communicator =
    std::movable<C> &&
    requires(C& c, const C& cc, int i, bool ok, std::string_view msg,
             std::span<const int> ranks, std::span<const p2p_op> ops) {
      { cc.rank() } -> std::same_as<int>;
      { cc.size() } -> std::same_as<int>;
      { cc.name() } -> std::convertible_to<std::string_view>;  // for error messages
      { c.barrier() } -> std::same_as<void>;
      { c.synchronize() } -> std::same_as<void>;
      // All ops posted together; returns when all have completed.
      { c.group(ops) } -> std::same_as<void>;
      // Collective: every rank learns whether any rank passed ok == false and
      // then all throw the same comm_error. Guards run-time checks that would
      // otherwise leave the healthy ranks waiting in the next collective.
      { c.agree(ok, msg) } -> std::same_as<void>;
      // Collective over this communicator. color >= 0 (every rank lands in
      // some group); ranks in the new communicator are ordered by (key, rank).
      { c.split(i, i) } -> std::same_as<C>;
      // Collective over this communicator: `ranks` lists the caller's group
      // (in this communicator's numbering, caller included); the position in
      // the list becomes the rank in the new communicator. Groups must be
      // disjoint and cover every rank; inconsistent lists make all ranks throw.
      { c.group_of(ranks) } -> std::same_as<C>;
    } &&
    communicator_for<C, float> && communicator_for<C, double> &&
    communicator_for<C, std::int32_t> && communicator_for<C, std::int64_t> &&
    communicator_for<C, bf16> && communicator_for<C, f16>;

// Picks the caller's group out of a full partition (e.g. all tensor groups of
// a mesh) so call sites can hand over what the plan computes.
template <Communicator C>
C group_from_partition(C& c, std::span<const std::vector<int>> partition) {
  const std::vector<int>* mine = nullptr;
  for (const auto& g : partition)
    if (std::find(g.begin(), g.end(), c.rank()) != g.end()) mine = &g;
  c.agree(mine != nullptr,
          "group_from_partition: rank " + std::to_string(c.rank()) + " is in no group");
  return c.group_of(std::span<const int>(*mine));
}

// c.split(color, key) named `name` where the communicator takes a name (MPI, NCCL and
// self do; their error and watchdog messages carry it); decorators such as counting
// keep their inner communicator's default name.
template <Communicator C>
C split_named(C& c, int color, int key, std::string name) {
  if constexpr (requires { c.split(color, key, std::move(name)); })
    return c.split(color, key, std::move(name));
  else
    return c.split(color, key);
}

}  // namespace strata::comm
