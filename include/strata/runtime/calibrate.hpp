#pragma once
// A hardware description (plan/hardware.hpp) of the machine a world runs on, measured, so
// that the cost model's step times (plan/predict.hpp, the search's estimates re-priced)
// are this machine's rather than a data sheet's. Every rank measures at the same time, as
// a training step would run them side by side (so processes sharing cores measure their
// share), and the world agrees on the mean of each rate:
//  * peak FLOP/s per element type: the queue's GEMM (cuBLAS, OpenBLAS on the rank's
//    threads) on m = n = k = `gemm_size` matrices (pick the model's size: small products run
//    below a large one's rate), the mean over at least `repeats` calls and `min_seconds`
//    after one (bf16 and f16 alike: the host computes both in float);
//  * memory bandwidth: a copy of `copy_bytes` (bytes read + written per second);
//  * the link between neighbouring ranks (k and k xor 1): a sendrecv of `link_bytes` each
//    way for the rate (per direction), of one double for the latency (both directions at
//    once: one one-way trip);
//  * the collectives over that link, as nccl-tests measures them: an all-reduce of one
//    float and one of `collective_bytes` (pick the model's: a micro-batch's activations)
//    over each pair, through the communicator the plan uses. The cost model's ring formula
//    (plan/cost.hpp's collective_s) is solved for the two (cost::fit_all_reduce): the call
//    latency (hardware::collective_latency_s) and the fraction of the link's rate the bytes
//    move at, the bus bandwidth over the link's (intra/inter_efficiency). MPI's all-reduce on
//    the host runs well below a sendrecv's rate (its reduction, its algorithm, libnbc's
//    progress): about 0.15 of it at 32 KiB on two processes of a 2-core machine.
//  Every figure of the link is the fastest of 5 rounds of calls.
// The other efficiencies are 1 (the rates are sustained ones already), one "SM" with 1 × 1 tiles (no
// tile quantization: right for a CPU, an approximation for a GPU), and the world is one node
// (intra = inter); when its processes' threads outnumber the cores, their compute is shared
// (hardware::shared_compute). A world of one measures no link: its link rate is 0, which the
// cost model reads as collectives that cost nothing — calibrate the world the plan runs on.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

#include "strata/backend/elementwise.hpp"
#include "strata/backend/gemm.hpp"
#include "strata/core/bf16.hpp"
#include "strata/core/communicator.hpp"
#include "strata/core/precision.hpp"
#include "strata/exec/world.hpp"
#include "strata/plan/cost.hpp"
#include "strata/plan/hardware.hpp"

