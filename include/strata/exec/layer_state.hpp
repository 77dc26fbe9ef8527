#pragma once
// The statistics layers keep across steps (buffer_needs::state_stats, BatchNorm2d's running
// mean and variance) and the sums a training step adds for them (state_sums): one buffer of
// statistics per device, laid out by the lowering (layer_call::state_off: [kept | sums] per
// layer). Kept values start at the layer's state_init; at the step's end the device program
// all-reduces each layer's sums over the data-parallel replicas (reduce_state) and the layer
// folds them into its kept values (fold_state), so every replica keeps the same statistics,
// those of one device.
#include <cstddef>
#include <span>
#include <vector>

#include "strata/core/communicator.hpp"
#include "strata/plan/lower.hpp"

namespace strata::exec {

template <class P, class Backend, class S>
class layer_states {
  using L = lower::lowered<P>;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  static constexpr std::size_t uz(long long v) { return static_cast<std::size_t>(v); }

 public:
  // init(layer, k): the kept statistic k of `layer`'s initial value
  template <class Init>
  layer_states(typename Backend::queue& q, int stage, Init&& init)
      : stage_(stage), buf_(Backend::template allocate<S>(uz(L::tables.work[idx(stage)].state))) {
    std::vector<S> host(uz(L::tables.work[idx(stage)].state), S(0));
    for (int i = 0; i < P::num_layers; ++i) {
      const lower::layer_call& c = L::tables.calls[idx(i)];
      if (c.state_off < 0 || L::tables.parts[idx(P::layer_plans[idx(i)].part)].stage != stage) continue;
      for (long long k = 0; k < c.needs.state_stats; ++k) host[uz(c.state_off + k)] = S(init(i, k));
    }
    if (!host.empty()) Backend::upload(q, host.data(), host.size(), buf_.data());
  }

  // Layer i's [kept | sums], or null when it keeps none on this device (none, or on another
  // stage: state_off is an offset into its own stage's buffer).
  S* of(int i) {
    const long long off = L::tables.calls[idx(i)].state_off;
    const bool here = L::tables.parts[idx(P::layer_plans[idx(i)].part)].stage == stage_;
    return off < 0 || !here ? nullptr : buf_.data() + off;
  }
  // Layer i's sums, added up over the replicas (the data group).
  template <class Comm>
  void reduce(Comm& data, int i) {
    const lower::layer_call& c = L::tables.calls[idx(i)];
    if (data.size() == 1) return;
    data.all_reduce(of(i) + c.needs.state_stats, uz(c.needs.state_sums), comm::reduce_op::sum);
  }
  // Layer i's kept statistics, for checkpoints and tests (backend memory → host).
  std::vector<double> kept(typename Backend::queue& q, int i) {
    const lower::layer_call& c = L::tables.calls[idx(i)];
    std::vector<S> h(uz(c.needs.state_stats));
    if (!h.empty()) {
      Backend::download(q, of(i), h.size(), h.data());
      Backend::synchronize(q);
    }
    return std::vector<double>(h.begin(), h.end());
  }
  // Layer i's kept statistics from the host; its sums start again from zero (a load).
  void set_kept(typename Backend::queue& q, int i, std::span<const double> v) {
    const lower::layer_call& c = L::tables.calls[idx(i)];
    std::vector<S> h(v.begin(), v.end());
    h.resize(uz(c.needs.state_stats + c.needs.state_sums), S(0));
    if (!h.empty()) {
      Backend::upload(q, h.data(), h.size(), of(i));
      Backend::synchronize(q);
    }
  }

 private:
  int stage_;
  typename Backend::template buffer<S> buf_;
};

}  // namespace strata::exec
