#pragma once
// The executor: a small interpreter of the lowered program (plan/lower.hpp) on one
// device. It walks its stage's action list — forward and backward of (micro-batch,
// part) with the slots the lowering chose, pipeline sends and receives posted as the
// proven groups, the gradient reduction — and each part's step list: loading the
// input, layout conversions, layer calls, gradient buckets. Buffers come from the
// arena and the parameter store; nothing is allocated, and no layout is decided, here.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "strata/core/communicator.hpp"
#include "strata/core/precision.hpp"
#include "strata/exec/arena.hpp"
#include "strata/exec/batch.hpp"
#include "strata/exec/context.hpp"
#include "strata/exec/convert.hpp"
#include "strata/exec/dispatch.hpp"
#include "strata/exec/mesh_groups.hpp"
#include "strata/exec/optimizer.hpp"
#include "strata/exec/posted_group.hpp"
#include "strata/exec/store.hpp"
#include "strata/exec/zero.hpp"
#include "strata/plan/lower.hpp"
#include "strata/plan/plan.hpp"
#include "strata/plan/print.hpp"

namespace strata::exec {

template <class P, class T, class Backend, class Comm>
class executor {
 public:
  using M = master_t<T>;
  using S = stat_t<T>;
  using L = lower::lowered<P>;
  using queue = typename Backend::queue;
  static constexpr int NL = P::num_layers;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  static constexpr bool embedding_first = L::tables.calls[0].reads_ids;
  static constexpr std::size_t per_sample = static_cast<std::size_t>(P::input_shape.numel());
  // one label per loss row
  static constexpr std::size_t labels_per_sample = static_cast<std::size_t>(
      P::layer_plans[idx(NL - 1)].in.numel() / P::layer_plans[idx(NL - 1)].in.last());
  static constexpr std::size_t step_samples = std::size_t(P::micro_batch) * P::num_micro_batch;

  // Communicators that can run on their own stream (NCCL) overlap gradient buckets
  // with the backward of earlier layers.
  static constexpr bool overlapped_comm = requires(Comm& c, queue& q, typename Backend::event& e) {
    c.set_stream(q.stream());
    c.wait_for(q.stream());
    c.record(e.native());
  };

  executor(queue& q, Comm& world, rank_coord me, int dp, std::uint64_t seed)
      : q_(q), world_(world), me_(me), dp_(dp), arena_(me.stage), store_(q, me, seed) {
    const int n = P::part_devices;
    // Collective splits, in the same order on every rank, named for the watchdog's messages
    // where the communicator takes names.
    std::string base = "world";
    if constexpr (requires { world.name(); }) base = std::string(world.name());
    part_.emplace(comm::split_named(world, me.data * P::stages + me.stage, me.index, base + ".part"));
    data_.emplace(comm::split_named(world, me.stage * n + me.index, me.data, base + ".data"));
    part_data_.emplace(comm::split_named(world, me.stage, world.rank(), base + ".part_data"));
    // 2D/2.5D/3D: the mesh's rows, columns, depths and gradient groups (exec/mesh_groups.hpp)
    mesh_.form(world, base);
    // ZeRO partitions each group's update over the devices its gradients are reduced in
    if constexpr (P::zero > 0) store_.partition({data_->size(), part_data_->size()}, {data_->rank(), part_data_->rank()});
    if constexpr (overlapped_comm) {
      comm_q_.emplace();
      comm_done_ = typename Backend::event(false);
      for (auto& e : slot_done_) e = typename Backend::event(false);
      data_->set_stream(comm_q_->stream());
      part_data_->set_stream(comm_q_->stream());
      mesh_.each_reduction_group([&](Comm& c) { c.set_stream(comm_q_->stream()); });  // they reduce buckets
    }
    // Zero<3>: a TaskGraph's weights are all-gathered right before its layers need them
    if constexpr (P::zero >= 3)
      store_.set_gather([this](int g, const M* send, M* recv, std::size_t n) {
        Comm& c = group_comm(g);
        if constexpr (overlapped_comm) c.wait_for(q_.stream());  // this device's chunk is in place
        c.all_gather(send, recv, n);
        finish_buckets();
      });
    // The step's batch in backend memory, at fixed places (graphs read them there).
    inputs_ = Backend::template allocate<M>(step_samples * per_sample);
    labels_ = Backend::template allocate<std::int32_t>(step_samples * labels_per_sample);
    if constexpr (embedding_first) ids_ = Backend::template allocate<std::int32_t>(step_samples * per_sample);
    acc_ = Backend::template allocate<double>(3);
    scalar_ = Backend::template allocate<double>(1);
    if constexpr (P::half_reduce > 0) {  // the largest bucket in fp16
      long long most = 1;
      for (int b = 0; b < L::tables.num_buckets[idx(me.stage)]; ++b)
        most = std::max(most, L::tables.buckets[idx(me.stage)][idx(b)].count);
      half_ = Backend::template allocate<f16>(static_cast<std::size_t>(most));
    }
    group_.reserve(64);  // no allocation while posting a step's messages
  }

