// ZB-V (two chunks per stage in a V: stage s runs parts s and 2p − 1 − s, backwards split
// into B and W): complete, deadlock-free under rendezvous send/recv with the groups the
// executor posts, receives from each peer in the peer's sending order (NCCL's rule), at
// most 2p part-activations per stage (1F1B's memory). With one unit per F, B and W of a
// part the last stage cannot start before p − 1 forwards, so a step takes at least
// 6M + p − 1 units; the schedule reaches that bound for p ≤ 4 and M ≥ p (ZB-V's "zero
// bubble" up to the unavoidable warm-up), and stays within p − 4 units of it up to p = 8,
// against ZB-H1's 6M + 2(p − 1) and 1F1B's 6M + 6(p − 1) with the same per-stage costs.
#include <strata/plan/schedule.hpp>

using namespace strata::sched;

template <int P, int M>
constexpr bool zb_v_sound(long long slack) {
  constexpr auto v = zb_v<P, M>();
  static_assert(v.split_backward && v.v_shape && v.chunks == 2);
  static_assert(check_complete(v).status == verdict::ok);
  const sim_result r = simulate(v, 1, 1, nullptr, 1);
  const long long bound = 6LL * M + P - 1;
  if (r.status != verdict::ok || r.busy != 6LL * M || r.makespan < bound || r.makespan > bound + slack) return false;
  for (int s = 0; s < P; ++s)
    if (peak_in_flight(v, s) > 2 * P) return false;
  // the same stage costs (a stage is two parts: F = B = W = 2) under ZB-H1 and 1F1B
  if (M >= P) {
    if (simulate(zb_h1<P, M>(), 2, 2, nullptr, 2).makespan != 6LL * M + 2 * (P - 1)) return false;
    if (simulate(one_f_one_b<P, M>(), 2, 4).makespan != 6LL * (M + P - 1)) return false;
  }
  return true;
}
template <int P, int M>
constexpr bool zb_v_exact() {
  return zb_v_sound<P, M>(0) && bubble(zb_v<P, M>(), 1, 1, 1) == fraction{P - 1, 6LL * M + P - 1};
}

static_assert(zb_v_exact<1, 3>() && zb_v_exact<2, 2>() && zb_v_exact<2, 5>() && zb_v_exact<3, 3>());
static_assert(zb_v_exact<3, 7>() && zb_v_exact<4, 4>() && zb_v_exact<4, 9>() && zb_v_exact<4, 16>());
static_assert(zb_v_sound<5, 10>(1) && zb_v_sound<6, 12>(2) && zb_v_sound<8, 8>(4) && zb_v_sound<8, 16>(4));
// fewer micro-batches than stages: still complete and deadlock-free, with a longer tail
static_assert(zb_v_sound<4, 1>(8) && zb_v_sound<4, 2>(4));

// The V: stage p − 1 hands part p − 1's output to part p (and part p's input gradient
// back) in place — no message, no exit or input-gradient buffer there — while stage 0
// both starts (part 0) and ends (part 2p − 1) every micro-batch.
constexpr bool turn_is_local() {
  constexpr int P = 3, M = 4;
  constexpr auto v = zb_v<P, M>();
  for (int i = 0; i < v.length[P - 1]; ++i) {
    const instr& x = v.at(P - 1, i);
    if ((x.kind == op::recv_act && x.chunk == 1) || (x.kind == op::send_act && x.chunk == 0)) return false;
    if ((x.kind == op::recv_grad && x.chunk == 0) || (x.kind == op::send_grad && x.chunk == 1)) return false;
  }
  constexpr auto r = assign_slots<2 * P, M>(v);
  return v.part_of(0, 1) == 2 * P - 1 && v.stage_of(P) == P - 1 && r.count(pool_kind::exit, P - 1) == 0 &&
         r.count(pool_kind::gin, P) == 0 && r.count(pool_kind::act, P) > 0;
}
static_assert(turn_is_local());

