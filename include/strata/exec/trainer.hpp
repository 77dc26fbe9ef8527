#pragma once
// The trainer: what a user calls. It checks the run-time inputs (the world size, the
// batch, its values) on every rank before any collective, hands the batch to the
// executor, runs the lowered program — recorded once and replayed as a graph on
// backends that have graphs — reads the loss, and runs the optimizer action.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "strata/core/agreed_error.hpp"
#include "strata/core/communicator.hpp"
#include "strata/core/finite.hpp"
#include "strata/core/precision.hpp"
#include "strata/core/threads.hpp"
#include "strata/exec/batch.hpp"
#include "strata/exec/batch_values.hpp"
#include "strata/exec/checkpoint.hpp"
#include "strata/exec/executor.hpp"
#include "strata/exec/init.hpp"
#include "strata/exec/optimizer.hpp"
#include "strata/exec/replicas.hpp"
#include "strata/exec/world.hpp"
#include "strata/plan/plan.hpp"

namespace strata {

namespace exec {
struct no_graph {};
template <class B, class = void>
struct graph_of {
  using type = no_graph;
};
template <class B>
struct graph_of<B, std::void_t<typename B::graph>> {
  using type = typename B::graph;
};

template <class List>
struct executable_list;
template <class... L>
struct executable_list<type_list<L...>> {
  static constexpr bool value = [] {
    constexpr std::array<bool, sizeof...(L) + 1> ok{ExecutableLayer<L>..., true};
    for (bool b : ok)
      if (!b) return false;
    return true;
  }();
};
}  // namespace exec

// T is the compute type: float or double (one precision throughout), or bf16 / f16 (mixed
// precision: 16-bit activations and parameter copies for the GEMMs, FP32 master weights,
// gradients, optimizer state and statistics; see strata/core/precision.hpp; f16 wants a
// LossScale, the default for Element<f16> plans).
// The batch is given in master_t<T> (float for bf16).
//
// Errors: a problem every rank sees the same way (world size, batch shape or values, a
// NaN loss, replicas that differ) is an agreed_error thrown on every rank; any other
// exception escaping a call on one rank (a failed collective, a user layer that throws)
// ends every rank of a multi-process job after printing the rank and the message, so no
// rank is left waiting in a collective (exec/world.hpp).
template <class P, class T, class Backend, class Comm>
class trainer {
  static_assert(is_precision_v<T>, "trainer<T>: T is float, double, bf16 or f16");
  // An invalid plan has already raised its rule (plan/passes): no second error here.
  static_assert(exec::executable_list<typename P::layers>::value,
                "trainer: this plan uses a layer without forward/backward; a user layer runs once it defines "
                "them (see docs/concepts.md)");

  using M = master_t<T>;
  using queue = typename Backend::queue;
  using executor = exec::executor<P, T, Backend, Comm>;
  static constexpr std::size_t step_samples = executor::step_samples;
  static constexpr std::size_t per_sample = executor::per_sample;
  static constexpr std::size_t labels_per_sample = executor::labels_per_sample;
  static constexpr bool embedding_first = executor::embedding_first;
  static constexpr bool has_graphs = requires { typename Backend::graph; };
  // A queue that runs work on the CPU's threads (the host backend's).
  static constexpr bool host_queue = requires(queue& q) { q.parallel_for(std::size_t(1), [](std::size_t) {}); };

 public:
  trainer(world<Backend, Comm>& w, optimizer opt, std::uint64_t seed = 0x5eed)
      : world_(w), q_(w.queue()), opt_(opt) {
    guarded("setting up the trainer", [&] { set_up(seed); });
  }