namespace strata {

struct calibration_options {
  // the cores of the machine (one node): more processes × threads than this share them
  unsigned cores = std::thread::hardware_concurrency();
  std::size_t gemm_size = 512;
  std::size_t copy_bytes = std::size_t(64) << 20;
  std::size_t link_bytes = std::size_t(4) << 20;
  std::size_t collective_bytes = std::size_t(256) << 10;
  int repeats = 5;
  // a rate is taken over at least this long: processes sharing a core take turns in slices
  // of milliseconds, and a shorter window would catch one running alone
  double min_seconds = 0.2;
};

namespace detail {
// Seconds per call of f after one to warm up, every rank of `c` starting together: at
// least `repeats` calls and, where each rank calls f on its own (min_seconds > 0), at least
// min_seconds, so that processes sharing cores measure their share, as they run a step. A
// call that pairs ranks (a sendrecv) must run a fixed count on both: min_seconds = 0.
template <class Comm, class F>
double seconds_each(Comm& c, int repeats, double min_seconds, F&& f) {
  f();
  c.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  double s = 0;
  int n = 0;
  while (n < repeats || s < min_seconds) {
    f();
    ++n;
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return s / n;
}
// The fastest of `rounds` such means, for calls that pair ranks: a round that the machine's
// other work interrupted (a process descheduled mid-exchange) is not the link's time.
template <class Comm, class F>
double best_seconds_each(Comm& c, int rounds, int repeats, F&& f) {
  double best = seconds_each(c, repeats, 0.0, f);
  for (int r = 1; r < rounds; ++r) best = std::min(best, seconds_each(c, repeats, 0.0, f));
  return best;
}
template <class T, class Backend, class Comm>
double gemm_rate(typename Backend::queue& q, Comm& c, std::size_t n, int repeats, double min_seconds) {
  auto a = Backend::template allocate<T>(n * n), b = Backend::template allocate<T>(n * n),
       out = Backend::template allocate<T>(n * n);
  const std::vector<T> halves(n * n, T(0.5f));
  Backend::upload(q, halves.data(), n * n, a.data());
  Backend::upload(q, halves.data(), n * n, b.data());
  using S = gemm_scalar_t<T>;
  return 2.0 * double(n) * double(n) * double(n) / seconds_each(c, repeats, min_seconds, [&] {
           backend::gemm(q, backend::trans::N, backend::trans::N, n, n, n, S(1), static_cast<const T*>(a.data()), n,
                         static_cast<const T*>(b.data()), n, S(0), out.data(), n);
           Backend::synchronize(q);
         });
}

}  // namespace detail

template <class Backend, class Comm>
hardware calibrate(world<Backend, Comm>& w, const calibration_options& o = {}) {
  auto& q = w.queue();
  auto& link = w.comm();
  // rates: fp32, fp64, bf16, memory, link; latency; collective call latency, efficiency
  std::array<double, 8> m{};
  m[0] = detail::gemm_rate<float, Backend>(q, link, o.gemm_size, o.repeats, o.min_seconds);
  m[1] = detail::gemm_rate<double, Backend>(q, link, o.gemm_size, o.repeats, o.min_seconds);
  m[2] = detail::gemm_rate<bf16, Backend>(q, link, o.gemm_size, o.repeats, o.min_seconds);
  {
    const std::size_t n = o.copy_bytes / sizeof(float);
    auto x = Backend::template allocate<float>(n), y = Backend::template allocate<float>(n);
    const std::vector<float> zeros(n, 0.0f);
    Backend::upload(q, zeros.data(), n, x.data());
    m[3] = 2.0 * double(n * sizeof(float)) / detail::seconds_each(link, o.repeats, o.min_seconds, [&] {
             backend::copy(q, n, static_cast<const float*>(x.data()), y.data());
             Backend::synchronize(q);
           });
  }
  // the link: pairs (k, k xor 1) exchanging at once; an odd world's last rank has no partner
  // and sits the barriers out alone (a split of its own)
  const int peer = w.rank() ^ 1;
  auto pair = link.split(peer < w.size() ? w.rank() / 2 : w.size(), w.rank());
  if (w.size() > 1 && peer < w.size()) {
    const std::size_t n = o.link_bytes / sizeof(float);
    auto x = Backend::template allocate<float>(n), y = Backend::template allocate<float>(n);
    // synchronize: a communicator on a stream (NCCL) returns once the transfer is queued
    auto big = [&] {
      link.sendrecv(static_cast<const float*>(x.data()), n, peer, y.data(), n, peer, 7);
      link.synchronize();
    };
    auto one = Backend::template allocate<double>(2);
    auto tiny = [&] {
      link.sendrecv(static_cast<const double*>(one.data()), 1, peer, one.data() + 1, 1, peer, 8);
      link.synchronize();
    };
    m[4] = double(n * sizeof(float)) / detail::best_seconds_each(pair, 5, o.repeats, big);
    m[5] = detail::best_seconds_each(pair, 5, o.repeats * 4, tiny);
    const std::size_t nc = std::max<std::size_t>(1, o.collective_bytes / sizeof(float));
    // zeros: summed into themselves call after call, they stay finite and normal
    auto c = Backend::template allocate<float>(nc);
    const std::vector<float> zeros(nc, 0.0f);
    Backend::upload(q, zeros.data(), nc, c.data());
    Backend::synchronize(q);
    auto all_reduce = [&](std::size_t count) {
      return detail::best_seconds_each(pair, 5, o.repeats * 4, [&] {
        pair.all_reduce(c.data(), count, comm::reduce_op::sum);
        pair.synchronize();
      });
    };
    const double small = all_reduce(1);
    const auto fit = cost::fit_all_reduce(small, all_reduce(nc), double(nc * sizeof(float)), m[4], m[5]);
    m[6] = fit.call_s;
    m[7] = fit.efficiency;
  }
  // the world's mean of each (ranks without a partner count the others' link figures)
  std::array<double, 10> sum{m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[4] > 0 ? 1.0 : 0.0, 1.0};
  {  // through backend memory: a device's communicator reduces device buffers
    auto b = Backend::template allocate<double>(sum.size());
    Backend::upload(q, sum.data(), sum.size(), b.data());
    Backend::synchronize(q);
    link.all_reduce(b.data(), sum.size(), comm::reduce_op::sum);
    link.synchronize();
    Backend::download(q, static_cast<const double*>(b.data()), sum.size(), sum.data());
    Backend::synchronize(q);
  }
  const double ranks = sum[9], linked = sum[8] > 0 ? sum[8] : 1;
  hardware hw{};
  hw.name = "calibrated";
  hw.flops_fp32 = sum[0] / ranks;
  hw.flops_fp64 = sum[1] / ranks;
  hw.flops_bf16 = hw.flops_fp16 = sum[2] / ranks;
  hw.gemm_efficiency = 1.0;
  hw.sm_count = 1;
  hw.gemm_tiles = {{{1, 1}, {1, 1}, {1, 1}}};
  hw.hbm_bytes_per_s = sum[3] / ranks;
  hw.hbm_efficiency = 1.0;
  hw.devices_per_node = w.size();
  if constexpr (requires { q.threads(); })  // host queues: their threads on the machine's cores
    hw.shared_compute = o.cores > 0 && static_cast<unsigned>(w.size()) * q.threads() > o.cores;
  hw.intra_bytes_per_s = hw.inter_bytes_per_s = sum[4] / linked;
  hw.intra_latency_s = hw.inter_latency_s = sum[5] / linked;
  hw.collective_latency_s = sum[6] / linked;
  hw.intra_efficiency = hw.inter_efficiency = sum[8] > 0 ? sum[7] / linked : 1.0;
  hw.p2p_efficiency = 1.0;  // the link's rate is the sendrecv's own
  return hw;
}

}  // namespace strata
