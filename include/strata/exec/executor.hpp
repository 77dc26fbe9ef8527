#pragma once
// The executor: an interpreter of the device program (plan/lower/device_program.hpp) on
// one device. It walks its stage's actions in order — loads, conversions, copies, layer
// calls, pipeline messages posted as the proven groups, weight fills and gathers,
// gradient slots and reductions, and after the loss the update's — each against the
// buffers the lowering planned (exec/arena.hpp, exec/store.hpp) and the device's
// communicators. It reads the lowered tables only: what runs, where and when was
// decided at compile time.
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/core/communicator.hpp"
#include "strata/core/posted_group.hpp"
#include "strata/core/precision.hpp"
#include "strata/core/random.hpp"
#include "strata/exec/arena.hpp"
#include "strata/exec/batch.hpp"
#include "strata/exec/context.hpp"
#include "strata/exec/convert.hpp"
#include "strata/exec/dispatch.hpp"
#include "strata/exec/groups.hpp"
#include "strata/exec/layer_state.hpp"
#include "strata/exec/optimizer.hpp"
#include "strata/exec/program_position.hpp"
#include "strata/exec/reductions.hpp"
#include "strata/exec/store.hpp"
#include "strata/plan/lower/check.hpp"
#include "strata/plan/lower/device_program.hpp"
#include "strata/plan/print.hpp"

namespace strata::exec {

template <class P, class T, class Backend, class Comm>
class executor {
 public:
  using M = master_t<T>;
  using S = stat_t<T>;
  using L = lower::lowered<P>;
  using D = lower::device_program<P>;
  using queue = typename Backend::queue;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }
  static constexpr std::size_t uz(long long v) { return static_cast<std::size_t>(v); }
  static constexpr bool embedding_first = L::tables.calls[0].reads_ids;
  static constexpr std::size_t per_sample = uz(L::input_elems);
  static constexpr std::size_t labels_per_sample = uz(L::labels_per_sample);
  static constexpr std::size_t step_samples = uz(L::replica_batch);
  // The device program is proven before it runs (plan/lower/check.hpp).
  static_assert(lower::device_check<P>::train.ok() && lower::device_check<P>::eval.ok(),
                "strata internal: a device program fails its proof (lower::device_check<P>::train/eval say where)");

  executor(queue& q, Comm& world, rank_coord me, int dp, std::uint64_t seed)
      : q_(q), world_(world), me_(me), dp_(dp), seed_(seed), arena_(me.stage), store_(q, me, seed), groups_(world, me),
        reductions_(q, groups_, me.stage),
        states_(q, me.stage, [](int i, long long k) { return dispatch::state_init[idx(i)](k); }) {
    // the update is split over the devices each group's gradients are reduced over
    // (where the layout partitions it)
    store_.partition({groups_.group(0).size(), groups_.group(1).size()}, {groups_.group(0).rank(), groups_.group(1).rank()});
    // The step's batch in backend memory, at fixed places (graphs read them there).
    inputs_ = Backend::template allocate<M>(step_samples * per_sample);
    labels_ = Backend::template allocate<std::int32_t>(step_samples * labels_per_sample);
    if constexpr (embedding_first) ids_ = Backend::template allocate<std::int32_t>(step_samples * per_sample);
    // the batch as it lands, before prepare_batch arranges it (Context<N> only)
    landed_inputs_ = Backend::template allocate<M>(L::arrangement.empty() ? 0 : step_samples * per_sample);
    landed_labels_ = Backend::template allocate<std::int32_t>(L::arrangement.empty() ? 0 : step_samples * labels_per_sample);
    acc_ = Backend::template allocate<double>(3);
    scalar_ = Backend::template allocate<double>(1);
    step_key_ = Backend::template allocate<std::uint64_t>(1);
    set_step(0);
    group_.reserve(64);  // no allocation while posting a step's messages
  }

  param_store<P, Backend, T>& store() { return store_; }
  layer_states<P, Backend, S>& states() { return states_; }
  const activation_arena<P, Backend, T>& arena() const { return arena_; }
  Comm& part_comm() { return groups_.part(); }
  Comm& group_comm(int g) { return groups_.group(g); }
  Comm& axis_comm(group_axis a) { return groups_.axis(a); }
  M* inputs() { return inputs_.data(); }
  std::int32_t* labels() { return labels_.data(); }
  double* books() { return acc_.data(); }

