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
// Zero<2> keeps the gradients in that layout too: a TaskGraph's backward writes into one of
// two gradient slots, whose buckets are reduce-scattered and added to this device's shard
// after every backward. Zero<3> also keeps the masters in that layout: a TaskGraph's
// weights are all-gathered into a staging slot before its layers run (and a whole copy is
// assembled only when asked for: checkpoints, gather_parameters).
// ApplyGroups<N> runs the segments in N groups of about equal size.
//
// What layers read: the masters (float/double), compute-type copies made after every
// update (mixed precision), or — Offload<...> or CastWeightsPerUse — a staging buffer that
// holds the weights of one TaskGraph at a time (two slots: the TaskGraph running and the
// one before), filled from the masters before the TaskGraph's layers run: in a training
// step on a copy queue, as early as the slot is free (exec/staging.hpp), so that the copy
// overlaps the layers in between. Offloaded masters (and state) live in the backend's host
// memory; the update brings one group at a time to the device.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "strata/core/precision.hpp"
#include "strata/exec/init.hpp"
#include "strata/exec/optimizer.hpp"
#include "strata/exec/staging.hpp"
#include "strata/exec/zero.hpp"
#include "strata/plan/lower.hpp"
#include "strata/plan/memory.hpp"

namespace strata::exec {

template <class P, class Backend, class T>
class param_store {
  using L = lower::lowered<P>;
  using M = master_t<T>;
  static constexpr bool mixed = is_mixed_v<T>;
  static constexpr bool offloaded = P::offload != offload_level::none;
  static constexpr bool state_offloaded = P::offload == offload_level::weights_and_state;
  static constexpr bool staged = P::staged_weights;
  static constexpr bool grads_sharded = P::zero >= 2;   // gradients in the segments' layout
  static constexpr bool params_sharded = P::zero >= 3;  // masters too
  static constexpr bool slotted = staged || grads_sharded;  // per-TaskGraph layout needed
  static constexpr bool prefetched = staged && !params_sharded;  // Zero<3> gathers on demand
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
  param_store(typename Backend::queue& q, rank_coord me, std::uint64_t seed)
      : q_(q), stage_(me.stage), me_(me), seed_(seed) {
    for (int g = 0; g < 2; ++g) {
      const std::size_t n = static_cast<std::size_t>(elems(g) > 0 ? elems(g) : 1);
      if constexpr (!params_sharded) params_[idx(g)] = make<offloaded>(n);
      if constexpr (!grads_sharded) grads_[idx(g)] = Backend::template allocate<M>(n);
      if constexpr (mixed && !staged) work_[idx(g)] = Backend::template allocate<T>(n);
    }
    if constexpr (slotted) lay_out_slots();
    if constexpr (prefetched) {
      uses_ = staging::training_uses<P>(stage_);
      schedule_ = staging::plan(uses_);
      if constexpr (std::is_constructible_v<typename Backend::queue, unsigned>) copy_q_.emplace(q_.threads());
      else copy_q_.emplace();
    }
    partition({1, 1}, {0, 0});
    if constexpr (!params_sharded) initialize();
  }

  static constexpr const lower::tensor_place& place(int layer, int k) { return L::tables.params[idx(layer)][idx(k)]; }
  bool owns(int layer) const { return P::stage_of_part(P::layer_plans[idx(layer)].part) == stage_; }
  long long elems(int g) const { return L::tables.group_elems[idx(stage_)][idx(g)]; }

  // Splits the update (and the optimizer state) over the devices of each group's
  // reduction: `size[g]` devices, this one at `rank[g]` (1 and 0: no partition). Zeroes
  // the optimizer state; called once, before the first step.
  // Under Zero<3> it also lays the masters out anew, with their initial values.
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
      if constexpr (params_sharded) params_[idx(g)] = make<offloaded>(n);
      if constexpr (grads_sharded) grads_[idx(g)] = Backend::template allocate<M>(n);
    }
    // where this device's chunk of each bucket (and the tail after it) lives in the
    // segments' layout: the order zero::segments walks them
    std::array<long long, 2> at{};
    for (int b = 0; b < L::tables.num_buckets[idx(stage_)]; ++b) {
      const lower::bucket& bk = L::tables.buckets[idx(stage_)][idx(b)];
      bucket_state_[idx(b)] = at[idx(bk.group)];
      at[idx(bk.group)] += bk.count / size[idx(bk.group)] + bk.count % size[idx(bk.group)];
    }
    if constexpr (params_sharded) initialize();
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

