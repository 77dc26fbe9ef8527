#pragma once
// Cutting a sequence of units (top-level items of a model) into K contiguous pipeline
// stages: the cut whose most expensive stage is cheapest, among the cuts whose every
// stage fits a memory budget. Plain constexpr dynamic programming over arrays,
// O(K · N²); plan/auto_stages.hpp feeds it the planner's per-unit costs.
#include <array>
#include <cstddef>

namespace strata::detail {

// What each unit costs, per step or per micro-batch (see stage_memory).
template <std::size_t N>
struct unit_costs {
  std::array<long long, N> cost{};   // forward + backward (+ recomputed forward) FLOPs per step
  std::array<long long, N> state{};  // bytes of parameters, gradients and optimizer state
  std::array<long long, N> act{};    // bytes one micro-batch keeps from forward to backward
  std::array<long long, N> ping{};     // bytes of its largest transient activation (two work buffers)
  // The lowering sizes each kind of buffer (values, statistics) by its own maximum, so
  // scratch and recompute buffers are two maxima each.
  std::array<long long, N> scratch{};        // bytes of its largest layer scratch of values
  std::array<long long, N> scratch_stats{};  // ... and of statistics
  std::array<long long, N> recompute{};  // bytes of values its largest recomputed region writes (kept until its backward)
  std::array<long long, N> recompute_stats{};  // ... and of statistics
  // A skip's gradient is held while a backward runs, one slot per nesting depth, every slot
  // of the stage's largest size (plan/lower/parts.hpp): its largest, and its depth.
  std::array<long long, N> skip{};
  std::array<long long, N> skip_levels{};
  // bytes of its largest input gathered again from a kept row split (SequenceParallel: the
  // stage's gathered buffer, plan/lower/parts.hpp)
  std::array<long long, N> gathered{};
  std::array<long long, N> entry{};    // bytes of its input: kept, and its gradient sent back, when a stage starts with it
  std::array<long long, N> exit{};     // bytes of its output: sent on, and its gradient received, when a stage ends with it
  // bytes a micro-batch keeps more when a stage ends with it: a recomputed region stops
  // before a part's last layer (plan/recompute.hpp), so that layer's stash is kept
  std::array<long long, N> tail{};
};

// The units of one stage, added one at a time (in any order): sums of what each keeps,
// maxima of what they use one at a time.
//
// Compile-time cost: the search evaluates these for every candidate, and a constant
// evaluator allocates a call frame for each std::array::operator[] (about 1 KB under g++,
// kept until the whole evaluation ends), so the loops index through pointers taken once.
struct stage_tally {
  long long state = 0, act = 0, ping = 0, scratch = 0, scratch_stats = 0, recompute = 0, recompute_stats = 0;
  long long skip = 0, skip_levels = 0, gathered = 0;
  template <std::size_t N>
  constexpr void add(const unit_costs<N>& u, std::size_t x) {
    add_at(u.state.data(), u.act.data(), u.ping.data(), u.scratch.data(), u.scratch_stats.data(), u.recompute.data(),
           u.recompute_stats.data(), x);
    add_held(u.skip.data(), u.skip_levels.data(), u.gathered.data(), x);
  }
  // the skip slots and the gathered buffer
  constexpr void add_held(const long long* sk, const long long* sl, const long long* ga, std::size_t x) {
    skip = sk[x] > skip ? sk[x] : skip;
    skip_levels = sl[x] > skip_levels ? sl[x] : skip_levels;
    gathered = ga[x] > gathered ? ga[x] : gathered;
  }
  constexpr void add_at(const long long* st, const long long* ac, const long long* pi, const long long* sc,
                        const long long* ss, const long long* re, const long long* rs, std::size_t x) {
    state += st[x];
    act += ac[x];
    ping = pi[x] > ping ? pi[x] : ping;
    scratch = sc[x] > scratch ? sc[x] : scratch;
    scratch_stats = ss[x] > scratch_stats ? ss[x] : scratch_stats;
    recompute = re[x] > recompute ? re[x] : recompute;
    recompute_stats = rs[x] > recompute_stats ? rs[x] : recompute_stats;
  }
  // Memory of a device holding units so tallied, the first one's input `entry` bytes and the
  // last one's output `exit`, `in_flight` micro-batches stashed: what they keep, two transient
  // buffers of the largest activation, the largest scratch and recompute buffers, the skip
  // slots, the gathered buffer, and the messages at the stage's edges (input gradient,
  // output, output gradient).
  constexpr long long memory(long long entry, long long exit, long long in_flight) const {
    return state + in_flight * (act + entry) + 2 * ping + scratch + scratch_stats + recompute + recompute_stats +
           skip * skip_levels + gathered + entry + 2 * exit;
  }
  template <std::size_t N>
  constexpr long long memory(const unit_costs<N>& u, int i, int j, long long in_flight) const {
    const auto last = static_cast<std::size_t>(j - 1);
    return memory(u.entry[static_cast<std::size_t>(i)], u.exit[last], in_flight) + in_flight * u.tail[last];
  }
  // The tallies at `scale` times the activations (a micro-batch of another size): each kept,
  // transient or scratch size, rounded down; the state as it is.
  constexpr stage_tally scaled(double scale) const {
    auto sc = [scale](long long v) { return static_cast<long long>(static_cast<double>(v) * scale); };
    return {state, sc(act), sc(ping), sc(scratch), sc(scratch_stats), sc(recompute), sc(recompute_stats), sc(skip),
            skip_levels, sc(gathered)};
  }
};

// Memory of a device holding units [i, j) with `in_flight` micro-batches stashed at once.
template <std::size_t N>
constexpr long long stage_memory(const unit_costs<N>& u, int i, int j, long long in_flight) {
  stage_tally t;
  const long long *st = u.state.data(), *ac = u.act.data(), *pi = u.ping.data(), *sc = u.scratch.data(),
                  *ss = u.scratch_stats.data(), *re = u.recompute.data(), *rs = u.recompute_stats.data();
  const long long *sk = u.skip.data(), *sl = u.skip_levels.data(), *ga = u.gathered.data();
  for (int k = i; k < j; ++k) {
    t.add_at(st, ac, pi, sc, ss, re, rs, static_cast<std::size_t>(k));
    t.add_held(sk, sl, ga, static_cast<std::size_t>(k));
  }
  return t.memory(u, i, j, in_flight);
}
template <std::size_t N>
constexpr long long stage_cost(const unit_costs<N>& u, int i, int j) {
  long long c = 0;
  for (int k = i; k < j; ++k) c += u.cost[static_cast<std::size_t>(k)];
  return c;
}

// cuts[s] is the first unit of stage s (cuts[0] = 0, cuts[K] = N).
template <std::size_t K>
struct cut_result {
  std::array<int, K + 1> cuts{};
  bool fits = false;             // some cut keeps every stage within the budget
  long long bottleneck = 0;      // the chosen cut's largest stage cost
  long long fullest = 0;         // the chosen cut's largest stage memory
};

enum class cut_goal : unsigned char { balance_cost, least_memory };

// The best cut of N units into K stages; stage s holds in_flight[s] micro-batches. With
// budget > 0 only cuts whose every stage fits it count (balance_cost). least_memory
// minimises the fullest stage instead, ignoring the budget (for the diagnostic).
// Ties keep the cut whose stages end earliest, scanning from the last stage.
template <std::size_t N, std::size_t K>
constexpr cut_result<K> best_cut(const unit_costs<N>& u, const std::array<long long, K>& in_flight, long long budget,
                                 cut_goal goal = cut_goal::balance_cost) {
  constexpr long long inf = 0x7fffffffffffffffLL;
  constexpr int n = static_cast<int>(N), k = static_cast<int>(K);
  cut_result<K> r{};
  if (k < 1 || k > n) return r;
  // best[s][j]: the best worst-stage value for units [0, j) in stages 0..s; from[s][j] the
  // first unit of stage s in that solution.
  std::array<std::array<long long, N + 1>, K> best{};
  std::array<std::array<int, N + 1>, K> from{};
  for (auto& row : best) row.fill(inf);
  for (int s = 0; s < k; ++s) {
    const long long fl = in_flight[static_cast<std::size_t>(s)];
    for (int j = s + 1; j <= n - (k - 1 - s); ++j) {
      long long cost = 0;
      stage_tally t;
      for (int i = j - 1; i >= s; --i) {  // stage s = units [i, j)
        const auto x = static_cast<std::size_t>(i);
        cost += u.cost[x];
        t.add(u, x);
        const long long mem = t.memory(u, i, j, fl);
        if (goal == cut_goal::balance_cost && budget > 0 && mem > budget) continue;
        const long long prev = s == 0 ? (i == 0 ? 0 : inf) : best[static_cast<std::size_t>(s - 1)][x];
        if (prev == inf) continue;
        const long long here = goal == cut_goal::balance_cost ? cost : mem;
        const long long v = prev > here ? prev : here;
        if (v < best[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)]) {
          best[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)] = v;
          from[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)] = i;
        }
      }
    }
  }
  if (best[K - 1][N] == inf) return r;
  r.fits = true;
  r.cuts[K] = n;
  for (int s = k - 1; s >= 0; --s)
    r.cuts[static_cast<std::size_t>(s)] = from[static_cast<std::size_t>(s)][static_cast<std::size_t>(r.cuts[static_cast<std::size_t>(s + 1)])];
  for (int s = 0; s < k; ++s) {
    const int i = r.cuts[static_cast<std::size_t>(s)], j = r.cuts[static_cast<std::size_t>(s + 1)];
    const long long c = stage_cost(u, i, j), m = stage_memory(u, i, j, in_flight[static_cast<std::size_t>(s)]);
    r.bottleneck = c > r.bottleneck ? c : r.bottleneck;
    r.fullest = m > r.fullest ? m : r.fullest;
  }
  return r;
}

