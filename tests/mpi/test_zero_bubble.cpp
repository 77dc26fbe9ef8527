// ZeroBubbleH1 splits every backward into B (the input's gradient) and a later W (the
// weights'): a plan under it trains to the same losses and parameters as the model on
// one device (float64 within 1e-9, bytes per collective as planned), and to exactly the
// same bits as the same plan under 1F1B — each gradient sums the same micro-batches in
// the same order, only later. A GPT (every layer with parameters split: embeddings,
// LayerNorm, attention, Linear) over 2 and 4 stages, with data and tensor
// parallelism, an MLP over 4 stages, and one stage accumulating 3 micro-batches (B, W, B,
// W, ...) under data parallelism.
// mpi-ranks: 1 2 4
#include "check_one_device.hpp"

#include <cstdio>
#include <vector>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>

#include "same_bits.hpp"
#include "small_gpt.hpp"

using namespace strata;

namespace {

auto& W() { return mpi_test::world(); }
using namespace small_gpt;

template <class Sched, template <int, class...> class Strategy = Replicate, int N = 1, class... Extra>
using gpt2 = staged<Strategy, N, MicroBatch<2>, NumMicroBatch<4>, Schedule<Sched>, Extra...>;
template <class Sched>
using gpt4 = quartered<Replicate, 1, MicroBatch<2>, NumMicroBatch<6>, Schedule<Sched>>;
template <class Sched>
using mlp4 = Plan<Pipeline<Replicate<1, Linear<12, 32>, ReLU>, Replicate<1, Linear<32, 32>, GeLU>,
                           Replicate<1, Linear<32, 32>, ReLU>, Replicate<1, Linear<32, 5, false>>>,
                  Loss<SoftmaxCrossEntropy>, MicroBatch<3>, NumMicroBatch<5>, Schedule<Sched>>;

template <class Sched>
using one_stage = on<Replicate, 1, 2, MicroBatch<2>, NumMicroBatch<3>, Schedule<Sched>>;

using ZB = ZeroBubbleH1;
using OneFOneB = PreferBackward;

static_assert(gpt2<ZB>::split_backward && !gpt2<OneFOneB>::split_backward);
// ZB-H1's bubble with F = B = W: (p − 1) / (3M + p − 1) against 1F1B's 3(p − 1) / (3M + 3(p − 1))
static_assert(gpt2<ZB>::bubble == sched::fraction(1, 3 * 4 + 1));
static_assert(gpt4<ZB>::bubble == sched::fraction(3, 3 * 6 + 3));
static_assert(gpt4<OneFOneB>::bubble == sched::fraction(3, 6 + 3));
// the stash lives until W: every stage holds up to p micro-batches (1F1B's first stage)
static_assert(gpt4<ZB>::peak_in_flight(3) == 4 && gpt4<OneFOneB>::peak_in_flight(3) == 1);

// the layers whose B and W run apart (so the equalities below exercise the split path):
// both embeddings, the five LayerNorms, both attentions and the five Linear layers
template <class P>
constexpr int split_calls() {
  int n = 0;
  for (const auto& c : lower::lowered<P>::tables.calls) n += c.dy_keep.empty() ? 0 : 1;
  return n;
}
static_assert(split_calls<gpt2<ZB>>() == 14 && split_calls<gpt2<OneFOneB>>() == 0);
static_assert(split_calls<gpt2<ZB, Split, 2>>() == 14 && split_calls<mlp4<ZB>>() == 4);
// and that memory is counted: each keeps its output's gradient (attention also its QKV gradient)
static_assert(gpt2<ZB>::activation_arena_bytes(0) > gpt2<OneFOneB>::activation_arena_bytes(0));

template <class P>
void check(const char* name, optimizer opt, double tol = 1e-9) {
  mpi_test::check_one_device<P, double>("zero-bubble", name, opt, tol, 5);
}

template <class A, class B, class T = double>
void same(const char* name, optimizer o = AdamW{.lr = 1e-2}) {
  mpi_test::same_bits<A, B, T>("zero-bubble", name, o);
}

const Adam adam{.lr = 1e-2};
const SGD sgd{.lr = 0.1, .momentum = 0.9};

}  // namespace

TEST_CASE("ZB-H1 equals one device") {
  check<one_stage<ZB>>("GPT one stage, 3 micro-batches, DP", adam);
  check<gpt2<ZB>>("GPT PP2 ZB-H1 (x DP2 on 4 ranks)", adam);
  if (W().size() == 4) check<gpt2<ZB, Split, 2>>("GPT PP2 x TP2 ZB-H1", adam);
  if (W().size() == 4) check<gpt2<ZB, Split, 2, SequenceParallel>>("GPT PP2 x TP2 + SP ZB-H1", adam);
  if (W().size() == 4) check<gpt2<ZB, Replicate, 1, Zero<1>>>("GPT PP2 x DP2 ZeRO-1 ZB-H1", adam);
  if (W().size() == 4) check<gpt4<ZB>>("GPT PP4 ZB-H1", sgd);
  if (W().size() == 4) check<mlp4<ZB>>("MLP PP4 ZB-H1", sgd);
}

TEST_CASE("ZB-H1 trains the same bits as 1F1B") {
  same<one_stage<OneFOneB>, one_stage<ZB>>("GPT one stage, 3 micro-batches");
  same<gpt2<OneFOneB>, gpt2<ZB>>("GPT PP2");
  same<gpt2<OneFOneB>, gpt2<ZB>, float>("GPT PP2 float");
  same<gpt2<OneFOneB>, gpt2<ZB>, bf16>("GPT PP2 bf16");
  if (W().size() == 4) same<gpt2<OneFOneB, Split, 2>, gpt2<ZB, Split, 2>>("GPT PP2 x TP2");
  if (W().size() == 4)
    same<gpt2<OneFOneB, Split, 2, SequenceParallel>, gpt2<ZB, Split, 2, SequenceParallel>>("GPT PP2 x TP2 + SP");
  if (W().size() == 4) same<gpt2<OneFOneB, Replicate, 1, Zero<1>>, gpt2<ZB, Replicate, 1, Zero<1>>>("GPT PP2 x DP2 ZeRO-1");
  if (W().size() == 4) same<gpt4<OneFOneB>, gpt4<ZB>>("GPT PP4");
  if (W().size() == 4) same<mlp4<OneFOneB>, mlp4<ZB>>("MLP PP4", sgd);
}