  param_store<P, Backend, T>& store() { return store_; }
  const activation_arena<P, Backend, T>& arena() const { return arena_; }
  Comm& part_comm() { return *part_; }
  M* inputs() { return inputs_.data(); }
  std::int32_t* labels() { return labels_.data(); }
  double* books() { return acc_.data(); }

  // The batch (step_samples samples, already in backend memory at inputs()/labels())
  // becomes token ids for an Embedding that reads the model's input.
  void cast_input_ids() {
    if constexpr (embedding_first) cast_ids(q_, step_samples * per_sample, inputs_.data(), ids_.data());
  }

  // ---- training: the stage's lowered action list ---------------------------------------
  // Everything up to the optimizer action, which the trainer runs once the loss is known.
  // A step of `passes` replica batches (run-time gradient accumulation) runs the program
  // once per pass on the same buffers: gradients and the loss books accumulate from the
  // first pass, and the gradient reduction goes out in the last.
  void run_training_program(int pass = 0, int passes = 1) {
    passes_ = passes;
    final_pass_ = pass + 1 == passes;
    if (pass == 0) {
      store_.zero_grads();
      fill(q_, std::size_t(3), 0.0, acc_.data());
    }
    store_.begin_program(true);  // every pass stages (Zero<3>: gathers) the same TaskGraphs
    // Zero<2/3>: the gradient slots' last reductions are done (the previous program ended
    // with them); events of this program's own, so that a captured graph never waits on
    // one recorded outside it
    if constexpr (overlapped_comm && P::zero >= 2)
      for (auto& e : slot_done_) e = Backend::record(q_);
    const auto& prog = L::train.prog;
    const int s = me_.stage;
    for (int i = 0; i < prog.length[idx(s)]; ++i) {
      const sched::instr& x = prog.at(s, i);
      if (x.kind == sched::op::optimizer_step) break;
      if (x.kind == sched::op::reduce_grads) {
        if (final_pass_) finish_buckets();
        continue;
      }
      if (timing_ && sched::is_compute(x.kind)) timed(x, i);
      else act_named(x, i, /*train=*/true);
    }
    finish_posted();
  }

  // Wall time of this device's compute actions (F, B, W), summed while timing is on: the
  // per-stage costs the schedule simulator takes (benchmarks; each action synchronizes).
  struct compute_clock {
    double forward_s = 0, backward_s = 0, weight_s = 0;
    long long forwards = 0, backwards = 0, weights = 0;
  };
  void time_compute(bool on) {
    timing_ = on;
    clock_ = {};
  }
  const compute_clock& compute_times() const { return clock_; }

  // Multiplies every gradient (through the loss's scale): the one-device reference of a
  // GradientReduce<ReduceSum> plan on dp replicas uses dp (runtime/verify.hpp).
  void set_gradient_multiplier(double m) { multiplier_ = m; }