  // Staged: a layer call with parameters begins; its weights are in place on this queue
  // when it returns (weight() then reads them). In a training step it follows the
  // schedule: issues the fills due before this use, and waits for its slot's.
  void use(int layer) {
    if constexpr (staged) {
      const int tg = P::layer_plans[idx(layer)].taskgraph;
      if (!in_step_) {
        current_ = stage_taskgraph(tg);
        return;
      }
      const std::size_t j = uz(next_use_++);
      if (j >= uses_.size() || uses_[j] != tg)
        throw std::logic_error("strata: staged weights: use " + std::to_string(j) + " of the step is TaskGraph " +
                               std::to_string(tg) + ", not the one the lowered program says");
      for (int f : schedule_.issue[j])
        if (f >= 0) fill_ahead(f);
      const int s = schedule_.slot[j];
      Backend::wait(q_, ready_[idx(s)]);
      current_ = slots_[idx(s)].data();
    }
  }
  // What layers read: backend memory, valid until the next update (or, staged, until the
  // next use()).
  const T* weight(int layer, int k) {
    const lower::tensor_place& t = place(layer, k);
    if constexpr (staged) return current_ + slot_off_[idx(layer)][idx(k)];
    else if constexpr (mixed) return work_[idx(t.group)].data() + t.offset;
    else return params_[idx(t.group)].data() + t.offset;
  }
  // Where a layer's backward adds its gradients (Zero<2/3>: its TaskGraph's open slot).
  M* grad(int layer, int k) {
    const lower::tensor_place& t = place(layer, k);
    if constexpr (grads_sharded) {
      const int tg = P::layer_plans[idx(layer)].taskgraph;
      for (int s = 0; s < 2; ++s)
        if (gslot_tg_[idx(s)] == tg) return gslots_[idx(s)].data() + slot_off_[idx(layer)][idx(k)];
      throw std::logic_error("strata: gradients of TaskGraph " + std::to_string(tg) + " written before it was opened");
    } else {
      return grads_[idx(t.group)].data() + t.offset;
    }
  }
  // Zero<2/3>: a TaskGraph's backward begins; its gradients go to the slot not used last,
  // zeroed (`ready(s)` first: work still reading slot s, its buckets' reductions, is done).
  // With one TaskGraph with parameters on the stage there is one slot (nothing to overlap).
  template <class Ready>
  int open_gradients(int tg, Ready&& ready) {
    const int s = gslot_next_;
    gslot_next_ = (gslot_next_ + 1) % gslot_count_;
    ready(s);
    gslot_tg_[idx(s)] = tg;
    if (gslot_tg_[idx(s ^ 1)] == tg) gslot_tg_[idx(s ^ 1)] = -1;  // its previous backward's, reduced
    fill(q_, uz(tg_size_[idx(tg)]), M(0), gslots_[idx(s)].data());
    return s;
  }
  int gradient_slot(int tg) const { return gslot_tg_[0] == tg ? 0 : 1; }
  // A bucket's gradients as the backward wrote them: where they are reduced.
  M* bucket_grads(int b) {
    const lower::bucket& bk = bucket_of(b);
    if constexpr (grads_sharded)
      return gslots_[idx(gradient_slot(bk.taskgraph))].data() + slot_pos(bk.taskgraph, bk.group, bk.offset);
    else return grads_[idx(bk.group)].data() + bk.offset;
  }
  // Zero<2/3>: this device's summed chunk of bucket b (then its tail) in the shard.
  M* shard_grads(int b) { return grads_[idx(bucket_of(b).group)].data() + bucket_state_[idx(b)]; }

