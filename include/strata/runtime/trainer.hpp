#pragma once
// The executor: each rank walks its stage's static program from the planner —
// forward/backward per micro-batch with the layout conversions the planner derived,
// pipeline sends and receives posted as the proven groups, the data-parallel gradient
// reduction and the optimizer step.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "strata/backend/bf16.hpp"
#include "strata/backend/host/kernels.hpp"
#include "strata/comm/communicator.hpp"
#include "strata/plan/plan.hpp"
#include "strata/runtime/init.hpp"
#include "strata/runtime/layer_exec.hpp"
#include "strata/runtime/optimizer.hpp"
#include "strata/runtime/world.hpp"

namespace strata {

// A replica's batch for one step (or one evaluation chunk): `samples` rows of the
// model's input (each input_shape.numel() values) and labels for the loss rows.
// Host memory, or (backends with device memory) memory already on the device: then
// the batch is copied device to device and its values are checked there.
template <class T>
struct batch_view {
  const T* inputs = nullptr;
  const std::int32_t* labels = nullptr;
  std::size_t samples = 0;
  std::size_t input_elems = 0;  // values per sample, checked against the plan
  std::size_t labels_per_sample = 1;
};

struct step_result {
  double loss = 0.0;  // mean over the global batch
  long long correct = 0;
  long long rows = 0;  // loss rows in the global batch
};

namespace runtime {

// A backend's memory arena and graph types, or empty stand-ins for backends without.
struct no_arena {};
struct no_graph {};
template <class B, class = void>
struct arena_of {
  using type = no_arena;
};
template <class B>
struct arena_of<B, std::void_t<typename B::arena>> {
  using type = typename B::arena;
};
template <class B, class = void>
struct graph_of {
  using type = no_graph;
};
template <class B>
struct graph_of<B, std::void_t<typename B::graph>> {
  using type = typename B::graph;
};

template <class List>
struct exec_table;
template <class... L>
struct exec_table<type_list<L...>> {
  static constexpr bool all_executable = [] {
    constexpr std::array<bool, sizeof...(L) + 1> ok{executable_layer<L>..., true};
    for (bool b : ok)
      if (!b) return false;
    return true;
  }();
};

}  // namespace runtime

// T is the compute type: float or double (one precision throughout), or bf16 (mixed
// precision: bf16 activations and parameter copies for the GEMMs, FP32 master
// weights, gradients, optimizer state and statistics; see strata/backend/bf16.hpp).
// The batch is given in master_t<T> (float for bf16).
template <class P, class T, class Backend, class Comm>
class trainer {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16>,
                "trainer<T>: T is float, double or bf16");
  static_assert(P::valid, "trainer: the plan is invalid (see the rule above)");
  static_assert(runtime::exec_table<typename P::layers>::all_executable,
                "trainer: this plan uses a layer the executor cannot run yet: built-in execution covers Linear, "
                "ReLU, GeLU, Flatten, LayerNorm, Embedding and SoftmaxCrossEntropy");
  static_assert(P::mode == tensor_mode::d1,
                "trainer: execution covers 1D tensor parallelism; 2D/2.5D/3D plans are planned and costed only");

