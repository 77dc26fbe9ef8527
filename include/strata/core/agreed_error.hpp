#pragma once
// An error every rank of the job throws with the same message, at the same point,
// because every rank reached the same verdict (a bad world size, a bad batch, a NaN
// loss after the step's all-reduce). No rank is left inside a collective, so the job may
// end normally. Any other exception escaping a training call on one rank would leave
// the others waiting: strata aborts the job instead (exec/world.hpp).
#include <stdexcept>

namespace strata {

class agreed_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace strata