  // The batch (step_samples samples, already in backend memory at inputs()/labels()) in
  // the order the program reads it (the lowering's chunk moves: none without Context<N>),
  // then token ids for an Embedding that reads the model's input.
  void prepare_batch() {
    if constexpr (!L::arrangement.empty()) {
      copy(q_, step_samples * per_sample, inputs_.data(), landed_inputs_.data());
      copy(q_, step_samples * labels_per_sample, labels_.data(), landed_labels_.data());
      const std::size_t xs = per_sample / uz(L::pieces), ls = labels_per_sample / uz(L::pieces);
      for (std::size_t mb = 0; mb < step_samples / uz(L::micro_batch); ++mb)
        for (const auto& m : L::arrangement) {
          copy(q_, xs, landed_inputs_.data() + mb * uz(L::input_stride) + uz(m.from) * xs,
               inputs_.data() + mb * uz(L::input_stride) + uz(m.to) * xs);
          copy(q_, ls, landed_labels_.data() + mb * uz(L::label_stride) + uz(m.from) * ls,
               labels_.data() + mb * uz(L::label_stride) + uz(m.to) * ls);
        }
    }
    if constexpr (embedding_first) cast_ids(q_, step_samples * per_sample, inputs_.data(), ids_.data());
  }

  // The step's random key (dropout_step_key of the run's seed and `step`, the steps taken
  // before it) into backend memory, where the step's layers read it: at a fixed place, so a
  // recorded graph reads each step's own. The trainer writes it before every step.
  void set_step(long long step) {
    host_step_key_ = dropout_step_key(seed_, static_cast<std::uint64_t>(step));
    Backend::upload(q_, &host_step_key_, 1, step_key_.data());
  }

  // ---- training: the stage's device program ---------------------------------------------
  // Everything up to the update, which the trainer runs once the loss is known. A step of
  // `passes` replica batches (run-time gradient accumulation) runs the program once per
  // pass on the same buffers: gradients and the loss books accumulate from the first
  // pass; actions marked for the last pass (the reductions, unless Zero<2/3> reduce every
  // backward) run in the last.
  void run_training_program(int pass = 0, int passes = 1) {
    passes_ = passes;
    final_pass_ = pass + 1 == passes;
    // this pass's first sample in the step's global batch: replica d's share is passes chunks
    // of step_samples from d·passes·step_samples on (trainer::share), as one device's are
    batch_first_ = (std::uint64_t(me_.data) * std::uint64_t(passes) + std::uint64_t(pass)) * step_samples;
    if (pass == 0) {
      store_.zero_grads();
      fill(q_, std::size_t(3), 0.0, acc_.data());
    }
    reductions_.begin_program();
    run_program(D::train, L::train.prog, 0, true);
  }

  // Wall time of this device's compute instructions (F, B, W), summed while timing is on:
  // the per-stage costs the schedule simulator takes (benchmarks; each synchronizes).
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

  // The update: the device program's update actions. `update` counts applied updates
  // from 1 (Adam's bias correction), `step` training steps (the schedule's position).
  // With loss scaling the gradients hold loss_scale × the true ones: a step whose
  // gradients hold Inf/NaN on any device is skipped by every device (false); otherwise
  // they are divided by the scale. Clipping needs the global gradient norm: each
  // device's share (store::grad_square_sum), summed over the world.
  bool run_optimizer(const optimizer& opt, long long update, long long step, const training_options& o = {},
                     double loss_scale = 1.0, bool check_finite = false) {
    if (check_finite && world_sum(store_.grads_finite() ? 0.0 : 1.0) != 0.0) return false;
    double scale = 1.0 / loss_scale;
    if (o.clip_norm > 0) {
      const double norm = std::sqrt(world_sum(store_.grad_square_sum())) / loss_scale;
      last_norm_ = norm;
      scale *= std::fmin(1.0, o.clip_norm / (norm + 1e-6));
    }
    const double lr = o.schedule.factor(step);
    position().in = rank_position::phase::update;
    const int s = me_.stage;
    for (int i = 0; i < D::update.length[idx(s)]; ++i) {
      const lower::action& a = D::update.at(s, i);
      switch (a.kind) {
        case lower::act::apply_group: store_.apply_group(a.index, opt, update, lr, o.decay, scale); break;
        case lower::act::gather_bucket: reductions_.gather_updated(bucket(a.index), store_); break;
        case lower::act::finish_reductions: reductions_.finish(); break;
        case lower::act::refresh_weights: store_.refresh(); break;
        default: throw std::logic_error("strata: an update action outside the update");
      }
    }
    return true;
  }
  // The loss's gradient is multiplied by this (loss scaling), from the next step.
  void set_loss_scale(double s) { loss_scale_ = s; }
  // The global gradient norm of the last step that clipped (before clipping).
  double last_gradient_norm() const { return last_norm_; }

