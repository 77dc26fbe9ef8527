// ZB-H1 against the zero-bubble paper's closed form: with forward, input-gradient and
// weight-gradient passes of F, B, W units (W ≤ F, W ≤ B) and M ≥ p micro-batches a step
// takes M·(F + B + W) + (p − 1)·(F + B − W), against 1F1B's (M + p − 1)·(F + B + W) when
// its backward is B and W together — simulated under rendezvous send/recv with the
// groups the executor posts (W's overlapping a posted group), deadlock-free and
// complete (every W once, after its B). Every stage holds at most p micro-batches.
#include <strata/plan/schedule.hpp>

using namespace strata::sched;

template <int P, int M>
constexpr bool zb_h1_matches_closed_form() {
  constexpr auto z = zb_h1<P, M>();
  constexpr auto o = one_f_one_b<P, M>();
  static_assert(z.split_backward && check_complete(z).status == verdict::ok);
  static_assert(simulate(z).status == verdict::ok);
  constexpr long long costs[][3] = {{1, 1, 1}, {2, 2, 1}, {1, 2, 1}, {2, 3, 2}, {3, 3, 2}, {3, 4, 3}, {4, 5, 2}};
  for (const auto& c : costs) {
    const long long f = c[0], b = c[1], w = c[2];
    const sim_result r = simulate(z, f, b, nullptr, w);
    if (r.status != verdict::ok || r.makespan != M * (f + b + w) + (P - 1) * (f + b - w)) return false;
    if (r.busy != M * (f + b + w)) return false;
    if (simulate(o, f, b + w).makespan != (M + P - 1) * (f + b + w)) return false;
    if (!(bubble(z, f, b, w) == fraction{(P - 1) * (f + b - w), M * (f + b + w) + (P - 1) * (f + b - w)})) return false;
  }
  for (int s = 0; s < P; ++s)
    if (peak_in_flight(z, s) != (P < M ? P : M)) return false;
  return true;
}

static_assert(zb_h1_matches_closed_form<2, 2>());
static_assert(zb_h1_matches_closed_form<2, 5>());
static_assert(zb_h1_matches_closed_form<3, 3>());
static_assert(zb_h1_matches_closed_form<3, 7>());
static_assert(zb_h1_matches_closed_form<4, 4>());
static_assert(zb_h1_matches_closed_form<4, 9>());
static_assert(zb_h1_matches_closed_form<4, 16>());
static_assert(zb_h1_matches_closed_form<6, 13>());
static_assert(zb_h1_matches_closed_form<8, 8>());
static_assert(zb_h1_matches_closed_form<8, 11>());

// Fewer micro-batches than stages: still deadlock-free and complete.
static_assert(simulate(zb_h1<4, 2>()).status == verdict::ok && check_complete(zb_h1<4, 2>()).status == verdict::ok);
static_assert(simulate(zb_h1<5, 1>()).status == verdict::ok && check_complete(zb_h1<5, 1>()).status == verdict::ok);

// The order, written out for p = 3, m = 4: stage s is 1F1B's order of F and B with W of
// micro-batch k right after B of k + s, and the rest at the end.
struct step {
  op kind;
  int mb;
};
constexpr op F = op::forward, B = op::backward, Wt = op::weight;
constexpr step expected[3][12] = {
    {{F, 0}, {F, 1}, {F, 2}, {B, 0}, {Wt, 0}, {F, 3}, {B, 1}, {Wt, 1}, {B, 2}, {Wt, 2}, {B, 3}, {Wt, 3}},
    {{F, 0}, {F, 1}, {B, 0}, {F, 2}, {B, 1}, {Wt, 0}, {F, 3}, {B, 2}, {Wt, 1}, {B, 3}, {Wt, 2}, {Wt, 3}},
    {{F, 0}, {B, 0}, {F, 1}, {B, 1}, {F, 2}, {B, 2}, {Wt, 0}, {F, 3}, {B, 3}, {Wt, 1}, {Wt, 2}, {Wt, 3}},
};
constexpr bool canonical_zb_h1() {
  constexpr auto prog = zb_h1<3, 4>();
  for (int s = 0; s < 3; ++s) {
    int k = 0;
    for (int i = 0; i < prog.length[static_cast<std::size_t>(s)]; ++i) {
      const instr& x = prog.at(s, i);
      if (!is_compute(x.kind)) continue;
      if (k >= 12 || x.kind != expected[s][k].kind || x.mb != expected[s][k].mb) return false;
      ++k;
    }
    if (k != 12) return false;
  }
  return true;
}
static_assert(canonical_zb_h1());

// A W before its B, or twice, or missing, is refused by the completeness check.
constexpr bool w_checked() {
  auto bad = zb_h1<2, 2>();
  for (int i = 0; i < bad.length[0]; ++i)  // stage 0's first W becomes micro-batch 1's, before its B
    if (bad.code[0][static_cast<std::size_t>(i)].kind == op::weight) {
      bad.code[0][static_cast<std::size_t>(i)].mb = 1;
      break;
    }
  auto unsplit = zb_h1<2, 2>();
  unsplit.split_backward = false;  // W's in a program that does not split backwards
  return check_complete(bad).status == verdict::incomplete && check_complete(unsplit).status == verdict::incomplete;
}
static_assert(w_checked());

// The buffer slots: a micro-batch's stash and output gradient stay until its W.
constexpr bool slots_live_until_w() {
  constexpr auto r = assign_slots<2, 4>(zb_h1<2, 4>());
  // stage 0: two micro-batches in flight (1F1B's warm-up), their output gradients until W;
  // stage 1 holds two (W deferred by one) plus the next activation, whose receive is
  // posted before the W it overlaps
  return r.count(pool_kind::act, 0) == 2 && r.count(pool_kind::gout, 0) == 2 && r.count(pool_kind::act, 1) == 3;
}
static_assert(slots_live_until_w());

int main() { return 0; }
