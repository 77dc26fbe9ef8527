// Vocabulary parallelism: a classifier over 32000 classes and its loss, and an
// embedding table, each cut by vocabulary over four devices.
#include <strata/strata.hpp>

using namespace strata;

// Classifier + loss: the logits stay split; the loss exchanges three numbers per row
// (running max, sum of exponentials, target logit) instead of gathering the logits.
using Head = Split<4, LayerNorm<1024>, Linear<1024, 32000>>;
using P = Plan<Head, Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;

constexpr auto& classifier = P::layer_plans[1];
constexpr auto& loss = P::layer_plans[2];

static_assert(classifier.sig == signature::column_parallel);
static_assert(classifier.out_layout == sbp::split_feature);
static_assert(classifier.local_params[0] == shape_v<1024, 8000>);  // 32000 / 4 classes per device
static_assert(loss.sig == signature::vocab_loss && loss.in_layout == sbp::split_feature);
static_assert(loss.num_comms == 1);
static_assert(loss.comms[0].kind == collective::all_reduce);
static_assert(loss.comms[0].elems == 8 && loss.comms[0].calls == 3);  // one value per row, three times

// Embedding: each device holds 8000 rows of the table and looks up the ids it owns;
// the output is a partial sum (P), all-reduced where a layer needs it whole.
using E = Plan<Split<4, Embedding<32000, 1024>, LayerNorm<1024>, Linear<1024, 32000>>, Input<128>,
               Loss<SoftmaxCrossEntropy>, MicroBatch<8>>;

static_assert(E::layer_plans[0].sig == signature::vocab_embedding);
static_assert(E::layer_plans[0].local_params[0] == shape_v<8000, 1024>);
static_assert(E::layer_plans[0].out_layout == sbp::partial);
static_assert(E::layer_plans[0].out == shape_v<128, 1024>);
static_assert(E::layer_plans[1].comms[0].kind == collective::all_reduce);
static_assert(E::layer_plans[1].comms[0].elems == 8 * 128 * 1024);

int main() { return 0; }
