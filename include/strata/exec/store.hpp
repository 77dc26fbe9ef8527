#pragma once
// The parameter store of one device: this stage's parameter shards, their gradients
// and optimizer state, in two flat groups laid out by the lowering (group 0 reduced
// over the data-parallel group, group 1 over the part's devices and the data group),
// and what the layers read.
//
// The update runs over segments: contiguous ranges of a group whose tensors share the
// attributes the update needs (decayed or not). Without ZeRO the segments cover the group
// and the optimizer state mirrors it; with Zero<1> each device's segments are the chunks of
// the gradient buckets it owns (exec/zero.hpp) and its optimizer state holds only those.
// ApplyGroups<N> runs the segments in N groups of about equal size.
//
// What layers read: the masters (float/double), compute-type copies made after every
// update (mixed precision), or — Offload<...> or CastWeightsPerUse — a staging buffer that
// holds the weights of one TaskGraph at a time (two slots: the TaskGraph running and the
// one before), filled from the masters right before the TaskGraph's layers run. Offloaded
// masters (and state) live in the backend's host memory; the update brings one group at a
// time to the device.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <variant>
#include <vector>

#include "strata/core/precision.hpp"
#include "strata/exec/init.hpp"
#include "strata/exec/optimizer.hpp"
#include "strata/exec/zero.hpp"
#include "strata/plan/lower.hpp"

namespace strata::exec {

template <class P, class Backend, class T>
class param_store {
  using L = lower::lowered<P>;
  using M = master_t<T>;
  static constexpr bool mixed = is_mixed_v<T>;
  static constexpr bool offloaded = P::offload != offload_level::none;
  static constexpr bool state_offloaded = P::offload == offload_level::weights_and_state;
  static constexpr bool staged = P::staged_weights;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  static constexpr std::size_t uz(long long v) { return static_cast<std::size_t>(v); }
  template <class X>
  using device_buf = typename Backend::template buffer<X>;
  template <class X>
  using host_buf = typename Backend::template host_buffer<X>;
  using master_buf = std::conditional_t<offloaded, host_buf<M>, device_buf<M>>;
  using state_buf = std::conditional_t<state_offloaded, host_buf<M>, device_buf<M>>;
  template <bool Host>
  static auto make(std::size_t n) {
    if constexpr (Host) return Backend::template allocate_host<M>(n);
    else return Backend::template allocate<M>(n);
  }

 public:
  using master_type = M;
  param_store(typename Backend::queue& q, rank_coord me, std::uint64_t seed) : q_(q), stage_(me.stage), me_(me) {
    for (int g = 0; g < 2; ++g) {
      const std::size_t n = static_cast<std::size_t>(elems(g) > 0 ? elems(g) : 1);
      params_[idx(g)] = make<offloaded>(n);
      grads_[idx(g)] = Backend::template allocate<M>(n);
      if constexpr (mixed && !staged) work_[idx(g)] = Backend::template allocate<T>(n);
    }
    if constexpr (staged) lay_out_staging();
    partition({1, 1}, {0, 0});
    // Values from the logical element index: the same model whatever the sharding.
    std::vector<M> host;
    for (int i = 0; i < P::num_layers; ++i) {
      if (!owns(i)) continue;
      const layer_plan& lp = P::layer_plans[idx(i)];
      for (int k = 0; k < lp.desc.num_params; ++k) {
        const param_t& prm = lp.desc.params[idx(k)];
        const shape_t local = lp.local_params[idx(k)];
        host.resize(uz(place(i, k).size));
        for (std::size_t e = 0; e < host.size(); ++e)
          host[e] = static_cast<M>(initial_value(lp.desc, i, k, logical_index(prm.shape, local, me.index, e), seed));
        set_master(i, k, host.data());
      }
    }
    refresh_copies();
  }

  static constexpr const lower::tensor_place& place(int layer, int k) { return L::tables.params[idx(layer)][idx(k)]; }
  bool owns(int layer) const { return P::stage_of_part(P::layer_plans[idx(layer)].part) == stage_; }
  long long elems(int g) const { return L::tables.group_elems[idx(stage_)][idx(g)]; }

