#pragma once
// The gradient collectives of the device program: a bucket all-reduced, or (ZeRO) its
// chunks reduce-scattered in place — device r's sum lands at chunk r — and its short
// tail all-reduced (exec/zero.hpp); with HalfGradientReduce<S> in fp16 (divided by S,
// exact, then widened and multiplied back where this device needs the sum); Zero<2/3>
// then add the chunk and the tail into this device's gradient shard. Zero<1/2>'s
// all-gather of updated chunks, Zero<3>'s of a TaskGraph's weights. Communicators that
// run on a stream of their own (NCCL) do all this on a communication queue, overlapping
// the backward of earlier layers; the compute queue waits for it where the program says
// (finish) and a gradient slot is reopened only after its reductions (slot_ready).
#include <array>
#include <cstddef>
#include <optional>

#include "strata/core/communicator.hpp"
#include "strata/core/f16.hpp"
#include "strata/exec/groups.hpp"
#include "strata/exec/zero.hpp"
#include "strata/plan/lower.hpp"

namespace strata::exec {

template <class P, class Backend, class Comm, class M>
class gradient_reductions {
  using L = lower::lowered<P>;
  using queue = typename Backend::queue;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  static constexpr std::size_t uz(long long v) { return static_cast<std::size_t>(v); }

 public:
  // Communicators that can run on their own stream overlap reductions with compute.
  static constexpr bool overlapped = requires(Comm& c, queue& q, typename Backend::event& e) {
    c.set_stream(q.stream());
    c.wait_for(q.stream());
    c.record(e.native());
  };

  gradient_reductions(queue& q, device_groups<P, Comm>& groups, int stage) : q_(q), groups_(groups) {
    if constexpr (overlapped) {
      comm_q_.emplace();
      done_ = typename Backend::event(false);
      for (auto& e : slot_done_) e = typename Backend::event(false);
      groups_.each_reduction_group([&](Comm& c) { c.set_stream(comm_q_->stream()); });
    }
    if (L::params.half_scale > 0) half_ = Backend::template allocate<f16>(uz(L::largest_bucket(stage) > 0 ? L::largest_bucket(stage) : 1));
  }

  // A program begins: the gradient slots' last reductions are those of the previous
  // program (events of this program's own, so that a captured graph never waits on one
  // recorded outside it).
  void begin_program() {
    if constexpr (overlapped)
      for (auto& e : slot_done_) e = Backend::record(q_);
  }
  // Before gradient slot s is opened again: its previous reductions are done.
  void slot_ready(int s) {
    if constexpr (overlapped) Backend::wait(q_, slot_done_[idx(s)]);
  }

  // Reduces bucket `bk` held at g, as the action says (chunks: ZeRO's layout; half: fp16).
  void reduce(const lower::bucket& bk, M* g, bool chunks, bool half) {
    Comm& c = groups_.axis(bk.axis);
    if (c.size() == 1) return;
    if constexpr (overlapped) c.wait_for(q_.stream());  // the bucket's gradients are written
    if (half) {
      reduce_in_half(c, g, bk.count, chunks);
    } else if (chunks) {
      reduce_chunks(c, g, bk.count);
    } else {
      c.all_reduce(g, uz(bk.count), comm::reduce_op::sum);
    }
  }
  // Zero<2/3>: the reduced chunk and tail of the bucket at g added into `shard`, behind
  // the collectives; gradient slot s's reductions are then done.
  void add_to_shard(const lower::bucket& bk, const M* g, M* shard, int s) {
    Comm& c = groups_.axis(bk.axis);
    const zero::bucket_split sp = zero::split_bucket(bk.count, c.size());
    queue& aq = behind(c);
    axpy(aq, uz(sp.q), 1.0, g + c.rank() * sp.q, shard);
    axpy(aq, uz(sp.tail), 1.0, g + c.size() * sp.q, shard + sp.q);
    if constexpr (overlapped) c.record(slot_done_[idx(s)].native());
  }
  // Zero<1/2>: bucket bk's updated chunks all-gathered into the masters through `store`.
  template <class Store>
  void gather_updated(const lower::bucket& bk, Store& store) {
    Comm& c = groups_.axis(bk.axis);
    const zero::bucket_split sp = zero::split_bucket(bk.count, c.size());
    if (c.size() == 1 || sp.q == 0) return;
    if constexpr (overlapped) c.wait_for(q_.stream());  // the update is written
    store.gather_chunks(bk.group, bk.offset, sp.q, c.size(), c.rank(), [&](const M* send, M* recv, std::size_t n) {
      c.all_gather(send, recv, n);
      finish();  // the store reads the result on its queue
    });
  }
  // Zero<3>: n elements all-gathered over parameter group g's reduction devices, complete
  // on the compute queue when it returns.
  void gather_group(int g, const M* send, M* recv, std::size_t n) {
    Comm& c = groups_.group(g);
    if constexpr (overlapped) c.wait_for(q_.stream());  // this device's chunk is in place
    c.all_gather(send, recv, n);
    finish();
  }
  // Later work on the compute queue waits for every reduction issued so far.
  void finish() {
    if constexpr (overlapped)
      groups_.each_reduction_group([&](Comm& c) {
        if (c.size() == 1) return;
        c.record(done_.native());
        Backend::wait(q_, done_);
      });
  }

 private:
  template <class X>
  void reduce_chunks(Comm& c, X* g, long long count) {
    const zero::bucket_split sp = zero::split_bucket(count, c.size());
    if (sp.q > 0) c.reduce_scatter(g, g + uz(c.rank() * sp.q), uz(sp.q), comm::reduce_op::sum);
    if (sp.tail > 0) c.all_reduce(g + uz(c.size() * sp.q), uz(sp.tail), comm::reduce_op::sum);
  }
  // Where work behind a group's collectives runs: the communication queue when there is
  // one and the group communicates (the fp16 path has already waited for it).
  queue& behind(Comm& c) {
    if constexpr (overlapped) {
      if (c.size() > 1 && L::params.half_scale == 0) return *comm_q_;
    }
    (void)c;
    return q_;
  }
  void reduce_in_half(Comm& c, M* g, long long count, bool chunks) {
    const std::size_t n = uz(count);
    const double S = L::params.half_scale;
    scale(q_, n, 1.0 / S, g);
    cast_elements(q_, n, static_cast<const M*>(g), half_.data());
    if constexpr (overlapped) c.wait_for(q_.stream());
    std::size_t lo = 0, len = n;  // what comes back: the whole bucket, or this device's chunk and the tail
    if (chunks) {
      const zero::bucket_split sp = zero::split_bucket(count, c.size());
      reduce_chunks(c, half_.data(), count);
      finish();
      lo = uz(c.rank() * sp.q), len = uz(sp.q);
      widen(half_.data() + c.size() * sp.q, uz(sp.tail), g + c.size() * sp.q, S);
    } else {
      c.all_reduce(half_.data(), n, comm::reduce_op::sum);
      finish();
    }
    widen(half_.data() + lo, len, g + lo, S);
  }
  void widen(const f16* h, std::size_t n, M* g, double S) {
    if (n == 0) return;
    cast_elements(q_, n, h, g);
    scale(q_, n, S, g);
  }

  queue& q_;
  device_groups<P, Comm>& groups_;
  std::optional<queue> comm_q_;
  typename Backend::event done_{};
  std::array<typename Backend::event, 2> slot_done_{};
  typename Backend::template buffer<f16> half_;
};

}  // namespace strata::exec