  int data_parallel() const { return dp_; }
  // Learning-rate schedule, weight-decay groups and gradient clipping (exec/optimizer.hpp).
  void set_training_options(const training_options& o) { train_opts_ = o; }
  const training_options& options() const { return train_opts_; }
  // The learning rate of the next update.
  double learning_rate() const {
    return std::visit([](const auto& o) { return o.lr; }, opt_) * train_opts_.schedule.factor(step_ + 1);
  }
  // The global gradient norm of the last step (before clipping; 0 unless clipping is on).
  double last_gradient_norm() const { return exec_->last_gradient_norm(); }
  // Record the step as a graph and replay it (backends that have graphs; default on).
  void use_graphs(bool on) { use_graph_ = on; }
  rank_coord coord() const { return me_; }
  long long steps() const { return step_; }
  // Updates applied: steps() minus the steps loss scaling skipped.
  long long updates() const { return updates_; }
  // The loss scale of the next step (1 without LossScale<...>).
  double loss_scale() const { return loss_scale_; }
  // Bytes of this device's activation buffers: P::activation_arena_bytes of its stage,
  // for this trainer's T.
  long long activation_bytes() const { return exec_->arena().bytes(); }
  // Benchmarks: time this device's forward, backward and W actions (see executor::compute_clock).
  void time_compute(bool on) { exec_->time_compute(on); }
  const typename executor::compute_clock& compute_times() const { return exec_->compute_times(); }
  // Writes a checkpoint into directory `dir` (exec/checkpoint.hpp): parameters, optimizer
  // state, the step (the learning-rate schedule's position) and `user`'s entries (the data
  // loader's position...). Collective; atomic: `dir` holds the old checkpoint or the new.
  void save_checkpoint(const std::string& dir, const std::map<std::string, std::string>& user = {}) {
    guarded("save_checkpoint", [&] { checkpoints().save(dir, step_, opt_, user, trainer_state()); });
  }
  // The same, written in the background (exec/checkpoint_async.hpp): returns once this
  // rank's state is copied to host memory. Committed at the next save, wait_for_checkpoint,
  // load or the trainer's end, which report a failed write (agreed_error; <dir> kept).
  void save_checkpoint_async(const std::string& dir, const std::map<std::string, std::string>& user = {}) {
    guarded("save_checkpoint", [&] {
      using ckpt = exec::checkpointer<P, T, Backend, Comm>;
      saving_.start(checkpoints().snapshot(dir, step_, opt_, user, trainer_state()), &ckpt::write,
                    [&c = world_.comm()](const auto& s, const std::string& p) { ckpt::commit(c, s, p); });
    });
  }
  // Collective: waits for the background save (if any) and commits it.
  void wait_for_checkpoint() { guarded("wait_for_checkpoint", [&] { saving_.finish(); }); }
  // Loads a checkpoint of the same model written by any plan (resharding as needed) and
  // continues from its step. A missing, truncated, corrupt or mismatched checkpoint is an
  // agreed_error on every rank, and the trainer is left as it was.
  checkpoint_info load_checkpoint(const std::string& dir) {
    return guarded("load_checkpoint", [&] { return took(checkpoints().load(dir, opt_)); });
  }
  // The same, for a checkpoint written by plan From: the reading map is From's (compile
  // time), and a checkpoint written by another plan is refused.
  template <class From>
  checkpoint_info load_checkpoint_from(const std::string& dir) {
    static_assert(sizeof(rule::checkpoint_same_model<exec::ckpt::same_model<From, P>()
                                                         ? -1
                                                         : exec::ckpt::first_model_difference<From, P>()>) != 0);
    return guarded("load_checkpoint", [&] { return took(checkpoints().template load_from<From>(dir, opt_)); });
  }

  // Compare every replicated parameter across the world after every n-th step (0: never);
  // differing bits throw an agreed_error naming the tensor and ranks. Default: the
  // environment's STRATA_CHECK_REPLICAS, else every 100 steps in debug builds (no NDEBUG).
  void check_replicas_every(long long n) { replica_every_ = n; }

  // One training step on this replica's batch of P::replica_batch samples, or of k times
  // as many: gradient accumulation over k chunks, then one update (no graph replay then).
  step_result step(const batch_view<M>& b) {
    return guarded("step", [&] { return step_on(b); });
  }

  // This replica's share of a global batch that every rank holds whole: samples
  // [d·n/D, (d+1)·n/D) of n for data-parallel replica d of D, so that step(share(g)) on
  // every rank trains on g. A count that does not divide, or inputs or labels of the wrong
  // size, is the same agreed_error on every rank (the global batch is the same everywhere).
  batch_view<M> share(const batch_view<M>& global) const {
    return exec::share_of(global, static_cast<std::size_t>(dp_), static_cast<std::size_t>(me_.data), per_sample,
                          labels_per_sample);
  }
  // The same for evaluation of a global batch whose first `valid` samples count and whose
  // rest pads it (to a multiple of D micro-batches): this replica's share and its own valid
  // count, as evaluate(b, valid) takes them.
  struct evaluation_share {
    batch_view<M> batch;
    std::size_t valid = 0;
  };
  evaluation_share share(const batch_view<M>& global, std::size_t valid) const {
    if (valid > global.samples)
      throw agreed_error("strata: share: the valid count " + std::to_string(valid) + " exceeds the global batch's " +
                         std::to_string(global.samples) + " samples");
    const batch_view<M> mine = share(global);
    const std::size_t first = static_cast<std::size_t>(me_.data) * mine.samples;
    return {mine, valid <= first ? 0 : std::min(valid - first, mine.samples)};
  }