  // The optimizer action: the program's last. `update` counts applied updates from 1
  // (Adam's bias correction), `step` training steps (the schedule's position). With loss
  // scaling the gradients hold loss_scale × the true ones: a step whose gradients hold
  // Inf/NaN on any device is skipped by every device (false); otherwise they are divided
  // by the scale in the update. Clipping needs the global gradient norm: each device's
  // share (store::grad_square_sum), summed over the world.
  bool run_optimizer(const optimizer& opt, long long update, long long step, const training_options& o = {},
                     double loss_scale = 1.0, bool check_finite = false) {
    if (check_finite && world_sum(store_.grads_finite() ? 0.0 : 1.0) != 0.0) return false;
    double scale = 1.0 / loss_scale;
    if (o.clip_norm > 0) {
      const double norm = std::sqrt(world_sum(store_.grad_square_sum())) / loss_scale;
      last_norm_ = norm;
      scale *= std::fmin(1.0, o.clip_norm / (norm + 1e-6));
    }
    store_.apply(opt, update, o.schedule.factor(step), o.decay, scale);
    if constexpr (P::zero > 0 && P::zero < 3) gather_updates();  // Zero<3> gathers per TaskGraph
    store_.refresh();
    return true;
  }
  // The loss's gradient is multiplied by this (loss scaling), from the next step.
  void set_loss_scale(double s) { loss_scale_ = s; }
  // The global gradient norm of the last step that clipped (before clipping).
  double last_gradient_norm() const { return last_norm_; }

  // Σ over the world of one double per rank, the same on every rank.
  double world_sum(double v) {
    fill(q_, std::size_t(1), v, scalar_.data());
    if (world_.size() > 1) world_.all_reduce(scalar_.data(), 1, comm::reduce_op::sum);
    double r = 0;
    Backend::download(q_, scalar_.data(), 1, &r);
    Backend::synchronize(q_);
    return r;
  }
  Comm& group_comm(int g) { return g == 0 ? *data_ : *part_data_; }
  // The communicator of a planner group (plan/sharding.hpp's group_axis).
  Comm& axis_comm(group_axis a) {
    switch (a) {
      case group_axis::data: return *data_;
      case group_axis::part_data: return *part_data_;
      case group_axis::part:
      case group_axis::pipeline: return *part_;
      default: break;
    }
    if (Comm* c = mesh_.of(a)) return *c;
    throw std::logic_error("strata: the plan names the " + std::string(to_string(a)) +
                           " group, which this executor did not form");
  }
  // Zero<3>: the whole masters assembled for reading (gather_parameters, checkpoints,
  // the replica check); collective.
  void gather_whole() { store_.gather_whole(*data_, *part_data_); }

  // ---- evaluation: the forward-only program, once per micro-batch ------------------------
  // `mbs` micro-batches of the batch in inputs()/labels(); rows past `valid` (of the
  // replica's batch) are padding and do not count.
  void run_evaluation(int mbs, std::size_t valid) {
    fill(q_, std::size_t(3), 0.0, acc_.data());
    store_.begin_program(false);
    valid_rows_ = valid;
    const auto& prog = L::eval.prog;
    const int s = me_.stage;
    for (int mb = 0; mb < mbs; ++mb)
      for (int i = 0; i < prog.length[idx(s)]; ++i) {
        sched::instr x = prog.at(s, i);
        x.mb = mb;  // the one-micro-batch program, run for each
        act_named(x, i, /*train=*/false);
      }
    valid_rows_ = static_cast<std::size_t>(-1);
  }

  // Σ loss, correct rows, rows over the world: the step's books, the same on every rank.
  std::array<double, 3> finish_books() {
    if (world_.size() > 1) world_.all_reduce(acc_.data(), 3, comm::reduce_op::sum);
    std::array<double, 3> v{};
    Backend::download(q_, acc_.data(), 3, v.data());
    Backend::synchronize(q_);
    return v;
  }

 private:
  void timed(const sched::instr& x, int i) {
    finish_posted();  // a W overlapping messages is timed without them
    Backend::synchronize(q_);
    const auto t0 = std::chrono::steady_clock::now();
    act_named(x, i, /*train=*/true);
    Backend::synchronize(q_);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (x.kind == sched::op::forward) clock_.forward_s += s, ++clock_.forwards;
    if (x.kind == sched::op::backward) clock_.backward_s += s, ++clock_.backwards;
    if (x.kind == sched::op::weight) clock_.weight_s += s, ++clock_.weights;
  }

  // ---- one action -----------------------------------------------------------------------
  // A communication failure says which action of the lowered program it hit.
  void act_named(const sched::instr& x, int i, bool train) {
    try {
      act(x, train);
    } catch (const comm::comm_error& e) {
      throw comm::comm_error(std::string(e.what()) + " [stage " + std::to_string(me_.stage) + ", action " +
                             std::to_string(i) + ": " + action_text(x, P::chunks) + "]");
    }
  }

