// strata-header: mpi
#pragma once
// MPI backend of the communicator concept: one MPI process per simulated
// device. Every call returns through MPI_ERRORS_RETURN and is checked, so a
// failure becomes a comm_error naming the call, the communicator and the rank
// instead of OpenMPI's default abort with no context.
//
// No operation blocks for ever: each posts the non-blocking form of its MPI call
// and waits through the watchdog (comm/mpi_watchdog.hpp), which ends the job with
// a message naming the operation, the communicator and the rank when a peer
// leaves it unfinished for STRATA_MPI_TIMEOUT_S (default 300 s; set_timeout()).
// Error messages keep the name of the blocking call the operation stands for
// (MPI_Allreduce for MPI_Iallreduce + test), which is what it means to the caller.
//
// bf16, f16: moved as 16-bit words and reduced with user-defined ops (comm/mpi_types.hpp).

#include "strata/comm/mpi_types.hpp"  // <mpi.h> without the C++ bindings
#include "strata/comm/mpi_watchdog.hpp"
#include "strata/core/communicator.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
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
  // The watchdog's timeout is STRATA_MPI_TIMEOUT_S's (see set_timeout).
  static mpi_communicator borrow(MPI_Comm comm, std::string name) {
    return mpi_communicator(comm, std::move(name), /*owned=*/false, detail::mpi_timeout_from_env());
  }
  // Takes ownership: freed with MPI_Comm_free on destruction (also when this throws).
  static mpi_communicator adopt(MPI_Comm comm, std::string name) {
    std::chrono::milliseconds t{};
    try {
      t = detail::mpi_timeout_from_env();
    } catch (...) {
      if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
      throw;
    }
    return mpi_communicator(comm, std::move(name), /*owned=*/true, t);
  }
  // Private duplicate of MPI_COMM_WORLD (collective), so strata's traffic
  // and error handler never mix with other users of MPI_COMM_WORLD. A rank
  // that never gets here ends the job after the timeout, like any operation.
  static mpi_communicator world(std::string name = "world") {
    const std::chrono::milliseconds t = detail::mpi_timeout_from_env();
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, &dup, &req);
    bool expired = false;
    if (rc == MPI_SUCCESS) rc = detail::mpi_wait_bounded(1, &req, nullptr, t, expired);
    if (expired) {
      detail::mpi_op_info op;
      op.what = detail::mpi_op_info::kind::create_world;
      fail_all(detail::mpi_watchdog_message(op, MPI_COMM_WORLD, "MPI_COMM_WORLD (creating communicator '" + name + "')",
                                            t, 1, &req));
    }
    if (rc != MPI_SUCCESS)
      throw comm_error("strata::comm: MPI_Comm_dup of MPI_COMM_WORLD failed: " +
                       detail::mpi_error_string(rc));
    return mpi_communicator(dup, std::move(name), /*owned=*/true, t);
  }

  mpi_communicator(const mpi_communicator&) = delete;
  mpi_communicator& operator=(const mpi_communicator&) = delete;
  mpi_communicator(mpi_communicator&& o) noexcept
      : comm_(std::exchange(o.comm_, MPI_COMM_NULL)),
        owned_(std::exchange(o.owned_, false)),
        rank_(o.rank_),
        size_(o.size_),
        timeout_(o.timeout_),
        seq_(o.seq_),
        name_(std::move(o.name_)) {}
  mpi_communicator& operator=(mpi_communicator&& o) noexcept {
    if (this != &o) {
      release();
      comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
      owned_ = std::exchange(o.owned_, false);
      rank_ = o.rank_;
      size_ = o.size_;
      timeout_ = o.timeout_;
      seq_ = o.seq_;
      name_ = std::move(o.name_);
    }
    return *this;
  }
  ~mpi_communicator() { release(); }

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string_view name() const { return name_; }
  MPI_Comm native() const { return comm_; }

  // The watchdog: an operation not complete this long after it was posted ends
  // the job (every rank) with a message naming it. 0: wait for ever. Split and
  // group_of children start with their parent's.
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) {
    if (t.count() < 0)
      throw comm_error("strata::comm: set_timeout on " + where() + ": the timeout must be >= 0 (0: none)");
    timeout_ = t;
  }
  // Operations issued so far on this communicator (the watchdog's "#N").
  std::uint64_t ops_issued() const noexcept { return seq_; }

  void barrier() {
    const auto op = begin(kind::barrier);
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &req), "MPI_Barrier");
    check(wait(1, &req, nullptr, op), "MPI_Barrier");
  }
  void synchronize() {}  // every operation here has completed when it returns

  void agree(bool ok, std::string_view message) {
    struct {
      int value;
      int rank;
    } in{ok ? 1 : 0, rank_}, out{1, 0};
    auto op = begin(kind::agree);
    MPI_Request req = MPI_REQUEST_NULL;
    // MINLOC: whether anyone failed and the lowest failing rank, in one call.
    check(MPI_Iallreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, comm_, &req), "MPI_Allreduce", "agree");
    check(wait(1, &req, nullptr, op), "MPI_Allreduce", "agree");
    if (out.value == 1) return;
    // Ship the failing rank's text so every rank throws the identical error.
    op.peer = out.rank;
    std::string text = out.rank == rank_ ? std::string(message.substr(0, 4096)) : std::string();
    int len = static_cast<int>(text.size());
    check(MPI_Ibcast(&len, 1, MPI_INT, out.rank, comm_, &req), "MPI_Bcast", "agree");
    check(wait(1, &req, nullptr, op), "MPI_Bcast", "agree");
    text.resize(static_cast<std::size_t>(len));
    check(MPI_Ibcast(text.data(), len, MPI_CHAR, out.rank, comm_, &req), "MPI_Bcast", "agree");
    check(wait(1, &req, nullptr, op), "MPI_Bcast", "agree");
    throw comm_error("strata::comm: check failed on rank " + std::to_string(out.rank) +
                     " of communicator '" + name_ + "' (size " + std::to_string(size_) +
                     "): " + text);
  }

  template <comm_scalar T>
  void all_reduce(T* buf, std::size_t count, reduce_op op) {
    const int n = count_arg(count, "MPI_Allreduce");
    require_buf(buf, count, "MPI_Allreduce");
    const MPI_Op mop = reduction<T>(op, "MPI_Allreduce");
    const auto info = begin(kind::all_reduce, dtype_of<T>, count, op);
    MPI_Request req = MPI_REQUEST_NULL;
    const MPI_Datatype t = detail::mpi_type<T>();
    check(bounded() ? MPI_Iallreduce(MPI_IN_PLACE, buf, n, t, mop, comm_, &req)
                    : MPI_Allreduce(MPI_IN_PLACE, buf, n, t, mop, comm_),
          "MPI_Allreduce");
    check(wait(1, &req, nullptr, info), "MPI_Allreduce");
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
    const auto info = begin(kind::reduce_scatter, dtype_of<T>, recv_count, op);
    MPI_Request req = MPI_REQUEST_NULL;
    const MPI_Datatype t = detail::mpi_type<T>();
    check(bounded() ? MPI_Ireduce_scatter_block(s, recv, n, t, mop, comm_, &req)
                    : MPI_Reduce_scatter_block(s, recv, n, t, mop, comm_),
          "MPI_Reduce_scatter_block");
    check(wait(1, &req, nullptr, info), "MPI_Reduce_scatter_block");
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
    const auto info = begin(kind::all_gather, dtype_of<T>, send_count);
    MPI_Request req = MPI_REQUEST_NULL;
    const MPI_Datatype t = detail::mpi_type<T>();
    check(bounded() ? MPI_Iallgather(s, n, t, recv, n, t, comm_, &req) : MPI_Allgather(s, n, t, recv, n, t, comm_),
          "MPI_Allgather");
    check(wait(1, &req, nullptr, info), "MPI_Allgather");
  }

  template <comm_scalar T>
  void broadcast(T* buf, std::size_t count, int root) {
    const int n = count_arg(count, "MPI_Bcast");
    require_buf(buf, count, "MPI_Bcast");
    auto info = begin(kind::broadcast, dtype_of<T>, count);
    info.peer = root;
    MPI_Request req = MPI_REQUEST_NULL;
    const MPI_Datatype t = detail::mpi_type<T>();
    check(bounded() ? MPI_Ibcast(buf, n, t, root, comm_, &req) : MPI_Bcast(buf, n, t, root, comm_), "MPI_Bcast",
          "root " + std::to_string(root));
    check(wait(1, &req, nullptr, info), "MPI_Bcast", "root " + std::to_string(root));
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
    const auto info = begin(kind::all_to_all, dtype_of<T>, count_per_peer);
    MPI_Request req = MPI_REQUEST_NULL;
    const MPI_Datatype t = detail::mpi_type<T>();
    check(bounded() ? MPI_Ialltoall(s, n, t, recv, n, t, comm_, &req) : MPI_Alltoall(s, n, t, recv, n, t, comm_),
          "MPI_Alltoall");
    check(wait(1, &req, nullptr, info), "MPI_Alltoall");
  }

  template <comm_scalar T>
  void send(const T* buf, std::size_t count, int peer, int tag = 0) {
    const int n = count_arg(count, "MPI_Send");
    require_buf(buf, count, "MPI_Send");
    auto info = begin(kind::send, dtype_of<T>, count);
    info.peer = peer;
    info.tag = tag;
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Isend(buf, n, detail::mpi_type<T>(), detail::mpi_peer(peer), tag, comm_, &req), "MPI_Send",
          p2p_detail(peer, tag));
    check(wait(1, &req, nullptr, info), "MPI_Send", p2p_detail(peer, tag));
  }

  template <comm_scalar T>
  void recv(T* buf, std::size_t count, int peer, int tag = 0) {
    const int n = count_arg(count, "MPI_Recv");
    require_buf(buf, count, "MPI_Recv");
    auto info = begin(kind::recv, dtype_of<T>, count);
    info.peer = peer;
    info.tag = tag;
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status st;
    check(MPI_Irecv(buf, n, detail::mpi_type<T>(), detail::mpi_peer(peer), tag, comm_, &req),
          "MPI_Recv", p2p_detail(peer, tag));
    check(wait(1, &req, &st, info), "MPI_Recv", p2p_detail(peer, tag));
    check_received(st, detail::mpi_type<T>(), n, peer, tag, "MPI_Recv");
  }

  template <comm_scalar T>
  void sendrecv(const T* send, std::size_t send_count, int dest, T* recv,
                std::size_t recv_count, int source, int tag = 0) {
    const int ns = count_arg(send_count, "MPI_Sendrecv");
    const int nr = count_arg(recv_count, "MPI_Sendrecv");
    require_buf(send, send_count, "MPI_Sendrecv");
    require_buf(recv, recv_count, "MPI_Sendrecv");
    auto info = begin(kind::sendrecv, dtype_of<T>, send_count);
    info.count2 = recv_count;
    info.peer = dest;
    info.peer2 = source;
    info.tag = tag;
    auto what = [&] {
      return "dest " + std::to_string(dest) + ", source " + std::to_string(source) + ", tag " +
             std::to_string(tag);
    };
    // [0] the receive, posted first (as in group), [1] the send.
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Status st[2];
    int rc = MPI_Irecv(recv, nr, detail::mpi_type<T>(), detail::mpi_peer(source), tag, comm_, &reqs[0]);
    if (rc == MPI_SUCCESS)
      rc = MPI_Isend(send, ns, detail::mpi_type<T>(), detail::mpi_peer(dest), tag, comm_, &reqs[1]);
    if (rc != MPI_SUCCESS) {
      cancel_posted(reqs, 2, /*receives=*/1);
      check(rc, "MPI_Sendrecv", what());
    }
    rc = wait(2, reqs, st, info);
    if (rc == MPI_ERR_IN_STATUS)
      for (const MPI_Status& s : st)
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) check(s.MPI_ERROR, "MPI_Sendrecv", what());
    check(rc, "MPI_Sendrecv", what());
    check_received(st[0], detail::mpi_type<T>(), nr, source, tag, "MPI_Sendrecv");
  }

  // A group posted and not yet waited for (post_group → complete): work that needs none
  // of its messages runs in between (a zero-bubble schedule's W passes). Dropped while
  // posted (an exception), its requests are cancelled.
  class pending_group {
   public:
    pending_group() = default;
    pending_group(pending_group&& o) noexcept { take(o); }
    pending_group& operator=(pending_group&& o) noexcept {
      if (this != &o) {
        drop();
        take(o);
      }
      return *this;
    }
    ~pending_group() { drop(); }
    bool active() const noexcept { return !reqs_.empty(); }

   private:
    friend class mpi_communicator;
    void take(pending_group& o) noexcept {
      ops_ = std::move(o.ops_), reqs_ = std::move(o.reqs_), counts_ = std::move(o.counts_);
      st_ = std::move(o.st_), finished_ = o.finished_, finished_rc_ = o.finished_rc_, info_ = o.info_;
      info_.ops = ops_;
      o.reqs_.clear();
    }
    void drop() noexcept {
      if (!reqs_.empty() && !finished_) abandon(ops_, reqs_);
      reqs_.clear();
    }
    std::vector<p2p_op> ops_;
    std::vector<MPI_Request> reqs_;
    std::vector<int> counts_;
    std::vector<MPI_Status> st_;
    bool finished_ = false;  // progress() saw every request complete (statuses in st_)
    int finished_rc_ = MPI_SUCCESS;
    detail::mpi_op_info info_{};
  };

  // Drives the transfers of a posted group (MPI moves a large message only inside MPI
  // calls: without this, a peer waiting on it waits for the work in between too).
  void progress(pending_group& g) {
    if (!g.active() || g.finished_) return;
    int flag = 0;
    g.st_.resize(g.reqs_.size());
    const int rc = MPI_Testall(static_cast<int>(g.reqs_.size()), g.reqs_.data(), &flag, g.st_.data());
    if (flag || rc != MPI_SUCCESS) g.finished_ = flag != 0, g.finished_rc_ = rc;
    if (rc != MPI_SUCCESS && !flag) complete(g);  // reports the failure
  }

  pending_group post_group(std::span<const p2p_op> ops) {
    const std::size_t m = ops.size();
    pending_group g;
    g.ops_.assign(ops.begin(), ops.end());
    g.counts_.assign(m, 0);
    for (std::size_t i = 0; i < m; ++i) {
      g.counts_[i] = count_arg(ops[i].count, "group");
      require_buf(ops[i].data, ops[i].count, "group");
    }
    g.info_ = begin(kind::group);
    g.info_.ops = g.ops_;
    std::vector<MPI_Request> reqs(m, MPI_REQUEST_NULL);
    // Receives are posted before sends so incoming data lands in place rather
    // than in MPI's unexpected-message queue.
    for (auto pass : {p2p_op::kind::recv, p2p_op::kind::send}) {
      for (std::size_t i = 0; i < m; ++i) {
        const p2p_op& op = ops[i];
        if (op.what != pass) continue;
        const int peer = detail::mpi_peer(op.peer);
        const MPI_Datatype t = detail::mpi_type(op.type);
        const bool is_send = op.what == p2p_op::kind::send;
        const int rc = is_send ? MPI_Isend(op.data, g.counts_[i], t, peer, op.tag, comm_, &reqs[i])
                               : MPI_Irecv(op.data, g.counts_[i], t, peer, op.tag, comm_, &reqs[i]);
        if (rc != MPI_SUCCESS) {
          abandon(ops, reqs);
          check(rc, is_send ? "MPI_Isend" : "MPI_Irecv",
                "group op " + std::to_string(i) + ", " + p2p_detail(op.peer, op.tag));
        }
      }
    }
    g.reqs_ = std::move(reqs);
    return g;
  }

  // Waits for a posted group (under the watchdog) and checks what arrived.
  void complete(pending_group& g) {
    if (!g.active()) return;
    const std::size_t m = g.reqs_.size();
    std::vector<MPI_Status> st(m);
    const bool tested = g.finished_;
    const int rc = tested ? g.finished_rc_ : wait(static_cast<int>(m), g.reqs_.data(), st.data(), g.info_);
    if (tested) st = std::move(g.st_);
    g.reqs_.clear();  // every request finished (MPI_REQUEST_NULL): none is left to cancel
    if (rc == MPI_ERR_IN_STATUS) {
      for (std::size_t i = 0; i < m; ++i)
        if (st[i].MPI_ERROR != MPI_SUCCESS && st[i].MPI_ERROR != MPI_ERR_PENDING)
          check(st[i].MPI_ERROR, "MPI_Waitall",
                "group op " + std::to_string(i) + ", " + p2p_detail(g.ops_[i].peer, g.ops_[i].tag));
    }
    check(rc, "MPI_Waitall", "group");
    for (std::size_t i = 0; i < m; ++i)
      if (g.ops_[i].what == p2p_op::kind::recv)
        check_received(st[i], detail::mpi_type(g.ops_[i].type), g.counts_[i], g.ops_[i].peer, g.ops_[i].tag,
                       "group recv");
  }

  void group(std::span<const p2p_op> ops) {
    pending_group g = post_group(ops);
    complete(g);
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
  using kind = detail::mpi_op_info::kind;

  mpi_communicator(MPI_Comm comm, std::string name, bool owned, std::chrono::milliseconds timeout)
      : comm_(comm), owned_(owned), timeout_(timeout), name_(std::move(name)) {
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

  // MPI has no non-blocking split; the agree every caller runs first (bounded)
  // has every rank at the split, so only a rank stopping in between is unguarded.
  mpi_communicator split_unchecked(int color, int key, std::string name) {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split",
          "color " + std::to_string(color) + ", key " + std::to_string(key));
    return mpi_communicator(out, std::move(name), /*owned=*/true, timeout_);
  }

  // Numbers the operation about to be posted, for the watchdog's message.
  detail::mpi_op_info begin(kind what, dtype type = dtype::i32, std::size_t count = 0,
                            reduce_op op = reduce_op::sum) noexcept {
    detail::mpi_op_info o;
    o.what = what;
    o.seq = ++seq_;
    o.type = type;
    o.count = count;
    o.op = op;
    return o;
  }

  // With the watchdog off, the five data collectives make the blocking calls:
  // Open MPI runs non-blocking collectives with other algorithms (libnbc's),
  // faster for some sizes, slower for others (docs/execution.md).
  bool bounded() const noexcept { return timeout_.count() > 0; }

  // Completes the posted requests and returns MPI's code, or, when they are
  // not done within the timeout, ends every rank naming the operation: a
  // posted collective cannot be cancelled, and the peers are stuck too.
  // A single MPI_REQUEST_NULL: the blocking call already ran (!bounded()).
  int wait(int n, MPI_Request* reqs, MPI_Status* st, const detail::mpi_op_info& op) const {
    if (n == 1 && *reqs == MPI_REQUEST_NULL) return MPI_SUCCESS;
    bool expired = false;
    const int rc = detail::mpi_wait_bounded(n, reqs, st, timeout_, expired);
    if (expired) [[unlikely]]
      watchdog_expired(n, reqs, op);
    return rc;
  }

  [[noreturn]] void watchdog_expired(int n, MPI_Request* reqs, const detail::mpi_op_info& op) const noexcept {
    std::string msg = "MPI watchdog: an operation timed out; ending every rank";
    try {
      msg = detail::mpi_watchdog_message(op, comm_, where(), timeout_, n, reqs);
    } catch (...) {  // out of memory: the short message still ends the job
    }
    fail_all(msg);
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

  // The MPI_Op for `op` on elements of type T: predefined, or for bf16 and f16 the
  // user-defined op (created on the first 16-bit reduction).
  template <comm_scalar T>
  MPI_Op reduction(reduce_op op, const char* call) const {
    if constexpr (std::same_as<T, bf16> || std::same_as<T, f16>) {
      const char* failed = "MPI_Op_create";
      check(detail::half_mpi_ops_init(failed), failed,
            std::string(call) + ": creating the bf16/f16 reduction ops");
      return detail::half_mpi_op<T>(op);
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
    for (std::size_t i = 0; i < reqs.size(); ++i) cancel_posted(&reqs[i], 1, ops[i].what == p2p_op::kind::recv);
  }
  // The same for reqs[0..n), of which the first `receives` are receives.
  static void cancel_posted(MPI_Request* reqs, int n, int receives) noexcept {
    for (int i = 0; i < n; ++i) {
      if (reqs[i] == MPI_REQUEST_NULL) continue;
      if (i < receives) {
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
  std::chrono::milliseconds timeout_{300'000};
  std::uint64_t seq_ = 0;
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