  // Forward only (no update): mean loss and correct predictions over the world's batch.
  // This replica's batch is any positive multiple of the micro-batch, run in pieces of one
  // step's size; its first `valid` rows count and the rest are padding (a rank passes the
  // count of its own replica's shard, anything from 0 to the batch: the partial batch may
  // land on any replica). The result sums the valid rows of every replica.
  step_result evaluate(const batch_view<M>& b, std::size_t valid) {
    return guarded("evaluate", [&] { return evaluate_on(b, valid); });
  }

  // Every logical parameter, assembled on every rank (tests and checkpoints):
  // result[layer][tensor] holds the full tensor in row-major order (replica 0's copy).
  std::vector<std::vector<std::vector<double>>> gather_parameters() {
    return guarded("gather_parameters", [&] { return gather(); });
  }

  // The inverse of gather_parameters: every rank passes the whole model (the same values
  // everywhere) and keeps its shards of it. Optimizer state is left as it is.
  void set_parameters(const std::vector<std::vector<std::vector<double>>>& full) {
    guarded("set_parameters", [&] { scatter(full); });
  }

  // Collective: are the data-parallel replicas (and the devices of a part that hold a
  // whole tensor) still bit for bit identical? The same report on every rank.
  replica_report check_replicas() {
    return guarded("check_replicas", [&] {
      exec_->gather_whole();
      replica_report rep = exec::check_replicas<P, Backend>(q_, exec_->store(), world_.comm());
      exec_->store().drop_whole();
      return rep;
    });
  }

  // Multiplies every gradient (the one-device reference of a GradientReduce<ReduceSum>
  // plan on dp replicas uses dp, runtime/verify.hpp); before the first step.
  void set_gradient_multiplier(double m) {
    exec_->set_gradient_multiplier(m);
    if constexpr (has_graphs) graph_ = {};
  }

 private:
  void set_up(std::uint64_t seed) {
    const int W = world_.size();
    // Every rank computes the same verdict, so every rank throws the same error and
    // none reaches a collective.
    if (W % P::devices_per_replica != 0)
      throw agreed_error("strata: world size " + std::to_string(W) + " is not a multiple of the " +
                                  std::to_string(P::devices_per_replica) +
                                  " devices one replica of this plan uses (stages " + std::to_string(P::stages) +
                                  " x devices per stage " + std::to_string(P::part_devices) + "): run " +
                                  std::to_string(P::devices_per_replica) + ", " +
                                  std::to_string(2 * P::devices_per_replica) + ", " +
                                  std::to_string(3 * P::devices_per_replica) + ", ... processes");
    if (P::fixed_world != 0 && P::fixed_world != W)
      throw agreed_error("strata: the plan fixes World<" + std::to_string(P::fixed_world) +
                                  "> but the job runs " + std::to_string(W) + " processes");
    // the batch's checks run on the CPU's threads: the host queue's own, or a pool
    if constexpr (!host_queue) cpu_.emplace(default_threads());
    me_ = P::coord(world_.rank());
    dp_ = P::data_parallel(W);
    exec_.emplace(q_, world_.comm(), me_, dp_, seed);
    exec_->set_loss_scale(loss_scale_);
    if (const char* e = std::getenv("STRATA_CHECK_REPLICAS"); e && *e) {
      char* end = nullptr;
      const long long n = std::strtoll(e, &end, 10);
      if (*end != '\0' || n < 0)
        throw agreed_error(std::string("strata: STRATA_CHECK_REPLICAS='") + e + "' is not a number of steps");
      replica_every_ = n;
    }
  }

