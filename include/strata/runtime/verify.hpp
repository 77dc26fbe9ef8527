#pragma once
// strata::verify: check a plan against the same model on one device.
//
//   auto world = strata::init<Host>(argc, argv);
//   auto r = strata::verify::against_one_device<P>(world, Adam{.lr = 1e-3}, 10,
//                                                  strata::verify::random_data<P>());
//   if (world.rank() == 0) std::puts(r.text().c_str());
//   return r.ok() ? 0 : 1;
//
// Both runs start from the same seed and train on the same global batches: the plan on
// the world (each replica on its shard), the reference — the same layers as one
// Replicate<1> on one device, built on every rank — on the whole global batch, as
// data-parallel-degree chunks accumulated into one update, so the global batch is the
// world's, known at run time. Compared: every step's loss, every parameter after every
// step (relative L2 per tensor), an evaluation at the end, the bytes every kind of
// collective moved in each step against the plan's communication_of, the activation
// buffers against the lowered plan, and the replicas' parameters against each other, bit
// for bit. The verdict is the same on every rank.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/comm/counting.hpp"
#include "strata/exec/replicas.hpp"
#include "strata/exec/trainer.hpp"
#include "strata/exec/world.hpp"
#include "strata/plan/plan.hpp"
#include "strata/runtime/verify_report.hpp"

namespace strata::verify {

namespace detail {
template <class List>
struct replicate_one;
template <class... L>
struct replicate_one<type_list<L...>> {
  using type = Replicate<1, L...>;
};
}  // namespace detail

// P's layers (the loss included) on one device; a step of P::replica_batch samples.
template <class P>
using one_device_plan = Plan<typename detail::replicate_one<typename P::layers>::type, InputShape<P::input_shape>,
                             MicroBatch<P::micro_batch>, NumMicroBatch<P::num_micro_batch>>;

// Deterministic synthetic data for P: inputs N(0, 1) (token ids below P::vocabulary when
// the model reads ids) and labels below P::classes, from (seed, step) alone, so every
// rank makes the same global batch.
template <class P>
auto random_data(std::uint64_t seed = 1234) {
  return [seed]<class M>(int step, std::span<M> inputs, std::span<std::int32_t> labels) {
    std::mt19937_64 g(seed + static_cast<std::uint64_t>(step));
    std::normal_distribution<double> nd;
    for (auto& v : inputs) {
      if constexpr (P::reads_token_ids) v = static_cast<M>(static_cast<double>(g() % std::uint64_t(P::vocabulary)));
      else v = static_cast<M>(nd(g));
    }
    for (auto& v : labels) v = static_cast<std::int32_t>(g() % static_cast<std::uint64_t>(P::classes));
  };
}

inline double relative(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-30});
}