  // Splits the update (and the optimizer state) over the devices of each group's
  // reduction: `size[g]` devices, this one at `rank[g]` (1 and 0: no partition). Zeroes
  // the optimizer state; called once, before the first step.
  void partition(std::array<int, 2> size, std::array<int, 2> rank) {
    size_ = size;
    rank_ = rank;
    long long total = 0;
    for (int g = 0; g < 2; ++g) {
      segs_[idx(g)] = zero::segments<P>(stage_, g, me_, size[idx(g)], rank[idx(g)]);
      long long state = 0;
      for (const zero::segment& s : segs_[idx(g)]) state = std::max(state, s.state + s.count);
      state_elems_[idx(g)] = state;
      total += state;
      const std::size_t n = uz(std::max(state, 1LL));
      m_[idx(g)] = make<state_offloaded>(n);
      v_[idx(g)] = make<state_offloaded>(n);
      const std::vector<M> zeros(n, M(0));
      write(m_[idx(g)].data(), zeros.data(), n, state_offloaded);
      write(v_[idx(g)].data(), zeros.data(), n, state_offloaded);
    }
    // ApplyGroups: [first, last) element of the update, per group of about total / N
    const long long per = (total + P::apply_groups - 1) / P::apply_groups;
    if constexpr (offloaded) {
      tmp_p_ = Backend::template allocate<M>(uz(std::max(per, 1LL)));
      if constexpr (state_offloaded) {
        tmp_m_ = Backend::template allocate<M>(uz(std::max(per, 1LL)));
        tmp_v_ = Backend::template allocate<M>(uz(std::max(per, 1LL)));
      }
    }
    apply_per_ = std::max(per, 1LL);
  }
  const std::vector<zero::segment>& segments(int g) const { return segs_[idx(g)]; }
  int partition_size(int g) const { return size_[idx(g)]; }
  int partition_rank(int g) const { return rank_[idx(g)]; }
  // Optimizer state elements this device keeps per group (adam: two such arrays).
  long long state_elems(int g) const { return state_elems_[idx(g)]; }

  // What layers read: backend memory, valid until the next update (or, staged, until
  // another TaskGraph's weights are read: the executor asks per layer call).
  const T* weight(int layer, int k) {
    const lower::tensor_place& t = place(layer, k);
    if constexpr (staged) return stage_taskgraph(P::layer_plans[idx(layer)].taskgraph) + stage_off_[idx(layer)][idx(k)];
    else if constexpr (mixed) return work_[idx(t.group)].data() + t.offset;
    else return params_[idx(t.group)].data() + t.offset;
  }
  M* grad(int layer, int k) {
    const lower::tensor_place& t = place(layer, k);
    return grads_[idx(t.group)].data() + t.offset;
  }
  M* grads(int g) { return grads_[idx(g)].data(); }

  // Master values of one local tensor to and from host memory (its local size); call
  // refresh() after the last set_master.
  void read_master(int layer, int k, M* host) {
    const lower::tensor_place& t = place(layer, k);
    read(params_[idx(t.group)].data() + t.offset, host, uz(t.size), offloaded);
  }
  void set_master(int layer, int k, const M* host) {
    const lower::tensor_place& t = place(layer, k);
    write(params_[idx(t.group)].data() + t.offset, host, uz(t.size), offloaded);
  }
  // One moment of group g (which = 0: first moment or SGD's velocity, 1: second), in the
  // segments' state layout, to and from host memory.
  void read_state(int which, int g, M* host) {
    read((which == 0 ? m_ : v_)[idx(g)].data(), host, uz(state_elems(g)), state_offloaded);
  }
  void write_state(int which, int g, const M* host) {
    write((which == 0 ? m_ : v_)[idx(g)].data(), host, uz(state_elems(g)), state_offloaded);
  }
  void refresh() { refresh_copies(); }

  void zero_grads() {
    for (int g = 0; g < 2; ++g) fill(q_, grads_[idx(g)].size(), M(0), grads_[idx(g)].data());
  }

  // This device's share of Σ g² over the model: every gradient element counted on
  // exactly one device of the world (the segments say which), after the reduction.
  double grad_square_sum() {
    double s = 0;
    for (int g = 0; g < 2; ++g)
      for (const zero::segment& sg : segs_[idx(g)])
        if (sg.counts) s += sum_squares(q_, uz(sg.count), grads_[idx(g)].data() + sg.offset);
    return s;
  }
  // Whether every gradient this device updates is finite (after the reduction).
  bool grads_finite() {
    for (int g = 0; g < 2; ++g)
      for (const zero::segment& sg : segs_[idx(g)])
        if (!all_finite(q_, uz(sg.count), grads_[idx(g)].data() + sg.offset)) return false;
    return true;
  }

