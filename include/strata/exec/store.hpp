#pragma once
// The parameter store of one device: this stage's parameter shards, their gradients
// and optimizer state, in two flat groups laid out by the lowering (group 0 reduced
// over the data-parallel group, group 1 over the part's devices and the data group),
// plus the compute-type copies mixed precision reads. The future home of ZeRO shards
// and checkpoints.
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <variant>
#include <vector>

#include "strata/core/precision.hpp"
#include "strata/exec/init.hpp"
#include "strata/exec/optimizer.hpp"
#include "strata/plan/lower.hpp"

namespace strata::exec {

template <class P, class Backend, class T>
class param_store {
  using L = lower::lowered<P>;
  using M = master_t<T>;
  static constexpr bool mixed = is_mixed_v<T>;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }

 public:
  using master_type = M;
  param_store(typename Backend::queue& q, int stage, int index, std::uint64_t seed) : q_(q), stage_(stage) {
    for (int g = 0; g < 2; ++g) {
      const std::size_t n = static_cast<std::size_t>(elems(g) > 0 ? elems(g) : 1);
      params_[idx(g)] = Backend::template allocate<M>(n);
      grads_[idx(g)] = Backend::template allocate<M>(n);
      m_[idx(g)] = Backend::template allocate<M>(n);
      v_[idx(g)] = Backend::template allocate<M>(n);
      fill(q_, n, M(0), m_[idx(g)].data());
      fill(q_, n, M(0), v_[idx(g)].data());
      if constexpr (mixed) work_[idx(g)] = Backend::template allocate<T>(n);
    }
    // Values from the logical element index: the same model whatever the sharding.
    std::vector<M> host;
    for (int i = 0; i < P::num_layers; ++i) {
      if (!owns(i)) continue;
      const layer_plan& lp = P::layer_plans[idx(i)];
      for (int k = 0; k < lp.desc.num_params; ++k) {
        const lower::tensor_place& t = place(i, k);
        const param_t& prm = lp.desc.params[idx(k)];
        const shape_t local = lp.local_params[idx(k)];
        host.resize(static_cast<std::size_t>(t.size));
        for (std::size_t e = 0; e < host.size(); ++e)
          host[e] = static_cast<M>(initial_value(lp.desc, i, k, logical_index(prm.shape, local, index, e), seed));
        Backend::upload(q_, host.data(), host.size(), params_[idx(t.group)].data() + t.offset);
        Backend::synchronize(q_);  // `host` is reused for the next tensor
      }
    }
    refresh_copies();
  }

  static constexpr const lower::tensor_place& place(int layer, int k) { return L::tables.params[idx(layer)][idx(k)]; }
  bool owns(int layer) const { return P::stage_of_part(P::layer_plans[idx(layer)].part) == stage_; }
  long long elems(int g) const { return L::tables.group_elems[idx(stage_)][idx(g)]; }

  // What layers read (compute-type copies in mixed precision) and their gradients.
  const T* weight(int layer, int k) const {
    const lower::tensor_place& t = place(layer, k);
    if constexpr (mixed) return work_[idx(t.group)].data() + t.offset;
    else return params_[idx(t.group)].data() + t.offset;
  }
  M* grad(int layer, int k) {
    const lower::tensor_place& t = place(layer, k);
    return grads_[idx(t.group)].data() + t.offset;
  }
  const M* master(int layer, int k) const {
    const lower::tensor_place& t = place(layer, k);
    return params_[idx(t.group)].data() + t.offset;
  }
  M* grads(int g) { return grads_[idx(g)].data(); }

  // Overwrites one local tensor's master values (host memory, the tensor's local size);
  // call refresh() after the last one.
  void set_master(int layer, int k, const M* host) {
    const lower::tensor_place& t = place(layer, k);
    Backend::upload(q_, host, static_cast<std::size_t>(t.size), params_[idx(t.group)].data() + t.offset);
    Backend::synchronize(q_);
  }
  void refresh() { refresh_copies(); }

  void zero_grads() {
    for (int g = 0; g < 2; ++g) fill(q_, grads_[idx(g)].size(), M(0), grads_[idx(g)].data());
  }

  // One optimizer update of every tensor (the step counts updates from 1).
  void apply(const optimizer& opt, long long step) {
    for (int g = 0; g < 2; ++g) {
      const std::size_t n = static_cast<std::size_t>(elems(g));
      if (n == 0) continue;
      M* p = params_[idx(g)].data();
      M* gr = grads_[idx(g)].data();
      M* m = m_[idx(g)].data();
      M* v = v_[idx(g)].data();
      std::visit(
          [&](const auto& o) {
            using O = std::decay_t<decltype(o)>;
            if constexpr (std::is_same_v<O, SGD>)
              sgd_momentum_step(q_, n, o.lr, o.momentum, o.weight_decay, p, gr, m);
            else
              adam_step(q_, n, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, step, p, gr, m, v,
                        std::is_same_v<O, AdamW>);
          },
          opt);
    }
    refresh_copies();
  }

 private:
  // Mixed precision: the layers read bf16 copies of the masters, rounded to nearest
  // even after every update (Megatron's bf16 recipe).
  void refresh_copies() {
    if constexpr (mixed)
      for (int g = 0; g < 2; ++g) cast_elements(q_, params_[idx(g)].size(), params_[idx(g)].data(), work_[idx(g)].data());
  }

  typename Backend::queue& q_;
  int stage_;
  std::array<typename Backend::template buffer<M>, 2> params_, grads_, m_, v_;
  std::array<typename Backend::template buffer<T>, 2> work_;
};

}  // namespace strata::exec
