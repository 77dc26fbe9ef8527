// Rule split-vocab (embedding): Split<3> cuts the table of layer 0, Embedding<1000, 512>,
// along its vocabulary of 1000, which 3 devices do not divide.
// expected-error: strata rule \[split-vocab\]
// expected-error: split_vocab_divisible<(0, 1000, 3>|Index, Vocab, N> \[with Index=0, Vocab=1000, N=3\])
#include <strata/strata.hpp>

using namespace strata;

using P = Plan<Split<3, Embedding<1000, 512>, Linear<512, 12>, SoftmaxCrossEntropy>, MicroBatch<16>>;
static_assert(P::valid);