  // Runs f; an exception that is not agreed on by every rank ends the job (a world that
  // can: several processes), since the other ranks would wait for this one for ever.
  template <class F>
  decltype(auto) guarded(const char* what, F&& f) {
    const position_call at(what, step_);  // for a watchdog's verdict (core/position.hpp)
    try {
      return f();
    } catch (const agreed_error&) {
      throw;
    } catch (const std::exception& e) {
      if (world_.can_abort())
        world_.abort(std::string("strata: ") + what + " failed on this rank alone: " + e.what() +
                     " (ending every rank)");
      throw;
    } catch (...) {
      if (world_.can_abort())
        world_.abort(std::string("strata: ") + what + " failed on this rank alone: an exception not derived from "
                     "std::exception (ending every rank)");
      throw;
    }
  }

  // Every checkpoint call first commits the save in flight: never two, and a load sees it.
  exec::checkpointer<P, T, Backend, Comm> checkpoints() {
    saving_.finish();
    return {q_, world_.comm(), exec_->store(), exec_->states(), me_, {&exec_->group_comm(0), &exec_->group_comm(1)}};
  }
  // What a checkpoint keeps of the trainer besides the step: exact decimal text of the
  // loss scale (a power of two or the fixed scale) and the counters.
  std::map<std::string, std::string> trainer_state() const {
    char scale[64];
    std::snprintf(scale, sizeof scale, "%.17g", loss_scale_);
    return {{"updates", std::to_string(updates_)}, {"loss_scale", scale}, {"loss_scale.clean_steps", std::to_string(clean_)}};
  }
  checkpoint_info took(checkpoint_info i) {
    step_ = i.step;
    updates_ = i.step;
    clean_ = 0;
    loss_scale_ = P::loss_scale::initial;
    // a checkpoint of a run without loss scaling has them too (updates = steps, scale 1)
    if (auto u = i.trainer.find("updates"); u != i.trainer.end()) updates_ = std::stoll(u->second);
    if constexpr (scale_kind == loss_scale_kind::dynamic) {
      if (auto s = i.trainer.find("loss_scale"); s != i.trainer.end() && std::stod(s->second) != 1.0)
        loss_scale_ = std::stod(s->second);
      if (auto c = i.trainer.find("loss_scale.clean_steps"); c != i.trainer.end()) clean_ = std::stoll(c->second);
    }
    exec_->set_loss_scale(loss_scale_);
    if constexpr (has_graphs) graph_ = {};
    return i;
  }

  step_result step_on(const batch_view<M>& b) {
    check_batch(b, "step");
    exec_->set_step(step_);  // the step's random key (Dropout's mask), outside any recorded graph
    const int passes = static_cast<int>(b.samples / step_samples);
    // Everything between the upload and the loss read-back is the same device work every
    // step; a backend with graphs records it once (second step) and replays it.
    auto device_step = [&] { exec_->run_training_program(); };
    if (passes > 1) {
      for (int p = 0; p < passes; ++p) {
        upload(b, std::size_t(p) * step_samples, step_samples);
        exec_->run_training_program(p, passes);
      }
    } else if constexpr (has_graphs) {
      upload(b, 0, step_samples);
      if (use_graph_ && step_ >= 1) {
        if (!graph_.ready()) graph_.capture(q_, device_step);
        graph_.launch(q_);
      } else {
        device_step();
      }
    } else {
      upload(b, 0, step_samples);
      device_step();
    }
    const step_result r = books(exec_->finish_books());
    // the books are all-reduced: every rank sees the same loss
    if (!std::isfinite(r.loss))
      throw agreed_error("strata: step " + std::to_string(step_ + 1) + ": the loss is " + std::to_string(r.loss) +
                         " (NaN/Inf): stopping before the update");
    ++step_;
    step_result out = r;
    // the gradient was scaled for every row; rows labelled ignore_label do not count
    const double all_rows = double(step_samples * labels_per_sample) * passes * dp_;
    if (double(r.rows) > all_rows) throw std::logic_error("strata internal: the books count more rows than the batch has");
    const double counted = r.rows > 0 ? double(r.rows) : all_rows;
    out.skipped = !exec_->run_optimizer(opt_, updates_ + 1, step_, train_opts_, loss_scale_ * (counted / all_rows),
                                        scaled);
    if (!out.skipped) ++updates_;
    const double before = loss_scale_;
    if constexpr (scale_kind == loss_scale_kind::dynamic) {
      if (out.skipped) loss_scale_ *= 0.5, clean_ = 0;  // halve and retry
      else if (++clean_ == P::loss_scale::growth_interval) loss_scale_ *= 2.0, clean_ = 0;
      exec_->set_loss_scale(loss_scale_);
      if constexpr (has_graphs)
        if (loss_scale_ != before) graph_ = {};  // the scale is a kernel argument: record again
    }
    if (train_opts_.loss_scale_log && world_.rank() == 0 && (out.skipped || loss_scale_ != before)) {
      std::printf("[strata amp] step %lld: %s; loss scale %g -> %g\n", step_,
                  out.skipped ? "Inf/NaN in the gradients, update skipped" : "clean steps", before, loss_scale_);
      std::fflush(stdout);
    }
    if (replica_every_ > 0 && step_ % replica_every_ == 0) {
      exec_->gather_whole();
      const replica_report rep = exec::check_replicas<P, Backend>(q_, exec_->store(), world_.comm());
      exec_->store().drop_whole();
      if (!rep.identical)
        throw agreed_error("strata: after step " + std::to_string(step_) + " the replicas differ: " +
                           rep.first_difference);
    }
    return out;
  }

