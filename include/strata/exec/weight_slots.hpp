#pragma once
// Staged weights (Offload, CastWeightsPerUse, Zero<3>): layers read their TaskGraph's
// weights, in the compute type, from one of two slots. The device program says when a
// slot is filled and from what (plan/lower/device_program.hpp): a fill from the masters
// runs on a copy queue, after the compute work enqueued so far (the last reads of the
// slot), so it overlaps the layers in between, and the compute queue waits for it at the
// first read; a Zero<3> gather assembles the masters on the compute queue.
#include <array>
#include <cstddef>
#include <optional>
#include <type_traits>

#include "strata/core/precision.hpp"
#include "strata/exec/taskgraph_layout.hpp"
#include "strata/plan/lower.hpp"

namespace strata::exec {

template <class P, class Backend, class T>
class weight_slots {
  using M = master_t<T>;
  using L = lower::lowered<P>;
  using queue = typename Backend::queue;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  static constexpr std::size_t uz(long long v) { return static_cast<std::size_t>(v); }
  static constexpr bool mixed = is_mixed_v<T>;
  // the masters reach the device before the cast: offloaded, or gathered from shards
  static constexpr bool via_masters = mixed && (L::params.masters_on_host || L::params.masters_sharded);

 public:
  weight_slots(queue& q, const taskgraph_layout<P>& layout) : q_(q), layout_(layout) {
    if constexpr (L::params.staged) {
      for (auto& s : slots_) s = Backend::template allocate<T>(uz(layout_.largest()));
      if constexpr (via_masters) masters_ = Backend::template allocate<M>(uz(layout_.largest()));
      if constexpr (!L::params.masters_sharded) {  // fills from the masters go on a copy queue
        if constexpr (std::is_constructible_v<queue, unsigned>) copy_q_.emplace(q_.threads());
        else copy_q_.emplace();
      }
    }
  }

  const T* slot(int s) const { return slots_[idx(s)].data(); }
  // Where tensor k of layer i lies in a slot.
  long long offset(int layer, int k) const { return layout_.offset(layer, k); }

  // TaskGraph tg's masters into slot s, in the compute type, on the copy queue once the
  // compute queue's work so far is done; `master(i, k)` is tensor k of layer i's masters
  // (host memory when offloaded).
  template <class Master>
  void fill(int tg, int s, Master&& master) {
    queue& cq = *copy_q_;
    Backend::wait(cq, Backend::record(q_));
    T* dst = slots_[idx(s)].data();
    for (const auto& [i, k] : layout_.tensors(tg)) {
      const lower::tensor_place& t = L::tables.params[idx(i)][idx(k)];
      const M* src = master(i, k);
      T* out = dst + layout_.offset(i, k);
      if constexpr (L::params.masters_on_host && mixed) {
        M* d = masters_.data() + layout_.offset(i, k);
        Backend::upload(cq, src, uz(t.size), d);
        cast_elements(cq, uz(t.size), static_cast<const M*>(d), out);
      } else if constexpr (L::params.masters_on_host) {
        Backend::upload(cq, src, uz(t.size), out);
      } else {
        cast_elements(cq, uz(t.size), src, out);
      }
    }
    ready_[idx(s)] = Backend::record(cq);
  }
  // The compute queue waits for slot s's fill.
  void wait(int s) { Backend::wait(q_, ready_[idx(s)]); }

  // Zero<3>: TaskGraph tg assembled in master precision by `assemble(buffer)` (on the
  // compute queue), then cast into slot s for mixed precision.
  template <class Assemble>
  void gather(int tg, int s, Assemble&& assemble) {
    T* dst = slots_[idx(s)].data();
    if constexpr (mixed) {
      assemble(masters_.data());
      cast_elements(q_, uz(layout_.size(tg)), static_cast<const M*>(masters_.data()), dst);
    } else {
      assemble(dst);
    }
  }

 private:
  queue& q_;
  const taskgraph_layout<P>& layout_;
  std::array<typename Backend::template buffer<T>, 2> slots_;
  typename Backend::template buffer<M> masters_;  // one slot of masters on their way
  std::optional<queue> copy_q_;
  std::array<typename Backend::event, 2> ready_{};
};

}  // namespace strata::exec
