#pragma once
// ZeRO's partition of the update (Zero<1..3>): which ranges of a stage's flat parameter
// group a device updates, and where their optimizer state lives.
//
// A gradient bucket of `count` elements, reduced over a group of R devices, is cut into
// R chunks of q = count / R elements and a tail of count − R·q (< R) elements. The
// chunks are reduce-scattered (device r receives chunk r, summed) and the tail is
// all-reduced; device r updates chunk r and the tail, then the chunks are all-gathered.
// Every device updates the tail from the same values, so its copies stay identical.
// Without ZeRO, the whole group is one range and the state mirrors the parameters.
#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "strata/plan/lower.hpp"
#include "strata/plan/plan.hpp"

namespace strata::exec::zero {

// A contiguous range of one group that the update treats alike.
struct segment {
  long long offset = 0, count = 0;  // in the group's flat parameter/gradient arrays
  long long state = 0;              // offset of its optimizer state
  bool matrix = false;              // rank >= 2 (decayed under decay_on::matrices)
  bool counts = false;              // counted in the global gradient norm by this device
  bool tail = false;                // a bucket's tail: every device of the group holds and updates it
};

// Bucket `count` over R devices: chunk size and tail.
struct bucket_split {
  long long q = 0, tail = 0;
};
constexpr bucket_split split_bucket(long long count, int R) { return {count / R, count - count / R * R}; }

namespace detail {
struct tensor_range {
  long long offset = 0, size = 0;
  bool matrix = false;
  bool first = false;  // this device is the first of its part to hold this block (Plan::param_holder)
  // ... the first among the devices its layouts are cut over (the part's; Context<N, Split<T>>:
  // its tensor group, whose group-0 reduction spans the other context indices)
  bool first_cut = false;
};

template <class P>
std::vector<tensor_range> tensors_of(int stage, int g, int index) {
  using L = lower::lowered<P>;
  std::vector<tensor_range> t;
  for (int i = 0; i < P::num_layers; ++i) {
    const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(i)];
    if (P::stage_of_part(lp.part) != stage) continue;
    for (int k = 0; k < lp.desc.num_params; ++k) {
      const lower::tensor_place& pl = L::tables.params[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)];
      if (pl.group != g || pl.size == 0) continue;
      const shape_t whole = lp.desc.params[static_cast<std::size_t>(k)].shape;
      // a tied tensor's second copy is counted where its owner is
      const int at = P::layout_index(index);
      const bool tied = P::tie.is_user(i, k);
      t.push_back({pl.offset, pl.size, whole.rank >= 2, P::param_holder(i, k, index) == index && !tied,
                   P::param_holder(i, k, at) == at && !tied});
    }
  }
  return t;  // ascending offsets: the lowering lays tensors out in layer order
}

// Appends [a, b) of the group, state from `state`, cut where the tensors' attributes change.
inline void add_piece(std::vector<segment>& out, const std::vector<tensor_range>& ts, long long a, long long b,
                      long long state, bool tail, auto&& counts_of) {
  for (const tensor_range& t : ts) {
    const long long lo = a > t.offset ? a : t.offset, hi = b < t.offset + t.size ? b : t.offset + t.size;
    if (lo >= hi) continue;
    const segment s{lo, hi - lo, state + (lo - a), t.matrix, counts_of(t), tail};
    if (!out.empty()) {
      segment& p = out.back();
      if (p.offset + p.count == s.offset && p.state + p.count == s.state && p.matrix == s.matrix &&
          p.counts == s.counts && p.tail == s.tail) {
        p.count += s.count;
        continue;
      }
    }
    out.push_back(s);
  }
}
}  // namespace detail

// The segments device `me` updates in group g of its stage, when the group's gradients
// are reduced over R devices of which it is the r-th (R = 1 without ZeRO, or a group of
// one device). The gradient norm counts every logical element once in the world: without
// ZeRO on replica 0, each block on the first device of the part that holds it (a 1D shard
// on its device, a whole tensor on device 0, a 2D bias block on its column's first row);
// with ZeRO on the chunk's owner (the tail's: the group's first device) — in
// group 1, whose group spans the part's devices, that owner is already unique.
template <class P>
std::vector<segment> segments(int stage, int g, rank_coord me, int R, int r) {
  using L = lower::lowered<P>;
  const std::vector<detail::tensor_range> ts = detail::tensors_of<P>(stage, g, me.index);
  std::vector<segment> out;
  const long long total = L::tables.group_elems[static_cast<std::size_t>(stage)][static_cast<std::size_t>(g)];
  const auto base = [&](const detail::tensor_range& t) { return g == 1 || t.first_cut; };
  if (!L::params.partitioned) {
    detail::add_piece(out, ts, 0, total, 0, false,
                      [&](const detail::tensor_range& t) { return me.data == 0 && t.first; });
    return out;
  }
  long long state = 0;
  for (int b = 0; b < L::tables.num_buckets[static_cast<std::size_t>(stage)]; ++b) {
    const lower::bucket& bk = L::tables.buckets[static_cast<std::size_t>(stage)][static_cast<std::size_t>(b)];
    if (bk.group != g) continue;
    const bucket_split sp = split_bucket(bk.count, R);
    const long long chunk = bk.offset + r * sp.q, tail = bk.offset + R * sp.q;
    detail::add_piece(out, ts, chunk, chunk + sp.q, state, false, base);
    state += sp.q;
    detail::add_piece(out, ts, tail, tail + sp.tail, state, true,
                      [&](const detail::tensor_range& t) { return r == 0 && base(t); });
    state += sp.tail;
  }
  return out;
}

// A stage's update split over each group's reduction devices: group g over size[g]
// devices, this one at rank[g] (1 and 0: no partition) — its segments, the optimizer
// state they need, and where its chunk of each bucket (and the tail after it) lies in
// the segments' layout (the order segments() walks them).
template <class P>
class partition {
  using L = lower::lowered<P>;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }

 public:
  partition(int stage, rank_coord me, std::array<int, 2> size, std::array<int, 2> rank)
      : size_(size), rank_(rank) {
    for (int g = 0; g < 2; ++g) {
      segs_[idx(g)] = segments<P>(stage, g, me, size[idx(g)], rank[idx(g)]);
      long long state = 0;
      for (const segment& s : segs_[idx(g)]) state = std::max(state, s.state + s.count);
      state_[idx(g)] = state;
    }
    std::array<long long, 2> at{};
    for (int b = 0; b < L::tables.num_buckets[idx(stage)]; ++b) {
      const lower::bucket& bk = L::tables.buckets[idx(stage)][idx(b)];
      chunk_at_[idx(b)] = at[idx(bk.group)];
      at[idx(bk.group)] += bk.count / size[idx(bk.group)] + bk.count % size[idx(bk.group)];
    }
  }
  const std::vector<segment>& segments_of(int g) const { return segs_[idx(g)]; }
  int size(int g) const { return size_[idx(g)]; }
  int rank(int g) const { return rank_[idx(g)]; }
  // Elements of each optimizer-state array (and, sharded, of the gradients and masters).
  long long state_elems(int g) const { return state_[idx(g)]; }
  long long total() const { return state_[0] + state_[1]; }
  // Where this device's chunk of bucket b starts in the segments' layout.
  long long chunk_at(int b) const { return chunk_at_[idx(b)]; }

 private:
  std::array<std::vector<segment>, 2> segs_;
  std::array<int, 2> size_{1, 1}, rank_{0, 0};
  std::array<long long, 2> state_{};
  std::array<long long, idx(L::max_buckets)> chunk_at_{};
};

}  // namespace strata::exec::zero
