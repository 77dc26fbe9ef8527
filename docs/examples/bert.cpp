// BERT as EPL's chapter 8 trains it, at toy size: token + segment + position embeddings,
// bidirectional post-LN blocks, a masked-language-model head tied to the word embedding,
// and a loss over the masked positions only (every other label is ignore_label). Two
// pipeline stages (1F1B) times two data-parallel replicas, checked against the same model
// on one device: the loss is averaged over the masked positions of the whole global batch,
// so the replicas' different mask counts still give one device's update. On 4 processes the
// same model also runs as PP2 × TP2: the word table, the tied decoder and its bias cut by
// vocabulary, the loss vocabulary-parallel over the masked rows.
//   mpicxx -std=c++20 -O2 -Iinclude -DSTRATA_WITH_MPI bert.cpp -o bert -lopenblas
//   mpiexec -n 4 ./bert
// mpi-ranks: 2 4
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <span>

#include <strata/runtime/trainer.hpp>
#include <strata/runtime/verify.hpp>
#include <strata/strata.hpp>
using namespace strata;

constexpr int V = 64, S = 16, D = 16, H = 4;
constexpr int CLS = 60, SEP = 61, MASK = 62;  // special tokens at the top of the vocabulary
// post-LN: the sum, then the norm (BERT's order); not causal
using Block = Repeat<1, Residual<MultiHeadAttention<D, H, S>>, LayerNorm<D>,
                     Residual<Linear<D, 4 * D>, GeLU, Linear<4 * D, D>>, LayerNorm<D>>;
template <template <int, class...> class Strategy, int N>
using Net = Pipeline<Strategy<N, SegmentEmbedding<V, D, 2, SEP>, PositionEmbedding<S, D>, LayerNorm<D>, Repeat<2, Block>>,
                     Strategy<N, Repeat<2, Block>, Linear<D, D>, GeLU, LayerNorm<D>, TiedHead<V, D, true>>>;
template <template <int, class...> class Strategy, int N>
using Bert = Plan<Net<Strategy, N>, Input<S>, Loss<SoftmaxCrossEntropy>, MicroBatch<2>, NumMicroBatch<4>,
                  Schedule<PreferBackward>, Element<double>>;
using P = Bert<Replicate, 1>;     // PP2; on 4 processes × DP2
using PT = Bert<Split, 2>;        // PP2 × TP2 on 4 processes
static_assert(P::devices_per_replica == 2 && PT::devices_per_replica == 4 && P::labels_per_sample == S);

// "[CLS] a… [SEP] b… [SEP]" with a random split; 15% of the other positions are masked
// (80% [MASK], 10% a random token, 10% kept) and labelled with their token, the rest
// ignored.
void mlm_batch(int step, std::span<double> ids, std::span<std::int32_t> labels) {
  std::mt19937_64 g(99 + std::uint64_t(step));
  for (std::size_t s = 0; s < ids.size() / S; ++s) {
    const std::size_t a = 3 + g() % (S - 6);
    for (std::size_t t = 0; t < S; ++t) {
      const std::size_t i = s * S + t;
      const bool special = t == 0 || t == a || t == S - 1;
      const int token = t == 0 ? CLS : special ? SEP : int(g() % 60);
      ids[i] = token;
      labels[i] = ignore_label;
      if (!special && g() % 100 < 15) {
        labels[i] = token;
        const auto r = g() % 10;
        ids[i] = r < 8 ? MASK : r < 9 ? int(g() % 60) : token;
      }
    }
  }
}

int main(int argc, char** argv) {
  auto world = strata::init<Host>(argc, argv);
  try {
    const AdamW opt{.lr = 1e-2, .weight_decay = 0.01};
    const auto r = verify::against_one_device<P>(world, opt, 4, mlm_batch);
    if (world.rank() == 0) std::printf("%s", r.text().c_str());
    if (!r.ok()) return 1;
    if (world.size() != 4) return 0;
    const auto t = verify::against_one_device<PT>(world, opt, 4, mlm_batch);
    if (world.rank() == 0) std::printf("%s", t.text().c_str());
    return t.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    return world.fail(e);
  }
}