// The same bottleneck without memory: the least X such that greedy packing (each stage as
// long as it stays within X) needs at most K stages, found by bisection — O(N log Σcost)
// instead of O(K·N²) — then stages with two or more units are split until there are K.
// For the search (plan/search.hpp), which cuts many (tensor degree, K) pairs.
template <std::size_t N>
constexpr int greedy_stages(const unit_costs<N>& u, long long x) {
  int stages = 1;
  long long run = 0;
  for (std::size_t i = 0; i < N; ++i) {
    if (run + u.cost[i] > x) ++stages, run = 0;
    run += u.cost[i];
  }
  return stages;
}
template <std::size_t N, std::size_t K>
constexpr cut_result<K> balanced_cut(const unit_costs<N>& u) {
  cut_result<K> r{};
  if (K < 1 || K > N) return r;
  long long lo = 0, hi = 0;
  for (std::size_t i = 0; i < N; ++i) lo = u.cost[i] > lo ? u.cost[i] : lo, hi += u.cost[i];
  while (lo < hi) {
    const long long mid = lo + (hi - lo) / 2;
    if (greedy_stages(u, mid) <= static_cast<int>(K)) hi = mid;
    else lo = mid + 1;
  }
  // greedy packing at X = lo: stage starts (a start at every unit that overflows)
  std::array<bool, N + 1> start{};
  start[0] = true;
  long long run = 0;
  int stages = 1;
  for (std::size_t i = 0; i < N; ++i) {
    if (run + u.cost[i] > lo) start[i] = true, ++stages, run = 0;
    run += u.cost[i];
  }
  // split (at its first unit boundary) the first stage of two or more units until K
  for (std::size_t i = 1; i < N && stages < static_cast<int>(K); ++i)
    if (!start[i]) start[i] = true, ++stages;
  r.fits = true;
  std::size_t s = 0;
  for (std::size_t i = 0; i < N; ++i)
    if (start[i]) r.cuts[s++] = static_cast<int>(i);
  r.cuts[K] = static_cast<int>(N);
  for (std::size_t k = 0; k < K; ++k) {
    const long long c = stage_cost(u, r.cuts[k], r.cuts[k + 1]);
    r.bottleneck = c > r.bottleneck ? c : r.bottleneck;
  }
  return r;
}

}  // namespace strata::detail
