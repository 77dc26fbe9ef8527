#pragma once
// The parameter store of one device: this stage's parameter shards, their gradients and
// optimizer state, in two flat groups laid out by the lowering (group 0 reduced over the
// data-parallel group, group 1 over the part's devices and the data group), kept as the
// lowering's parameter layout says (lower::param_layout):
//  * the update runs over segments (exec/zero.hpp): the whole group, or under ZeRO this
//    device's chunks of the gradient buckets, whose optimizer state alone it keeps;
//  * Zero<2/3> keep the gradients in that layout too: a TaskGraph's backward writes into
//    a gradient slot (exec/taskgraph_layout.hpp), whose buckets are reduce-scattered
//    and added to this device's shard; Zero<3> keeps the masters so as well, and a whole
//    copy is assembled only when asked for (checkpoints, gather_parameters);
//  * layers read the masters, compute-type copies made after every update (mixed
//    precision), or — staged — a slot the device program fills (exec/weight_slots.hpp);
//    offloaded masters and state live in the backend's host memory, and the update
//    brings one ApplyGroups group at a time to the device.
// What is filled, gathered, opened and reduced when is the device program's
// (plan/lower/device_program.hpp): the store only does it.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "strata/core/communicator.hpp"
#include "strata/core/precision.hpp"
#include "strata/exec/init.hpp"
#include "strata/exec/optimizer.hpp"
#include "strata/exec/taskgraph_layout.hpp"
#include "strata/exec/weight_slots.hpp"
#include "strata/exec/zero.hpp"
#include "strata/plan/lower.hpp"

namespace strata::exec {

template <class P, class Backend, class T>
class param_store {
  using L = lower::lowered<P>;
  using M = master_t<T>;
  static constexpr lower::param_layout layout = L::params;
  static constexpr bool mixed = is_mixed_v<T>;
  static constexpr bool copies = mixed && !layout.staged;  // whole compute-type copies of the masters
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  static constexpr std::size_t uz(long long v) { return static_cast<std::size_t>(v); }
  template <class X>
  using device_buf = typename Backend::template buffer<X>;
  template <class X>
  using host_buf = typename Backend::template host_buffer<X>;
  using master_buf = std::conditional_t<layout.masters_on_host, host_buf<M>, device_buf<M>>;
  using state_buf = std::conditional_t<layout.state_on_host, host_buf<M>, device_buf<M>>;
  template <bool Host>
  static auto make(std::size_t n) {
    if constexpr (Host) return Backend::template allocate_host<M>(n);
    else return Backend::template allocate<M>(n);
  }

 public:
  using master_type = M;
  param_store(typename Backend::queue& q, rank_coord me, std::uint64_t seed)
      : q_(q), stage_(me.stage), me_(me), seed_(seed), tgs_(me.stage), slots_(q, tgs_) {
    for (int g = 0; g < 2; ++g) {
      const std::size_t n = uz(std::max(elems(g), 1LL));
      if constexpr (!layout.masters_sharded) params_[idx(g)] = make<layout.masters_on_host>(n);
      if constexpr (!layout.grads_sharded) grads_[idx(g)] = Backend::template allocate<M>(n);
      if constexpr (copies) work_[idx(g)] = Backend::template allocate<T>(n);
    }
    for (int s = 0; s < L::gradient_slots(stage_); ++s) gslots_[idx(s)] = Backend::template allocate<M>(uz(tgs_.largest()));
    partition({1, 1}, {0, 0});
    if constexpr (!layout.masters_sharded) initialize();
  }

  static constexpr const lower::tensor_place& place(int layer, int k) { return L::tables.params[idx(layer)][idx(k)]; }
  bool owns(int layer) const { return L::stage_of_part(P::layer_plans[idx(layer)].part) == stage_; }
  long long elems(int g) const { return L::tables.group_elems[idx(stage_)][idx(g)]; }