// Receives out of the sender's order are caught: stage 0's first two receives from stage
// 1 swapped (an activation and a gradient in a V) is a mismatch or a deadlock.
constexpr bool order_checked() {
  auto bad = zb_v<2, 4>();
  int first = -1;
  for (int i = 0; i < bad.length[0]; ++i) {
    instr& x = bad.code[0][static_cast<std::size_t>(i)];
    if (x.kind != op::recv_act && x.kind != op::recv_grad) continue;
    if (first < 0) {
      first = i;
    } else if (x.kind != bad.code[0][static_cast<std::size_t>(first)].kind) {
      instr& y = bad.code[0][static_cast<std::size_t>(first)];
      const instr t = x;
      x.kind = y.kind, x.mb = y.mb, x.chunk = y.chunk;
      y.kind = t.kind, y.mb = t.mb, y.chunk = t.chunk;
      break;
    }
  }
  return first >= 0 && simulate(bad, 1, 1, nullptr, 1).status != verdict::ok;
}
static_assert(order_checked());

// DualPipeV: the same V, DualPipe's fixed order (F0 B1 F1 B0 in the steady state). Complete,
// deadlock-free, receives in each sender's order, at most 2p + 1 part-activations a stage,
// and with one unit per F, B and W of a part exactly 6M + p − 1 units for every p ≤ 8 and
// M ≥ 2p tried: bubble (p − 1) / (6M + p − 1), ZB-V's bound.
template <int P, int M>
constexpr bool dual_pipe_v_exact() {
  constexpr auto v = dual_pipe_v<P, M>();
  static_assert(v.split_backward && v.v_shape && v.chunks == 2);
  static_assert(check_complete(v).status == verdict::ok);
  const sim_result r = simulate(v, 1, 1, nullptr, 1);
  if (r.status != verdict::ok || r.busy != 6LL * M || r.makespan != 6LL * M + P - 1) return false;
  for (int s = 0; s < P; ++s)
    if (peak_in_flight(v, s) > 2 * P + 1) return false;
  return bubble(v, 1, 1, 1) == fraction{P - 1, 6LL * M + P - 1};
}
static_assert(dual_pipe_v_exact<1, 2>() && dual_pipe_v_exact<1, 5>() && dual_pipe_v_exact<2, 4>());
static_assert(dual_pipe_v_exact<2, 7>() && dual_pipe_v_exact<3, 6>() && dual_pipe_v_exact<4, 8>());
static_assert(dual_pipe_v_exact<4, 13>() && dual_pipe_v_exact<6, 12>() && dual_pipe_v_exact<8, 16>());
// Stage 0 of p = 2 at M = 6: 2(p − 1) = 2 F0, then F0 F1, then B1 W F1 (the W deferred, run
// at once), then the steady state F0 B1 W F1 B0 W (full backwards)
constexpr bool dual_pipe_v_steady() {
  constexpr auto o = strata::sched::detail::dual_pipe_v_orders<2, 6>();
  const auto& s0 = o.order[0];
  return o.count[0] == 36 && s0[0].fwd && s0[0].chunk == 0 && s0[2].fwd && s0[3].fwd && s0[3].chunk == 1 &&
         !s0[4].fwd && !s0[4].weight && s0[4].chunk == 1 && s0[5].weight && s0[6].fwd && s0[6].chunk == 1 &&
         s0[7].fwd && s0[7].chunk == 0 && !s0[8].fwd && !s0[8].weight && s0[8].chunk == 1 && s0[9].weight;
}
static_assert(dual_pipe_v_steady());
// not ZB-V's order under another name: stage 0's orders differ
constexpr bool orders_differ() {
  constexpr auto d = strata::sched::detail::dual_pipe_v_orders<2, 6>();
  constexpr auto z = strata::sched::detail::zb_v_orders<2, 6>();
  for (int i = 0; i < d.count[0]; ++i) {
    const auto &a = d.order[0][static_cast<std::size_t>(i)], &b = z.order[0][static_cast<std::size_t>(i)];
    if (a.fwd != b.fwd || a.weight != b.weight || a.chunk != b.chunk || a.mb != b.mb) return true;
  }
  return false;
}
static_assert(orders_differ());

int main() { return 0; }
