// Rule split-vocab (classifier): under Split<3> layer 1, Linear<784, 1000>, feeds the
// loss, so it runs vocabulary-parallel and cuts its 1000 classes 3 ways (1000 % 3 != 0).
// expected-error: strata rule \[split-vocab\]
// expected-error: split_vocab_divisible<(1, 1000, 3>|Index, Vocab, N> \[with Index=1, Vocab=1000, N=3\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<3, Flatten, Linear<784, 1000>, SoftmaxCrossEntropy>, MicroBatch<16>>;
static_assert(P::valid);