// Trains P on `w` and its one-device reference for `steps` steps, both from `seed` on
// the same global batches. data(step, inputs, labels) fills a global batch
// (P::global_batch(w.size()) samples: inputs × P::input_elems values of master_t<T>,
// labels × P::labels_per_sample) and must give every rank the same values; step == steps
// asks for the evaluation batch. Collective: every rank calls it.
//
// The verdict is the plan's arithmetic in float64 against one device in float64, within
// `default_tolerance<double>()` (the tolerance of HalfGradientReduce's fp16 rounding when
// the plan reduces in fp16) — whatever T is: layouts, collectives and schedule do not
// depend on the element type, and in float64 a correct plan agrees to rounding, so the
// verdict never mistakes an optimizer amplifying rounding for a bug. When T or R is not
// double the plan also runs in T against one device in R (R = double: against exact
// arithmetic), reported as `precision` and judged by `tolerance` and the optimizer's
// element bound (element_bound_of).
namespace detail {
template <class P, class T, class R, class Backend, class Comm, class Data>
report run(world<Backend, Comm>& w, optimizer opt, int steps, Data& data, double tolerance, double element_bound,
           std::uint64_t seed, const training_options& topts);

// `data` for a run in float64 when it fills only master_t<T> (a loader of floats): the
// same values, widened.
template <class M, class Data>
auto widened(Data& data) {
  return [&data]<class X>(int step, std::span<X> inputs, std::span<std::int32_t> labels) {
    if constexpr (std::is_invocable_v<Data&, int, std::span<X>, std::span<std::int32_t>>) {
      data(step, inputs, labels);
    } else {
      std::vector<M> m(inputs.size());
      data(step, std::span<M>(m), labels);
      std::copy(m.begin(), m.end(), inputs.begin());
    }
  };
}

template <class P, class T, class R, class Backend, class Comm, class Data>
report verdict(world<Backend, Comm>& w, const optimizer& opt, int steps, Data& data, double tolerance,
               std::uint64_t seed, const training_options& topts) {
  if constexpr (std::is_same_v<T, double> && std::is_same_v<R, double>) {
    return run<P, double, double>(w, opt, steps, data, tolerance, 0.0, seed, topts);
  } else {
    auto in_double = widened<master_t<T>>(data);
    const double exact = P::half_reduce != 0 ? default_tolerance<f16>() : default_tolerance<double>();
    report rep = run<P, double, double>(w, opt, steps, in_double, exact, 0.0, seed, topts);
    const element_bound eb = element_bound_of(opt, steps, topts.schedule);
    report mine = run<P, T, R>(w, opt, steps, data, tolerance, eb.bound, seed, topts);
    mine.bound_reason = eb.reason;
    rep.precision = static_cast<const comparison&>(mine);
    return rep;
  }
}
}  // namespace detail

// `tolerance` judges the run in T (the float64 verdict has its own); see above.
template <class P, class T = typename P::element_type, class R = T, class Backend, class Comm, class Data>
report against_one_device(world<Backend, Comm>& w, optimizer opt, int steps, Data&& data,
                          double tolerance = default_tolerance<T>(), std::uint64_t seed = 0x5eed,
                          const training_options& topts = {}) {
  // Errors every rank reaches alike (a world size the plan cannot use, a NaN loss, a bad
  // label from `data`) are thrown to the caller; any other ends the job, as a trainer's do.
  try {
    return detail::verdict<P, T, R>(w, opt, steps, data, tolerance, seed, topts);
  } catch (const agreed_error&) {
    throw;
  } catch (const std::exception& e) {
    if (w.can_abort()) w.abort(std::string("strata::verify failed on this rank alone: ") + e.what());
    throw;
  }
}

