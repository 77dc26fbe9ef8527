// strata-header: mpi
#pragma once
// The MPI communicator's point-to-point operations: send, recv, sendrecv, and groups
// of sends and receives, either completed at once (group) or posted and completed
// later (post_group / progress / complete) so that work needing none of their
// messages runs while they are in flight. Receives are exact-size (as in NCCL), and
// a failed post cancels the receives already posted.
#include "strata/comm/mpi/collectives.hpp"
#include "strata/comm/mpi/types.hpp"  // <mpi.h> without the C++ bindings
#include "strata/core/communicator.hpp"

#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace strata::comm::detail {

// After a failed post: cancel receives (they would write into buffers the caller gets
// back on throw) and let posted sends finish in the background. reqs[0..n), of which
// the first `receives` are receives.
inline void mpi_cancel_posted(MPI_Request* reqs, int n, int receives) noexcept {
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
// The same for a group's requests, reqs[i] posted for ops[i].
inline void mpi_abandon(std::span<const p2p_op> ops, std::span<MPI_Request> reqs) noexcept {
  for (std::size_t i = 0; i < reqs.size(); ++i) mpi_cancel_posted(&reqs[i], 1, ops[i].what == p2p_op::kind::recv);
}

class mpi_p2p : public mpi_collectives {
 public:
  template <comm_scalar T>
  void send(const T* buf, std::size_t count, int peer, int tag = 0) {
    const int n = count_arg(count, "MPI_Send");
    require_buf(buf, count, "MPI_Send");
    auto info = begin(kind::send, dtype_of<T>, count);
    info.peer = peer;
    info.tag = tag;
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Isend(buf, n, mpi_type<T>(), mpi_peer(peer), tag, comm_, &req), "MPI_Send", p2p_detail(peer, tag));
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
    check(MPI_Irecv(buf, n, mpi_type<T>(), mpi_peer(peer), tag, comm_, &req), "MPI_Recv", p2p_detail(peer, tag));
    check(wait(1, &req, &st, info), "MPI_Recv", p2p_detail(peer, tag));
    check_received(st, mpi_type<T>(), n, peer, tag, "MPI_Recv");
  }

  template <comm_scalar T>
  void sendrecv(const T* send, std::size_t send_count, int dest, T* recv, std::size_t recv_count, int source,
                int tag = 0) {
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
    int rc = MPI_Irecv(recv, nr, mpi_type<T>(), mpi_peer(source), tag, comm_, &reqs[0]);
    if (rc == MPI_SUCCESS) rc = MPI_Isend(send, ns, mpi_type<T>(), mpi_peer(dest), tag, comm_, &reqs[1]);
    if (rc != MPI_SUCCESS) {
      mpi_cancel_posted(reqs, 2, /*receives=*/1);
      check(rc, "MPI_Sendrecv", what());
    }
    rc = wait(2, reqs, st, info);
    if (rc == MPI_ERR_IN_STATUS)
      for (const MPI_Status& s : st)
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) check(s.MPI_ERROR, "MPI_Sendrecv", what());
    check(rc, "MPI_Sendrecv", what());
    check_received(st[0], mpi_type<T>(), nr, source, tag, "MPI_Sendrecv");
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
    friend class mpi_p2p;
    void take(pending_group& o) noexcept {
      ops_ = std::move(o.ops_), reqs_ = std::move(o.reqs_), counts_ = std::move(o.counts_);
      st_ = std::move(o.st_), finished_ = o.finished_, finished_rc_ = o.finished_rc_, info_ = o.info_;
      info_.ops = ops_;
      o.reqs_.clear();
    }
    void drop() noexcept {
      if (!reqs_.empty() && !finished_) mpi_abandon(ops_, reqs_);
      reqs_.clear();
    }
    std::vector<p2p_op> ops_;
    std::vector<MPI_Request> reqs_;
    std::vector<int> counts_;
    std::vector<MPI_Status> st_;
    bool finished_ = false;  // progress() saw every request complete (statuses in st_)
    int finished_rc_ = MPI_SUCCESS;
    mpi_op_info info_{};
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
        const int peer = mpi_peer(op.peer);
        const MPI_Datatype t = mpi_type(op.type);
        const bool is_send = op.what == p2p_op::kind::send;
        const int rc = is_send ? MPI_Isend(op.data, g.counts_[i], t, peer, op.tag, comm_, &reqs[i])
                               : MPI_Irecv(op.data, g.counts_[i], t, peer, op.tag, comm_, &reqs[i]);
        if (rc != MPI_SUCCESS) {
          mpi_abandon(ops, reqs);
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
        check_received(st[i], mpi_type(g.ops_[i].type), g.counts_[i], g.ops_[i].peer, g.ops_[i].tag,
                       "group recv");
  }

  // All ops posted together; returns when all have completed.
  void group(std::span<const p2p_op> ops) {
    pending_group g = post_group(ops);
    complete(g);
  }
  void group(std::initializer_list<p2p_op> ops) { group(std::span<const p2p_op>(ops.begin(), ops.size())); }

 protected:
  using mpi_collectives::mpi_collectives;

 private:
  // Receives are exact-size (as in NCCL): a shorter message is a protocol bug.
  void check_received(const MPI_Status& st, MPI_Datatype t, int expected, int peer, int tag,
                      const char* call) const {
    if (peer == no_peer) return;
    int got = 0;
    check(MPI_Get_count(&st, t, &got), "MPI_Get_count");
    if (got != expected)
      throw comm_error(std::string("strata::comm: ") + call + " on " + where() + " [" + p2p_detail(peer, tag) +
                       "]: received " + std::to_string(got) + " elements, expected " + std::to_string(expected));
  }

  static std::string p2p_detail(int peer, int tag) {
    return "peer " + std::to_string(peer) + ", tag " + std::to_string(tag);
  }
};

}  // namespace strata::comm::detail