  // Master values of one local tensor to and from host memory (its local size); call
  // refresh() after the last set_master. Zero<3> reads the whole copy gather_whole()
  // assembled, and writes the parts of the tensor this device keeps.
  void read_master(int layer, int k, M* host) {
    const lower::tensor_place& t = place(layer, k);
    if constexpr (params_sharded) {
      if (!whole_valid_)
        throw std::logic_error("strata: Zero<3> masters read without gather_whole() since the last change");
      std::copy_n(whole_[idx(t.group)].data() + t.offset, uz(t.size), host);
    } else {
      read(params_[idx(t.group)].data() + t.offset, host, uz(t.size), offloaded);
    }
  }
  void set_master(int layer, int k, const M* host) {
    const lower::tensor_place& t = place(layer, k);
    if constexpr (params_sharded) {
      whole_valid_ = false;
      for (const zero::segment& s : segs_[idx(t.group)]) {
        const long long lo = std::max(s.offset, t.offset), hi = std::min(s.offset + s.count, t.offset + t.size);
        if (lo < hi)
          write(params_[idx(t.group)].data() + s.state + (lo - s.offset), host + (lo - t.offset), uz(hi - lo), offloaded);
      }
    } else {
      write(params_[idx(t.group)].data() + t.offset, host, uz(t.size), offloaded);
    }
  }
  // One array of group g in the segments' layout, to and from host memory: which = 0 the
  // first moment (or SGD's velocity), 1 the second; read_state(2, ...) reads the masters
  // under Zero<3>.
  void read_state(int which, int g, M* host) {
    if (which == 2) {
      if constexpr (params_sharded) read(params_[idx(g)].data(), host, uz(state_elems(g)), offloaded);
      return;
    }
    read((which == 0 ? m_ : v_)[idx(g)].data(), host, uz(state_elems(g)), state_offloaded);
  }
  void write_state(int which, int g, const M* host) {
    write((which == 0 ? m_ : v_)[idx(g)].data(), host, uz(state_elems(g)), state_offloaded);
  }
  // Array `which` of group g in the group's flat layout, whole: every device's segments
  // all-gathered over `c` (the group's reduction devices) and placed by each owner's
  // segments, bit for bit; the bucket tails (which every device holds) from this device,
  // so that replicas whose tails drifted apart assemble different copies. Collective over c.
  template <class Comm>
  std::vector<M> gather_flat(int which, int g, Comm& c) {
    const std::size_t n = uz(elems(g)), st = uz(state_elems(g));
    const int R = size_[idx(g)], me = rank_[idx(g)];
    std::vector<M> flat(n), all(st * uz(R));
    if (n == 0) return flat;
    read_state(which, g, all.data() + uz(me) * st);
    if (R > 1) {  // through backend memory (NCCL needs device buffers)
      auto buf = Backend::template allocate<M>(all.size());
      Backend::upload(q_, all.data() + uz(me) * st, st, buf.data() + uz(me) * st);
      Backend::synchronize(q_);
      c.all_gather(buf.data() + uz(me) * st, buf.data(), st);
      c.synchronize();
      Backend::download(q_, buf.data(), all.size(), all.data());
      Backend::synchronize(q_);
    }
    for (int r = 0; r < R; ++r)
      for (const zero::segment& s : R == 1 ? segs_[idx(g)] : zero::segments<P>(stage_, g, me_, R, r))
        if (!s.tail || r == me) std::copy_n(all.data() + uz(r) * st + uz(s.state), uz(s.count), flat.data() + s.offset);
    return flat;
  }
  // Zero<3>: assembles the whole masters for read_master (collective over both groups'
  // devices; nothing to do otherwise).
  template <class Comm>
  void gather_whole(Comm& group0, Comm& group1) {
    if constexpr (params_sharded) {
      whole_[0] = gather_flat(2, 0, group0);
      whole_[1] = gather_flat(2, 1, group1);
      whole_valid_ = true;
    }
  }
  // Zero<3>: the whole copy is no longer needed (it is a full host copy of the masters).
  void drop_whole() {
    if constexpr (params_sharded) {
      whole_ = {};
      whole_valid_ = false;
    }
  }
  void refresh() { refresh_copies(); }
  // A program begins: the staging slots are filled anew (so every training step stages
  // the same TaskGraphs); a training step follows the schedule, an evaluation stages on
  // demand.
  void begin_program(bool training) {
    if constexpr (staged) {
      slot_tg_ = {-1, -1};
      next_use_ = 0;
      in_step_ = prefetched && training;
    }
  }
  // Zero<3>: how a TaskGraph's weights get here — all_gather(g, send, recv, n) over group
  // g's reduction devices, complete on this queue when it returns.
  using gather_fn = std::function<void(int, const M*, M*, std::size_t)>;
  void set_gather(gather_fn f) { gather_ = std::move(f); }

  void zero_grads() {
    for (int g = 0; g < 2; ++g) fill(q_, grads_[idx(g)].size(), M(0), grads_[idx(g)].data());
    if constexpr (grads_sharded) gslot_tg_ = {-1, -1};
  }