  // Splits the update (and the optimizer state) over the devices of each group's
  // reduction, where the layout is partitioned: `size[g]` devices, this one at `rank[g]`.
  // Zeroes the optimizer state; called before the first step. Sharded masters are laid
  // out anew, with their initial values.
  void partition(std::array<int, 2> size, std::array<int, 2> rank) {
    if constexpr (!layout.partitioned) size = {1, 1}, rank = {0, 0};
    part_.emplace(stage_, me_, size, rank);
    for (int g = 0; g < 2; ++g) {
      const std::size_t n = uz(std::max(state_elems(g), 1LL));
      m_[idx(g)] = make<layout.state_on_host>(n);
      v_[idx(g)] = make<layout.state_on_host>(n);
      const std::vector<M> zeros(n, M(0));
      write(m_[idx(g)].data(), zeros.data(), n, layout.state_on_host);
      write(v_[idx(g)].data(), zeros.data(), n, layout.state_on_host);
      if constexpr (layout.masters_sharded) params_[idx(g)] = make<layout.masters_on_host>(n);
      if constexpr (layout.grads_sharded) grads_[idx(g)] = Backend::template allocate<M>(n);
    }
    if constexpr (layout.masters_sharded) initialize();
    // ApplyGroups: [first, last) element of the update, per group of about total / N
    apply_per_ = std::max((part_->total() + layout.apply_groups - 1) / layout.apply_groups, 1LL);
    if constexpr (layout.masters_on_host) {
      tmp_p_ = Backend::template allocate<M>(uz(apply_per_));
      if constexpr (layout.state_on_host) {
        tmp_m_ = Backend::template allocate<M>(uz(apply_per_));
        tmp_v_ = Backend::template allocate<M>(uz(apply_per_));
      }
    }
  }
  const std::vector<zero::segment>& segments(int g) const { return part_->segments_of(g); }
  int partition_size(int g) const { return part_->size(g); }
  int partition_rank(int g) const { return part_->rank(g); }
  // Optimizer state elements this device keeps per group (adam: two such arrays).
  long long state_elems(int g) const { return part_->state_elems(g); }

  // What a layer call reads: backend memory, valid until the next update — or the
  // staging slot the device program names (wslot ≥ 0).
  const T* weight(int layer, int k, int wslot) const {
    if (wslot >= 0) return slots_.slot(wslot) + slots_.offset(layer, k);
    const lower::tensor_place& t = place(layer, k);
    if constexpr (copies) return work_[idx(t.group)].data() + t.offset;
    else if constexpr (!layout.masters_sharded && std::is_same_v<M, T>) return params_[idx(t.group)].data() + t.offset;
    else throw std::logic_error("strata: a layer read unstaged weights the plan keeps only staged");
  }
  // Where a layer's backward adds its gradients: the group's, or (Zero<2/3>) the
  // gradient slot its TaskGraph opened (gslot).
  M* grad(int layer, int k, int gslot) {
    if (gslot >= 0) return gslots_[idx(gslot)].data() + tgs_.offset(layer, k);
    const lower::tensor_place& t = place(layer, k);
    return grads_[idx(t.group)].data() + t.offset;
  }
  // Zero<2/3>: TaskGraph tg's backward writes into gradient slot s, zeroed first.
  void open_gradients(int tg, int s) { fill(q_, uz(tgs_.size(tg)), M(0), gslots_[idx(s)].data()); }
  // A bucket's gradients as the backward wrote them: where they are reduced.
  M* bucket_grads(int b, int gslot) {
    const lower::bucket& bk = bucket_of(b);
    if (gslot >= 0) return gslots_[idx(gslot)].data() + tgs_.position(bk.taskgraph, bk.group, bk.offset);
    return grads_[idx(bk.group)].data() + bk.offset;
  }
  // Zero<2/3>: this device's summed chunk of bucket b (then its tail) in the shard.
  M* shard_grads(int b) { return grads_[idx(bucket_of(b).group)].data() + part_->chunk_at(b); }

  // A tied tensor's copies (plan/sharding.hpp's tie_info): each copy on this device after
  // the reduction, summed with the other copy — here when this device holds both, else
  // over `pair`, the devices of the two stages at this device's place (a collective).
  // What this device keeps of a copy: the whole tensor, or under ZeRO its chunk of the
  // copy's bucket and the bucket's tail (each copy is one bucket, chunked alike).
  template <class Comm>
  void tie_gradients(Comm* pair) {
    const tie_info& t = P::tie;
    std::array<std::array<reduced_range, 2>, 2> held{};
    int copies = 0;
    for (const auto& [i, k] : {std::array<int, 2>{t.owner, t.owner_param}, std::array<int, 2>{t.user, t.user_param}})
      if (owns(i)) held[idx(copies++)] = reduced_of(i, k);
    for (int r = 0; r < 2; ++r) {
      const reduced_range& a = held[0][idx(r)];
      if (a.count == 0) continue;
      if (copies == 2) {
        const reduced_range& b = held[1][idx(r)];
        axpy(q_, uz(a.count), 1.0, static_cast<const M*>(b.at), a.at);
        copy(q_, uz(a.count), static_cast<const M*>(a.at), b.at);
      } else if (pair) {
        Backend::synchronize(q_);
        pair->all_reduce(a.at, uz(a.count), comm::reduce_op::sum);
        if constexpr (requires { pair->synchronize(); }) pair->synchronize();
      }
    }
  }

