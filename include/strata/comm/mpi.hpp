// strata-header: mpi
#pragma once
// MPI backend of the communicator concept: one MPI process per simulated
// device. Every call returns through MPI_ERRORS_RETURN and is checked, so a
// failure becomes a comm_error naming the call, the communicator and the rank
// instead of OpenMPI's default abort with no context.
//
// bf16: MPI has no bfloat16 datatype. bf16 buffers travel as MPI_UINT16_T
// (bit-exact; counts and MPI_Get_count stay in elements), and all_reduce /
// reduce_scatter reduce them with three user-defined, commutative MPI_Ops
// (sum, max, min) that widen each element to float, combine, and round the
// result back to bf16 (nearest, ties to even). They are created on the first
// bf16 reduction of the process and freed at the start of MPI_Finalize, by
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
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::comm {

namespace detail {

// bf16 has no MPI datatype: it moves as its 16 bits.
static_assert(sizeof(bf16) == sizeof(std::uint16_t));

template <comm_scalar T>
MPI_Datatype mpi_type() noexcept {
  if constexpr (std::same_as<T, float>) return MPI_FLOAT;
  else if constexpr (std::same_as<T, double>) return MPI_DOUBLE;
  else if constexpr (std::same_as<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::same_as<T, std::int64_t>) return MPI_INT64_T;
  else return MPI_UINT16_T;  // bf16
}

inline MPI_Datatype mpi_type(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return MPI_FLOAT;
    case dtype::f64: return MPI_DOUBLE;
    case dtype::i32: return MPI_INT32_T;
    case dtype::i64: return MPI_INT64_T;
    case dtype::bf16: return MPI_UINT16_T;
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

// ---- bf16 reductions ---------------------------------------------------------
// MPI_User_function for bf16 carried as MPI_UINT16_T: inout[i] = in[i] (op)
// inout[i]. sum widens both to float (exact), adds once and rounds once, so
// the op is commutative (declared so to MPI_Op_create) though, like every
// rounded sum, not associative. max/min pick one of the inputs (no rounding);
// a NaN in either input wins, so the result does not depend on the order in
// which MPI combines the ranks.
template <reduce_op Op>
void bf16_mpi_reduce(void* in, void* inout, int* len, MPI_Datatype* /*always MPI_UINT16_T*/) {
  const auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  const int n = *len;
  for (int i = 0; i < n; ++i) {
    const float x = a[i], y = b[i];
    if constexpr (Op == reduce_op::sum) {
      b[i] = bf16(x + y);
    } else if (!std::isnan(y) && (std::isnan(x) || (Op == reduce_op::max ? x > y : x < y))) {
      b[i] = a[i];
    }
  }
}

// The three ops, created together on first use (per process) and freed by
// bf16_mpi_ops_release when MPI_Finalize frees MPI_COMM_SELF's attributes.
// Its destructor (at exit, possibly after MPI_Finalize) never calls MPI.
struct bf16_mpi_op_table {
  std::mutex lock;  // creation only; MPI itself may be FUNNELED or MULTIPLE
  std::atomic<bool> ready{false};
  MPI_Op ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, max, min
};

inline bf16_mpi_op_table& bf16_mpi_ops() {
  static bf16_mpi_op_table t;
  return t;
}

// Valid after a successful bf16_mpi_ops_init (MPI_OP_NULL for an unknown op,
// which MPI then rejects like mpi_op's).
inline MPI_Op bf16_mpi_op(reduce_op op) noexcept {
  auto& t = bf16_mpi_ops();
  switch (op) {
    case reduce_op::sum: return t.ops[0];
    case reduce_op::max: return t.ops[1];
    case reduce_op::min: return t.ops[2];
  }
  return MPI_OP_NULL;
}

// True while the bf16 ops exist (created and not yet freed by finalisation).
inline bool bf16_mpi_ops_live() noexcept { return bf16_mpi_ops().ready.load(std::memory_order_acquire); }

// MPI_Comm_delete_attr_function: runs at the start of MPI_Finalize, while
// every MPI call is still allowed (MPI standard, "Allowing User Functions at
// Process Termination").
inline int bf16_mpi_ops_release(MPI_Comm, int, void*, void*) {
  auto& t = bf16_mpi_ops();
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
inline int bf16_mpi_ops_init(const char*& failed) {
  auto& t = bf16_mpi_ops();
  if (t.ready.load(std::memory_order_acquire)) [[likely]]
    return MPI_SUCCESS;
  std::lock_guard<std::mutex> g(t.lock);
  if (t.ready.load(std::memory_order_relaxed)) return MPI_SUCCESS;
  MPI_User_function* const fns[3] = {&bf16_mpi_reduce<reduce_op::sum>, &bf16_mpi_reduce<reduce_op::max>,
                                     &bf16_mpi_reduce<reduce_op::min>};
  MPI_Op made[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  int rc = MPI_SUCCESS;
  for (int i = 0; i < 3 && rc == MPI_SUCCESS; ++i) {
    rc = MPI_Op_create(fns[i], /*commute=*/1, &made[i]);
    failed = "MPI_Op_create";
  }
  // The finalize hook: MPI_Finalize deletes MPI_COMM_SELF's attributes first,
  // calling bf16_mpi_ops_release. The keyval is freed at once; the attribute
  // keeps it alive until then.
  int key = MPI_KEYVAL_INVALID;
  if (rc == MPI_SUCCESS) {
    rc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &bf16_mpi_ops_release, &key, nullptr);
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

// Prints "[strata] rank R: message" and takes every rank down with MPI_Abort.
// For a rank that finds bad input on its own: throwing there would leave the
// other ranks blocked in their next collective forever.
[[noreturn]] inline void fail_all(std::string_view message) noexcept {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  const bool live = init && !fin;
  int rank = 0;
  if (live) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "[strata] rank %d: %.*s\n", rank, static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
  if (live) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; this covers "no MPI running"
}

// Installs a std::terminate handler that names the exception escaping main and ends
// every rank (fail_all): an uncaught exception on one rank must not leave the others
// inside a collective. Installed once, by strata::init.
inline void end_job_on_terminate() noexcept {
  static const bool installed = [] {
    std::set_terminate([]() noexcept {
      std::string what = "terminate called without an active exception";
      if (const std::exception_ptr e = std::current_exception()) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          what = std::string("uncaught exception: ") + x.what();
        } catch (...) {
          what = "uncaught exception of a type not derived from std::exception";
        }
      }
      fail_all(what + " (ending every rank)");
    });
    return true;
  }();
  (void)installed;
}

class mpi_communicator {
 public:
  // Non-owning view of an existing communicator (sets MPI_ERRORS_RETURN on it).
  static mpi_communicator borrow(MPI_Comm comm, std::string name) {
    return mpi_communicator(comm, std::move(name), /*owned=*/false);
  }
  // Takes ownership: freed with MPI_Comm_free on destruction.
  static mpi_communicator adopt(MPI_Comm comm, std::string name) {
    return mpi_communicator(comm, std::move(name), /*owned=*/true);
  }
  // Private duplicate of MPI_COMM_WORLD (collective), so strata's traffic
  // and error handler never mix with other users of MPI_COMM_WORLD.
  static mpi_communicator world(std::string name = "world") {
    MPI_Comm dup = MPI_COMM_NULL;
    const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    if (rc != MPI_SUCCESS)
      throw comm_error("strata::comm: MPI_Comm_dup of MPI_COMM_WORLD failed: " +
                       detail::mpi_error_string(rc));
    return adopt(dup, std::move(name));
  }

  mpi_communicator(const mpi_communicator&) = delete;
  mpi_communicator& operator=(const mpi_communicator&) = delete;
  mpi_communicator(mpi_communicator&& o) noexcept
      : comm_(std::exchange(o.comm_, MPI_COMM_NULL)),
        owned_(std::exchange(o.owned_, false)),
        rank_(o.rank_),
        size_(o.size_),
        name_(std::move(o.name_)) {}
  mpi_communicator& operator=(mpi_communicator&& o) noexcept {
    if (this != &o) {
      release();
      comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
      owned_ = std::exchange(o.owned_, false);
      rank_ = o.rank_;
      size_ = o.size_;
      name_ = std::move(o.name_);
    }
    return *this;
  }
  ~mpi_communicator() { release(); }

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string_view name() const { return name_; }
  MPI_Comm native() const { return comm_; }

  void barrier() { check(MPI_Barrier(comm_), "MPI_Barrier"); }
  void synchronize() {}  // every MPI call here is blocking

  void agree(bool ok, std::string_view message) {
    struct {
      int value;
      int rank;
    } in{ok ? 1 : 0, rank_}, out{1, 0};
    // MINLOC: whether anyone failed and the lowest failing rank, in one call.
    check(MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, comm_), "MPI_Allreduce",
          "agree");
    if (out.value == 1) return;
    // Ship the failing rank's text so every rank throws the identical error.
    std::string text = out.rank == rank_ ? std::string(message.substr(0, 4096)) : std::string();
    int len = static_cast<int>(text.size());
    check(MPI_Bcast(&len, 1, MPI_INT, out.rank, comm_), "MPI_Bcast", "agree");
    text.resize(static_cast<std::size_t>(len));
    check(MPI_Bcast(text.data(), len, MPI_CHAR, out.rank, comm_), "MPI_Bcast", "agree");
    throw comm_error("strata::comm: check failed on rank " + std::to_string(out.rank) +
                     " of communicator '" + name_ + "' (size " + std::to_string(size_) +
                     "): " + text);
  }

  template <comm_scalar T>
  void all_reduce(T* buf, std::size_t count, reduce_op op) {
    const int n = count_arg(count, "MPI_Allreduce");
    require_buf(buf, count, "MPI_Allreduce");
    const MPI_Op mop = reduction<T>(op, "MPI_Allreduce");
    check(MPI_Allreduce(MPI_IN_PLACE, buf, n, detail::mpi_type<T>(), mop, comm_), "MPI_Allreduce");
  }

  template <comm_scalar T>
  void reduce_scatter(const T* send, T* recv, std::size_t recv_count, reduce_op op) {
    const int n = count_arg(recv_count, "MPI_Reduce_scatter_block");
    const std::size_t total = recv_count * static_cast<std::size_t>(size_);
    require_buf(send, total, "MPI_Reduce_scatter_block");
    require_buf(recv, recv_count, "MPI_Reduce_scatter_block");
    const void* s = send;
    std::vector<T> copy;
    if (static_cast<const T*>(recv) == send) {
      s = MPI_IN_PLACE;  // MPI in-place: reads all of recv, result in its first block
    } else if (detail::overlaps<T>(send, total, recv, recv_count)) {
      copy.assign(send, send + total);  // e.g. NCCL-style recv == send + rank*count
      s = copy.data();
    }
    const MPI_Op mop = reduction<T>(op, "MPI_Reduce_scatter_block");
    check(MPI_Reduce_scatter_block(s, recv, n, detail::mpi_type<T>(), mop, comm_),
          "MPI_Reduce_scatter_block");
  }

  template <comm_scalar T>
  void all_gather(const T* send, T* recv, std::size_t send_count) {
    const int n = count_arg(send_count, "MPI_Allgather");
    const std::size_t total = send_count * static_cast<std::size_t>(size_);
    require_buf(send, send_count, "MPI_Allgather");
    require_buf(recv, total, "MPI_Allgather");
    const void* s = send;
    std::vector<T> copy;
    if (send == recv + static_cast<std::size_t>(rank_) * send_count) {
      s = MPI_IN_PLACE;  // caller's block already in place (the NCCL in-place form)
    } else if (detail::overlaps<T>(send, send_count, recv, total)) {
      copy.assign(send, send + send_count);
      s = copy.data();
    }
    check(MPI_Allgather(s, n, detail::mpi_type<T>(), recv, n, detail::mpi_type<T>(), comm_),
          "MPI_Allgather");
  }

  template <comm_scalar T>
  void broadcast(T* buf, std::size_t count, int root) {
    const int n = count_arg(count, "MPI_Bcast");
    require_buf(buf, count, "MPI_Bcast");
    check(MPI_Bcast(buf, n, detail::mpi_type<T>(), root, comm_), "MPI_Bcast",
          "root " + std::to_string(root));
  }

  template <comm_scalar T>
  void all_to_all(const T* send, T* recv, std::size_t count_per_peer) {
    const int n = count_arg(count_per_peer, "MPI_Alltoall");
    const std::size_t total = count_per_peer * static_cast<std::size_t>(size_);
    require_buf(send, total, "MPI_Alltoall");
    require_buf(recv, total, "MPI_Alltoall");
    const void* s = send;
    std::vector<T> copy;
    if (static_cast<const T*>(recv) == send) {
      s = MPI_IN_PLACE;
    } else if (detail::overlaps<T>(send, total, recv, total)) {
      copy.assign(send, send + total);
      s = copy.data();
    }
    check(MPI_Alltoall(s, n, detail::mpi_type<T>(), recv, n, detail::mpi_type<T>(), comm_),
          "MPI_Alltoall");
  }

  template <comm_scalar T>
  void send(const T* buf, std::size_t count, int peer, int tag = 0) {
    const int n = count_arg(count, "MPI_Send");
    require_buf(buf, count, "MPI_Send");
    check(MPI_Send(buf, n, detail::mpi_type<T>(), detail::mpi_peer(peer), tag, comm_), "MPI_Send",
          p2p_detail(peer, tag));
  }

  template <comm_scalar T>
  void recv(T* buf, std::size_t count, int peer, int tag = 0) {
    const int n = count_arg(count, "MPI_Recv");
    require_buf(buf, count, "MPI_Recv");
    MPI_Status st;
    check(MPI_Recv(buf, n, detail::mpi_type<T>(), detail::mpi_peer(peer), tag, comm_, &st),
          "MPI_Recv", p2p_detail(peer, tag));
    check_received(st, detail::mpi_type<T>(), n, peer, tag, "MPI_Recv");
  }

  template <comm_scalar T>
  void sendrecv(const T* send, std::size_t send_count, int dest, T* recv,
                std::size_t recv_count, int source, int tag = 0) {
    const int ns = count_arg(send_count, "MPI_Sendrecv");
    const int nr = count_arg(recv_count, "MPI_Sendrecv");
    require_buf(send, send_count, "MPI_Sendrecv");
    require_buf(recv, recv_count, "MPI_Sendrecv");
    MPI_Status st;
    check(MPI_Sendrecv(send, ns, detail::mpi_type<T>(), detail::mpi_peer(dest), tag, recv, nr,
                       detail::mpi_type<T>(), detail::mpi_peer(source), tag, comm_, &st),
          "MPI_Sendrecv", "dest " + std::to_string(dest) + ", source " + std::to_string(source) +
                              ", tag " + std::to_string(tag));
    check_received(st, detail::mpi_type<T>(), nr, source, tag, "MPI_Sendrecv");
  }

  void group(std::span<const p2p_op> ops) {
    const std::size_t m = ops.size();
    std::vector<MPI_Request> reqs(m, MPI_REQUEST_NULL);
    std::vector<int> counts(m, 0);
    for (std::size_t i = 0; i < m; ++i) {
      counts[i] = count_arg(ops[i].count, "group");
      require_buf(ops[i].data, ops[i].count, "group");
    }
    // Receives are posted before sends so incoming data lands in place rather
    // than in MPI's unexpected-message queue.
    for (auto pass : {p2p_op::kind::recv, p2p_op::kind::send}) {
      for (std::size_t i = 0; i < m; ++i) {
        const p2p_op& op = ops[i];
        if (op.what != pass) continue;
        const int peer = detail::mpi_peer(op.peer);
        const MPI_Datatype t = detail::mpi_type(op.type);
        const bool is_send = op.what == p2p_op::kind::send;
        const int rc = is_send ? MPI_Isend(op.data, counts[i], t, peer, op.tag, comm_, &reqs[i])
                               : MPI_Irecv(op.data, counts[i], t, peer, op.tag, comm_, &reqs[i]);
        if (rc != MPI_SUCCESS) {
          abandon(ops, reqs);
          check(rc, is_send ? "MPI_Isend" : "MPI_Irecv",
                "group op " + std::to_string(i) + ", " + p2p_detail(op.peer, op.tag));
        }
      }
    }
    std::vector<MPI_Status> st(m);
    const int rc = MPI_Waitall(static_cast<int>(m), reqs.data(), st.data());
    if (rc == MPI_ERR_IN_STATUS) {
      for (std::size_t i = 0; i < m; ++i)
        if (st[i].MPI_ERROR != MPI_SUCCESS && st[i].MPI_ERROR != MPI_ERR_PENDING)
          check(st[i].MPI_ERROR, "MPI_Waitall",
                "group op " + std::to_string(i) + ", " + p2p_detail(ops[i].peer, ops[i].tag));
    }
    check(rc, "MPI_Waitall", "group");
    for (std::size_t i = 0; i < m; ++i)
      if (ops[i].what == p2p_op::kind::recv)
        check_received(st[i], detail::mpi_type(ops[i].type), counts[i], ops[i].peer, ops[i].tag,
                       "group recv");
  }
  void group(std::initializer_list<p2p_op> ops) {
    group(std::span<const p2p_op>(ops.begin(), ops.size()));
  }

  mpi_communicator split(int color, int key, std::string name = {}) {
    // agree first: a rank throwing alone would leave the rest inside
    // MPI_Comm_split forever.
    agree(color >= 0, "split: color must be >= 0, got " + std::to_string(color));
    return split_unchecked(color, key,
                           name.empty() ? name_ + ".split" + std::to_string(color)
                                        : std::move(name));
  }

  mpi_communicator group_of(std::span<const int> ranks, std::string name = {}) {
    std::string err;
    auto pos = std::find(ranks.begin(), ranks.end(), rank_);
    if (pos == ranks.end()) err = "the caller (rank " + std::to_string(rank_) + ") is not in " + list(ranks);
    for (std::size_t i = 0; i < ranks.size() && err.empty(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= size_)
        err = list(ranks) + " has rank " + std::to_string(ranks[i]) + " outside [0, " +
              std::to_string(size_) + ")";
      else if (std::find(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(i),
                         ranks[i]) != ranks.begin() + static_cast<std::ptrdiff_t>(i))
        err = list(ranks) + " repeats rank " + std::to_string(ranks[i]);
    }
    agree(err.empty(), "group_of: " + err);
    // color = lowest member: unique per group because groups are disjoint.
    const int color = *std::min_element(ranks.begin(), ranks.end());
    mpi_communicator sub = split_unchecked(
        color, static_cast<int>(pos - ranks.begin()),
        name.empty() ? name_ + ".group" + std::to_string(color) : std::move(name));
    // Catch members that passed different lists (they would silently get a
    // group other than the one they asked for).
    std::vector<std::int32_t> got(static_cast<std::size_t>(sub.size()));
    const std::int32_t me = rank_;
    sub.all_gather(&me, got.data(), 1);
    const bool same = got.size() == ranks.size() && std::equal(got.begin(), got.end(), ranks.begin());
    agree(same, "group_of: rank " + std::to_string(rank_) + " asked for " + list(ranks) +
                    " but the ranks that chose the same group formed " +
                    list(std::span<const std::int32_t>(got)) +
                    " (every member must pass the same list)");
    return sub;
  }

 private:
  mpi_communicator(MPI_Comm comm, std::string name, bool owned)
      : comm_(comm), owned_(owned), name_(std::move(name)) {
    // A throwing constructor never runs the destructor, so an adopted comm is
    // released here on failure.
    int rc = MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comm_, &rank_);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm_, &size_);
    if (rc == MPI_SUCCESS && owned_) rc = MPI_Comm_set_name(comm_, name_.substr(0, MPI_MAX_OBJECT_NAME - 1).c_str());
    if (rc != MPI_SUCCESS) {
      release();
      throw comm_error("strata::comm: setting up communicator '" + name_ +
                       "' failed: " + detail::mpi_error_string(rc));
    }
  }

  mpi_communicator split_unchecked(int color, int key, std::string name) {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split",
          "color " + std::to_string(color) + ", key " + std::to_string(key));
    return adopt(out, std::move(name));
  }

  void release() noexcept {
    if (owned_ && comm_ != MPI_COMM_NULL) {
      int fin = 0;
      MPI_Finalized(&fin);
      if (!fin) MPI_Comm_free(&comm_);  // after MPI_Finalize there is nothing to free
    }
    comm_ = MPI_COMM_NULL;
    owned_ = false;
  }

  // The MPI_Op for `op` on elements of type T: predefined, or for bf16 the
  // user-defined op (created on the first bf16 reduction).
  template <comm_scalar T>
  MPI_Op reduction(reduce_op op, const char* call) const {
    if constexpr (std::same_as<T, bf16>) {
      const char* failed = "MPI_Op_create";
      check(detail::bf16_mpi_ops_init(failed), failed,
            std::string(call) + ": creating the bf16 reduction ops");
      return detail::bf16_mpi_op(op);
    } else {
      return detail::mpi_op(op);
    }
  }

  std::string where() const {
    return "communicator '" + name_ + "' (rank " + std::to_string(rank_) + " of " +
           std::to_string(size_) + ")";
  }

  void check(int rc, const char* call, std::string_view detail = {}) const {
    if (rc == MPI_SUCCESS) [[likely]]
      return;
    std::string msg = std::string("strata::comm: ") + call + " failed on " + where();
    if (!detail.empty()) msg += " [" + std::string(detail) + "]";
    throw comm_error(msg + ": " + detail::mpi_error_string(rc));
  }

  // MPI counts are int; the backend rejects rather than chunks so that sender
  // and receiver can never disagree about how a message was split.
  int count_arg(std::size_t count, const char* call) const {
    if (count > static_cast<std::size_t>(INT_MAX))
      throw comm_error(std::string("strata::comm: ") + call + " on " + where() + ": count " +
                       std::to_string(count) +
                       " exceeds INT_MAX (2147483647), the MPI limit; split the buffer");
    return static_cast<int>(count);
  }

  void require_buf(const void* p, std::size_t count, const char* call) const {
    if (count > 0 && p == nullptr)
      throw comm_error(std::string("strata::comm: ") + call + " on " + where() +
                       ": null buffer with count " + std::to_string(count));
  }

  // Receives are exact-size (as in NCCL): a shorter message is a protocol bug.
  void check_received(const MPI_Status& st, MPI_Datatype t, int expected, int peer, int tag,
                      const char* call) const {
    if (peer == no_peer) return;
    int got = 0;
    check(MPI_Get_count(&st, t, &got), "MPI_Get_count");
    if (got != expected)
      throw comm_error(std::string("strata::comm: ") + call + " on " + where() + " [" +
                       p2p_detail(peer, tag) + "]: received " + std::to_string(got) +
                       " elements, expected " + std::to_string(expected));
  }

  static std::string p2p_detail(int peer, int tag) {
    return "peer " + std::to_string(peer) + ", tag " + std::to_string(tag);
  }

  template <class I>
  static std::string list(std::span<const I> r) {
    std::string s = "[";
    for (std::size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
    return s + "]";
  }

  // After a failed post: cancel receives (they would write into buffers the
  // caller gets back on throw) and let posted sends finish in the background.
  static void abandon(std::span<const p2p_op> ops, std::span<MPI_Request> reqs) noexcept {
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i] == MPI_REQUEST_NULL) continue;
      if (ops[i].what == p2p_op::kind::recv) {
        MPI_Cancel(&reqs[i]);
        MPI_Wait(&reqs[i], MPI_STATUS_IGNORE);
      } else {
        MPI_Request_free(&reqs[i]);
      }
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 0;
  std::string name_;
};

