#pragma once
// self_communicator: the world of one process (no MPI, no launcher), host memory.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/comm/agree.hpp"
#include "strata/core/communicator.hpp"

namespace strata::comm {

// World of one process: no MPI, no launcher. Host memory only. Sends to self
// are buffered in a mailbox so single-rank rings/pipelines behave like MPI
// (a send must be matched by a later or grouped recv, else comm_error).
class self_communicator {
 public:
  explicit self_communicator(std::string name = "world") : name_(std::move(name)) {}

  int rank() const { return 0; }
  int size() const { return 1; }
  std::string_view name() const { return name_; }

  void barrier() {}
  void synchronize() {}

  void agree(bool ok, std::string_view message) {
    if (!ok) throw detail::agreed_failure(0, name_, 1, message);
  }

  template <comm_scalar T>
  void all_reduce(T* buf, std::size_t count, reduce_op) {
    check_buf(buf, count, "all_reduce");
  }

  template <comm_scalar T>
  void reduce_scatter(const T* send, T* recv, std::size_t recv_count, reduce_op) {
    copy(send, recv, recv_count, "reduce_scatter");
  }

  template <comm_scalar T>
  void all_gather(const T* send, T* recv, std::size_t send_count) {
    copy(send, recv, send_count, "all_gather");
  }

  template <comm_scalar T>
  void broadcast(T* buf, std::size_t count, int root) {
    check_peer(root, "broadcast root");
    check_buf(buf, count, "broadcast");
  }

  template <comm_scalar T>
  void all_to_all(const T* send, T* recv, std::size_t count_per_peer) {
    copy(send, recv, count_per_peer, "all_to_all");
  }

  template <comm_scalar T>
  void send(const T* buf, std::size_t count, int peer, int tag = 0) {
    post(send_op(buf, count, peer, tag));
  }

  template <comm_scalar T>
  void recv(T* buf, std::size_t count, int peer, int tag = 0) {
    post(recv_op(buf, count, peer, tag));
  }

  template <comm_scalar T>
  void sendrecv(const T* send, std::size_t send_count, int dest, T* recv,
                std::size_t recv_count, int source, int tag = 0) {
    const p2p_op ops[] = {send_op(send, send_count, dest, tag),
                          recv_op(recv, recv_count, source, tag)};
    group(ops);
  }

  // Sends first so grouped self-exchanges always find their message.
  void group(std::span<const p2p_op> ops) {
    for (const auto& op : ops)
      if (op.what == p2p_op::kind::send) post(op);
    for (const auto& op : ops)
      if (op.what == p2p_op::kind::recv) post(op);
  }
  void group(std::initializer_list<p2p_op> ops) {
    group(std::span<const p2p_op>(ops.begin(), ops.size()));
  }

  self_communicator split(int color, int /*key*/, std::string name = {}) {
    if (color < 0) throw comm_error(fmt_error("split: color must be >= 0", {}));
    return self_communicator(name.empty() ? name_ + ".split" : std::move(name));
  }

  self_communicator group_of(std::span<const int> ranks, std::string name = {}) {
    agree(ranks.size() == 1 && ranks[0] == 0,
          "group_of: the rank list must be exactly {0} in a world of size 1");
    return self_communicator(name.empty() ? name_ + ".group" : std::move(name));
  }

  // Messages sent to self and not yet received (a leak check for tests).
  std::size_t pending_messages() const { return mailbox_.size(); }

 private:
  struct mail {
    int tag;
    dtype type;
    std::vector<std::byte> bytes;
  };

  std::string fmt_error(std::string_view what, std::string_view detail) const {
    std::string s = "strata::comm: ";
    s += what;
    s += " (communicator '" + name_ + "', rank 0 of 1)";
    if (!detail.empty()) {
      s += ": ";
      s += detail;
    }
    return s;
  }

  void check_peer(int peer, std::string_view what) const {
    if (peer != 0)
      throw comm_error(fmt_error(what, "invalid rank " + std::to_string(peer) +
                                           " (valid: 0)"));
  }

  template <class T>
  void check_buf(const T* buf, std::size_t count, std::string_view what) const {
    if (count > 0 && buf == nullptr)
      throw comm_error(fmt_error(what, "null buffer with nonzero count"));
  }

  template <class T>
  void copy(const T* from, T* to, std::size_t count, std::string_view what) const {
    check_buf(from, count, what);
    check_buf(to, count, what);
    if (count > 0 && from != to) std::memmove(to, from, count * sizeof(T));
  }

  void post(const p2p_op& op) {
    if (op.peer == no_peer) return;
    check_peer(op.peer, op.what == p2p_op::kind::send ? "send" : "recv");
    const std::size_t nbytes = op.count * dtype_size(op.type);
    if (nbytes > 0 && op.data == nullptr)
      throw comm_error(fmt_error("send/recv", "null buffer with nonzero count"));
    if (op.what == p2p_op::kind::send) {
      const auto* p = static_cast<const std::byte*>(op.data);
      mailbox_.push_back({op.tag, op.type, std::vector<std::byte>(p, p + nbytes)});
      return;
    }
    // MPI semantics: the oldest pending message with a matching tag.
    auto it = std::find_if(mailbox_.begin(), mailbox_.end(),
                           [&](const mail& m) { return m.tag == op.tag; });
    if (it == mailbox_.end())
      throw comm_error(fmt_error("recv", "no matching send to self with tag " +
                                             std::to_string(op.tag) +
                                             " (this would deadlock)"));
    if (it->type != op.type || it->bytes.size() != nbytes)
      throw comm_error(fmt_error(
          "recv", "message from self with tag " + std::to_string(op.tag) + " has " +
                      std::to_string(it->bytes.size()) + " bytes of another type/size; expected " +
                      std::to_string(nbytes)));
    if (nbytes > 0) std::memcpy(op.data, it->bytes.data(), nbytes);
    mailbox_.erase(it);
  }

  std::string name_;
  std::deque<mail> mailbox_;
};

static_assert(Communicator<self_communicator>);

}  // namespace strata::comm
