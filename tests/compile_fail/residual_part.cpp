// Rule residual-part: a skip connection is a buffer of one device group, so a residual
// must begin and end in the same pipeline part. Written by hand here: the residual opens
// at layer 1 in part 0 and closes in part 1.
// expected-error: strata rule \[residual-part\]
// expected-error: residual_part<(1, 0, 1>|BeginLayer, BeginPart, EndPart> \[with BeginLayer=1, BeginPart=0, EndPart=1\])
#include <strata/strata.hpp>

using namespace strata;
using layers::ResidualBegin, layers::ResidualEnd;

using P = Plan<Pipeline<Replicate<1, Linear<16, 16>, ResidualBegin, Linear<16, 16>>,
                        Replicate<1, Linear<16, 16>, ResidualEnd, Linear<16, 4>>>,
               Loss<SoftmaxCrossEntropy>>;
static_assert(P::valid);
