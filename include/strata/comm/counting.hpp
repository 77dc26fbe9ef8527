#pragma once
// counting<C>: a communicator that forwards every call to C and adds up the bytes each
// kind of collective moves, by the rule the planner's cost model uses (comm_desc): the
// larger local buffer of a call — all-reduce: the buffer; reduce-scatter: the input
// (size × block); all-gather: the output (size × block); all-to-all: the input;
// broadcast: the buffer; point to point: what this rank sends. Sub-communicators split
// from it count into the same books, so a trainer on a counting world measures a whole
// step. Tests hold these numbers against Plan::communication.
#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "strata/core/communicator.hpp"
#include "strata/core/sbp.hpp"

namespace strata::comm {

// Bytes moved per kind of collective (indexed by strata::collective), and calls.
struct traffic {
  std::array<long long, 7> bytes{};
  std::array<long long, 7> calls{};
  void add(collective c, long long b) {
    bytes[static_cast<std::size_t>(c)] += b;
    calls[static_cast<std::size_t>(c)] += 1;
  }
  long long of(collective c) const { return bytes[static_cast<std::size_t>(c)]; }
  void clear() { *this = traffic{}; }
};

template <Communicator C>
class counting {
 public:
  explicit counting(C inner, std::shared_ptr<traffic> books = std::make_shared<traffic>())
      : inner_(std::move(inner)), books_(std::move(books)) {}

  const traffic& books() const { return *books_; }
  void clear() { books_->clear(); }
  C& inner() { return inner_; }

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  std::string_view name() const { return inner_.name(); }
  void barrier() { inner_.barrier(); }
  void synchronize() { inner_.synchronize(); }
  void agree(bool ok, std::string_view msg) { inner_.agree(ok, msg); }

  template <comm_scalar T>
  void all_reduce(T* buf, std::size_t n, reduce_op op) {
    books_->add(collective::all_reduce, bytes<T>(n));
    inner_.all_reduce(buf, n, op);
  }
  template <comm_scalar T>
  void reduce_scatter(const T* send, T* recv, std::size_t recv_count, reduce_op op) {
    books_->add(collective::reduce_scatter, bytes<T>(recv_count * std::size_t(size())));
    inner_.reduce_scatter(send, recv, recv_count, op);
  }
  template <comm_scalar T>
  void all_gather(const T* send, T* recv, std::size_t send_count) {
    books_->add(collective::all_gather, bytes<T>(send_count * std::size_t(size())));
    inner_.all_gather(send, recv, send_count);
  }
  template <comm_scalar T>
  void all_to_all(const T* send, T* recv, std::size_t count_per_peer) {
    books_->add(collective::all_to_all, bytes<T>(count_per_peer * std::size_t(size())));
    inner_.all_to_all(send, recv, count_per_peer);
  }
  template <comm_scalar T>
  void broadcast(T* buf, std::size_t n, int root) {
    books_->add(collective::broadcast, bytes<T>(n));
    inner_.broadcast(buf, n, root);
  }
  template <comm_scalar T>
  void send(const T* buf, std::size_t n, int peer, int tag = 0) {
    books_->add(collective::send_recv, bytes<T>(n));
    inner_.send(buf, n, peer, tag);
  }
  template <comm_scalar T>
  void recv(T* buf, std::size_t n, int peer, int tag = 0) {
    inner_.recv(buf, n, peer, tag);
  }
  template <comm_scalar T>
  void sendrecv(const T* send, std::size_t send_count, int dest, T* recv, std::size_t recv_count, int source,
                int tag = 0) {
    books_->add(collective::send_recv, bytes<T>(send_count));
    inner_.sendrecv(send, send_count, dest, recv, recv_count, source, tag);
  }
  void group(std::span<const p2p_op> ops) {
    count_sends(ops);
    inner_.group(ops);
  }
  // Posted groups where the inner communicator has them (core/posted_group.hpp): counted when posted.
  auto post_group(std::span<const p2p_op> ops)
    requires requires(C& c) { c.post_group(ops); }
  {
    count_sends(ops);
    return inner_.post_group(ops);
  }
  template <class G>
  void progress(G& g)
    requires requires(C& c) { c.progress(g); }
  {
    inner_.progress(g);
  }
  template <class G>
  void complete(G& g)
    requires requires(C& c) { c.complete(g); }
  {
    inner_.complete(g);
  }
  counting split(int color, int key) { return counting(inner_.split(color, key), books_); }
  counting group_of(std::span<const int> ranks) { return counting(inner_.group_of(ranks), books_); }

 private:
  void count_sends(std::span<const p2p_op> ops) {
    for (const p2p_op& op : ops)
      if (op.what == p2p_op::kind::send && op.peer != no_peer)
        books_->add(collective::send_recv, static_cast<long long>(op.count * dtype_size(op.type)));
  }
  template <class T>
  static long long bytes(std::size_t n) {
    return static_cast<long long>(n * sizeof(T));
  }
  C inner_;
  std::shared_ptr<traffic> books_;
};

}  // namespace strata::comm