  void act(const sched::instr& x, bool train) {
    const int part = P::part_of(me_.stage, x.chunk);
    const lower::part_plan& pp = L::tables.parts[idx(part)];
    if (x.kind != sched::op::weight) finish_posted();  // the W's a posted group overlaps are done
    switch (x.kind) {
      case sched::op::forward: forward(part, x, train); break;
      case sched::op::backward: backward(part, x); break;
      case sched::op::weight: weights(part, x); break;
      case sched::op::recv_act:
        group_.push_back(comm::recv_op(arena_.message(pp.entry, part, x.slot), static_cast<std::size_t>(pp.entry.elems),
                                       peer(x.peer), tag(0, part - 1)));
        break;
      case sched::op::send_act:
        group_.push_back(comm::send_op(arena_.message(pp.exit, part, x.slot), static_cast<std::size_t>(pp.exit.elems),
                                       peer(x.peer), tag(0, part)));
        break;
      case sched::op::recv_grad:
        group_.push_back(comm::recv_op(arena_.message(pp.gout, part, x.slot), static_cast<std::size_t>(pp.gout.elems),
                                       peer(x.peer), tag(1, part + 1)));
        break;
      case sched::op::send_grad:
        group_.push_back(comm::send_op(arena_.message(pp.gin, part, x.slot), static_cast<std::size_t>(pp.gin.elems),
                                       peer(x.peer), tag(1, part)));
        break;
      default: break;
    }
    if (sched::is_p2p(x.kind) && !x.group_next) {
      posted_.post(world_, std::span<const comm::p2p_op>(group_), x.overlap);  // W's after it overlap it
      group_.clear();
    }
  }
  void drive_posted() { posted_.drive(world_); }
  void finish_posted() { posted_.finish(world_); }

  int peer(int stage) const { return P::rank_of(me_.data, stage, me_.index); }
  // Messages between two ranks match in posting order (the deadlock proof checks it), so
  // the tag only names the stream: activations or gradients, and the sending part.
  static int tag(int kind, int sender_part) { return kind * P::num_parts + sender_part; }

  // ---- a part's steps ------------------------------------------------------------------
  void forward(int part, const sched::instr& x, bool train) {
    const lower::part_plan& pp = L::tables.parts[idx(part)];
    const slot_set slots{x.slot, x.in_slot, x.out_slot};
    for (int k = pp.fwd_begin; k < pp.fwd_end; ++k) {
      const lower::step& st = L::tables.steps[idx(k)];
      switch (st.kind) {
        case lower::step_kind::load: load(pp, part, x.mb, slots); break;
        case lower::step_kind::convert: convert(st.index, part, slots); break;
        case lower::step_kind::forward: layer(st.index, part, x.mb, slots, true, train); break;
        default: break;
      }
    }
  }

  void backward(int part, const sched::instr& x) {
    const lower::part_plan& pp = L::tables.parts[idx(part)];
    const slot_set slots{x.slot, x.in_slot, x.out_slot};
    int open_tg = -1;  // Zero<2/3>: the TaskGraph whose gradient slot this backward writes
    for (int k = pp.bwd_begin; k < pp.bwd_end; ++k) {
      const lower::step& st = L::tables.steps[idx(k)];
      switch (st.kind) {
        case lower::step_kind::convert: convert(st.index, part, slots); break;
        case lower::step_kind::backward:
          if constexpr (P::zero >= 2) {
            const int tg = P::layer_plans[idx(st.index)].taskgraph;
            if (tg != open_tg) {
              store_.open_gradients(tg, [&](int s) {
                if constexpr (overlapped_comm) Backend::wait(q_, slot_done_[idx(s)]);  // its last reductions
              });
              open_tg = tg;
            }
          }
          layer(st.index, part, x.mb, slots, false, false, P::split_backward ? pass_part::data : pass_part::whole);
          break;
        case lower::step_kind::recompute: layer(st.index, part, x.mb, slots, true, false); break;
        case lower::step_kind::bucket:
          // complete only after the final micro-batch; Zero<2/3> reduce every backward's;
          // with split backwards the final W completes them
          if (!P::split_backward && (P::zero >= 2 || (x.last && final_pass_))) issue(st.index);
          break;
        default: break;
      }
    }
  }