  // Σ over the world of one double per rank, the same on every rank.
  double world_sum(double v) {
    fill(q_, std::size_t(1), v, scalar_.data());
    // the communicator's own wait first: it has the watchdog, a stream synchronize has none
    if (world_.size() > 1) {
      world_.all_reduce(scalar_.data(), 1, comm::reduce_op::sum);
      world_.synchronize();
    }
    double r = 0;
    Backend::download(q_, scalar_.data(), 1, &r);
    Backend::synchronize(q_);
    return r;
  }
  // Sharded masters: the whole masters assembled for reading (gather_parameters,
  // checkpoints, the replica check); collective.
  void gather_whole() { store_.gather_whole(groups_.group(0), groups_.group(1)); }

  // ---- evaluation: the forward-only program, once per micro-batch ------------------------
  // `mbs` micro-batches of the batch in inputs()/labels(); rows past `valid` (of the
  // replica's batch) are padding and do not count.
  void run_evaluation(int mbs, std::size_t valid) {
    fill(q_, std::size_t(3), 0.0, acc_.data());
    valid_rows_ = valid;
    for (int mb = 0; mb < mbs; ++mb) run_program(D::eval, L::eval.prog, mb, false);
    valid_rows_ = static_cast<std::size_t>(-1);
  }

  // Σ loss, correct rows, rows over the world: the step's books, the same on every rank.
  std::array<double, 3> finish_books() {
    if (world_.size() > 1) {
      world_.all_reduce(acc_.data(), 3, comm::reduce_op::sum);
      world_.synchronize();  // the watchdog's wait (NCCL), before the stream's
    }
    std::array<double, 3> v{};
    Backend::download(q_, acc_.data(), 3, v.data());
    Backend::synchronize(q_);
    return v;
  }

 private:
  static constexpr const lower::bucket& bucket_at(int s, int b) { return L::tables.buckets[idx(s)][idx(b)]; }
  const lower::bucket& bucket(int b) const { return bucket_at(me_.stage, b); }

