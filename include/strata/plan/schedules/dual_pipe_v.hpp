#pragma once
// DualPipeV (DeepSeek-V3's DualPipe cut to a V, as torchtitan ships it): its builder and its
// tag, Schedule<DualPipeV>.
#include <array>
#include <cstddef>
#include <string_view>

#include "strata/core/diagnosis.hpp"
#include "strata/plan/schedule_emit.hpp"
#include "strata/plan/schedules/v_emit.hpp"

namespace strata::sched {

// DualPipeV: ZB-V's placement (stage s runs parts s and 2P − 1 − s; chunk 0 going down,
// chunk 1 coming back, the loss on stage 0) with DualPipe's fixed order instead of a list
// schedule. Stage s runs, with F_c, B_c, W the forward, backward-for-inputs and deferred
// weight gradient of chunk c (a "full" backward is B then W at once):
//   1. 2(P − s − 1) F0                      warm-up of the first chunk
//   2. s + 1 times F0 F1                    both chunks in flight
//   3. P − s − 1 times B1 (W deferred) W F1 zero-bubble fill
//   4. M − 2P + s + 1 times F0 B1 F1 B0     the steady state: each forward paired with a
//                                           backward (DualPipe overlaps the pair's compute and
//                                           communication; here they run one after the other)
//   5. P − s − 1 times B1 F1 B0
//   6. s + 1 times B1 B0, W deferred from the middle on
//   7. P − s − 1 times W B0 (W deferred)
//   8. s + 1 times W                        the deferred weight gradients, oldest first
// Each stage keeps at most 2P + 1 part-activations (ZB-V keeps 2P); it needs M ≥ 2P. With one
// unit per F, B and W of a part the step takes 6M + P − 1 units — the bound no V schedule
// beats (the last stage's wait for P − 1 forwards) — for every P and M ≥ 2P tested.
namespace detail {

template <int P, int M>
constexpr v_orders<P, M> dual_pipe_v_orders() {
  v_orders<P, M> r{};
  constexpr auto I = [](long long i) { return static_cast<std::size_t>(i); };
  if constexpr (M >= 2 * P) {
    for (int s = 0; s < P; ++s) {
      auto& o = r.order[I(s)];
      int& n = r.count[I(s)];
      std::array<int, 2> next_f{}, next_b{};
      std::array<work, I(2 * M)> deferred{};  // the W's B left for later, oldest first
      int head = 0, tail = 0;
      auto F = [&](int c) { o[I(n++)] = work{true, next_f[I(c)]++, c, false, false}; };
      auto B = [&](int c, bool defer) {
        const int mb = next_b[I(c)]++;
        o[I(n++)] = work{false, mb, c, false, false};
        const work w{false, mb, c, false, true};
        if (defer) deferred[I(tail++)] = w;
        else o[I(n++)] = w;
      };
      auto W = [&] { o[I(n++)] = deferred[I(head++)]; };
      for (int i = 0; i < 2 * (P - s - 1); ++i) F(0);
      for (int i = 0; i < s + 1; ++i) F(0), F(1);
      for (int i = 0; i < P - s - 1; ++i) B(1, true), W(), F(1);
      for (int i = 0; i < M - 2 * P + s + 1; ++i) F(0), B(1, false), F(1), B(0, false);
      for (int i = 0; i < P - s - 1; ++i) B(1, false), F(1), B(0, false);
      bool defer = false;
      for (int i = 0; i < s + 1; ++i) {  // the weight gradients deferred from the middle on
        if (i == (s + 1) / 2 && s % 2 == 1) defer = true;
        B(1, defer);
        if (i == (s + 1) / 2 && s % 2 == 0) defer = true;
        B(0, defer);
      }
      for (int i = 0; i < P - s - 1; ++i) W(), B(0, true);
      while (head < tail) W();
    }
  }
  // The unit-time start of every op, each as soon as its stage is free and its inputs are
  // there (the emission places the messages by these times, as ZB-V's).
  for (auto& row : r.f_end)
    for (long long& x : row) x = -1;
  r.b_end = r.f_end;
  std::array<int, I(P)> next{};
  int left = 0;
  for (int s = 0; s < P; ++s) left += r.count[I(s)];
  for (long long t = 0; left > 0 && t <= 12LL * (M + P) * 2 * P; ++t)
    for (int s = 0; s < P; ++s) {
      const int j = next[I(s)];
      if (j >= r.count[I(s)] || (j > 0 && r.start[I(s)][I(j - 1)] + 1 > t)) continue;
      const work& w = r.order[I(s)][I(j)];
      const int part = w.chunk == 0 ? s : 2 * P - 1 - s;
      if (!inputs_ready(r, w, part, t)) continue;
      r.start[I(s)][I(j)] = t;
      if (!w.weight) (w.fwd ? r.f_end : r.b_end)[I(part)][I(w.mb)] = t + 1;
      ++next[I(s)], --left;
    }
  return r;
}

}  // namespace detail

template <int P, int M>
constexpr program<P, schedule_capacity(M, 2, true)> dual_pipe_v() {
  return detail::emit_v<P, M>(detail::dual_pipe_v_orders<P, M>());
}

}  // namespace strata::sched

namespace strata {

// DualPipeV (DeepSeek's DualPipe in its V form, torchtitan's ScheduleDualPipeV): ZB-V's
// placement — stage s runs parts s and 2p − 1 − s — with backwards split into B and W, in
// DualPipe's fixed order (plan/schedules/dual_pipe_v.hpp): every steady-state forward is
// paired with a backward of the other chunk, which on GPUs lets one's compute hide the
// other's communication (expert parallelism's all-to-alls). Needs at least 2p micro-batches;
// keeps at most 2p + 1 part-activations per stage. Not priced by the cost model (nor
// searched) yet.
struct DualPipeV {
  static constexpr std::string_view name = "DualPipeV", label = "DualPipeV";
  static constexpr int chunks = 2;
  static constexpr bool v_shape = true, split_backward = true;
  template <int Stages, int M, int Chunks>
  static constexpr auto build() {
    return sched::dual_pipe_v<Stages, M>();
  }
  // [zero-bubble-v]: an even number of parts, two per stage; [dual-pipe-v]: M ≥ 2p
  static constexpr detail::diagnosis check(int parts, int stages, int micro_batches) {
    if (parts < 2 || parts % 2 != 0) return {detail::rule_id::zero_bubble_v_parts, parts};
    if (micro_batches < 2 * stages) return {detail::rule_id::dual_pipe_v_micro_batches, micro_batches, stages};
    return {};
  }
};

}  // namespace strata
