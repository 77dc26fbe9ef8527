// Schedules against closed forms: bubble (p−1)/(m+p−1) for GPipe and 1F1B and
// (p−1)/(v·m+p−1) for interleaved, exactly; in-flight micro-batches m (GPipe) and
// ≤ p (1F1B), and the cost model's bound per interleaved part; the canonical 1F1B order
// for p = 4, m = 8.
#include <strata/plan/schedule.hpp>
#include <strata/plan/schedule_slots.hpp>
#include <strata/plan/schedules/interleaved.hpp>

using namespace strata::sched;

template <int P, int M>
constexpr bool gpipe_and_1f1b_match_closed_forms() {
  constexpr auto g = gpipe<P, M>();
  constexpr auto o = one_f_one_b<P, M>();
  static_assert(simulate(g).status == verdict::ok && check_complete(g).status == verdict::ok);
  static_assert(simulate(o).status == verdict::ok && check_complete(o).status == verdict::ok);
  // forward 1 unit, backward 2 units; and equal costs
  static_assert(bubble(g) == fraction{P - 1, M + P - 1});
  static_assert(bubble(o) == fraction{P - 1, M + P - 1});
  static_assert(bubble(g, 1, 1) == fraction{P - 1, M + P - 1});
  static_assert(bubble(o, 1, 1) == fraction{P - 1, M + P - 1});
  for (int s = 0; s < P; ++s) {
    if (peak_in_flight(g, s) != M) return false;
    if (peak_in_flight(o, s) > P || peak_in_flight(o, s) != (P - s < M ? P - s : M)) return false;
  }
  return true;
}

template <int P, int M, int V>
constexpr bool interleaved_matches_closed_form() {
  constexpr auto x = interleaved<P, M, V>();
  static_assert(simulate(x).status == verdict::ok && check_complete(x).status == verdict::ok);
  static_assert(bubble(x) == fraction{P - 1, V * M + P - 1});
  static_assert(bubble(x, 1, 1) == fraction{P - 1, V * M + P - 1});
  return true;
}

static_assert(gpipe_and_1f1b_match_closed_forms<2, 2>());
static_assert(gpipe_and_1f1b_match_closed_forms<2, 4>());
static_assert(gpipe_and_1f1b_match_closed_forms<2, 8>());
static_assert(gpipe_and_1f1b_match_closed_forms<4, 4>());
static_assert(gpipe_and_1f1b_match_closed_forms<4, 8>());
static_assert(gpipe_and_1f1b_match_closed_forms<4, 16>());
static_assert(gpipe_and_1f1b_match_closed_forms<8, 8>());
static_assert(gpipe_and_1f1b_match_closed_forms<8, 16>());
static_assert(gpipe_and_1f1b_match_closed_forms<8, 32>());

static_assert(interleaved_matches_closed_form<2, 2, 2>());
static_assert(interleaved_matches_closed_form<2, 4, 2>());
static_assert(interleaved_matches_closed_form<2, 8, 2>());
static_assert(interleaved_matches_closed_form<4, 4, 2>());
static_assert(interleaved_matches_closed_form<4, 8, 2>());
static_assert(interleaved_matches_closed_form<4, 16, 2>());
static_assert(interleaved_matches_closed_form<8, 8, 2>());
static_assert(interleaved_matches_closed_form<8, 16, 2>());
static_assert(interleaved_matches_closed_form<8, 32, 2>());
static_assert(interleaved_matches_closed_form<4, 8, 4>());
static_assert(interleaved_matches_closed_form<2, 4, 3>());

// The cost model's bound per part (Interleaved<V>::in_flight_part) against the act slots the
// lowering gives each part (assign_slots): never below, and its sum over the parts within
// 12.5% of theirs (the stage's bound for every part, what the model used before, is up to V
// times theirs).
template <int P, int M, int V>
constexpr bool interleaved_part_bound_holds() {
  constexpr auto slots = assign_slots<P * V, M>(interleaved<P, M, V>());
  long long bound = 0, held = 0;
  for (int s = 0; s < P; ++s)
    for (int c = 0; c < V; ++c) {
      const long long b = strata::Interleaved<V>::in_flight_part(P, M, s, c), a = slots.count(pool_kind::act, c * P + s);
      if (b < a) return false;
      bound += b, held += a;
    }
  return 8 * bound <= 9 * held;
}
static_assert(interleaved_part_bound_holds<2, 4, 2>());
static_assert(interleaved_part_bound_holds<3, 9, 3>());
static_assert(interleaved_part_bound_holds<4, 8, 2>());
static_assert(interleaved_part_bound_holds<4, 16, 4>());
static_assert(interleaved_part_bound_holds<5, 10, 3>());
static_assert(interleaved_part_bound_holds<8, 16, 2>());

// The canonical 1F1B order for p = 4, m = 8, written out by hand: stage s warms up
// with p−s−1 forwards, then alternates one forward and one backward, then cools down.
struct step {
  bool fwd;
  int mb;
};
constexpr step F(int i) { return {true, i}; }
constexpr step B(int i) { return {false, i}; }
constexpr step expected[4][16] = {
    {F(0), F(1), F(2), F(3), B(0), F(4), B(1), F(5), B(2), F(6), B(3), F(7), B(4), B(5), B(6), B(7)},
    {F(0), F(1), F(2), B(0), F(3), B(1), F(4), B(2), F(5), B(3), F(6), B(4), F(7), B(5), B(6), B(7)},
    {F(0), F(1), B(0), F(2), B(1), F(3), B(2), F(4), B(3), F(5), B(4), F(6), B(5), F(7), B(6), B(7)},
    {F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3), F(4), B(4), F(5), B(5), F(6), B(6), F(7), B(7)},
};
constexpr bool canonical_1f1b() {
  constexpr auto prog = one_f_one_b<4, 8>();
  for (int s = 0; s < 4; ++s) {
    int k = 0;
    for (int i = 0; i < prog.length[static_cast<std::size_t>(s)]; ++i) {
      const instr& x = prog.at(s, i);
      if (!is_compute(x.kind)) continue;
      if (k >= 16 || (x.kind == op::forward) != expected[s][k].fwd || x.mb != expected[s][k].mb) return false;
      ++k;
    }
    if (k != 16) return false;
  }
  return true;
}
static_assert(canonical_1f1b());

// Communication placement: stage 0 of 1F1B sends activation i and receives gradient j
// in one group (what keeps rendezvous send/recv from deadlocking).
constexpr bool grouped_exchange() {
  constexpr auto prog = one_f_one_b<2, 4>();
  // stage 0: F0, send-act0, F1, [send-act1 + recv-grad0], B0, ...
  return prog.at(0, 0).kind == op::forward && prog.at(0, 1).kind == op::send_act && !prog.at(0, 1).group_next &&
         prog.at(0, 2).kind == op::forward && prog.at(0, 3).kind == op::send_act && prog.at(0, 3).group_next &&
         prog.at(0, 4).kind == op::recv_grad && prog.at(0, 4).mb == 0 && prog.at(0, 5).kind == op::backward &&
         prog.at(0, prog.length[0] - 1).kind == op::optimizer_step;
}
static_assert(grouped_exchange());

int main() { return 0; }