  // Zero-bubble W: the weight gradients of the part's layers whose backward splits, from
  // what their B kept; the gradient buckets go out after the part's final W.
  void weights(int part, const sched::instr& x) {
    const lower::part_plan& pp = L::tables.parts[idx(part)];
    const slot_set slots{x.slot, x.in_slot, x.out_slot};
    for (int k = pp.bwd_begin; k < pp.bwd_end; ++k) {
      const lower::step& st = L::tables.steps[idx(k)];
      if (st.kind == lower::step_kind::backward && !L::tables.calls[idx(st.index)].dy_keep.empty()) {
        drive_posted();  // the overlapped messages move between the layers' kernels
        layer(st.index, part, x.mb, slots, false, false, pass_part::weights);
      }
      if (st.kind == lower::step_kind::bucket && x.last && final_pass_) issue(st.index);
    }
  }

  // The model's input rows of micro-batch `mb` into the part's entry, in the layout
  // its first layer receives (this device's rows when the rows are split).
  void load(const lower::part_plan& pp, int part, int mb, const slot_set& slots) {
    const layer_plan& lp = P::layer_plans[idx(pp.first)];
    const std::size_t n = static_cast<std::size_t>(pp.entry.elems);
    const std::size_t first = lp.arrives == sbp::split_batch ? std::size_t(me_.index) * n : 0;
    const M* src = inputs_.data() + std::size_t(mb) * P::micro_batch * per_sample + first;
    T* dst = arena_.values(pp.entry, part, slots);
    if constexpr (std::is_same_v<M, T>) copy(q_, n, src, dst);
    else cast_elements(q_, n, src, dst);
  }

  void convert(int c, int part, const slot_set& slots) {
    const lower::conversion& cv = L::tables.convs[idx(c)];
    run_conversion(q_, *part_, cv, arena_.values(cv.src, part, slots), arena_.values(cv.dst, part, slots),
                   arena_.values(cv.staging, part, slots), P::part_devices, me_.index,
                   P::input_block(cv.layer, me_.index), P::mesh);
  }