  // One optimizer update of this device's segments (`update` counts updates from 1):
  // gradients times grad_scale (clipping, loss scaling), the learning rate times lr_factor,
  // weight decay where `decay` says; ApplyGroups' groups one after the other. The
  // compute-type copies are refreshed by refresh() (after a ZeRO all-gather).
  void apply(const optimizer& opt, long long update, double lr_factor, decay_on decay, double grad_scale) {
    long long done = 0;  // elements of the update so far: the group boundary is a multiple of apply_per_
    long long group_used = 0;
    for (int g = 0; g < 2; ++g)
      for (const zero::segment& s : segs_[idx(g)])
        for (long long a = 0; a < s.count;) {
          const long long n = std::min(s.count - a, apply_per_ - done % apply_per_);
          if (done % apply_per_ == 0) group_used = 0;  // a new group: the device copies start over
          update_range(opt, update, lr_factor, decay, grad_scale, g, s, a, n, group_used);
          group_used += n, done += n, a += n;
        }
  }

  // ZeRO's all-gather of bucket chunks into the masters: gather(send, recv, count) runs
  // the collective on backend memory (and returns once it completed, when the masters
  // are offloaded: they go through a device buffer).
  template <class Gather>
  void gather_chunks(int g, long long offset, long long q, int R, int r, Gather&& gather) {
    M* p = params_[idx(g)].data() + offset;
    if constexpr (!offloaded) {
      gather(p + uz(r * q), p, uz(q));
    } else {
      if (tmp_bucket_.size() < uz(R * q)) tmp_bucket_ = Backend::template allocate<M>(uz(R * q));
      Backend::synchronize(q_);  // the update's download of this chunk
      Backend::upload(q_, p + uz(r * q), uz(q), tmp_bucket_.data() + uz(r * q));
      Backend::synchronize(q_);
      gather(tmp_bucket_.data() + uz(r * q), tmp_bucket_.data(), uz(q));
      Backend::download(q_, tmp_bucket_.data(), uz(R * q), p);
      Backend::synchronize(q_);
    }
  }

 private:
  // Host memory of this backend's host_buffer, or backend memory.
  void read(const M* src, M* host, std::size_t n, bool in_host) {
    if (n == 0) return;
    if (in_host) {
      Backend::synchronize(q_);  // an update's download into it may be in flight
      std::memcpy(host, src, n * sizeof(M));
    } else {
      Backend::download(q_, src, n, host);
      Backend::synchronize(q_);
    }
  }
  void write(M* dst, const M* host, std::size_t n, bool in_host) {
    if (n == 0) return;
    Backend::synchronize(q_);  // kernels or copies may still read dst (or use host)
    if (in_host) std::memcpy(dst, host, n * sizeof(M));
    else {
      Backend::upload(q_, host, n, dst);
      Backend::synchronize(q_);
    }
  }

  void update_range(const optimizer& opt, long long update, double lr_factor, decay_on decay, double grad_scale, int g,
                    const zero::segment& s, long long a, long long n, long long at) {
    M* p = params_[idx(g)].data() + s.offset + a;
    M* gr = grads_[idx(g)].data() + s.offset + a;
    M* m = m_[idx(g)].data() + s.state + a;
    M* v = v_[idx(g)].data() + s.state + a;
    // offloaded: this range's masters (and state) on the device for the update, then back
    M* dp = p;
    M* dm = m;
    M* dv = v;
    if constexpr (offloaded) {
      dp = tmp_p_.data() + at;
      Backend::upload(q_, p, uz(n), dp);
      if constexpr (state_offloaded) {
        dm = tmp_m_.data() + at, dv = tmp_v_.data() + at;
        Backend::upload(q_, m, uz(n), dm);
        Backend::upload(q_, v, uz(n), dv);
      }
    }
    if (grad_scale != 1.0) scale(q_, uz(n), grad_scale, gr);
    const bool decays = decay == decay_on::all || s.matrix;
    std::visit(
        [&](const auto& o) {
          using O = std::decay_t<decltype(o)>;
          const double wd = decays ? o.weight_decay : 0.0;
          if constexpr (std::is_same_v<O, SGD>)
            sgd_momentum_step(q_, uz(n), o.lr * lr_factor, o.momentum, wd, dp, gr, dm);
          else
            adam_step(q_, uz(n), o.lr * lr_factor, o.beta1, o.beta2, o.eps, wd, update, dp, gr, dm, dv,
                      std::is_same_v<O, AdamW>);
        },
        opt);
    if constexpr (offloaded) {
      Backend::download(q_, dp, uz(n), p);
      if constexpr (state_offloaded) {
        Backend::download(q_, dm, uz(n), m);
        Backend::download(q_, dv, uz(n), v);
      }
    }
  }

