#pragma once
// Interleaved 1F1B (Megatron; Colossal-AI num_model_chunks): its builder and its tag,
// Schedule<Interleaved<V>>.
#include <array>
#include <cstddef>
#include <string_view>

#include "strata/plan/schedule_emit.hpp"
#include "strata/plan/schedules/one_f_one_b.hpp"

namespace strata::sched {

namespace detail {
// The forwards stage s of an interleaved pipeline runs before its first backward:
// 2(p − s − 1) + (V − 1)·p of its m·V chunk-micro-batches (all of them when m = p).
constexpr long long interleaved_warmup(int p, int m, int v, int s) {
  const long long total = static_cast<long long>(m) * v;
  const long long warm = m == p ? total : 2LL * (p - s - 1) + static_cast<long long>(v - 1) * p;
  return warm < total ? warm : total;
}
}  // namespace detail

// Interleaved 1F1B with V chunks per stage (Megatron / Colossal-AI): chunk c of stage s
// is pipeline part c·p + s; micro-batches advance through chunks in groups of p.
template <int P, int M, int V>
constexpr program<P, schedule_capacity(M, V)> interleaved() {
  if constexpr (V == 1) {
    return one_f_one_b<P, M>();  // one chunk: interleaving degenerates to plain 1F1B
  } else {
  program<P, schedule_capacity(M, V)> prog{};
  prog.micro_batches = M;
  prog.chunks = V;
  const int total = M * V;
  for (int s = 0; s < P; ++s) {
    std::array<detail::work, static_cast<std::size_t>(2 * M * V)> order{};
    auto fwd_of = [&](int k) { return detail::work{true, (k / (P * V)) * P + k % P, (k / P) % V, false}; };
    auto bwd_of = [&](int k) { return detail::work{false, (k / (P * V)) * P + k % P, V - 1 - (k / P) % V, false}; };
    const int warm = static_cast<int>(detail::interleaved_warmup(P, M, V, s));
    int n = 0;
    for (int k = 0; k < warm; ++k) order[static_cast<std::size_t>(n++)] = fwd_of(k);
    for (int j = 0; j < total - warm; ++j) {
      detail::work f = fwd_of(warm + j);
      f.fused_with_next = true;  // Megatron posts one group after each forward/backward pair
      order[static_cast<std::size_t>(n++)] = f;
      order[static_cast<std::size_t>(n++)] = bwd_of(j);
    }
    for (int j = total - warm; j < total; ++j) order[static_cast<std::size_t>(n++)] = bwd_of(j);
    detail::emit_stage(prog, s, order, n);
  }
  return prog;
  }
}

namespace detail {
// "I" and V's digits: the search's table names Interleaved<V> so
template <int V>
inline constexpr std::array<char, 12> interleaved_label = [] {
  std::array<char, 12> t{};
  t[0] = 'I';
  int digits = 1;
  for (int v = V / 10; v > 0; v /= 10) ++digits;
  for (int v = V < 0 ? 0 : V, i = digits; i > 0; v /= 10, --i) t[static_cast<std::size_t>(i)] = static_cast<char>('0' + v % 10);
  return t;
}();
}  // namespace detail

}  // namespace strata::sched

namespace strata {

// V model chunks per device: pipeline part k runs on stage k mod (parts / V). Its rules
// are the default for several chunks (sched::interleave_check); V < 1 is [interleave-chunks].
template <int V>
struct Interleaved {
  static constexpr std::string_view name = "interleaved 1F1B";
  static constexpr std::string_view label{sched::detail::interleaved_label<V>.data()};
  static constexpr int chunks = V;
  template <int Stages, int M, int Chunks>
  static constexpr auto build() {
    return sched::interleaved<Stages, M, (V > 1 ? V : 1)>();  // V < 1: only the rule speaks
  }
  // Any of a stage's peak 2(p − s − 1) + (V − 1)·p + 1 chunk-micro-batches may be this
  // part's (one chunk: 1F1B's); the fill and drain take (p − 1) / V micro-batches
  static constexpr long long in_flight(int p, int m, int s) {
    if constexpr (V <= 1) {
      return PreferBackward::in_flight(p, m, s);
    } else {
      const long long chunk_mbs = 2LL * (p - s - 1) + static_cast<long long>(V - 1) * p + 1;
      return chunk_mbs < m ? chunk_mbs : m;
    }
  }
  // Of those, what chunk c's part holds: a forward of chunk c meets its backward
  // warm + (V − 1 − 2c)·p steps later (warm = 2(p − s − 1) + (V − 1)·p forwards first, then
  // one forward and one backward per step), so the part holds at most the chunk-c forwards of
  // a window that long, and those come p in every p·V: min(m, L, p·(⌊L / (p·V)⌋ + 1)) for a
  // window of L = that lag + 1. Never below the lowering's slot counts, and their sum within
  // 12.5% of theirs (tests/static/schedules.cpp).
  static constexpr long long in_flight_part(int p, int m, int s, int chunk) {
    if constexpr (V <= 1) {
      return PreferBackward::in_flight(p, m, s);
    } else {
      const long long warm = sched::detail::interleaved_warmup(p, m, V, s);
      long long window = warm + static_cast<long long>(V - 1 - 2 * chunk) * p + 1;
      window = window > 1 ? window : 1;
      const long long per_round = static_cast<long long>(p) * (window / (static_cast<long long>(p) * V) + 1);
      const long long held = window < per_round ? window : per_round;
      return held < m ? held : m;
    }
  }
  static constexpr double bubble(int p, double stage_s, double) { return (p - 1) * stage_s / (V > 1 ? V : 1); }
};

}  // namespace strata