  // Staged weights: TaskGraph tg into slot s from the masters (on the copy queue), and
  // the compute queue's wait for it.
  void fill_weights(int tg, int s) {
    slots_.fill(tg, s, [&](int i, int k) -> const M* {
      const lower::tensor_place& t = place(i, k);
      return params_[idx(t.group)].data() + t.offset;
    });
  }
  void wait_weights(int s) { slots_.wait(s); }
  // Zero<3>: TaskGraph tg into slot s: each bucket from every device's chunk,
  // all-gathered by gather(group, send, recv, n) over the group's reduction devices, and
  // this device's copy of its tail.
  template <class Gather>
  void gather_weights(int tg, int s, Gather&& gather) {
    slots_.gather(tg, s, [&](M* buf) {
      for (int b = 0; b < L::tables.num_buckets[idx(stage_)]; ++b) {
        const lower::bucket& bk = bucket_of(b);
        if (bk.taskgraph != tg) continue;
        const int R = part_->size(bk.group), r = part_->rank(bk.group);
        const zero::bucket_split sp = zero::split_bucket(bk.count, R);
        M* at = buf + tgs_.position(tg, bk.group, bk.offset);
        const M* own = params_[idx(bk.group)].data() + part_->chunk_at(b);
        put(own, sp.q, at + r * sp.q);
        put(own + sp.q, sp.tail, at + R * sp.q);
        if (R > 1 && sp.q > 0) gather(bk.group, at + r * sp.q, at, uz(sp.q));
      }
    });
  }

  // Master values of one local tensor to and from host memory (its local size); call
  // refresh() after the last set_master. Zero<3> reads the whole copy gather_whole()
  // assembled, and writes the parts of the tensor this device keeps.
  void read_master(int layer, int k, M* host) {
    const lower::tensor_place& t = place(layer, k);
    if constexpr (layout.masters_sharded) {
      if (!whole_valid_)
        throw std::logic_error("strata: Zero<3> masters read without gather_whole() since the last change");
      std::copy_n(whole_[idx(t.group)].data() + t.offset, uz(t.size), host);
    } else {
      read(params_[idx(t.group)].data() + t.offset, host, uz(t.size), layout.masters_on_host);
    }
  }
  void set_master(int layer, int k, const M* host) {
    const lower::tensor_place& t = place(layer, k);
    if constexpr (layout.masters_sharded) {
      whole_valid_ = false;
      for (const zero::segment& s : segments(t.group)) {
        const long long lo = std::max(s.offset, t.offset), hi = std::min(s.offset + s.count, t.offset + t.size);
        if (lo < hi)
          write(params_[idx(t.group)].data() + s.state + (lo - s.offset), host + (lo - t.offset), uz(hi - lo),
                layout.masters_on_host);
      }
    } else {
      write(params_[idx(t.group)].data() + t.offset, host, uz(t.size), layout.masters_on_host);
    }
  }
  // One array of group g in the segments' layout, to and from host memory: which = 0 the
  // first moment (or SGD's velocity), 1 the second; read_state(2, ...) reads the masters
  // when they are sharded.
  void read_state(int which, int g, M* host) {
    if (which == 2) {
      if constexpr (layout.masters_sharded) read(params_[idx(g)].data(), host, uz(state_elems(g)), layout.masters_on_host);
      return;
    }
    read((which == 0 ? m_ : v_)[idx(g)].data(), host, uz(state_elems(g)), layout.state_on_host);
  }
  void write_state(int which, int g, const M* host) {
    write((which == 0 ? m_ : v_)[idx(g)].data(), host, uz(state_elems(g)), layout.state_on_host);
  }
  // Array `which` of group g in the group's flat layout, whole: every device's segments
  // all-gathered over `c` (the group's reduction devices) and placed by each owner's
  // segments, bit for bit; the bucket tails (which every device holds) from this device,
  // so that replicas whose tails drifted apart assemble different copies. Collective over c.
  template <class Comm>
  std::vector<M> gather_flat(int which, int g, Comm& c) {
    const std::size_t n = uz(elems(g)), st = uz(state_elems(g));
    const int R = part_->size(g), me = part_->rank(g);
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
      for (const zero::segment& s : R == 1 ? segments(g) : zero::segments<P>(stage_, g, me_, R, r))
        if (!s.tail || r == me) std::copy_n(all.data() + uz(r) * st + uz(s.state), uz(s.count), flat.data() + s.offset);
    return flat;
  }
  // Sharded masters: assembles the whole masters for read_master (collective over both
  // groups' devices; nothing to do otherwise), and drops them (a full host copy).
  template <class Comm>
  void gather_whole(Comm& group0, Comm& group1) {
    if constexpr (layout.masters_sharded) {
      whole_[0] = gather_flat(2, 0, group0);
      whole_[1] = gather_flat(2, 1, group1);
      whole_valid_ = true;
    }
  }
  void drop_whole() {
    whole_ = {};
    whole_valid_ = false;
  }
  // Mixed precision: the layers read copies of the masters, rounded to nearest even after
  // every update (Megatron's bf16 recipe); staged weights are filled from the masters anyway.
  void refresh() {
    whole_valid_ = false;
    if constexpr (copies)
      for (int g = 0; g < 2; ++g) cast_elements(q_, params_[idx(g)].size(), params_[idx(g)].data(), work_[idx(g)].data());
  }