  // `books`: a training forward that is not a recomputation (auxiliary losses count once).
  // `how`: a backward whole, or (zero-bubble) its B or W part; layers whose backward does
  // not split run whole in B.
  enum class pass_part : unsigned char { whole, data, weights };
  void layer(int i, int part, int mb, const slot_set& slots, bool fwd, bool books, pass_part how = pass_part::whole) {
    const lower::layer_call& c = L::tables.calls[idx(i)];
    const layer_plan& lp = P::layer_plans[idx(i)];
    layer_ctx<Backend, T, Comm> ctx{q_, *part_};
    ctx.sig = lp.sig;
    ctx.index = me_.index;
    ctx.n = P::part_devices;
    ctx.rows = static_cast<std::size_t>(c.dims.rows);
    ctx.in_cols = static_cast<std::size_t>(c.dims.in_cols);
    ctx.out_cols = static_cast<std::size_t>(c.dims.out_cols);
    ctx.x = arena_.values(c.x, part, slots);
    ctx.y = arena_.values(c.y, part, slots);
    ctx.dy = arena_.values(c.dy, part, slots);
    ctx.dx = arena_.values(c.dx, part, slots);
    if (lp.desc.num_params > 0) store_.use(i);  // staged weights: in place from here
    for (int k = 0; k < lp.desc.num_params; ++k) {
      ctx.w[idx(k)] = store_.weight(i, k);
      ctx.g[idx(k)] = P::zero >= 2 && fwd ? nullptr : store_.grad(i, k);  // Zero<2/3>: open in a backward only
    }
    ctx.stash_values = arena_.values(c.stash_values, part, slots);
    ctx.stash_stats = arena_.stats(c.stash_stats, part, slots);
    ctx.stash_ids = arena_.ids(c.stash_ids, part, slots);
    ctx.scratch_values = arena_.values(c.scratch_values, part, slots);
    ctx.scratch_stats = arena_.stats(c.scratch_stats, part, slots);
    ctx.skip = arena_.values(c.skip, part, slots);
    ctx.skip_grad = arena_.values(c.skip_grad, part, slots);
    ctx.row0 = lp.in_layout == sbp::split_batch ? std::size_t(me_.index) * ctx.rows : 0;
    if (lp.in_layout == sbp::split_feature) ctx.col0 = std::size_t(me_.index) * ctx.in_cols;
    if (lp.in_layout == sbp::block) {
      const strata::detail::act_block b = P::input_block(i, me_.index);
      ctx.row0 = std::size_t(b.row) * ctx.rows;
      ctx.col0 = std::size_t(b.feature) * ctx.in_cols;
      ctx.mesh_q = c.dims.q;
    }
    for (int k = 0; k < 3 && lp.num_conversion_comms + k < lp.num_comms; ++k)
      ctx.mesh[idx(k)] = &axis_comm(lp.comms[idx(lp.num_conversion_comms + k)].group);
    if (c.reads_ids) {
      const std::size_t local = ctx.rows * ctx.in_cols;
      const std::size_t first = lp.in_layout == sbp::split_batch ? std::size_t(me_.index) * local : 0;
      ctx.ids = ids_.data() + std::size_t(mb) * P::micro_batch * per_sample + first;
    }
    if (lp.desc.role == layer_role::loss) ctx.loss = prepare_loss(i, lp, mb, ctx.rows);
    if (lp.desc.role == layer_role::moe) ctx.aux = prepare_aux(books);
    // a view runs no kernel (at a part's edge its output is a copy), except a backward
    // that needs one (ResidualBegin adds the skip's gradient)
    if (c.needs.view && (fwd || !c.needs.backward_kernel)) {
      const std::size_t e = ctx.rows * ctx.in_cols;
      if (fwd && ctx.y != ctx.x) copy(q_, e, ctx.x, ctx.y);
      if (!fwd && ctx.dx && ctx.dx != ctx.dy) copy(q_, e, ctx.dy, ctx.dx);
      return;
    }
    if (fwd) return forward_table[idx(i)](ctx);
    if (how == pass_part::whole || c.dy_keep.empty()) return backward_table[idx(i)](ctx);
    ctx.keep = arena_.values(c.keep, part, slots);
    T* kept = arena_.values(c.dy_keep, part, slots);
    if (how == pass_part::data) {
      if (kept != ctx.dy)  // the ping buffer is reused before W
        copy(q_, static_cast<std::size_t>(c.dims.out_rows * c.dims.out_cols), ctx.dy, kept);
      return backward_data_table[idx(i)](ctx);
    }
    ctx.dy = kept;
    ctx.dx = nullptr;
    backward_weights_table[idx(i)](ctx);
  }

  // ---- the loss --------------------------------------------------------------------------
  loss_io<T>* prepare_loss(int i, const layer_plan& lp, int mb, std::size_t rows) {
    const std::size_t per_mb = std::size_t(P::micro_batch) * labels_per_sample;
    const strata::detail::act_block b = P::input_block(i, me_.index);
    const bool block = lp.in_layout == sbp::block;
    const std::size_t first_row = lp.in_layout == sbp::split_batch ? std::size_t(me_.index) * rows
                                  : block                          ? std::size_t(b.row) * rows
                                                                   : 0;
    const std::size_t start = std::size_t(mb) * per_mb + first_row;
    loss_.labels = labels_.data() + start;
    loss_.acc = acc_.data();
    loss_.scale = row_scale();
    // one device reports rows that several devices of the part hold (S(0,-1): the one
    // with the first feature block)
    loss_.counts = lp.in_layout == sbp::split_batch || (block ? b.feature == 0 : me_.index == 0);
    // in an evaluation, rows past `valid` are padding
    const std::size_t valid = valid_rows_ == static_cast<std::size_t>(-1) ? valid_rows_ : valid_rows_ * labels_per_sample;
    loss_.valid = valid == static_cast<std::size_t>(-1) ? valid : (valid > start ? valid - start : 0);
    return &loss_;
  }

