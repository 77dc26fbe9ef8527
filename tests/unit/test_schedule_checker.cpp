// The deadlock checker on hand-made programs: it must accept the generated schedules
// and reject deliberately mis-ordered ones, naming the stage and instruction.
#include <doctest/doctest.h>

#include <strata/plan/schedule.hpp>

using namespace strata::sched;

namespace {

template <int P, int Cap>
int find(const program<P, Cap>& prog, int s, op k, int mb) {
  for (int i = 0; i < prog.length[static_cast<std::size_t>(s)]; ++i)
    if (prog.at(s, i).kind == k && prog.at(s, i).mb == mb) return i;
  return -1;
}

}  // namespace

TEST_CASE("generated schedules pass the checker") {
  CHECK(simulate(gpipe<4, 8>()).status == verdict::ok);
  CHECK(simulate(one_f_one_b<4, 8>()).status == verdict::ok);
  CHECK(simulate(interleaved<4, 8, 2>()).status == verdict::ok);
}

TEST_CASE("a last stage that sends its gradient before it receives the activation deadlocks") {
  auto prog = one_f_one_b<2, 2>();
  // Stage 1 would wait for gradient 0 to be received by stage 0 before it has even
  // received activation 0: under rendezvous send/recv both stages block forever.
  const int recv0 = find(prog, 1, op::recv_act, 0);
  const int send0 = find(prog, 1, op::send_grad, 0);
  REQUIRE(recv0 >= 0);
  REQUIRE(send0 > recv0);
  // move the gradient send to the very front, un-grouped
  instr moved = prog.at(1, send0);
  moved.group_next = false;
  for (int i = send0; i > 0; --i) prog.code[1][static_cast<std::size_t>(i)] = prog.code[1][static_cast<std::size_t>(i - 1)];
  prog.code[1][0] = moved;
  prog.code[1][static_cast<std::size_t>(send0)].group_next = false;
  const sim_result r = simulate(prog);
  CHECK(r.status != verdict::ok);
  CHECK(r.stage >= 0);
  CHECK(r.instruction >= 0);
}

TEST_CASE("splitting a grouped exchange into two blocking operations deadlocks") {
  // In 1F1B steady state stage 0 posts [send-act i, recv-grad j] as one group while
  // stage 1 posts [send-grad j, recv-act i]. Posting each side's send alone first makes
  // both block on a send whose receive is never posted.
  auto prog = one_f_one_b<2, 4>();
  bool split_one = false;
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i + 1 < prog.length[static_cast<std::size_t>(s)]; ++i)
      if (prog.at(s, i).group_next && is_send(prog.at(s, i).kind)) {
        prog.code[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)].group_next = false;
        split_one = true;
      }
  REQUIRE(split_one);
  const sim_result r = simulate(prog);
  CHECK(r.status == verdict::deadlock);
}

TEST_CASE("receiving micro-batches out of order is a mismatch, not silent corruption") {
  auto prog = gpipe<2, 4>();
  const int a = find(prog, 1, op::recv_act, 1);
  const int b = find(prog, 1, op::recv_act, 2);
  REQUIRE(a >= 0);
  REQUIRE(b >= 0);
  prog.code[1][static_cast<std::size_t>(a)].mb = 2;
  prog.code[1][static_cast<std::size_t>(b)].mb = 1;
  const sim_result r = simulate(prog);
  CHECK(r.status == verdict::mismatch);
  CHECK((r.stage == 0 || r.stage == 1));  // either end of the mismatched pair
}

TEST_CASE("a program that skips a backward is incomplete") {
  auto prog = one_f_one_b<2, 2>();
  const int b = find(prog, 0, op::backward, 1);
  REQUIRE(b >= 0);
  prog.code[0][static_cast<std::size_t>(b)].kind = op::forward;
  CHECK(check_complete(prog).status == verdict::incomplete);
}

TEST_CASE("bubble values at run time agree with the closed forms") {
  CHECK(bubble(one_f_one_b<8, 32>()) == fraction{7, 39});
  CHECK(bubble(gpipe<8, 8>()) == fraction{7, 15});
  CHECK(bubble(interleaved<8, 16, 2>()) == fraction{7, 39});
  CHECK(bubble(interleaved<8, 16, 2>()).value() == doctest::Approx(7.0 / 39.0));
}