namespace detail {
template <class P, class T, class R, class Backend, class Comm, class Data>
report run(world<Backend, Comm>& w, optimizer opt, int steps, Data& data, double tolerance, double element_bound,
           std::uint64_t seed, const training_options& topts) {
  using X = master_t<T>;
  using XR = master_t<R>;
  using RP = one_device_plan<P>;
  report rep;
  rep.world = w.size();
  rep.steps = steps;
  rep.tolerance = tolerance;
  rep.element_bound = element_bound;
  rep.element = element_name<T>();
  rep.reference = element_name<R>();
  // the parallel run counts the bytes its communicators move (a private copy of the world)
  // (no abort function: errors reach the wrapper above, which ends the job if need be)
  comm::counting<Comm> counted(w.comm().split(0, w.rank()));
  world<Backend, comm::counting<Comm>> cw(nullptr, &counted);
  if constexpr (requires { cw.queue().set_threads(w.queue().threads()); }) cw.queue().set_threads(w.queue().threads());
  // a communicator with a stream (NCCL) runs on this world's queue, in order with its kernels
  if constexpr (requires { counted.inner().set_stream(cw.queue().stream()); })
    counted.inner().set_stream(cw.queue().stream());
  auto par = make_trainer<P, T>(cw, opt, seed);
  par.check_replicas_every(0);  // checked below, outside the counted steps
  par.use_graphs(false);        // every step calls the communicators, so every step is counted
  par.set_training_options(topts);
  const int dp = par.data_parallel();
  rep.data_parallel = dp;
  const std::size_t S = std::size_t(P::replica_batch), G = S * std::size_t(dp);
  rep.global_batch = static_cast<long long>(G);
  const std::size_t in = std::size_t(P::input_elems), lab = std::size_t(P::labels_per_sample);

  auto one = one_device_world<Backend>::make();
  if constexpr (requires { one.queue().set_threads(w.queue().threads()); })
    one.queue().set_threads(w.queue().threads());
  auto ref = make_trainer<RP, R>(one, opt, seed);
  if (P::gradient_reduce == reduce_method::sum) ref.set_gradient_multiplier(dp);  // dp × the mean gradient
  ref.check_replicas_every(0);
  ref.set_training_options(topts);

  const int stage = par.coord().stage;
  rep.buffers_as_planned = par.activation_bytes() == P::lowering::arena_bytes(stage, sizeof(T), sizeof(stat_t<T>));
  const auto planned = [&] {
    const auto t = P::communication_of(stage, dp, sizeof(T), sizeof(stat_t<T>), sizeof(X));
    std::array<long long, 7> b{};
    for (int i = 0; i < t.size; ++i) b[static_cast<std::size_t>(t.rows[static_cast<std::size_t>(i)].kind)] += t.rows[static_cast<std::size_t>(i)].bytes;
    if (w.size() > 1) b[static_cast<std::size_t>(collective::all_reduce)] += P::loss_books_bytes;
    // clipping's global norm: one double summed over the world
    if (w.size() > 1 && topts.clip_norm > 0) b[static_cast<std::size_t>(collective::all_reduce)] += 8;
    // loss scaling's verdict on Inf/NaN in the gradients: one double summed over the world
    if (w.size() > 1 && P::loss_scale::kind != loss_scale_kind::none) b[static_cast<std::size_t>(collective::all_reduce)] += 8;
    return b;
  }();

  std::vector<X> x(G * in);
  std::vector<XR> xr(G * in);
  std::vector<std::int32_t> y(G * lab);
  const std::size_t mine = std::size_t(par.coord().data) * S;
  auto shard = [&](std::size_t samples) {
    return batch_view<X>{.inputs = std::span<const X>(x).subspan(mine * in, samples * in),
                         .labels = std::span<const std::int32_t>(y).subspan(mine * lab, samples * lab),
                         .samples = samples};
  };
  auto whole = [&]() { return batch_view<XR>{.inputs = xr, .labels = y, .samples = G}; };
  auto note = [&](const std::string& what) {
    if (rep.first_difference.empty()) rep.first_difference = what;
  };
  for (int s = 0; s < steps; ++s) {
    data(s, std::span<X>(x), std::span<std::int32_t>(y));
    std::copy(x.begin(), x.end(), xr.begin());
    counted.clear();
    const step_result a = par.step(shard(S));
    for (std::size_t k = 1; k < planned.size(); ++k)
      if (planned[k] != counted.books().bytes[k] && rep.bytes_as_planned) {
        rep.bytes_as_planned = false;
        rep.bytes_difference = " (rank " + std::to_string(w.rank()) + ", stage " + std::to_string(stage) +
                               ", step " + std::to_string(s + 1) + ": " +
                               std::string(to_string(static_cast<collective>(k))) + " moved " +
                               std::to_string(counted.books().bytes[k]) + " bytes, the plan says " +
                               std::to_string(planned[k]) + ")";
      }
    const step_result b = ref.step(whole());
    const double e = relative(a.loss, b.loss);
    if (!std::isnan(rep.worst_loss) && !(e <= rep.worst_loss)) rep.worst_loss = e;  // a NaN sticks
    if (!(e <= tolerance))
      note("step " + std::to_string(s + 1) + ": loss " + std::to_string(a.loss) + ", one device " +
           std::to_string(b.loss) + " (relative " + std::to_string(e) + ")");
    const auto pa = par.gather_parameters();
    const auto pb = ref.gather_parameters();
    for (std::size_t i = 0; i < pa.size(); ++i)
      for (std::size_t k = 0; k < pa[i].size(); ++k) {
        double num = 0, den = 0, far = 0;
        for (std::size_t j = 0; j < pa[i][k].size(); ++j) {
          const double d = pa[i][k][j] - pb[i][k][j];
          num += d * d;
          den += pb[i][k][j] * pb[i][k][j];
          if (!(std::abs(d) <= far)) far = std::abs(d);  // a NaN sticks
        }
        const double pe = std::sqrt(num / std::max(den, 1e-300));
        const layer_plan& lp = P::layer_plans[i];
        const std::string name = "layer " + std::to_string(i) + " (" + std::string(lp.desc.name) + ") '" +
                                 std::string(lp.desc.params[k].name) + "'";
        if (rep.worst_param_tensor.empty() || (!std::isnan(rep.worst_param) && !(pe <= rep.worst_param))) {
          rep.worst_param = pe;  // a NaN sticks
          rep.worst_param_tensor = name;
        }
        if (pe <= tolerance) continue;
        // beyond the relative tolerance: within the optimizer's per-element bound, or a difference
        if (element_bound > 0 && (rep.worst_element_tensor.empty() || !(far <= rep.worst_element))) {
          rep.worst_element = far;
          rep.worst_element_tensor = name;
        }
        if (!(far <= element_bound))
          note("after step " + std::to_string(s + 1) + ": " + name + " differs by " + std::to_string(pe) +
               " (relative L2)" + (element_bound > 0 ? ", an element by " + std::to_string(far) : std::string()));
      }
  }
  // an evaluation of one global batch, every row valid
  data(steps, std::span<X>(x), std::span<std::int32_t>(y));
  std::copy(x.begin(), x.end(), xr.begin());
  const step_result ea = par.evaluate(shard(S), S);
  const step_result eb = ref.evaluate(whole(), G);
  rep.worst_eval = relative(ea.loss, eb.loss);
  // the same rows right, up to argmax ties that rounding may flip (none in double)
  const long long flips = std::is_same_v<T, double> && std::is_same_v<R, double> ? 0 : std::max(1LL, ea.rows / 100);
  rep.eval_correct_ok = std::abs(ea.correct - eb.correct) <= flips;
  rep.eval_loss = ea.loss;
  rep.eval_loss_reference = eb.loss;
  rep.eval_rows = ea.rows;
  rep.eval_correct = ea.correct;
  rep.eval_correct_reference = eb.correct;
  rep.replicas = par.check_replicas();
  // one verdict on every rank: the worst errors over the world
  // (a NaN error becomes +Inf: a max reduction may drop NaNs)
  auto no_nan = [](double e) { return std::isnan(e) ? std::numeric_limits<double>::infinity() : e; };
  std::array<double, 8> worst{no_nan(rep.worst_loss),          no_nan(rep.worst_param),
                              no_nan(rep.worst_eval),          rep.bytes_as_planned ? 0.0 : 1.0,
                              rep.buffers_as_planned ? 0.0 : 1.0, rep.eval_correct_ok ? 0.0 : 1.0,
                              rep.first_difference.empty() ? 0.0 : 1.0, no_nan(rep.worst_element)};
  {
    auto d = Backend::template allocate<double>(worst.size());
    Backend::upload(w.queue(), worst.data(), worst.size(), d.data());
    Backend::synchronize(w.queue());
    w.comm().all_reduce(d.data(), worst.size(), comm::reduce_op::max);
    w.comm().synchronize();
    Backend::download(w.queue(), d.data(), worst.size(), worst.data());
    Backend::synchronize(w.queue());
  }
  rep.worst_loss = worst[0];
  rep.worst_param = worst[1];
  rep.worst_eval = worst[2];
  if (worst[3] != 0.0 && rep.bytes_as_planned) {
    rep.bytes_as_planned = false;
    rep.bytes_difference = " (on another rank)";
  }
  rep.buffers_as_planned = worst[4] == 0.0;
  rep.eval_correct_ok = worst[5] == 0.0;
  if (worst[7] > rep.worst_element) {
    rep.worst_element = worst[7];
    rep.worst_element_tensor = "on another rank";
  }
  if (rep.first_difference.empty() && worst[6] != 0.0)
    rep.first_difference = "on another rank (worst loss " + std::to_string(rep.worst_loss) + ", parameter " +
                           std::to_string(rep.worst_param) + ")";
  return rep;
}
}  // namespace detail

}  // namespace strata::verify