  void zero_grads() {
    for (int g = 0; g < 2; ++g) fill(q_, grads_[idx(g)].size(), M(0), grads_[idx(g)].data());
  }
  // This device's share of Σ g² over the model: every gradient element counted on
  // exactly one device of the world (the segments say which), after the reduction.
  double grad_square_sum() {
    double s = 0;
    for (int g = 0; g < 2; ++g)
      for (const zero::segment& sg : segments(g))
        if (sg.counts) s += sum_squares(q_, uz(sg.count), grad_of(g, sg));
    return s;
  }
  // Whether every gradient this device updates is finite (after the reduction).
  bool grads_finite() {
    for (int g = 0; g < 2; ++g)
      for (const zero::segment& sg : segments(g))
        if (!all_finite(q_, uz(sg.count), grad_of(g, sg))) return false;
    return true;
  }

  // The optimizer update of ApplyGroups group `which`: elements [which·per, (which+1)·per)
  // of this device's segments in order (`update` counts updates from 1): gradients times
  // grad_scale (clipping, loss scaling), the learning rate times lr_factor, weight decay
  // where `decay` says.
  void apply_group(int which, const optimizer& opt, long long update, double lr_factor, decay_on decay,
                   double grad_scale) {
    const long long lo = which * apply_per_, hi = lo + apply_per_;
    long long at = 0;  // position of the segment's first element in the update's order
    for (int g = 0; g < 2; ++g)
      for (const zero::segment& s : segments(g)) {
        const long long a = std::max(lo, at), b = std::min(hi, at + s.count);
        if (a < b) update_range(opt, update, lr_factor, decay, grad_scale, g, s, a - at, b - a, a - lo);
        at += s.count;
      }
  }

