// strata-header: mpi
#pragma once
// MPI datatypes of the communicator's element types and the reductions MPI lacks
// (used by every part of the MPI communicator, comm/mpi/*.hpp).
//
// bf16, f16: MPI has no bfloat16 or binary16 datatype. Their buffers travel as
// MPI_UINT16_T (bit-exact; counts and MPI_Get_count stay in elements), and
// all_reduce / reduce_scatter reduce them with user-defined, commutative MPI_Ops
// (sum, max, min per type) that widen each element to float, combine, and round
// the result back to the type (nearest, ties to even). They are created on the
// first 16-bit reduction of the process and freed at the start of MPI_Finalize, by
// whoever calls it (mpi_environment or the application), through a delete
// callback of an attribute on MPI_COMM_SELF: the standard's finalize hook.
// The deprecated MPI C++ bindings are not used; skipping them keeps -Wall
// -Wextra -Werror builds clean and avoids linking libmpi_cxx.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "strata/core/communicator.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <string>

namespace strata::comm {

namespace detail {

// bf16 and f16 have no MPI datatype: they move as their 16 bits.
static_assert(sizeof(bf16) == sizeof(std::uint16_t) && sizeof(f16) == sizeof(std::uint16_t));

template <comm_scalar T>
MPI_Datatype mpi_type() noexcept {
  if constexpr (std::same_as<T, float>) return MPI_FLOAT;
  else if constexpr (std::same_as<T, double>) return MPI_DOUBLE;
  else if constexpr (std::same_as<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::same_as<T, std::int64_t>) return MPI_INT64_T;
  else return MPI_UINT16_T;  // bf16, f16
}

inline MPI_Datatype mpi_type(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return MPI_FLOAT;
    case dtype::f64: return MPI_DOUBLE;
    case dtype::i32: return MPI_INT32_T;
    case dtype::i64: return MPI_INT64_T;
    case dtype::bf16:
    case dtype::f16: return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

inline MPI_Op mpi_op(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return MPI_SUM;
    case reduce_op::max: return MPI_MAX;
    case reduce_op::min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// ---- bf16 and f16 reductions -------------------------------------------------
// MPI_User_function for H (bf16, f16) carried as MPI_UINT16_T: inout[i] = in[i] (op)
// inout[i]. sum widens both to float (exact), adds once and rounds once, so
// the op is commutative (declared so to MPI_Op_create) though, like every
// rounded sum, not associative. max/min pick one of the inputs (no rounding);
// a NaN in either input wins, so the result does not depend on the order in
// which MPI combines the ranks.
template <class H, reduce_op Op>
void half_mpi_reduce(void* in, void* inout, int* len, MPI_Datatype* /*always MPI_UINT16_T*/) {
  const auto* a = static_cast<const H*>(in);
  auto* b = static_cast<H*>(inout);
  const int n = *len;
  for (int i = 0; i < n; ++i) {
    const float x = a[i], y = b[i];
    if constexpr (Op == reduce_op::sum) {
      b[i] = H(x + y);
    } else if (!std::isnan(y) && (std::isnan(x) || (Op == reduce_op::max ? x > y : x < y))) {
      b[i] = a[i];
    }
  }
}

// The six ops (sum, max, min of bf16, then of f16), created together on first use
// (per process) and freed by half_mpi_ops_release when MPI_Finalize frees
// MPI_COMM_SELF's attributes. Its destructor (at exit, possibly after MPI_Finalize)
// never calls MPI.
struct half_mpi_op_table {
  std::mutex lock;  // creation only; MPI itself may be FUNNELED or MULTIPLE
  std::atomic<bool> ready{false};
  MPI_Op ops[6] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

inline half_mpi_op_table& half_mpi_ops() {
  static half_mpi_op_table t;
  return t;
}

// Valid after a successful half_mpi_ops_init (MPI_OP_NULL for an unknown op,
// which MPI then rejects like mpi_op's).
template <class H>
MPI_Op half_mpi_op(reduce_op op) noexcept {
  const MPI_Op* ops = half_mpi_ops().ops + (std::same_as<H, bf16> ? 0 : 3);
  switch (op) {
    case reduce_op::sum: return ops[0];
    case reduce_op::max: return ops[1];
    case reduce_op::min: return ops[2];
  }
  return MPI_OP_NULL;
}

// True while the 16-bit ops exist (created and not yet freed by finalisation).
inline bool half_mpi_ops_live() noexcept { return half_mpi_ops().ready.load(std::memory_order_acquire); }
inline bool bf16_mpi_ops_live() noexcept { return half_mpi_ops_live(); }  // the name from before f16

// MPI_Comm_delete_attr_function: runs at the start of MPI_Finalize, while
// every MPI call is still allowed (MPI standard, "Allowing User Functions at
// Process Termination").
inline int half_mpi_ops_release(MPI_Comm, int, void*, void*) {
  auto& t = half_mpi_ops();
  std::lock_guard<std::mutex> g(t.lock);
  int rc = MPI_SUCCESS;
  for (MPI_Op& op : t.ops)
    if (op != MPI_OP_NULL) {
      const int r = MPI_Op_free(&op);  // sets op to MPI_OP_NULL
      if (rc == MPI_SUCCESS) rc = r;
    }
  t.ready.store(false, std::memory_order_release);
  return rc;
}

// Creates the ops once. Returns MPI_SUCCESS, or the error code with `failed`
// naming the call that returned it (nothing is left half-made then).
inline int half_mpi_ops_init(const char*& failed) {
  auto& t = half_mpi_ops();
  if (t.ready.load(std::memory_order_acquire)) [[likely]]
    return MPI_SUCCESS;
  std::lock_guard<std::mutex> g(t.lock);
  if (t.ready.load(std::memory_order_relaxed)) return MPI_SUCCESS;
  MPI_User_function* const fns[6] = {
      &half_mpi_reduce<bf16, reduce_op::sum>, &half_mpi_reduce<bf16, reduce_op::max>,
      &half_mpi_reduce<bf16, reduce_op::min>, &half_mpi_reduce<f16, reduce_op::sum>,
      &half_mpi_reduce<f16, reduce_op::max>,  &half_mpi_reduce<f16, reduce_op::min>};
  MPI_Op made[6] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  int rc = MPI_SUCCESS;
  for (int i = 0; i < 6 && rc == MPI_SUCCESS; ++i) {
    rc = MPI_Op_create(fns[i], /*commute=*/1, &made[i]);
    failed = "MPI_Op_create";
  }
  // The finalize hook: MPI_Finalize deletes MPI_COMM_SELF's attributes first,
  // calling half_mpi_ops_release. The keyval is freed at once; the attribute
  // keeps it alive until then.
  int key = MPI_KEYVAL_INVALID;
  if (rc == MPI_SUCCESS) {
    rc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &half_mpi_ops_release, &key, nullptr);
    failed = "MPI_Comm_create_keyval";
  }
  if (rc == MPI_SUCCESS) {
    rc = MPI_Comm_set_attr(MPI_COMM_SELF, key, nullptr);
    failed = "MPI_Comm_set_attr(MPI_COMM_SELF)";
  }
  if (key != MPI_KEYVAL_INVALID) (void)MPI_Comm_free_keyval(&key);
  if (rc != MPI_SUCCESS) {
    for (MPI_Op& op : made)
      if (op != MPI_OP_NULL) (void)MPI_Op_free(&op);
    return rc;
  }
  std::copy(std::begin(made), std::end(made), std::begin(t.ops));
  t.ready.store(true, std::memory_order_release);
  return MPI_SUCCESS;
}

inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS)
    return "MPI error code " + std::to_string(code);
  return std::string(buf, static_cast<std::size_t>(len));
}

inline int mpi_peer(int peer) noexcept { return peer == no_peer ? MPI_PROC_NULL : peer; }

}  // namespace detail

}  // namespace strata::comm