  using buffer = typename Backend::template buffer<T>;
  using M = master_t<T>;
  using master_buffer = typename Backend::template buffer<M>;
  static constexpr bool mixed = is_mixed_v<T>;
  using queue = typename Backend::queue;
  static constexpr int NL = P::num_layers;
  // A layer's input gradient is needed when a layer before it has parameters, or when
  // it must flow back to an earlier pipeline part (whose program waits for it). Within
  // part 0 the need only grows with the index, so backward stops at the first layer
  // that needs none.
  static constexpr auto needs_input_grad = [] {
    std::array<bool, static_cast<std::size_t>(NL)> need{};
    bool params_before = false;
    for (int i = 0; i < NL; ++i) {
      const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(i)];
      need[static_cast<std::size_t>(i)] = params_before || lp.part > 0;
      params_before = params_before || lp.desc.num_params > 0;
    }
    return need;
  }();
  // loss rows per sample: one label each
  static constexpr std::size_t labels_per_sample = static_cast<std::size_t>(
      P::layer_plans[static_cast<std::size_t>(NL - 1)].in.numel() /
      P::layer_plans[static_cast<std::size_t>(NL - 1)].in.last());

 public:
  trainer(world<Backend, Comm>& w, optimizer opt, std::uint64_t seed = 0x5eed)
      : world_(w), q_(w.queue()), opt_(opt), seed_(seed) {
    const int W = w.size();
    // Every rank computes the same verdict, so every rank throws the same error and
    // none reaches a collective.
    if (W % P::devices_per_replica != 0)
      throw std::invalid_argument("strata: world size " + std::to_string(W) + " is not a multiple of the " +
                                  std::to_string(P::devices_per_replica) +
                                  " devices one replica of this plan uses (stages " + std::to_string(P::stages) +
                                  " x devices per stage " + std::to_string(P::part_devices) + ")");
    if (P::fixed_world != 0 && P::fixed_world != W)
      throw std::invalid_argument("strata: the plan fixes World<" + std::to_string(P::fixed_world) +
                                  "> but the job runs " + std::to_string(W) + " processes");
    if constexpr (has_arena) {
      // One reservation sized from the plan's compile-time memory analysis (parameters,
      // gradients, optimizer state, peak activations) with room for the executor's
      // staging and conversion buffers: no cudaMalloc once training runs.
      std::size_t bytes = 0;
      for (int s = 0; s < P::stages; ++s) bytes = std::max<std::size_t>(bytes, std::size_t(P::peak_memory_bytes(s)));
      bytes = 4 * bytes + 8 * std::size_t(P::micro_batch) * P::num_micro_batch *
                              (std::size_t(P::input_shape.numel()) + 1) * sizeof(M) + (std::size_t(256) << 20);
      if (const char* env = std::getenv("STRATA_ARENA_MB")) bytes = std::size_t(std::atoll(env)) << 20;
      arena_.emplace(bytes);
    }
    [[maybe_unused]] const auto on_arena = arena_scope();
    if constexpr (requires { q_.threads(); }) host_q_.set_threads(q_.threads());  // the rank's share of the cores
    me_ = P::coord(w.rank());
    dp_ = P::data_parallel(W);
    n_ = P::part_devices;
    Comm& c = w.comm();
    // Collective splits, in the same order on every rank.
    part_.emplace(c.split(me_.data * P::stages + me_.stage, me_.index));
    data_.emplace(c.split(me_.stage * n_ + me_.index, me_.data));
    part_data_.emplace(c.split(me_.stage, w.rank()));
    if constexpr (overlapped_comm) {
      // gradient reductions get their own stream, joined back with an event
      comm_q_.emplace();
      comm_done_ = typename Backend::event(false);
      data_->set_stream(comm_q_->stream());
      part_data_->set_stream(comm_q_->stream());
    }
    build_parameters();
    plan_buckets();
  }

  int data_parallel() const { return dp_; }
  // Record the step as a graph and replay it (backends that have graphs; default on).
  void use_graphs(bool on) { use_graph_ = on; }
  rank_coord coord() const { return me_; }
  long long steps() const { return step_; }

  // One training step on this replica's batch of micro_batch × num_micro_batch samples.
  step_result step(const batch_view<M>& b) {
    check_batch(b, std::size_t(P::micro_batch) * P::num_micro_batch, "step");
    [[maybe_unused]] const auto on_arena = arena_scope();
    begin_batch(b);
    // Everything between the uploads and the loss read-back is the same device work
    // every step; a backend with graphs records it once (second step) and replays it.
    auto device_step = [&] {
      for (auto& g : grads_) fill(q_, g.size(), M(0), g.data());
      fill(q_, std::size_t(3), 0.0, acc_.data());
      run_program();
      reduce_gradients();
    };
    if constexpr (has_graphs) {
      if (use_graph_ && step_ >= 1) {
        if (!graph_.ready()) graph_.capture(q_, device_step);
        graph_.launch(q_);
      } else {
        device_step();
      }
    } else {
      device_step();
    }
    const step_result r = finish_loss();
    if (!std::isfinite(r.loss))
      throw std::runtime_error("strata: step " + std::to_string(step_ + 1) + ": the loss is " +
                               std::to_string(r.loss) + " (NaN/Inf): stopping before the update");
    ++step_;
    apply_optimizer();
    return r;
  }

  // Forward only (no update): mean loss and correct predictions over `samples` rows,
  // of which the first `valid` count (padding rows of the last chunk do not).
  step_result evaluate(const batch_view<M>& b, std::size_t valid) {
    const std::size_t mb = P::micro_batch;
    const std::size_t chunks = (b.samples + mb - 1) / mb;
    check_batch(b, chunks * mb, "evaluate");
    [[maybe_unused]] const auto on_arena = arena_scope();
    if constexpr (has_graphs) graph_ = {};  // evaluation reuses the step's buffers: record again
    begin_batch(b);
    fill(q_, std::size_t(3), 0.0, acc_.data());
    valid_rows_ = std::min(valid, b.samples);
    for (int j = 0; j < static_cast<int>(chunks); ++j)
      for (int part = 0; part < P::num_parts; ++part) {
        if (P::stage_of_part(part) != me_.stage) continue;
        forward_part(part, j, /*train=*/false);
        if (part + 1 < P::num_parts && P::stage_of_part(part + 1) != me_.stage) {
          buffer& out = out_act(part, j);
          world_.comm().send(out.data(), out_size(part), peer_stage(P::stage_of_part(part + 1)), tag(0, j, part));
        }
      }
    valid_rows_ = static_cast<std::size_t>(-1);
    return finish_loss();
  }

  // Every logical parameter, assembled on every rank (tests and checkpoints):
  // result[layer][tensor] holds the full tensor in row-major order.
  std::vector<std::vector<std::vector<double>>> gather_parameters() {
    std::vector<std::vector<std::vector<double>>> out(NL);
    for (int i = 0; i < NL; ++i) {
      const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(i)];
      out[static_cast<std::size_t>(i)].resize(static_cast<std::size_t>(lp.desc.num_params));
      for (int k = 0; k < lp.desc.num_params; ++k) {
        const param_t& prm = lp.desc.params[static_cast<std::size_t>(k)];
        std::vector<double> full(static_cast<std::size_t>(prm.shape.numel()), 0.0);
        const auto it = tensors_.find({i, k});
        // one contributor per logical element: replica 0, and device 0 for whole tensors
        if (it != tensors_.end() && me_.data == 0) {
          const tensor_ref& t = it->second;
          const shape_t local = lp.local_params[static_cast<std::size_t>(k)];
          const bool whole = local == prm.shape;
          if (!whole || me_.index == 0) {
            std::vector<M> p(t.size);
            Backend::download(q_, params_[t.group].data() + t.offset, t.size, p.data());
            Backend::synchronize(q_);
            for (std::size_t e = 0; e < t.size; ++e)
              full[runtime::logical_index(prm.shape, local, me_.index, e)] = static_cast<double>(p[e]);
          }
        }
        reduce_on_backend(full, comm::reduce_op::sum);
        out[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)] = std::move(full);
      }
    }
    return out;
  }

 private:
  struct tensor_ref {
    int group = 0;  // 0: reduced over data; 1: over part × data
    std::size_t offset = 0, size = 0;
  };
  struct act_key {
    int part, mb;
    friend bool operator<(const act_key& a, const act_key& b) { return a.part != b.part ? a.part < b.part : a.mb < b.mb; }
  };

  world<Backend, Comm>& world_;
  queue& q_;
  optimizer opt_;
  std::uint64_t seed_;
  rank_coord me_{};
  int dp_ = 1, n_ = 1;
  long long step_ = 0;
  std::optional<Comm> part_, data_, part_data_;  // split once in the constructor
  std::array<master_buffer, 2> params_, grads_, opt_m_, opt_v_;
  std::array<buffer, 2> work_;  // mixed precision: the compute-type copies of params_ the layers read
  std::array<std::size_t, 2> group_elems_{};  // elements in each flat group (buffers hold at least 1)
  std::map<std::pair<int, int>, tensor_ref> tensors_;
  batch_view<M> batch_{};
  std::size_t valid_rows_ = static_cast<std::size_t>(-1);
  runtime::loss_io<T> loss_{};
  backend::host::queue host_q_{};  // the batch's checks run on the CPU's threads, whatever the backend
  typename Backend::template buffer<double> acc_;
  typename Backend::template buffer<std::int32_t> labels_;
  master_buffer inputs_;  // this step's inputs in backend memory: graphs read them from a fixed place
  typename Backend::template buffer<std::int32_t> ids_;  // token ids of the batch, when an Embedding comes first
  static constexpr bool embedding_first = P::layer_plans[0].desc.role == layer_role::embedding;

  static constexpr bool has_arena = requires { typename Backend::arena; };
  static constexpr bool has_graphs = requires { typename Backend::graph; };
  std::optional<typename runtime::arena_of<Backend>::type> arena_;
  [[no_unique_address]] typename runtime::graph_of<Backend>::type graph_{};
  bool use_graph_ = true;
  // Communicators that can run on another stream (NCCL) overlap gradient reductions.
  static constexpr bool overlapped_comm =
      requires(Comm& c, queue& q, typename Backend::event& e) {
        c.set_stream(q.stream());
        c.wait_for(q.stream());
        c.record(e.native());
      };
  std::optional<queue> comm_q_;
  typename Backend::event comm_done_{};
  auto arena_scope() {
    if constexpr (has_arena) return std::optional<typename Backend::arena::scope>(std::in_place, *arena_);
    else return 0;
  }
  std::map<act_key, buffer> in_, out_, gin_, gout_;  // per (part, micro-batch)
  std::map<act_key, std::vector<runtime::stash<Backend, T>>> stash_;
  std::vector<std::int32_t> labels_scratch_;

  Comm& part_comm() { return *part_; }

  // ---- parameters --------------------------------------------------------------------------
  bool owns_layer(int i) const { return P::stage_of_part(P::layer_plans[static_cast<std::size_t>(i)].part) == me_.stage; }

  void build_parameters() {
    std::array<std::size_t, 2> total{};
    for (int i = 0; i < NL; ++i) {
      if (!owns_layer(i)) continue;
      const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(i)];
      for (int k = 0; k < lp.desc.num_params; ++k) {
        const int g = lp.grad_group[static_cast<std::size_t>(k)] == group_axis::part_data ? 1 : 0;
        const std::size_t n = static_cast<std::size_t>(lp.local_params[static_cast<std::size_t>(k)].numel());
        tensors_[{i, k}] = tensor_ref{g, total[static_cast<std::size_t>(g)], n};
        total[static_cast<std::size_t>(g)] += n;
      }
    }
    for (int g = 0; g < 2; ++g) {
      const std::size_t n = std::max<std::size_t>(total[static_cast<std::size_t>(g)], 1);
      group_elems_[static_cast<std::size_t>(g)] = total[static_cast<std::size_t>(g)];
      params_[static_cast<std::size_t>(g)] = Backend::template allocate<M>(n);
      grads_[static_cast<std::size_t>(g)] = Backend::template allocate<M>(n);
      opt_m_[static_cast<std::size_t>(g)] = Backend::template allocate<M>(n);
      opt_v_[static_cast<std::size_t>(g)] = Backend::template allocate<M>(n);
      fill(q_, n, M(0), params_[static_cast<std::size_t>(g)].data());
      fill(q_, n, M(0), opt_m_[static_cast<std::size_t>(g)].data());
      fill(q_, n, M(0), opt_v_[static_cast<std::size_t>(g)].data());
      if constexpr (mixed) work_[static_cast<std::size_t>(g)] = Backend::template allocate<T>(n);
    }
    // Values from the logical element index: the same model whatever the sharding.
    std::vector<M> host;
    for (const auto& [key, t] : tensors_) {
      const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(key.first)];
      const param_t& prm = lp.desc.params[static_cast<std::size_t>(key.second)];
      const shape_t local = lp.local_params[static_cast<std::size_t>(key.second)];
      host.resize(t.size);
      for (std::size_t e = 0; e < t.size; ++e)
        host[e] = static_cast<M>(runtime::initial_value(lp.desc, key.first, key.second,
                                                        runtime::logical_index(prm.shape, local, me_.index, e), seed_));
      Backend::upload(q_, host.data(), t.size, params_[t.group].data() + t.offset);
      Backend::synchronize(q_);  // `host` is reused for the next tensor
    }
    refresh_working_copies();
  }

  // Mixed precision: the layers read bf16 copies of the master parameters, rounded
  // to nearest even after every update (Megatron's bf16 recipe).
  void refresh_working_copies() {
    if constexpr (mixed)
      for (std::size_t g = 0; g < 2; ++g)
        cast_elements(q_, params_[g].size(), params_[g].data(), work_[g].data());
  }
  T* layer_params(int g) {
    if constexpr (mixed) return work_[static_cast<std::size_t>(g)].data();
    else return params_[static_cast<std::size_t>(g)].data();
  }

  runtime::step_io<Backend, T> io_for(int i, std::size_t rows, std::size_t in_cols, std::size_t out_cols) {
    const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(i)];
    runtime::step_io<Backend, T> io{q_, lp, rows, in_cols, out_cols, me_.index, n_, {}, {}};
    for (int k = 0; k < lp.desc.num_params; ++k) {
      const tensor_ref& t = tensors_.at({i, k});
      io.params.push_back(layer_params(t.group) + t.offset);
      io.grads.push_back(grads_[t.group].data() + t.offset);
    }
    return io;
  }

  // ---- shapes and layouts --------------------------------------------------------------------
  // Rows of layer i's input/output over the whole micro-batch, and local rows/cols for a layout.
  static constexpr std::size_t full_rows(const shape_t& s) {
    return std::size_t(P::micro_batch) * static_cast<std::size_t>(s.numel() / std::max(s.last(), 1));
  }
  std::size_t local_rows(std::size_t rows, sbp l) const { return l == sbp::split_batch ? rows / std::size_t(n_) : rows; }
  std::size_t local_cols(std::size_t cols, sbp l) const { return l == sbp::split_feature ? cols / std::size_t(n_) : cols; }

  // Moves x (layout `from`, full size rows × cols) to layout `to`; returns the new buffer.
  buffer convert(buffer x, sbp from, sbp to, std::size_t rows, std::size_t cols) {
    if (from == to || n_ == 1) return x;
    if (to == sbp::partial) {
      // a broadcast tensor is one valid partial split; nothing else converts to P
      if (from != sbp::broadcast) throw std::logic_error("strata: no conversion into a partial-sum layout");
      return x;
    }
    Comm& c = part_comm();
    const std::size_t N = std::size_t(n_), idx = std::size_t(me_.index);
    if (from == sbp::partial && to == sbp::split_batch) {
      buffer y = Backend::template allocate<T>(rows / N * cols);
      c.reduce_scatter(x.data(), y.data(), rows / N * cols, comm::reduce_op::sum);
      return y;
    }
    // Everything else goes through the whole tensor: gather or reduce, then slice.
    buffer whole;
    if (from == sbp::partial) {
      c.all_reduce(x.data(), rows * cols, comm::reduce_op::sum);
      whole = std::move(x);
    } else if (from == sbp::split_batch) {
      whole = Backend::template allocate<T>(rows * cols);
      c.all_gather(x.data(), whole.data(), rows / N * cols);
    } else if (from == sbp::split_feature) {
      // gathered blocks are [device][rows][cols/N]; interleave them into [rows][cols]
      buffer blocks = Backend::template allocate<T>(rows * cols);
      c.all_gather(x.data(), blocks.data(), rows * (cols / N));
      whole = Backend::template allocate<T>(rows * cols);
      const std::size_t w = cols / N;
      for (std::size_t d = 0; d < N; ++d) copy_2d(q_, rows, w, blocks.data() + d * rows * w, w, whole.data() + d * w, cols);
    } else {
      whole = std::move(x);  // broadcast
    }
    if (to == sbp::broadcast) return whole;
    if (to == sbp::split_batch) {
      buffer y = Backend::template allocate<T>(rows / N * cols);
      copy(q_, rows / N * cols, whole.data() + idx * (rows / N) * cols, y.data());
      return y;
    }
    // split_feature
    const std::size_t w = cols / N;
    buffer y = Backend::template allocate<T>(rows * w);
    copy_2d(q_, rows, w, whole.data() + idx * w, cols, y.data(), w);
    return y;
  }

  // ---- the program ---------------------------------------------------------------------------
  int peer_stage(int stage) const { return P::rank_of(me_.data, stage, me_.index); }
  static int tag(int kind, int mb, int part) { return (kind * 64 + part % 64) * 256 + mb % 256; }

  buffer& out_act(int part, int mb) { return out_[{part, mb}]; }
  std::size_t out_size(int part) const {
    const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(last_layer(part))];
    return local_rows(full_rows(lp.out), lp.out_layout) * local_cols(std::size_t(lp.out.last()), lp.out_layout);
  }
  std::size_t in_size(int part) const {
    const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(first_layer(part))];
    return local_rows(full_rows(lp.in), lp.arrives) * local_cols(std::size_t(lp.in.last()), lp.arrives);
  }
  // First and last layer of each pipeline part, looked up on every micro-batch.
  static constexpr auto part_bounds = [] {
    std::array<std::array<int, 2>, static_cast<std::size_t>(P::num_parts)> b{};
    for (auto& x : b) x = {-1, -1};
    for (int i = 0; i < NL; ++i) {
      auto& x = b[static_cast<std::size_t>(P::layer_plans[static_cast<std::size_t>(i)].part)];
      if (x[0] < 0) x[0] = i;
      x[1] = i;
    }
    return b;
  }();
  static constexpr int first_layer(int part) { return part_bounds[static_cast<std::size_t>(part)][0]; }
  static constexpr int last_layer(int part) { return part_bounds[static_cast<std::size_t>(part)][1]; }

  void run_program() {
    const auto& prog = P::program;
    const int s = me_.stage;
    const int len = prog.length[static_cast<std::size_t>(s)];
    std::vector<comm::p2p_op> group;
    for (int i = 0; i < len; ++i) {
      const sched::instr& x = prog.at(s, i);
      const int part = P::part_of(s, x.chunk);
      switch (x.kind) {
        case sched::op::forward: forward_part(part, x.mb, true); break;
        case sched::op::backward: backward_part(part, x.mb); break;
        case sched::op::recv_act: {
          buffer& b = in_[{part, x.mb}];
          runtime::ensure<Backend, T>(b, in_size(part));
          group.push_back(comm::recv_op(b.data(), in_size(part), peer_stage(x.peer), tag(0, x.mb, part - 1)));
          break;
        }
        case sched::op::send_act:
          group.push_back(comm::send_op(out_act(part, x.mb).data(), out_size(part), peer_stage(x.peer), tag(0, x.mb, part)));
          break;
        case sched::op::recv_grad: {
          buffer& b = gout_[{part, x.mb}];
          runtime::ensure<Backend, T>(b, out_size(part));
          group.push_back(comm::recv_op(b.data(), out_size(part), peer_stage(x.peer), tag(1, x.mb, part + 1)));
          break;
        }
        case sched::op::send_grad:
          group.push_back(comm::send_op(gin_[{part, x.mb}].data(), in_size(part), peer_stage(x.peer), tag(1, x.mb, part)));
          break;
        case sched::op::reduce_grads:
        case sched::op::optimizer_step: break;  // done after the walk, below
      }
      if (sched::is_p2p(x.kind) && !x.group_next) {
        world_.comm().group(std::span<const comm::p2p_op>(group));
        group.clear();
      }
    }
  }

  // Input rows of micro-batch `mb` for the first part, in the layout its first layer receives.
  buffer load_input(int mb) {
    const layer_plan& lp = P::layer_plans[0];
    const std::size_t rows = full_rows(lp.in), cols = std::size_t(lp.in.last());
    const std::size_t per_sample = batch_.input_elems;
    buffer x = Backend::template allocate<T>(rows * cols);
    // an Embedding reads this micro-batch's ids from ids_ (io.ids), never x
    if constexpr (!embedding_first) {
      const M* src = inputs_.data() + std::size_t(mb) * P::micro_batch * per_sample;
      if constexpr (std::is_same_v<M, T>) copy(q_, std::size_t(P::micro_batch) * per_sample, src, x.data());
      else cast_elements(q_, std::size_t(P::micro_batch) * per_sample, src, x.data());
    }
    if (lp.arrives == sbp::split_batch) return convert(std::move(x), sbp::broadcast, sbp::split_batch, rows, cols);
    return x;
  }

  void forward_part(int part, int mb, bool train) {
    const int first = first_layer(part), last = last_layer(part);
    buffer x;
    if (part == 0) x = load_input(mb);
    else if (P::stage_of_part(part - 1) == me_.stage) x = std::move(out_[{part - 1, mb}]);  // same device
    else {
      buffer& in = in_[{part, mb}];
      if (!train) {  // evaluation walks parts in order with blocking receives
        runtime::ensure<Backend, T>(in, in_size(part));
        world_.comm().recv(in.data(), in_size(part), peer_stage(P::stage_of_part(part - 1)), tag(0, mb, part - 1));
      }
      x = Backend::template allocate<T>(in_size(part));
      copy(q_, in_size(part), in.data(), x.data());
    }
    auto& st = stash_[{part, mb}];
    st.resize(static_cast<std::size_t>(last - first + 1));
    for (int i = first; i <= last; ++i) {
      const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(i)];
      const std::size_t rin = full_rows(lp.in), cin = std::size_t(lp.in.last());
      x = convert(std::move(x), lp.arrives, lp.in_layout, rin, cin);
      const std::size_t rows = local_rows(rin, lp.in_layout);
      const std::size_t in_cols = local_cols(cin, lp.in_layout);
      const std::size_t out_cols = lp.desc.role == layer_role::loss ? 1 : local_cols(std::size_t(lp.out.last()), lp.out_layout);
      // rows can change (an embedding turns ids [S] into [S, D]); the loss writes nothing
      const std::size_t out_rows = local_rows(full_rows(lp.out), lp.out_layout);
      buffer y = Backend::template allocate<T>(std::max<std::size_t>(out_rows * out_cols, 1));
      auto io = io_for(i, rows, in_cols, out_cols);
      if (embedding_first && i == 0) io.ids = input_ids(mb, rows * in_cols);
      io.input = &x;  // a layer that keeps its input for backward takes this buffer
      runtime::loss_io<T>* L = nullptr;
      if (lp.desc.role == layer_role::loss) L = prepare_loss(lp, mb, rows);
      dispatch_forward(i, io, st[static_cast<std::size_t>(i - first)], x.data(), y.data(), L);
      x = std::move(y);
    }
    out_[{part, mb}] = std::move(x);
    if (!train) stash_.erase({part, mb});
  }

  void backward_part(int part, int mb) {
    const int first = first_layer(part), last = last_layer(part);
    auto& st = stash_[{part, mb}];
    buffer dy;
    if (part + 1 < P::num_parts) {
      if (P::stage_of_part(part + 1) == me_.stage) dy = std::move(gin_[{part + 1, mb}]);
      else {
        buffer& g = gout_[{part, mb}];
        dy = Backend::template allocate<T>(out_size(part));
        copy(q_, out_size(part), g.data(), dy.data());
      }
    }
    for (int i = last; i >= first; --i) {
      const layer_plan& lp = P::layer_plans[static_cast<std::size_t>(i)];
      const std::size_t rin = full_rows(lp.in), cin = std::size_t(lp.in.last());
      const std::size_t rows = local_rows(rin, lp.in_layout);
      const std::size_t in_cols = local_cols(cin, lp.in_layout);
      const std::size_t out_cols = lp.desc.role == layer_role::loss ? 1 : local_cols(std::size_t(lp.out.last()), lp.out_layout);
      const bool need_dx = needs_input_grad[static_cast<std::size_t>(i)];
      buffer dx = Backend::template allocate<T>(need_dx ? rows * in_cols : 1);
      auto io = io_for(i, rows, in_cols, out_cols);
      runtime::loss_io<T>* L = lp.desc.role == layer_role::loss ? &loss_ : nullptr;
      if (L) L->labels = loss_labels(lp, mb, rows);
      dispatch_backward(i, io, st[static_cast<std::size_t>(i - first)], dy.data(), need_dx ? dx.data() : nullptr, L);
      gradients_ready(part, mb, i);
      if (!need_dx) break;
      // The gradient of the layer's input, back into the layout its producer holds.
      const sbp g_in = (detail::tensor_parallel_consumer(lp.sig) && lp.in_layout == sbp::broadcast) ? sbp::partial
                                                                                                       : lp.in_layout;
      dy = convert(std::move(dx), g_in, detail::grad_of(lp.arrives), rin, cin);
    }
    if (part > 0) gin_[{part, mb}] = std::move(dy);
    st.clear();
  }

  // Micro-batch mb's token ids for the first layer: `local` ids of this device's rows.
  const std::int32_t* input_ids(int mb, std::size_t local) const {
    const std::size_t per_mb = std::size_t(P::micro_batch) * batch_.input_elems;
    const std::size_t first = P::layer_plans[0].in_layout == sbp::split_batch ? std::size_t(me_.index) * local : 0;
    return ids_.data() + std::size_t(mb) * per_mb + first;
  }

  // The batch lives in host memory: labels go to the backend once per step, and the
  // loss books are cleared.
  void begin_batch(const batch_view<M>& b) {
    batch_ = b;
    if (acc_.size() < 3) acc_ = Backend::template allocate<double>(3);
    const std::size_t n = b.samples * b.labels_per_sample;
    if (labels_.size() < n) labels_ = Backend::template allocate<std::int32_t>(n);
    const std::size_t x = b.samples * b.input_elems;
    if (inputs_.size() < x) inputs_ = Backend::template allocate<M>(x);
    if (on_device(b.inputs)) {  // the graph reads fixed buffers: copy, device to device
      copy(q_, x, b.inputs, inputs_.data());
      copy(q_, n, b.labels, labels_.data());
    } else {
      Backend::upload(q_, b.labels, n, labels_.data());
      Backend::upload(q_, b.inputs, x, inputs_.data());
    }
    if constexpr (embedding_first) {
      if (ids_.size() < x) ids_ = Backend::template allocate<std::int32_t>(x);
      cast_ids(q_, x, inputs_.data(), ids_.data());
    }
  }

  // A sum over the world of a host vector, through backend memory (NCCL needs device buffers).
  void reduce_on_backend(std::vector<double>& v, comm::reduce_op op) {
    auto d = Backend::template allocate<double>(std::max<std::size_t>(v.size(), 1));
    Backend::upload(q_, v.data(), v.size(), d.data());
    world_.comm().all_reduce(d.data(), v.size(), op);
    Backend::download(q_, d.data(), v.size(), v.data());
    Backend::synchronize(q_);
  }

  // ---- the loss ------------------------------------------------------------------------------
  const std::int32_t* loss_labels(const layer_plan& lp, int mb, std::size_t rows) {
    // labels of this micro-batch's loss rows; with rows split, this device's block
    const std::size_t per_mb = std::size_t(P::micro_batch) * batch_.labels_per_sample;
    std::size_t first = std::size_t(mb) * per_mb;
    if (lp.in_layout == sbp::split_batch) first += std::size_t(me_.index) * rows;
    return labels_.data() + first;
  }
  runtime::loss_io<T>* prepare_loss(const layer_plan& lp, int mb, std::size_t rows) {
    runtime::loss_io<T>& L = loss_;
    L.labels = loss_labels(lp, mb, rows);
    L.acc = acc_.data();
    // d(mean loss over the global batch)/d(row loss); every gradient reduction sums.
    const double rows_per_replica =
        double(P::micro_batch) * P::num_micro_batch * double(batch_.labels_per_sample);
    L.scale = 1.0 / rows_per_replica / (P::gradient_reduce == reduce_method::mean ? dp_ : 1);
    // one device reports rows that every device of the part holds
    L.counts = lp.in_layout == sbp::split_batch || me_.index == 0;
    const std::size_t per_mb = std::size_t(P::micro_batch) * batch_.labels_per_sample;
    const std::size_t first_row = lp.in_layout == sbp::split_batch ? std::size_t(me_.index) * rows : 0;
    // in an evaluation, rows past `valid` are padding of the last chunk
    const std::size_t start = std::size_t(mb) * per_mb + first_row;
    const std::size_t valid = valid_rows_ == static_cast<std::size_t>(-1) ? static_cast<std::size_t>(-1)
                                                                           : valid_rows_ * batch_.labels_per_sample;
    L.valid = valid == static_cast<std::size_t>(-1) ? valid : (valid > start ? valid - start : 0);
    return &L;
  }
  // Mean loss over every row of the global batch, the same value on every rank.
  step_result finish_loss() {
    world_.comm().all_reduce(acc_.data(), 3, comm::reduce_op::sum);
    std::array<double, 3> v{};
    Backend::download(q_, acc_.data(), 3, v.data());
    Backend::synchronize(q_);
    // device kernels record bad labels/ids instead of trapping: surface them here
    if constexpr (requires { raise_device_errors(q_); }) raise_device_errors(q_);
    step_result r;
    r.rows = static_cast<long long>(v[2]);
    r.loss = r.rows > 0 ? v[0] / v[2] : 0.0;
    r.correct = static_cast<long long>(v[1]);
    return r;
  }

  // ---- gradients and the optimizer -----------------------------------------------------------
  // ---- gradient buckets (EPL communication.max_splits) -----------------------------------
  // Each group's flat gradient is cut into at most `buckets` ranges. A range can be
  // reduced once the final micro-batch's backward has passed its lowest layer; on a
  // backend with streams the all-reduce runs on the communication stream while the
  // backward of earlier layers continues.
  struct bucket {
    int group = 0;
    std::size_t offset = 0, count = 0;
    int ready_layer = 0;  // lowest layer with gradients in the range
    bool issued = false;
  };
  std::vector<bucket> buckets_;
  std::array<int, static_cast<std::size_t>(P::num_parts)> final_mb_{};  // last backward micro-batch per part

  void plan_buckets() {
    for (int g = 0; g < 2; ++g) {
      const std::size_t total = group_elems_[static_cast<std::size_t>(g)];
      if (total == 0) continue;
      const std::size_t chunk = (total + P::buckets - 1) / P::buckets;
      for (std::size_t off = 0; off < total; off += chunk) {
        bucket b{g, off, std::min(chunk, total - off), NL, false};
        for (const auto& [k, t] : tensors_)
          if (t.group == g && t.offset < b.offset + b.count && t.offset + t.size > b.offset)
            b.ready_layer = std::min(b.ready_layer, k.first);
        buckets_.push_back(b);
      }
    }
    // the program's last backward of each part carries the final gradients
    for (int i = 0; i < P::program.length[static_cast<std::size_t>(me_.stage)]; ++i) {
      const sched::instr& x = P::program.at(me_.stage, i);
      if (x.kind == sched::op::backward) final_mb_[static_cast<std::size_t>(P::part_of(me_.stage, x.chunk))] = x.mb;
    }
  }

  Comm& group_comm(int g) { return g == 0 ? *data_ : *part_data_; }

  // Called after layer `layer` finished its backward of micro-batch `mb` of `part`.
  void gradients_ready(int part, int mb, int layer) {
    if (mb != final_mb_[static_cast<std::size_t>(part)]) return;
    for (auto& b : buckets_)
      if (!b.issued && layer <= b.ready_layer) issue(b);
  }

  void issue(bucket& b) {
    b.issued = true;
    Comm& c = group_comm(b.group);
    if (c.size() == 1) return;
    if constexpr (overlapped_comm) c.wait_for(q_.stream());  // the bucket's gradients are written
    c.all_reduce(grads_[static_cast<std::size_t>(b.group)].data() + b.offset, b.count, comm::reduce_op::sum);
  }

  void reduce_gradients() {
    for (auto& b : buckets_)
      if (!b.issued) issue(b);
    for (auto& b : buckets_) b.issued = false;
    if constexpr (overlapped_comm) {
      // the optimizer (and the next step) waits for the communication stream
      for (int g = 0; g < 2; ++g)
        if (group_comm(g).size() > 1) {
          group_comm(g).record(comm_done_.native());
          Backend::wait(q_, comm_done_);
        }
    }
  }

  void apply_optimizer() {
    for (int g = 0; g < 2; ++g) {
      const std::size_t total = group_elems_[static_cast<std::size_t>(g)];
      if (total == 0) continue;
      M* p = params_[static_cast<std::size_t>(g)].data();
      M* gr = grads_[static_cast<std::size_t>(g)].data();
      M* m = opt_m_[static_cast<std::size_t>(g)].data();
      M* v = opt_v_[static_cast<std::size_t>(g)].data();
      std::visit(
          [&](const auto& o) {
            using O = std::decay_t<decltype(o)>;
            if constexpr (std::is_same_v<O, SGD>)
              sgd_momentum_step(q_, total, o.lr, o.momentum, o.weight_decay, p, gr, m);
            else
              adam_step(q_, total, o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, step_, p, gr, m, v,
                        std::is_same_v<O, AdamW>);
          },
          opt_);
    }
    refresh_working_copies();
  }

  // ---- per-layer dispatch over the plan's layer types ----------------------------------------
  template <std::size_t... I>
  void dispatch_forward_impl(std::index_sequence<I...>, int i, runtime::step_io<Backend, T>& io,
                             runtime::stash<Backend, T>& s, const T* x, T* y, runtime::loss_io<T>* L) {
    ((i == int(I) ? (runtime::exec<detail::list_nth_t<I, typename P::layers>>::forward(io, s, x, y, part_comm(), L), 0)
                  : 0),
     ...);
  }
  void dispatch_forward(int i, runtime::step_io<Backend, T>& io, runtime::stash<Backend, T>& s, const T* x, T* y,
                        runtime::loss_io<T>* L) {
    dispatch_forward_impl(std::make_index_sequence<std::size_t(NL)>{}, i, io, s, x, y, L);
  }
  template <std::size_t... I>
  void dispatch_backward_impl(std::index_sequence<I...>, int i, runtime::step_io<Backend, T>& io,
                              runtime::stash<Backend, T>& s, const T* dy, T* dx, runtime::loss_io<T>* L) {
    ((i == int(I) ? (runtime::exec<detail::list_nth_t<I, typename P::layers>>::backward(io, s, dy, dx, part_comm(), L), 0)
                  : 0),
     ...);
  }
  void dispatch_backward(int i, runtime::step_io<Backend, T>& io, runtime::stash<Backend, T>& s, const T* dy, T* dx,
                         runtime::loss_io<T>* L) {
    dispatch_backward_impl(std::make_index_sequence<std::size_t(NL)>{}, i, io, s, dy, dx, L);
  }

  // ---- run-time input checks, agreed on by every rank before any collective ----------------
  static bool on_device(const void* p) {
    if constexpr (requires { Backend::device_pointer(p); }) return p && Backend::device_pointer(p);
    else return false;
  }
  // A device batch's labels (and token ids) are small: they are checked on the host;
  // its inputs' NaN/Inf scan runs on the device.
  std::vector<std::int32_t> device_labels_;
  std::vector<M> device_ids_;

  void check_batch(const batch_view<M>& b, std::size_t samples, const char* what) {
    const std::size_t per_sample = static_cast<std::size_t>(P::input_shape.numel());
    std::string problem;
    if (!b.inputs || !b.labels) problem = "the batch has no data";
    else if (b.samples != samples && std::string_view(what) == "step")
      problem = "the batch holds " + std::to_string(b.samples) + " samples but this plan's replica consumes " +
                std::to_string(samples) + " (micro-batch " + std::to_string(P::micro_batch) + " x " +
                std::to_string(samples / P::micro_batch) + " micro-batches)";
    else if (b.samples == 0 || b.samples % std::size_t(P::micro_batch) != 0)
      problem = "the batch holds " + std::to_string(b.samples) + " samples, not a positive multiple of the micro-batch " +
                std::to_string(P::micro_batch) + " (pad the last chunk and pass the valid count)";
    else if (b.input_elems != per_sample)
      problem = "each sample has " + std::to_string(b.input_elems) + " values but the model's input shape holds " +
                std::to_string(per_sample);
    else if (b.labels_per_sample != labels_per_sample)
      problem = "the batch has " + std::to_string(b.labels_per_sample) + " labels per sample but the loss has " +
                std::to_string(labels_per_sample) + " rows per sample";
    else if (on_device(b.inputs) != on_device(b.labels))
      problem = "the batch's inputs and labels must both be in host memory or both on the device";
    else if (on_device(b.inputs)) {
      device_labels_.resize(b.samples * b.labels_per_sample);
      Backend::download(q_, b.labels, device_labels_.size(), device_labels_.data());
      if constexpr (embedding_first) {
        device_ids_.resize(b.samples * per_sample);
        Backend::download(q_, b.inputs, device_ids_.size(), device_ids_.data());
      }
      Backend::synchronize(q_);
      batch_view<M> host = b;
      host.labels = device_labels_.data();
      host.inputs = embedding_first ? device_ids_.data() : nullptr;
      problem = check_values(host, per_sample);
      if (problem.empty() && !embedding_first && !all_finite(q_, b.samples * per_sample, b.inputs))
        problem = "the inputs contain NaN or Inf";
    } else {
      problem = check_values(b, per_sample);
      if (problem.empty() && !backend::host::all_finite(host_q_, b.samples * per_sample, b.inputs))
        problem = "the inputs contain NaN or Inf";
    }
    world_.comm().agree(problem.empty(), std::string("strata: ") + what + ": " + problem);
  }

  // Token ids (when an Embedding comes first) and labels of a batch in host memory;
  // b.inputs may be null when the model reads no ids.
  std::string check_values(const batch_view<M>& b, std::size_t per_sample) const {
    std::string problem;
    {
      const layer_plan& loss = P::layer_plans[static_cast<std::size_t>(NL - 1)];
      const long long classes = loss.in.last();
      // token ids are checked here, on every rank, not only where the embedding runs
      const layer_plan& first = P::layer_plans[0];
      if (first.desc.role == layer_role::embedding) {
        const double vocab = first.desc.params[0].shape.dim[0];
        for (std::size_t i = 0; i < b.samples * per_sample; ++i) {
          const double id = static_cast<double>(b.inputs[i]);
          if (!(id >= 0 && id < vocab && id == std::floor(id))) {
            problem = "token id " + std::to_string(id) + " at position " + std::to_string(i) +
                      " is not an integer in [0, " + std::to_string(static_cast<long long>(vocab)) + ")";
            break;
          }
        }
      }
      for (std::size_t i = 0; problem.empty() && i < b.samples * b.labels_per_sample; ++i)
        if (b.labels[i] < 0 || b.labels[i] >= classes) {
          problem = "label " + std::to_string(b.labels[i]) + " at position " + std::to_string(i) +
                    " is outside [0, " + std::to_string(classes) + ")";
          break;
        }
    }
    return problem;
  }
};

// T defaults to the plan's Element<T> (float when the plan names none).
template <class P, class T = typename P::element_type, class Backend, class Comm>
trainer<P, T, Backend, Comm> make_trainer(world<Backend, Comm>& w, optimizer opt, std::uint64_t seed = 0x5eed) {
  return trainer<P, T, Backend, Comm>(w, opt, seed);
}

}  // namespace strata
