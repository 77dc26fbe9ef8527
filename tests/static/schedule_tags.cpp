// Schedule tags: a user schedule needs only a builder (and a name); the planner reads its
// other traits' defaults, and a user tag that declares a built-in one's traits and builder
// gives the same plan, instruction for instruction — the built-in tags take the same path.
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

#include <strata/plan/cost.hpp>
#include <strata/plan/search.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

// ---- the defaults ------------------------------------------------------------------------
struct Bare {  // a builder and nothing else
  template <int P, int M, int V>
  static constexpr auto build() {
    return sched::gpipe<P, M>();
  }
};
using bare = sched::schedule_traits<Bare>;
static_assert(bare::name == "custom" && bare::label == "custom");
static_assert(bare::chunks == 1 && !bare::v_shape && !bare::split_backward);
static_assert(bare::check(3, 3, 5).ok());  // one chunk: no rule of its own
static_assert(!cost::priced_schedule<Bare>);

struct TwoChunks {  // several chunks and no check of its own: the interleaved rules
  static constexpr std::string_view name = "two chunks";
  static constexpr int chunks = 2;
  template <int P, int M, int V>
  static constexpr auto build() {
    return sched::interleaved<P, M, V>();
  }
};
using two = sched::schedule_traits<TwoChunks>;
static_assert(two::name == "two chunks" && two::label == "two chunks" && two::chunks == 2);
static_assert(two::check(3, 1, 4).id == detail::rule_id::interleave_parts && two::check(3, 1, 4).a == 3);
static_assert(two::check(4, 2, 3).id == detail::rule_id::interleave_micro_batches && two::check(4, 2, 3).b == 2);
static_assert(two::check(4, 2, 4).ok());

// ---- the built-in tags ---------------------------------------------------------------------
static_assert(sched::schedule_traits<PreferBackward>::name == "1F1B (PreferBackward)" &&
              sched::schedule_traits<PreferBackward>::label == "1F1B");
static_assert(sched::schedule_traits<PreferForward>::name == "GPipe (PreferForward)");
static_assert(sched::schedule_traits<ZeroBubbleH1>::split_backward && sched::schedule_traits<ZeroBubbleH1>::chunks == 1);
static_assert(sched::schedule_traits<Interleaved<2>>::label == "I2" &&
              sched::schedule_traits<Interleaved<12>>::label == "I12" &&
              sched::schedule_traits<Interleaved<3>>::chunks == 3);
using zbv = sched::schedule_traits<ZeroBubbleV>;
static_assert(zbv::chunks == 2 && zbv::v_shape && zbv::split_backward);
// ZB-V's own rule replaces the interleaved ones: parts even, any micro-batch count
static_assert(zbv::check(3, 1, 4).id == detail::rule_id::zero_bubble_v_parts && zbv::check(4, 2, 3).ok());
static_assert(cost::priced_schedule<PreferForward> && cost::priced_schedule<PreferBackward> &&
              cost::priced_schedule<ZeroBubbleH1> && cost::priced_schedule<Interleaved<2>> &&
              !cost::priced_schedule<ZeroBubbleV>);
// one chunk: interleaving is 1F1B, priced as 1F1B
constexpr bool interleaved_1_is_1f1b = [] {
  constexpr cost::schedule_price a = cost::price_of<Interleaved<1>>, b = cost::price_of<PreferBackward>;
  for (int s = 0; s < 4; ++s)
    if (a.in_flight(4, 8, s) != b.in_flight(4, 8, s)) return false;
  return a.chunks == 1 && a.bubble(4, 1.5, 0.25) == b.bubble(4, 1.5, 0.25);
}();
static_assert(interleaved_1_is_1f1b);
// the search tries 1F1B at ZeRO 0-3, ZB-H1 at 0-1 ([zero-bubble]), interleaved at 0-2
static_assert(detail::searched_schedules::zero_levels == 9 && detail::searched_schedules::chunk_counts.n == 2);