  // Runs the stage's list, instruction by instruction (an evaluation's for micro-batch
  // mb_base). A communication failure names the instruction it hit.
  template <class List, class Prog>
  void run_program(const List& list, const Prog& prog, int mb_base, bool train) {
    const int s = me_.stage;
    program_position<P>::enter(s, prog.length[idx(s)], !train);  // where a watchdog's verdict says this rank is
    rank_position& at = position();
    for (int i = 0; i < prog.length[idx(s)]; ++i) {
      at.action = i;
      const sched::instr& x = prog.at(s, i);
      try {
        if (x.kind != sched::op::weight) posted_.finish(world_);  // the W's a posted group overlaps are done
        if (timing_ && sched::is_compute(x.kind)) {
          posted_.finish(world_);  // a W overlapping messages is timed without them
          Backend::synchronize(q_);
          const auto t0 = std::chrono::steady_clock::now();
          run_range(list, s, i, mb_base, train);
          Backend::synchronize(q_);
          time(x.kind, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        } else {
          run_range(list, s, i, mb_base, train);
        }
      } catch (const comm::comm_error& e) {
        throw comm::comm_error(std::string(e.what()) + " [stage " + std::to_string(s) + ", action " +
                               std::to_string(i) + ": " + action_text(x, L::chunks) + "]");
      }
    }
    posted_.finish(world_);
    at.in = rank_position::phase::books;
  }
  template <class List>
  void run_range(const List& list, int s, int i, int mb_base, bool train) {
    for (int k = list.begin[idx(s)][idx(i)]; k < list.begin[idx(s)][idx(i + 1)]; ++k) {
      const lower::action& a = list.at(s, k);
      if (!a.every_pass && !final_pass_) continue;
      run(a, a.mb + mb_base, train);
    }
  }
  void time(sched::op k, double seconds) {
    if (k == sched::op::forward) clock_.forward_s += seconds, ++clock_.forwards;
    if (k == sched::op::backward) clock_.backward_s += seconds, ++clock_.backwards;
    if (k == sched::op::weight) clock_.weight_s += seconds, ++clock_.weights;
  }

  // ---- one action -----------------------------------------------------------------------
  void run(const lower::action& a, int mb, bool train) {
    const slot_set& sl = a.slots;
    switch (a.kind) {
      case lower::act::load: load(a, mb); break;
      case lower::act::convert: convert(a.index, a.part, sl); break;
      case lower::act::copy: {
        const lower::copy_op& c = L::tables.copies[idx(a.index)];
        copy(q_, uz(c.elems), arena_.values(c.src, a.part, sl), arena_.values(c.dst, a.part, sl));
        break;
      }
      case lower::act::prepare_loss: prepare_loss(a.index, mb); break;
      case lower::act::forward: call(a, mb, forward_table, train, train); break;
      case lower::act::recompute: call(a, mb, forward_table, train, false); break;
      case lower::act::backward: call(a, mb, backward_table, train, false); break;
      case lower::act::backward_data: call(a, mb, backward_data_table, train, false); break;
      case lower::act::backward_weights:
        posted_.drive(world_);  // the overlapped messages move between the layers' kernels
        call(a, mb, backward_weights_table, train, false);
        break;
      case lower::act::send_act:
      case lower::act::recv_act:
      case lower::act::send_grad:
      case lower::act::recv_grad: message(a, mb); break;
      case lower::act::fill_weights: store_.fill_weights(a.index, a.wslot); break;
      case lower::act::wait_weights: store_.wait_weights(a.wslot); break;
      case lower::act::gather_weights:
        store_.gather_weights(a.index, a.wslot, [&](int g, const M* send, M* recv, std::size_t n) {
          reductions_.gather_group(g, send, recv, n);
        });
        break;
      case lower::act::release_weights: break;  // a slot's contents are let go: nothing to run
      case lower::act::open_grads:
        reductions_.slot_ready(a.gslot);
        store_.open_gradients(a.index, a.gslot);
        break;
      case lower::act::reduce_bucket:
        reductions_.reduce(bucket(a.index), store_.bucket_grads(a.index, a.gslot), a.chunks, a.half);
        break;
      case lower::act::shard_bucket:
        reductions_.add_to_shard(bucket(a.index), store_.bucket_grads(a.index, a.gslot), store_.shard_grads(a.index),
                                 a.gslot);
        break;
      case lower::act::finish_reductions: reductions_.finish(); break;
      case lower::act::tie_grads: store_.tie_gradients(groups_.tie()); break;
      case lower::act::reduce_state: states_.reduce(groups_.axis(group_axis::data), a.index); break;
      case lower::act::fold_state: {
        ctx_t ctx{q_, groups_.part()};
        ctx.state = states_.of(a.index);
        dispatch::fold_state[idx(a.index)](ctx);
        break;
      }
      case lower::act::apply_group:
      case lower::act::gather_bucket:
      case lower::act::refresh_weights: throw std::logic_error("strata: an update action inside a step");
    }
  }

  // A pipeline message: posted with the rest of its group when the group is complete.
  void message(const lower::action& a, int mb) {
    (void)mb;
    const lower::part_plan& pp = L::tables.parts[idx(a.part)];
    const int slot = a.slots.act, peer = L::rank_of(me_.data, a.peer, me_.index);
    switch (a.kind) {
      case lower::act::recv_act:
        group_.push_back(comm::recv_op(arena_.message(pp.entry, a.part, slot), uz(pp.entry.elems), peer, tag(0, a.part - 1)));
        break;
      case lower::act::send_act:
        group_.push_back(comm::send_op(arena_.message(pp.exit, a.part, slot), uz(pp.exit.elems), peer, tag(0, a.part)));
        break;
      case lower::act::recv_grad:
        group_.push_back(comm::recv_op(arena_.message(pp.gout, a.part, slot), uz(pp.gout.elems), peer, tag(1, a.part + 1)));
        break;
      default:
        group_.push_back(comm::send_op(arena_.message(pp.gin, a.part, slot), uz(pp.gin.elems), peer, tag(1, a.part)));
        break;
    }
    if (!a.group_next) {
      posted_.post(world_, std::span<const comm::p2p_op>(group_), a.overlap);  // W's after it overlap it
      group_.clear();
    }
  }
  // Messages between two ranks match in posting order (the deadlock proof checks it), so
  // the tag only names the stream: activations or gradients, and the sending part.
  static int tag(int kind, int sender_part) { return kind * L::parts + sender_part; }

  // The model's input rows of micro-batch mb into part a.part's entry, in the layout its
  // first layer receives (this device's rows when the rows are split).
  void load(const lower::action& a, int mb) {
    const lower::part_plan& pp = L::tables.parts[idx(a.part)];
    const M* src = inputs_.data() + mb * L::input_stride + L::tables.load_first[idx(me_.index)];
    T* dst = arena_.values(pp.entry, a.part, a.slots);
    if constexpr (std::is_same_v<M, T>) copy(q_, uz(pp.entry.elems), src, dst);
    else cast_elements(q_, uz(pp.entry.elems), src, dst);
  }

  void convert(int c, int part, const slot_set& slots) {
    const lower::conversion& cv = L::tables.convs[idx(c)];
    const int at = L::layout_index(me_.index);
    run_conversion(q_, groups_.axis(cv.group), cv, arena_.values(cv.src, part, slots),
                   arena_.values(cv.dst, part, slots), arena_.values(cv.staging, part, slots), L::layout_devices, at,
                   L::input_block(cv.layer, at), L::mesh);
  }

  // A layer call: its context from the lowered call, this device's origin, the store's
  // weights (the staging slot the action names) and gradients (its gradient slot). `train`:
  // the training program (a recompute draws the forward's random numbers again); `books`:
  // the call adds to the step's books (a training forward).
  using ctx_t = layer_ctx<Backend, T, Comm>;
  using fn = void (*)(ctx_t&);
  template <std::size_t N>
  void call(const lower::action& a, int mb, const std::array<fn, N>& table, bool train, bool books) {
    const int i = a.index;
    const lower::layer_call& c = L::tables.calls[idx(i)];
    const lower::call_origin& o = L::tables.origins[idx(i)][idx(me_.index)];
    const slot_set& sl = a.slots;
    ctx_t ctx{q_, groups_.axis(c.own)};
    ctx.sig = c.dims.sig;
    ctx.index = o.index;
    ctx.n = c.dims.n;
    ctx.rows = uz(c.dims.rows);
    ctx.in_cols = uz(c.dims.in_cols);
    ctx.out_cols = uz(c.dims.out_cols);
    ctx.in_shape = c.dims.in;
    ctx.out_shape = c.dims.out;
    ctx.x = arena_.values(c.x, a.part, sl);
    ctx.y = arena_.values(c.y, a.part, sl);
    ctx.dy = arena_.values(a.kind == lower::act::backward_weights ? c.dy_keep : c.dy, a.part, sl);
    ctx.dx = a.kind == lower::act::backward_weights ? nullptr : arena_.values(c.dx, a.part, sl);
    const bool backward = a.kind != lower::act::forward && a.kind != lower::act::recompute;
    for (int k = 0; k < c.num_params; ++k) {
      ctx.w[idx(k)] = store_.weight(i, k, a.wslot);
      ctx.g[idx(k)] = backward ? store_.grad(i, k, a.gslot) : nullptr;
    }
    ctx.stash_values = arena_.values(c.stash_values, a.part, sl);
    ctx.stash_stats = arena_.stats(c.stash_stats, a.part, sl);
    ctx.stash_ids = arena_.ids(c.stash_ids, a.part, sl);
    ctx.scratch_values = arena_.values(c.scratch_values, a.part, sl);
    ctx.scratch_stats = arena_.stats(c.scratch_stats, a.part, sl);
    ctx.backward_values = arena_.values(c.backward_values, a.part, sl);
    ctx.skip = arena_.values(c.skip, a.part, sl);
    ctx.skip_grad = arena_.values(c.skip_grad, a.part, sl);
    ctx.keep = arena_.values(c.keep, a.part, sl);
    ctx.row0 = uz(o.sample_row0);
    ctx.pos0 = uz(o.pos0);
    ctx.pos1 = uz(o.pos1);
    ctx.col0 = uz(o.col0);
    ctx.mesh_q = c.dims.q;
    ctx.context = c.dims.context;
    ctx.context_index = o.context_index;
    ctx.local_pieces = c.dims.pieces;
    if (c.dims.context > 1) ctx.context_group = &groups_.axis(group_axis::context);
    ctx.exchange = c.dims.exchange;
    ctx.training = train;
    ctx.counts = books;
    ctx.state = states_.of(i);
    ctx.step_key = step_key_.data();
    ctx.site = i;  // the action's layer: its index in the flat model, the same in every plan
    ctx.sample0 = batch_first_ + uz(mb) * uz(L::micro_batch);
    ctx.sample_rows = uz(c.sample_rows);
    for (int k = 0; k < c.num_groups; ++k) ctx.mesh[idx(k)] = &groups_.axis(c.groups[idx(k)]);
    if (c.reads_ids) ctx.ids = ids_.data() + mb * L::input_stride + o.batch_first;
    if (c.loss) ctx.loss = &loss_;
    if (c.aux_loss) ctx.aux = prepare_aux(books);
    table[idx(i)](ctx);
  }

  // ---- the loss --------------------------------------------------------------------------
  // The loss layer's labels (this device's rows of micro-batch mb), its gradient's scale,
  // the books, and — in an evaluation — where the padding starts.
  void prepare_loss(int i, int mb) {
    const lower::call_origin& o = L::tables.origins[idx(i)][idx(me_.index)];
    loss_.labels = labels_.data() + uz(mb * L::label_stride + o.row0);
    loss_.acc = acc_.data();
    loss_.scale = row_scale();
    loss_.counts = o.counts;
    // padding: the samples from valid_rows_ on, counted in this device's rows per sample
    constexpr std::size_t all = static_cast<std::size_t>(-1);
    const std::size_t per = uz(L::tables.calls[idx(i)].sample_rows);
    const std::size_t start = uz(mb * L::micro_batch) * per + uz(o.sample_row0);
    const std::size_t valid = valid_rows_ == all ? all : valid_rows_ * per;
    loss_.valid = valid == all ? all : (valid > start ? valid - start : 0);
  }

  // d(mean loss over the replica's batch)/d(row loss), the batch being `passes_` chunks
  // of step_samples; every gradient reduction sums, so ReduceMean also divides by dp.
  double row_scale() const {
    const double rows_per_replica = double(step_samples) * double(labels_per_sample) * passes_;
    return multiplier_ * loss_scale_ / rows_per_replica / (L::mean_over_replicas ? dp_ : 1);
  }

  // An auxiliary loss (MoE) is one value per micro-batch, counted as if each of the
  // micro-batch's loss rows carried it: the step's loss is then the mean row loss plus the
  // auxiliary loss averaged over micro-batches, and d(step loss)/d(aux) = rows × the row
  // scale. The part's devices compute the same value: device 0 books it.
  aux_loss_io* prepare_aux(bool books) {
    const double rows = double(L::label_stride);
    aux_.scale = row_scale() * rows;
    aux_.rows = rows;
    aux_.acc = books && me_.index == 0 ? acc_.data() : nullptr;
    return &aux_;
  }

  // ---- per-layer dispatch: one function pointer per layer of the plan ----------------------
  using dispatch = layer_dispatch<ctx_t, typename L::layers>;
  static constexpr auto forward_table = dispatch::forward;
  static constexpr auto backward_table = dispatch::backward;
  static constexpr auto backward_data_table = dispatch::backward_data;
  static constexpr auto backward_weights_table = dispatch::backward_weights;

  queue& q_;
  Comm& world_;
  rank_coord me_;
  int dp_;
  std::uint64_t seed_;  // the run's seed: parameters' initial values and the random keys
  activation_arena<P, Backend, T> arena_;
  param_store<P, Backend, T> store_;
  device_groups<P, Comm> groups_;
  gradient_reductions<P, Backend, Comm, M> reductions_;
  layer_states<P, Backend, S> states_;
  typename Backend::template buffer<M> inputs_;
  typename Backend::template buffer<std::int32_t> labels_, ids_, landed_labels_;
  typename Backend::template buffer<M> landed_inputs_;
  typename Backend::template buffer<double> acc_, scalar_;
  typename Backend::template buffer<std::uint64_t> step_key_;
  std::uint64_t host_step_key_ = 0;  // the upload's source (pageable memory is read before return)
  std::uint64_t batch_first_ = 0;    // this pass's first sample in the step's global batch
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
  comm::posted_group<Comm> posted_;  // a group the W's after it overlap
};

}  // namespace strata::exec