  // Each TaskGraph's tensors laid out one after the other in a staging slot.
  void lay_out_staging() {
    std::vector<long long> size(idx(P::num_taskgraphs), 0);
    long long most = 1;
    for (int i = 0; i < P::num_layers; ++i) {
      if (!owns(i)) continue;
      const int tg = P::layer_plans[idx(i)].taskgraph;
      for (int k = 0; k < P::layer_plans[idx(i)].desc.num_params; ++k) {
        stage_off_[idx(i)][idx(k)] = size[idx(tg)];
        size[idx(tg)] += place(i, k).size;
      }
      most = std::max(most, size[idx(tg)]);
    }
    for (auto& s : slots_) s = Backend::template allocate<T>(uz(most));
    if constexpr (offloaded && mixed) stage_masters_ = Backend::template allocate<M>(uz(most));
  }

  // The weights of TaskGraph tg in compute type, in one of the two slots.
  const T* stage_taskgraph(int tg) {
    for (int s = 0; s < 2; ++s)
      if (slot_tg_[idx(s)] == tg) return slots_[idx(s)].data();
    const int s = victim_;
    victim_ ^= 1;
    slot_tg_[idx(s)] = tg;
    T* dst = slots_[idx(s)].data();
    for (int i = 0; i < P::num_layers; ++i) {
      if (!owns(i) || P::layer_plans[idx(i)].taskgraph != tg) continue;
      for (int k = 0; k < P::layer_plans[idx(i)].desc.num_params; ++k) {
        const lower::tensor_place& t = place(i, k);
        const M* src = params_[idx(t.group)].data() + t.offset;
        T* out = dst + stage_off_[idx(i)][idx(k)];
        if constexpr (offloaded && mixed) {
          M* d = stage_masters_.data() + stage_off_[idx(i)][idx(k)];
          Backend::upload(q_, src, uz(t.size), d);
          cast_elements(q_, uz(t.size), static_cast<const M*>(d), out);
        } else if constexpr (offloaded) {
          Backend::upload(q_, src, uz(t.size), out);
        } else {
          cast_elements(q_, uz(t.size), src, out);
        }
      }
    }
    return dst;
  }

  // Mixed precision: the layers read bf16 copies of the masters, rounded to nearest
  // even after every update (Megatron's bf16 recipe). Staged: the slots are stale.
  void refresh_copies() {
    if constexpr (staged) slot_tg_ = {-1, -1};
    else if constexpr (mixed)
      for (int g = 0; g < 2; ++g) cast_elements(q_, params_[idx(g)].size(), params_[idx(g)].data(), work_[idx(g)].data());
  }

  typename Backend::queue& q_;
  int stage_;
  rank_coord me_;
  std::array<master_buf, 2> params_;
  std::array<device_buf<M>, 2> grads_;
  std::array<state_buf, 2> m_, v_;
  std::array<device_buf<T>, 2> work_;
  std::array<std::vector<zero::segment>, 2> segs_;
  std::array<long long, 2> state_elems_{};
  std::array<int, 2> size_{1, 1}, rank_{0, 0};
  long long apply_per_ = 1;
  // offload: one update group's masters and state on the device; a ZeRO bucket
  device_buf<M> tmp_p_, tmp_m_, tmp_v_, tmp_bucket_;
  // staging: two slots of one TaskGraph's weights; offloaded mixed masters on their way
  std::array<device_buf<T>, 2> slots_;
  device_buf<M> stage_masters_;
  std::array<int, 2> slot_tg_{-1, -1};
  int victim_ = 0;
  std::array<std::array<long long, max_layer_params>, idx(P::num_layers)> stage_off_{};
};

}  // namespace strata::exec