static_assert(Communicator<mpi_communicator>);

// Owns MPI's lifetime for a program: initialises MPI (MPI_THREAD_FUNNELED:
// only the main thread talks to MPI) unless someone already did, and
// finalises it only if it initialised it. Works under mpiexec/mpirun/srun and
// as a singleton (plain ./prog, size 1).
class mpi_environment {
 public:
  mpi_environment() : mpi_environment(nullptr, nullptr) {}
  mpi_environment(int* argc, char*** argv) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin) throw comm_error("strata::comm: MPI was already finalized; it cannot be re-initialised");
    if (!init) {
      const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided_);
      if (rc != MPI_SUCCESS)
        throw comm_error("strata::comm: MPI_Init_thread failed: " + detail::mpi_error_string(rc));
      owns_mpi_ = true;
    } else {
      MPI_Query_thread(&provided_);
    }
    try {
      world_.emplace(mpi_communicator::world());
    } catch (...) {
      if (owns_mpi_) MPI_Finalize();
      throw;
    }
  }
  mpi_environment(const mpi_environment&) = delete;
  mpi_environment& operator=(const mpi_environment&) = delete;
  ~mpi_environment() {
    world_.reset();  // communicators must be freed before MPI_Finalize
    int fin = 0;
    MPI_Finalized(&fin);
    if (owns_mpi_ && !fin) MPI_Finalize();
  }

  int rank() const { return world_->rank(); }
  int size() const { return world_->size(); }
  int thread_level() const { return provided_; }
  // A duplicate of MPI_COMM_WORLD named "world", freed before finalisation.
  mpi_communicator& world() { return *world_; }

 private:
  bool owns_mpi_ = false;
  int provided_ = MPI_THREAD_SINGLE;
  std::optional<mpi_communicator> world_;
};

}  // namespace strata::comm