  // ZeRO's all-gather of bucket chunks into the masters: gather(send, recv, count) runs
  // the collective on backend memory, ordered before later work on this queue.
  template <class Gather>
  void gather_chunks(int g, long long offset, long long q, int R, int r, Gather&& gather) {
    M* p = params_[idx(g)].data() + offset;
    if constexpr (!layout.masters_on_host) {
      gather(p + uz(r * q), p, uz(q));
    } else {  // through a device buffer
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
  // This device's reduced gradients of tensor k of `layer` when the tensor is a bucket of
  // its own (a tied copy): the whole tensor, or its chunk and the tail.
  struct reduced_range {
    M* at = nullptr;
    long long count = 0;
  };
  std::array<reduced_range, 2> reduced_of(int layer, int k) {
    const lower::tensor_place& t = place(layer, k);
    if constexpr (!layout.partitioned) {
      return {{{grads_[idx(t.group)].data() + t.offset, t.size}, {}}};
    } else {
      for (int b = 0; b < L::tables.num_buckets[idx(stage_)]; ++b) {
        const lower::bucket& bk = bucket_of(b);
        if (bk.group != t.group || bk.offset != t.offset) continue;
        const int R = part_->size(t.group), r = part_->rank(t.group);
        const zero::bucket_split sp = zero::split_bucket(bk.count, R);
        if constexpr (layout.grads_sharded) {
          return {{{shard_grads(b), sp.q + sp.tail}, {}}};
        } else {
          M* g = grads_[idx(t.group)].data() + bk.offset;
          return {{{g + r * sp.q, sp.q}, {g + R * sp.q, sp.tail}}};
        }
      }
      throw std::logic_error("strata internal: a tied tensor is not a bucket of its own");
    }
  }
  // A segment's masters and gradients: at its offset in the group, or (partitioned) at
  // its place in the segments' layout.
  M* master_of(int g, const zero::segment& s) {
    return params_[idx(g)].data() + (layout.masters_sharded ? s.state : s.offset);
  }
  M* grad_of(int g, const zero::segment& s) { return grads_[idx(g)].data() + (layout.grads_sharded ? s.state : s.offset); }

  // Initial values from the logical element index: the same model whatever the sharding.
  void initialize() {
    std::vector<M> host;
    for (int i = 0; i < P::num_layers; ++i) {
      if (!owns(i)) continue;
      const layer_plan& lp = P::layer_plans[idx(i)];
      for (int k = 0; k < lp.desc.num_params; ++k) {
        // a tied tensor's second copy starts as its owner's; a tied table is also the
        // head's weights, so it starts at the head's scale, U(±1/√D) (an Embedding alone
        // starts at U(±1)): the first logits are then O(1), not O(√D)
        const bool user = P::tie.is_user(i, k), tied = user || (i == P::tie.owner && k == P::tie.owner_param);
        const int oi = user ? P::tie.owner : i, ok = user ? P::tie.owner_param : k;
        const layer_plan& op = P::layer_plans[idx(oi)];
        const param_t& prm = op.desc.params[idx(ok)];
        const shape_t local = op.local_params[idx(ok)];
        const double scale = tied && prm.shape.rank == 2 ? 1.0 / std::sqrt(double(prm.shape.dim[1])) : 1.0;
        host.resize(uz(place(i, k).size));
        for (std::size_t e = 0; e < host.size(); ++e)
          host[e] = static_cast<M>(
              scale * initial_value(op.desc, oi, ok, logical_index(prm.shape, local, P::param_block(oi, ok, me_.index), e), seed_));
        set_master(i, k, host.data());
      }
    }
    refresh();
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
  // n masters to backend memory
  void put(const M* src, long long n, M* dst) {
    if (n <= 0) return;
    if constexpr (layout.masters_on_host) Backend::upload(q_, src, uz(n), dst);
    else copy(q_, uz(n), src, dst);
  }

  // Elements [a, a + n) of segment s of group g; `at`: their place in the group's device buffers (offload).
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
    if constexpr (layout.masters_on_host) {
      dp = tmp_p_.data() + at;
      Backend::upload(q_, p, uz(n), dp);
      if constexpr (layout.state_on_host) {
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
          optimizer_update<O>(q_, uz(n), o.template prepare<M>(lr_factor, decays, update), dp, gr, dm, dv);
        },
        opt);
    if constexpr (layout.masters_on_host) {
      Backend::download(q_, dp, uz(n), p);
      if constexpr (layout.state_on_host) {
        Backend::download(q_, dm, uz(n), m);
        Backend::download(q_, dv, uz(n), v);
      }
    }
  }

  typename Backend::queue& q_;
  int stage_;
  rank_coord me_;
  std::uint64_t seed_ = 0;
  taskgraph_layout<P> tgs_;
  weight_slots<P, Backend, T> slots_;
  std::optional<zero::partition<P>> part_;
  std::array<master_buf, 2> params_;
  std::array<device_buf<M>, 2> grads_;
  std::array<state_buf, 2> m_, v_;
  std::array<device_buf<T>, 2> work_;
  std::array<device_buf<M>, 2> gslots_;  // Zero<2/3>: the gradient slots
  long long apply_per_ = 1;
  // offload: one update group's masters and state on the device; a ZeRO bucket
  device_buf<M> tmp_p_, tmp_m_, tmp_v_, tmp_bucket_;
  std::array<std::vector<M>, 2> whole_;  // sharded masters, assembled
  bool whole_valid_ = false;
};

}  // namespace strata::exec
