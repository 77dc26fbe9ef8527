// Every layout conversion the executor runs (exec/convert.hpp), on 2, 4 and 8 ranks,
// against the whole tensor: from each layout a device can hold (B, S(0), S(-1), P) to
// each it can be asked for, the result is exactly this device's share, and the bytes
// the collective moved are what the planner counts (conversion_elems).
// mpi-ranks: 2 4 8
#include "doctest_world.hpp"

#include <cstdio>
#include <vector>

#include <strata/comm/counting.hpp>
#include <strata/exec/convert.hpp>
#include <strata/runtime/host.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {

// Element (r, c) of the whole tensor: exact in double, distinct everywhere.
double whole(std::size_t r, std::size_t c) { return double(r) * 1000.0 + double(c); }

// This device's share of the whole R × C tensor in layout l. A partial sum: rank k ≥ 1
// holds (k + 1)/2 everywhere and rank 0 the rest, so the parts add up to the whole exactly.
std::vector<double> share(sbp l, std::size_t R, std::size_t C, int n, int k) {
  std::vector<double> v;
  if (l == sbp::split_batch) {
    for (std::size_t r = k * (R / n); r < (k + 1) * (R / n); ++r)
      for (std::size_t c = 0; c < C; ++c) v.push_back(whole(r, c));
  } else if (l == sbp::split_feature) {
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t c = k * (C / n); c < (k + 1) * (C / n); ++c) v.push_back(whole(r, c));
  } else if (l == sbp::partial) {
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t c = 0; c < C; ++c) {
        const double others = double(n) * (n + 1) / 4.0 - 0.5;  // Σ_{j=1}^{n-1} (j + 1)/2
        v.push_back(k == 0 ? whole(r, c) - others : double(k + 1) * 0.5);
      }
  } else {
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t c = 0; c < C; ++c) v.push_back(whole(r, c));
  }
  return v;
}

}  // namespace

TEST_CASE("every conversion yields this device's share, moving the planned bytes") {
  auto& w = mpi_test::world();
  const int n = w.size(), k = w.rank();
  comm::counting<comm::mpi_communicator> part(w.comm().split(0, k));
  Host::queue q(1);
  const std::size_t R = 4 * std::size_t(n), C = 3 * std::size_t(n);
  const sbp layouts[] = {sbp::broadcast, sbp::split_batch, sbp::split_feature, sbp::partial};
  int ran = 0;
  for (sbp from : layouts)
    for (sbp to : layouts) {
      if (from == to || to == sbp::partial) continue;  // nothing converts into a partial sum
      lower::conversion cv;
      cv.from = from;
      cv.to = to;
      cv.coll = detail::convert(from, to);
      cv.rows = static_cast<long long>(R);
      cv.cols = static_cast<long long>(C);
      const std::vector<double> src = share(from, R, C, n, k), want = share(to, R, C, n, k);
      std::vector<double> dst(want.size(), -1.0), staging(R * C, -1.0);
      part.clear();
      exec::run_conversion(q, part, cv, src.data(), dst.data(), staging.data(), n, k);
      INFO(to_string(from) << " -> " << to_string(to) << " on " << n << " ranks");
      CHECK(dst == want);
      const long long planned = detail::conversion_elems(cv.coll, static_cast<long long>(R * C), n) * 8;
      const long long moved = part.books().of(collective::all_reduce) + part.books().of(collective::all_gather) +
                              part.books().of(collective::reduce_scatter) + part.books().of(collective::all_to_all);
      CHECK(moved == (cv.coll == collective::none ? 0 : planned));
      ++ran;
    }
  CHECK(ran == 9);
}