  // This device's share of Σ g² over the model: every gradient element counted on
  // exactly one device of the world (the segments say which), after the reduction.
  double grad_square_sum() {
    double s = 0;
    for (int g = 0; g < 2; ++g)
      for (const zero::segment& sg : segs_[idx(g)])
        if (sg.counts) s += sum_squares(q_, uz(sg.count), grad_of(g, sg));
    return s;
  }
  // Whether every gradient this device updates is finite (after the reduction).
  bool grads_finite() {
    for (int g = 0; g < 2; ++g)
      for (const zero::segment& sg : segs_[idx(g)])
        if (!all_finite(q_, uz(sg.count), grad_of(g, sg))) return false;
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
  const lower::bucket& bucket_of(int b) const { return L::tables.buckets[idx(stage_)][idx(b)]; }
  // A segment's masters and gradients: at its offset in the group, or (partitioned) at
  // its place in the segments' layout.
  M* master_of(int g, const zero::segment& s) { return params_[idx(g)].data() + (params_sharded ? s.state : s.offset); }
  M* grad_of(int g, const zero::segment& s) { return grads_[idx(g)].data() + (grads_sharded ? s.state : s.offset); }
  // Where element `offset` of group g lies in TaskGraph tg's slot.
  long long slot_pos(int tg, int g, long long offset) const {
    return tg_base_[idx(tg)][idx(g)] + (offset - tg_first_[idx(tg)][idx(g)]);
  }

  // Initial values from the logical element index: the same model whatever the sharding.
  void initialize() {
    std::vector<M> host;
    for (int i = 0; i < P::num_layers; ++i) {
      if (!owns(i)) continue;
      const layer_plan& lp = P::layer_plans[idx(i)];
      for (int k = 0; k < lp.desc.num_params; ++k) {
        const param_t& prm = lp.desc.params[idx(k)];
        const shape_t local = lp.local_params[idx(k)];
        host.resize(uz(place(i, k).size));
        for (std::size_t e = 0; e < host.size(); ++e)
          host[e] = static_cast<M>(initial_value(lp.desc, i, k, logical_index(prm.shape, local, P::param_block(i, k, me_.index), e), seed_));
        set_master(i, k, host.data());
      }
    }
    refresh_copies();
  }

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
    M* p = master_of(g, s) + a;
    M* gr = grad_of(g, s) + a;
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

  // Each TaskGraph's tensors in a slot: its range of group 0, then its range of group 1,
  // in the groups' order (a TaskGraph's layers lie together, so each range is contiguous
  // in its group and a bucket of Zero<2/3> is contiguous in the slot).
  void lay_out_slots() {
    tg_tensors_.resize(idx(P::num_taskgraphs));
    tg_size_.assign(idx(P::num_taskgraphs), 0);
    tg_first_.assign(idx(P::num_taskgraphs), {-1, -1});
    tg_base_.assign(idx(P::num_taskgraphs), {0, 0});
    long long most = 1;
    for (int tg = 0; tg < P::num_taskgraphs; ++tg) {
      for (int g = 0; g < 2; ++g) {
        tg_base_[idx(tg)][idx(g)] = tg_size_[idx(tg)];
        for (int i = 0; i < P::num_layers; ++i) {
          if (!owns(i) || P::layer_plans[idx(i)].taskgraph != tg) continue;
          for (int k = 0; k < P::layer_plans[idx(i)].desc.num_params; ++k) {
            const lower::tensor_place& t = place(i, k);
            if (t.group != g) continue;
            if (tg_first_[idx(tg)][idx(g)] < 0) tg_first_[idx(tg)][idx(g)] = t.offset;
            slot_off_[idx(i)][idx(k)] = tg_size_[idx(tg)];
            tg_size_[idx(tg)] += t.size;
            tg_tensors_[idx(tg)].push_back({i, k});
          }
        }
      }
      most = std::max(most, tg_size_[idx(tg)]);
    }
    if constexpr (staged) {
      for (auto& s : slots_) s = Backend::template allocate<T>(uz(most));
      if constexpr (mixed && (offloaded || params_sharded)) stage_masters_ = Backend::template allocate<M>(uz(most));
    }
    if constexpr (grads_sharded) {
      gslot_count_ = strata::detail::gradient_slots<P>(stage_);  // as plan/memory.hpp counts
      for (int s = 0; s < gslot_count_; ++s) gslots_[idx(s)] = Backend::template allocate<M>(uz(most));
    }
  }

  // The weights of TaskGraph tg in compute type, in one of the two slots (on demand).
  const T* stage_taskgraph(int tg) {
    for (int s = 0; s < 2; ++s)
      if (slot_tg_[idx(s)] == tg) return slots_[idx(s)].data();
    const int s = victim_;
    victim_ ^= 1;
    slot_tg_[idx(s)] = tg;
    T* dst = slots_[idx(s)].data();
    if constexpr (params_sharded) gather_taskgraph(tg, dst);
    else fill_slot(q_, tg, dst);
    return dst;
  }
  // The fill that use f needs, on the copy queue once the work so far (the last reads of
  // the slot, and any update of the masters) is done.
  void fill_ahead(int f) {
    const int s = schedule_.slot[uz(f)], tg = uses_[uz(f)];
    Backend::wait(*copy_q_, Backend::record(q_));
    fill_slot(*copy_q_, tg, slots_[idx(s)].data());
    ready_[idx(s)] = Backend::record(*copy_q_);
    slot_tg_[idx(s)] = tg;
  }
  // TaskGraph tg's masters into a slot, in compute type, on queue cq.
  void fill_slot(typename Backend::queue& cq, int tg, T* dst) {
    for (const auto& [i, k] : tg_tensors_[idx(tg)]) {
      const lower::tensor_place& t = place(i, k);
      const M* src = params_[idx(t.group)].data() + t.offset;
      T* out = dst + slot_off_[idx(i)][idx(k)];
      if constexpr (offloaded && mixed) {
        M* d = stage_masters_.data() + slot_off_[idx(i)][idx(k)];
        Backend::upload(cq, src, uz(t.size), d);
        cast_elements(cq, uz(t.size), static_cast<const M*>(d), out);
      } else if constexpr (offloaded) {
        Backend::upload(cq, src, uz(t.size), out);
      } else {
        cast_elements(cq, uz(t.size), src, out);
      }
    }
  }

  // Zero<3>: each bucket of the TaskGraph from every device's chunk (all-gathered) and
  // this device's copy of its tail; in master precision, then cast for mixed precision.
  void gather_taskgraph(int tg, T* dst) {
    M* buf;
    if constexpr (mixed) buf = stage_masters_.data();
    else buf = dst;
    for (int b = 0; b < L::tables.num_buckets[idx(stage_)]; ++b) {
      const lower::bucket& bk = bucket_of(b);
      if (bk.taskgraph != tg) continue;
      const int R = size_[idx(bk.group)], r = rank_[idx(bk.group)];
      const zero::bucket_split sp = zero::split_bucket(bk.count, R);
      M* at = buf + slot_pos(tg, bk.group, bk.offset);
      const M* own = params_[idx(bk.group)].data() + bucket_state_[idx(b)];
      put(own, sp.q, at + r * sp.q);
      put(own + sp.q, sp.tail, at + R * sp.q);
      if (R > 1 && sp.q > 0) gather_(bk.group, at + r * sp.q, at, uz(sp.q));
    }
    if constexpr (mixed) cast_elements(q_, uz(tg_size_[idx(tg)]), static_cast<const M*>(buf), dst);
  }
  // n masters to backend memory
  void put(const M* src, long long n, M* dst) {
    if (n <= 0) return;
    if constexpr (offloaded) Backend::upload(q_, src, uz(n), dst);
    else copy(q_, uz(n), src, dst);
  }

  // Mixed precision: the layers read bf16 copies of the masters, rounded to nearest
  // even after every update (Megatron's bf16 recipe). Staged: the slots are stale.
  void refresh_copies() {
    whole_valid_ = false;
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
  // a training step's TaskGraph uses, their schedule, the copy queue and each slot's fill
  std::vector<int> uses_;
  staging::schedule schedule_;
  std::optional<typename Backend::queue> copy_q_;
  std::array<typename Backend::event, 2> ready_{};
  long long next_use_ = 0;
  bool in_step_ = false;
  const T* current_ = nullptr;
  // per TaskGraph: its (layer, tensor)s, slot size, first element of each group, and
  // where each group's range starts in the slot; each tensor's place in its slot
  std::vector<std::vector<std::pair<int, int>>> tg_tensors_;
  std::vector<long long> tg_size_;
  std::vector<std::array<long long, 2>> tg_first_, tg_base_;
  std::array<std::array<long long, max_layer_params>, idx(P::num_layers)> slot_off_{};
  // Zero<2/3>: two gradient slots and the TaskGraph each holds; each bucket's chunk in
  // the segments' layout; Zero<3>: the gather, and the whole masters when assembled
  std::array<device_buf<M>, 2> gslots_;
  std::array<int, 2> gslot_tg_{-1, -1};
  int gslot_next_ = 0, gslot_count_ = 2;
  std::array<long long, idx(lower::lowered<P>::max_buckets)> bucket_state_{};
  gather_fn gather_;
  std::array<std::vector<M>, 2> whole_;
  bool whole_valid_ = false;
  std::uint64_t seed_ = 0;
};

}  // namespace strata::exec