// ---- the same path: a user tag with a built-in one's traits and builder -------------------
template <int P, int Cap>
constexpr bool same_program(const sched::program<P, Cap>& a, const sched::program<P, Cap>& b) {
  if (a.micro_batches != b.micro_batches || a.chunks != b.chunks || a.split_backward != b.split_backward ||
      a.v_shape != b.v_shape)
    return false;
  for (int s = 0; s < P; ++s) {
    if (a.length[static_cast<std::size_t>(s)] != b.length[static_cast<std::size_t>(s)]) return false;
    for (int i = 0; i < a.length[static_cast<std::size_t>(s)]; ++i) {
      const sched::instr &x = a.at(s, i), &y = b.at(s, i);
      if (x.kind != y.kind || x.mb != y.mb || x.chunk != y.chunk || x.peer != y.peer || x.group_next != y.group_next ||
          x.overlap != y.overlap || x.slot != y.slot || x.in_slot != y.in_slot || x.out_slot != y.out_slot ||
          x.last != y.last)
        return false;
    }
  }
  return true;
}
template <class A, class B>
constexpr bool same_plan() {
  if (A::stages != B::stages || A::chunks != B::chunks || A::v_shape != B::v_shape || A::bubble != B::bubble ||
      A::split_backward != B::split_backward || !same_program(A::lowered_program.prog, B::lowered_program.prog))
    return false;
  for (int p = 0; p < A::num_parts; ++p)
    if (A::stage_of_part(p) != B::stage_of_part(p)) return false;
  for (int s = 0; s < A::stages; ++s)
    if (A::peak_activation_bytes(s) != B::peak_activation_bytes(s) || A::peak_in_flight(s) != B::peak_in_flight(s))
      return false;
  return true;
}

struct MyZeroBubbleV {
  static constexpr std::string_view name = "my ZB-V";
  static constexpr int chunks = 2;
  static constexpr bool v_shape = true, split_backward = true;
  template <int P, int M, int V>
  static constexpr auto build() {
    return sched::zb_v<P, M>();
  }
};
struct MyZeroBubbleH1 {
  static constexpr std::string_view name = "my ZB-H1";
  template <int P, int M, int V>
  static constexpr auto build() {
    return sched::zb_h1<P, M>();
  }
};

using Part = Replicate<1, Linear<16, 16>, ReLU>;
using Net4 = Pipeline<Part, Part, Part, Replicate<1, Linear<16, 4>>>;
template <class S, int M = 4>
using With = Plan<Net4, Loss<SoftmaxCrossEntropy>, Input<16>, MicroBatch<2>, NumMicroBatch<M>, Schedule<S>>;
static_assert(same_plan<With<MyZeroBubbleV>, With<ZeroBubbleV>>() && With<MyZeroBubbleV>::stages == 2);
static_assert(same_plan<With<MyZeroBubbleH1>, With<ZeroBubbleH1>>() && With<MyZeroBubbleH1>::split_backward);
static_assert(With<MyZeroBubbleV>::schedule_name == "my ZB-V" && With<ZeroBubbleV>::schedule_name == "ZB-V (ZeroBubbleV)");
static_assert(same_plan<With<Bare, 8>, With<PreferForward, 8>>() && With<Bare>::schedule_name == "custom");

// AutoStages plans any one-chunk schedule from its program: a user GPipe cuts as GPipe does
template <class S>
using Auto = Plan<Repeat<4, Linear<16, 16>, ReLU>, AutoStages<2>, Input<16>, Loss<SoftmaxCrossEntropy>,
                  NumMicroBatch<4>, Schedule<S>, MemoryBudget<1>>;
static_assert(std::is_same_v<Auto<Bare>::net, Auto<PreferForward>::net> && Auto<Bare>::valid);

}  // namespace

int main() {
  // the report names a user schedule by its name
  const std::string r = report<With<MyZeroBubbleV>>();
  if (r.find("schedule my ZB-V, 2 chunk(s) per stage") == std::string::npos) {
    std::printf("the report does not name the user schedule:\n%s", r.c_str());
    return 1;
  }
  std::printf("%s", r.substr(0, r.find('\n', r.find("schedule "))).c_str());
  std::printf("\n");
  return 0;
}