  // d(mean loss over the replica's batch)/d(row loss), the batch being `passes_` chunks
  // of step_samples; every gradient reduction sums, so ReduceMean also divides by dp.
  double row_scale() const {
    const double rows_per_replica = double(step_samples) * double(labels_per_sample) * passes_;
    return multiplier_ * loss_scale_ / rows_per_replica / (P::gradient_reduce == reduce_method::mean ? dp_ : 1);
  }

  // An auxiliary loss (MoE) is one value per micro-batch, counted as if each of the
  // micro-batch's loss rows carried it: the step's loss is then the mean row loss plus the
  // auxiliary loss averaged over micro-batches, and d(step loss)/d(aux) = rows × the row
  // scale. The part's devices compute the same value: device 0 books it.
  aux_loss_io* prepare_aux(bool books) {
    const double rows = double(P::micro_batch) * double(labels_per_sample);
    aux_.scale = row_scale() * rows;
    aux_.rows = rows;
    aux_.acc = books && me_.index == 0 ? acc_.data() : nullptr;
    return &aux_;
  }

  // ---- gradient buckets (EPL communication.max_splits) -------------------------------------
  // All-reduced; with ZeRO the bucket's chunks are reduce-scattered in place (device r's
  // sum lands at chunk r) and its short tail all-reduced (exec/zero.hpp). Zero<2/3> then
  // add the chunk and the tail to this device's gradient shard (on the communication
  // queue where there is one, behind the collectives).
  void issue(int b) {
    const lower::bucket& bk = L::tables.buckets[idx(me_.stage)][idx(b)];
    Comm& c = axis_comm(bk.axis);
    M* g = store_.bucket_grads(b);
    if (c.size() > 1) {
      if constexpr (overlapped_comm) c.wait_for(q_.stream());  // the bucket's gradients are written
      if constexpr (P::half_reduce > 0) {
        reduce_in_half(c, g, bk.count);
      } else if constexpr (P::zero > 0) {
        reduce_chunks(c, g, bk.count);
      } else {
        c.all_reduce(g, static_cast<std::size_t>(bk.count), comm::reduce_op::sum);
      }
    }
    if constexpr (P::zero >= 2) {
      const zero::bucket_split sp = zero::split_bucket(bk.count, c.size());
      queue& aq = reduction_queue(c);
      M* shard = store_.shard_grads(b);
      axpy(aq, static_cast<std::size_t>(sp.q), 1.0, g + c.rank() * sp.q, shard);
      axpy(aq, static_cast<std::size_t>(sp.tail), 1.0, g + c.size() * sp.q, shard + sp.q);
      if constexpr (overlapped_comm) c.record(slot_done_[idx(store_.gradient_slot(bk.taskgraph))].native());
    }
  }
  // ZeRO: a bucket's chunks reduce-scattered in place (device r's sum lands at chunk r),
  // its tail all-reduced.
  template <class X>
  void reduce_chunks(Comm& c, X* g, long long count) {
    const zero::bucket_split sp = zero::split_bucket(count, c.size());
    if (sp.q > 0)
      c.reduce_scatter(g, g + static_cast<std::size_t>(c.rank() * sp.q), static_cast<std::size_t>(sp.q),
                       comm::reduce_op::sum);
    if (sp.tail > 0)
      c.all_reduce(g + static_cast<std::size_t>(c.size() * sp.q), static_cast<std::size_t>(sp.tail),
                   comm::reduce_op::sum);
  }
  // Where work behind a group's collectives runs: the communication queue when there is
  // one and the group communicates (the fp16 path has already waited for it).
  queue& reduction_queue(Comm& c) {
    if constexpr (overlapped_comm && P::half_reduce == 0) {
      if (c.size() > 1) return *comm_q_;
    }
    (void)c;
    return q_;
  }

