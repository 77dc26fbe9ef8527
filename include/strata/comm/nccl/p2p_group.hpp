// strata-header: cuda-only nccl
#pragma once
// The NCCL communicator's point-to-point operations: send, recv, sendrecv and groups,
// each enqueued on the communicator's stream (a group inside ncclGroupStart/End, so
// that its sends and receives progress together). Tags are range-checked and
// otherwise ignored: NCCL matches messages between two ranks by posting order.
#include <cuda_runtime.h>
#include <nccl.h>

#include "strata/comm/nccl/collectives.hpp"
#include "strata/comm/nccl/types.hpp"
#include "strata/comm/nccl/watchdog.hpp"
#include "strata/core/communicator.hpp"

#include <cstddef>
#include <initializer_list>
#include <source_location>
#include <span>

namespace strata::comm::detail {

class nccl_p2p : public nccl_collectives {
 public:
  template <comm_scalar T>
  void send(const T* buf, std::size_t count, int peer, int tag = 0,
            std::source_location at = std::source_location::current()) {
    post_one(send_op(buf, count, peer, tag), at);
  }

  template <comm_scalar T>
  void recv(T* buf, std::size_t count, int peer, int tag = 0,
            std::source_location at = std::source_location::current()) {
    post_one(recv_op(buf, count, peer, tag), at);
  }

  template <comm_scalar T>
  void sendrecv(const T* send, std::size_t send_count, int dest, T* recv, std::size_t recv_count,
                int source, int tag = 0, std::source_location at = std::source_location::current()) {
    const p2p_op ops[] = {send_op(send, send_count, dest, tag), recv_op(recv, recv_count, source, tag)};
    auto& st = usable("sendrecv", at);
    nccl_op_info o;
    o.kind = nccl_op_kind::sendrecv;
    o.where = at;
    o.type = dtype_of<T>;
    o.count = send_count;
    o.peer = dest;
    o.count2 = recv_count;
    o.peer2 = source;
    run_group(st, ops, o, at);
  }

  // ncclGroupStart/End around all ops: they progress together, so rings and
  // pipeline exchanges cannot deadlock. Returns once enqueued.
  void group(std::span<const p2p_op> ops, std::source_location at = std::source_location::current()) {
    auto& st = usable("group", at);
    nccl_op_info o;
    o.kind = nccl_op_kind::group;
    o.where = at;
    for (const auto& op : ops) {
      if (op.peer == no_peer) continue;
      (op.what == p2p_op::kind::send ? o.count : o.count2) += 1;
    }
    if (!ops.empty()) o.type = ops.front().type;
    run_group(st, ops, o, at);
  }
  void group(std::initializer_list<p2p_op> ops, std::source_location at = std::source_location::current()) {
    group(std::span<const p2p_op>(ops.begin(), ops.size()), at);
  }

 protected:
  nccl_p2p() = default;

 private:
  // A send or recv on its own (no group).
  void post_one(const p2p_op& op, const std::source_location& at) {
    const bool is_send = op.what == p2p_op::kind::send;
    auto& st = usable(is_send ? "send" : "recv", at);
    if (!checked(st, op, at)) return;
    device_scope on(st.device, st.name);
    auto o = st.begin(is_send ? nccl_op_kind::send : nccl_op_kind::recv, at);
    o.type = op.type;
    o.count = op.count;
    o.peer = op.peer;
    const ncclDataType_t t = nccl_type(op.type);
    st.nccl_check(is_send ? ncclSend(op.data, op.count, t, op.peer, st.comm, st.stream)
                          : ncclRecv(op.data, op.count, t, op.peer, st.comm, st.stream),
                  is_send ? "ncclSend" : "ncclRecv", &o);
    st.commit(o);
  }

  // Checks an op's tag, then (unless its peer is no_peer: false, nothing to do) its
  // peer and buffer.
  static bool checked(const nccl_state& st, const p2p_op& op, const std::source_location& at) {
    check_tag(st, op.tag, at);
    if (op.peer == no_peer) return false;
    const bool is_send = op.what == p2p_op::kind::send;
    check_rank(st, op.peer, is_send ? "send peer" : "recv peer", at);
    check_buf(st, op.data, op.count * dtype_size(op.type), is_send ? "send" : "recv", at);
    return true;
  }

  void run_group(nccl_state& st, std::span<const p2p_op> ops, nccl_op_info& o,
                 const std::source_location& at) {
    device_scope on(st.device, st.name);
    std::size_t active = 0;
    for (const auto& op : ops) active += checked(st, op, at);
    if (active == 0) return;  // MPI_PROC_NULL semantics: nothing to do
    st.stamp(o);
    st.nccl_check(ncclGroupStart(), "ncclGroupStart", &o);
    ncclResult_t r = ncclSuccess;
    const char* failed = nullptr;
    for (const auto& op : ops) {
      if (op.peer == no_peer) continue;
      const ncclDataType_t t = nccl_type(op.type);
      if (op.what == p2p_op::kind::send) {
        if ((r = ncclSend(op.data, op.count, t, op.peer, st.comm, st.stream)) != ncclSuccess) failed = "ncclSend";
      } else if ((r = ncclRecv(op.data, op.count, t, op.peer, st.comm, st.stream)) != ncclSuccess) {
        failed = "ncclRecv";
      }
      if (failed != nullptr) break;
    }
    end_group(st, r, failed, o);
    st.commit(o);
  }
};

}  // namespace strata::comm::detail