  step_result evaluate_on(const batch_view<M>& b, std::size_t valid) {
    check_batch(b, "evaluate", valid);
    if constexpr (has_graphs) graph_ = {};  // evaluation reuses the step's buffers: record again
    std::array<double, 3> total{};
    for (std::size_t first = 0; first < b.samples; first += step_samples) {
      const std::size_t samples = std::min(step_samples, b.samples - first);
      upload(b, first, samples);
      exec_->run_evaluation(static_cast<int>(samples / std::size_t(P::micro_batch)),
                            valid > first ? std::min(valid - first, samples) : 0);
      const auto v = exec_->finish_books();
      for (std::size_t k = 0; k < 3; ++k) total[k] += v[k];
    }
    return books(total);
  }

  void scatter(const std::vector<std::vector<std::vector<double>>>& full) {
    auto& store = exec_->store();
    std::string problem;
    if (full.size() != std::size_t(P::num_layers))
      problem = "set_parameters: " + std::to_string(full.size()) + " layers given, the plan has " +
                std::to_string(P::num_layers);
    for (int i = 0; problem.empty() && i < P::num_layers; ++i) {
      const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(i)];
      if (full[std::size_t(i)].size() != std::size_t(lp.desc.num_params)) {
        problem = "set_parameters: layer " + std::to_string(i) + " has " + std::to_string(lp.desc.num_params) +
                  " tensors, " + std::to_string(full[std::size_t(i)].size()) + " given";
        break;
      }
      for (int k = 0; k < lp.desc.num_params; ++k)
        if (full[std::size_t(i)][std::size_t(k)].size() != std::size_t(lp.desc.params[std::size_t(k)].shape.numel()))
          problem = "set_parameters: layer " + std::to_string(i) + " tensor '" +
                    std::string(lp.desc.params[std::size_t(k)].name) + "' has the wrong size";
    }
    // a tied tensor is one tensor: both of its places must carry the same values
    if (problem.empty() && P::tie.any() &&
        full[std::size_t(P::tie.user)][std::size_t(P::tie.user_param)] !=
            full[std::size_t(P::tie.owner)][std::size_t(P::tie.owner_param)])
      problem = "set_parameters: layer " + std::to_string(P::tie.user) + " (" +
                std::string(P::layer_plans[std::size_t(P::tie.user)].desc.name) + ") is tied to layer " +
                std::to_string(P::tie.owner) + " but is given other values";
    if (!problem.empty()) throw agreed_error("strata: " + problem);  // the same verdict on every rank
    std::vector<M> local;
    for (int i = 0; i < P::num_layers; ++i) {
      if (!store.owns(i)) continue;
      const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(i)];
      for (int k = 0; k < lp.desc.num_params; ++k) {
        const shape_t whole = lp.desc.params[std::size_t(k)].shape, mine = lp.local_params[std::size_t(k)];
        local.resize(static_cast<std::size_t>(mine.numel()));
        for (std::size_t e = 0; e < local.size(); ++e)
          local[e] = static_cast<M>(full[std::size_t(i)][std::size_t(k)][exec::logical_index(whole, mine, P::param_block(i, k, me_.index), e)]);
        store.set_master(i, k, local.data());
      }
    }
    store.refresh();
  }

  std::vector<std::vector<std::vector<double>>> gather() {
    constexpr int NL = P::num_layers;
    std::vector<std::vector<std::vector<double>>> out(NL);
    exec_->gather_whole();  // Zero<3>: the masters, whole
    auto& store = exec_->store();
    for (int i = 0; i < NL; ++i) {
      const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(i)];
      out[static_cast<std::size_t>(i)].resize(static_cast<std::size_t>(lp.desc.num_params));
      for (int k = 0; k < lp.desc.num_params; ++k) {
        const param_t& prm = lp.desc.params[static_cast<std::size_t>(k)];
        std::vector<double> full(static_cast<std::size_t>(prm.shape.numel()), 0.0);
        // one contributor per logical element: replica 0, and the first device of the part
        // that holds the block (device 0 for whole tensors)
        const shape_t local = lp.local_params[static_cast<std::size_t>(k)];
        if (store.owns(i) && me_.data == 0 && P::param_holder(i, k, me_.index) == me_.index) {
          std::vector<M> p(static_cast<std::size_t>(local.numel()));
          store.read_master(i, k, p.data());
          for (std::size_t e = 0; e < p.size(); ++e)
            full[exec::logical_index(prm.shape, local, P::param_block(i, k, me_.index), e)] = static_cast<double>(p[e]);
        }
        reduce_on_backend(full);
        out[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)] = std::move(full);
      }
    }
    store.drop_whole();
    return out;
  }

  static step_result books(const std::array<double, 3>& v) {
    step_result r;
    r.rows = static_cast<long long>(v[2]);
    r.loss = r.rows > 0 ? v[0] / v[2] : 0.0;
    r.correct = static_cast<long long>(v[1]);
    return r;
  }

  // Samples [first, first + samples) of the batch into the executor's batch buffers
  // (device to device when the batch is on the device), then device errors and ids.
  void upload(const batch_view<M>& b, std::size_t first, std::size_t samples) {
    const std::size_t x = samples * per_sample, n = samples * labels_per_sample;
    const M* in = b.inputs.data() + first * per_sample;
    const std::int32_t* lab = b.labels.data() + first * labels_per_sample;
    if (on_device(b.inputs.data())) {  // graphs read fixed buffers: copy, device to device
      copy(q_, x, in, exec_->inputs());
      copy(q_, n, lab, exec_->labels());
    } else {
      Backend::upload(q_, lab, n, exec_->labels());
      Backend::upload(q_, in, x, exec_->inputs());
    }
    exec_->prepare_batch();
  }

  // A sum over the world of a host vector, through backend memory (NCCL needs device buffers).
  void reduce_on_backend(std::vector<double>& v) {
    auto d = Backend::template allocate<double>(std::max<std::size_t>(v.size(), 1));
    Backend::upload(q_, v.data(), v.size(), d.data());
    world_.comm().all_reduce(d.data(), v.size(), comm::reduce_op::sum);
    Backend::download(q_, d.data(), v.size(), v.data());
    Backend::synchronize(q_);
  }

  // ---- run-time input checks, agreed on by every rank before any collective ----------------
  static bool on_device(const void* p) {
    if constexpr (requires { Backend::device_pointer(p); }) return p && Backend::device_pointer(p);
    else return false;
  }

  template <class F>
  void on_cpu(std::size_t tasks, F&& f) {
    if constexpr (host_queue) q_.parallel_for(tasks, f);
    else cpu_->run(tasks, f);
  }

  // step: a positive multiple of the replica's step; evaluate: of the micro-batch.
  void check_batch(const batch_view<M>& b, const char* what, std::size_t valid = 0) {
    const bool train = std::string_view(what) == "step";
    position().in = rank_position::phase::input_check;
    const std::size_t unit = train ? step_samples : std::size_t(P::micro_batch);
    const M* x = b.inputs.data();
    const std::int32_t* y = b.labels.data();
    std::string problem;
    if (b.samples == 0 || b.samples % unit != 0) {
      problem = "the batch holds " + std::to_string(b.samples) + " samples but this plan's replica consumes ";
      problem += train ? std::to_string(step_samples) + " per step (micro-batch " + std::to_string(P::micro_batch) +
                             " x " + std::to_string(P::num_micro_batch) +
                             " micro-batches; a multiple of it accumulates gradients)"
                       : "a positive multiple of the micro-batch " + std::to_string(P::micro_batch) +
                             " (pad the last chunk and pass the valid count)";
    } else if (b.inputs.size() != b.samples * per_sample)
      problem = "the batch's inputs hold " + std::to_string(b.inputs.size()) + " values, not " +
                std::to_string(b.samples) + " samples x " + std::to_string(per_sample) +
                " values per sample (the model's input shape)";
    else if (b.labels.size() != b.samples * labels_per_sample)
      problem = "the batch's labels hold " + std::to_string(b.labels.size()) + " values, not " +
                std::to_string(b.samples) + " samples x " + std::to_string(labels_per_sample) +
                " labels per sample (the loss's rows per sample)";
    else if (valid > b.samples)
      problem = "the valid count " + std::to_string(valid) + " exceeds the batch's " + std::to_string(b.samples) +
                " samples";
    else if (on_device(x) != on_device(y))
      problem = "the batch's inputs and labels must both be in host memory or both on the device";
    else if (on_device(x)) {
      // A device batch's labels (and token ids) are small: checked on the host; its
      // inputs' NaN/Inf scan runs on the device.
      device_labels_.resize(b.labels.size());
      Backend::download(q_, y, device_labels_.size(), device_labels_.data());
      if constexpr (embedding_first) {
        device_ids_.resize(b.inputs.size());
        Backend::download(q_, x, device_ids_.size(), device_ids_.data());
      }
      Backend::synchronize(q_);
      problem = check_values(embedding_first ? std::span<const M>(device_ids_) : std::span<const M>(),
                             device_labels_);
      if constexpr (requires { all_finite(q_, std::size_t(0), x); })
        if (problem.empty() && !embedding_first && !all_finite(q_, b.inputs.size(), x))
          problem = "the inputs contain NaN or Inf";
    } else {
      problem = check_values(b.inputs, b.labels);
      if (problem.empty() && !all_finite_bits(b.inputs.size(), x, [&](std::size_t t, auto&& f) { on_cpu(t, f); }))
        problem = "the inputs contain NaN or Inf";
    }
    try {
      world_.comm().agree(problem.empty(), std::string("strata: ") + what + ": " + problem);
    } catch (const comm::agreement_error& e) {
      throw agreed_error(e.what());  // every rank throws it (a failed agreement, e.g. a timeout, stays a comm_error)
    }
  }

  // Token ids (when an Embedding comes first; else `ids` is empty) and labels of a batch
  // in host memory.
  std::string check_values(std::span<const M> ids, std::span<const std::int32_t> labels) const {
    return exec::batch_value_problem<P, embedding_first>(ids, labels);
  }

  world<Backend, Comm>& world_;
  queue& q_;
  optimizer opt_;
  training_options train_opts_{};
  rank_coord me_{};
  int dp_ = 1;
  long long step_ = 0;     // training steps taken (the schedule's position)
  long long updates_ = 0;  // updates applied (steps minus those loss scaling skipped)
  static constexpr loss_scale_kind scale_kind = P::loss_scale::kind;
  static constexpr bool scaled = scale_kind != loss_scale_kind::none;
  double loss_scale_ = P::loss_scale::initial;
  long long clean_ = 0;  // dynamic scaling: clean steps since the scale last changed
  std::optional<executor> exec_;
  std::optional<thread_pool> cpu_;  // host-side checks of the batch, whatever the backend
  [[no_unique_address]] typename exec::graph_of<Backend>::type graph_{};
  bool use_graph_ = true;
#ifdef NDEBUG
  long long replica_every_ = 0;
#else
  long long replica_every_ = 100;
#endif
  std::vector<std::int32_t> device_labels_;
  std::vector<M> device_ids_;
  exec::background_save saving_;  // last, so ended (committed) first
};

// T defaults to the plan's Element<T> (float when the plan names none).
template <class P, class T = typename P::element_type, class Backend, class Comm>
trainer<P, T, Backend, Comm> make_trainer(world<Backend, Comm>& w, optimizer opt, std::uint64_t seed = 0x5eed) {
  return trainer<P, T, Backend, Comm>(w, opt, seed);
}

}  // namespace strata