  // HalfGradientReduce<S>: the bucket divided by S (exact), rounded to fp16, reduced in
  // fp16 — all-reduced, or with ZeRO its chunks reduce-scattered and its tail all-reduced —
  // and widened and multiplied by S again where this device needs the sum.
  void reduce_in_half(Comm& c, M* g, long long count) {
    const std::size_t n = static_cast<std::size_t>(count);
    constexpr double S = P::half_reduce;
    scale(q_, n, 1.0 / S, g);
    cast_elements(q_, n, static_cast<const M*>(g), half_.data());
    if constexpr (overlapped_comm) c.wait_for(q_.stream());
    std::size_t lo = 0, len = n;  // what comes back: the whole bucket, or this device's chunk and the tail
    if constexpr (P::zero > 0) {
      const zero::bucket_split sp = zero::split_bucket(count, c.size());
      reduce_chunks(c, half_.data(), count);
      finish_buckets();
      lo = static_cast<std::size_t>(c.rank() * sp.q), len = static_cast<std::size_t>(sp.q);
      widen(half_.data() + c.size() * sp.q, static_cast<std::size_t>(sp.tail), g + c.size() * sp.q, S);
    } else {
      c.all_reduce(half_.data(), n, comm::reduce_op::sum);
      finish_buckets();
    }
    widen(half_.data() + lo, len, g + lo, S);
  }
  void widen(const f16* h, std::size_t n, M* g, double S) {
    if (n == 0) return;
    cast_elements(q_, n, h, g);
    scale(q_, n, S, g);
  }

  // ZeRO: after the update each device holds its chunks of every bucket; gather them.
  void gather_updates() {
    for (int b = 0; b < L::tables.num_buckets[idx(me_.stage)]; ++b) {
      const lower::bucket& bk = L::tables.buckets[idx(me_.stage)][idx(b)];
      Comm& c = group_comm(bk.group);
      const zero::bucket_split sp = zero::split_bucket(bk.count, c.size());
      if (c.size() == 1 || sp.q == 0) continue;
      if constexpr (overlapped_comm) c.wait_for(q_.stream());  // the update is written
      store_.gather_chunks(bk.group, bk.offset, sp.q, c.size(), c.rank(),
                           [&](const M* send, M* recv, std::size_t n) {
                             c.all_gather(send, recv, n);
                             if constexpr (P::offload != offload_level::none) c.synchronize();
                           });
    }
    finish_buckets();  // later work (the copies' refresh) waits for the gathers
  }

  // The program's reduce-gradients action: every bucket has gone out during the final
  // backward; on a backend with streams, later work waits for them.
  void finish_buckets() {
    if constexpr (overlapped_comm) {
      for (int g = 0; g < 2; ++g)
        if (group_comm(g).size() > 1) {
          group_comm(g).record(comm_done_.native());
          Backend::wait(q_, comm_done_);
        }
      mesh_.each_reduction_group([&](Comm& c) {
        if (c.size() == 1) return;
        c.record(comm_done_.native());
        Backend::wait(q_, comm_done_);
      });
    }
  }

  // ---- per-layer dispatch: one function pointer per layer of the plan ----------------------
  using ctx_t = layer_ctx<Backend, T, Comm>;
  using dispatch = layer_dispatch<ctx_t, typename P::layers>;
  static constexpr auto forward_table = dispatch::forward;
  static constexpr auto backward_table = dispatch::backward;
  static constexpr auto backward_data_table = dispatch::backward_data;
  static constexpr auto backward_weights_table = dispatch::backward_weights;

  queue& q_;
  Comm& world_;
  rank_coord me_;
  int dp_;
  activation_arena<P, Backend, T> arena_;
  param_store<P, Backend, T> store_;
  std::optional<Comm> part_, data_, part_data_;  // split once, in the constructor
  mesh_groups<P, Comm> mesh_;
  std::optional<queue> comm_q_;
  typename Backend::event comm_done_{};
  std::array<typename Backend::event, 2> slot_done_{};  // Zero<2/3>: a gradient slot's reductions are done
  typename Backend::template buffer<M> inputs_;
  typename Backend::template buffer<std::int32_t> labels_, ids_;
  typename Backend::template buffer<double> acc_, scalar_;
  typename Backend::template buffer<f16> half_;
  double last_norm_ = 0.0;
  loss_io<T> loss_{};
  aux_loss_io aux_{};
  std::size_t valid_rows_ = static_cast<std::size_t>(-1);
  int passes_ = 1;
  bool final_pass_ = true;
  double multiplier_ = 1.0;
  double loss_scale_ = 1.0;
  std::vector<comm::p2p_op> group_;
  bool timing_ = false;
  compute_clock clock_{};
  posted_group<Comm> posted_;  // a group the W's after it overlap
};

}  // namespace strata::exec
