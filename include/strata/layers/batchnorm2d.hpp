#pragma once
// BatchNorm2d<C>: y = γ·(x − mean)·rstd + β per channel (the last axis). Training normalises
// with the statistics of every pixel of every sample of the micro-batch (biased variance, eps
// 1e-5: PyTorch's training mode) in every plan: in a Replicate<N> each device holds 1/N of
// the samples, and the layer all-reduces its per-channel sums over the part — synchronised
// batch norm, the collectives listed in the lowered program (data_shard) — so that every plan
// computes what one device computes. Forward: Σx, then Σ(x − mean)² (two passes: no
// cancellation), C statistics each; backward: Σdy and Σdy·x̂, 2C.
// Evaluation normalises with running statistics (PyTorch's eval mode), kept across steps
// (buffer_needs::state_stats, saved in checkpoints): at each step's end they move by momentum
// 0.1 towards the mean over the step's micro-batches — all of them, on every replica — of the
// micro-batch mean and unbiased variance. That is PyTorch's rule when a step is one
// micro-batch, and the same in every plan (a data-parallel replica of the whole plan
// normalises its own micro-batches in training, as one device does with each chunk of the
// global batch it accumulates).
#include <array>

#include "strata/core/communicator.hpp"
#include "strata/core/rules.hpp"
#include "strata/layers/image.hpp"
#include "strata/layers/layer.hpp"

namespace strata::layers {

template <int C>
struct BatchNorm2d {
  static_assert(rule::layer_dim_positive<C, C>::value);
  static constexpr std::string_view name = "BatchNorm2d";
  static constexpr layer_role role = layer_role::opaque;
  static constexpr double eps = 1e-5;
  static constexpr double momentum = 0.1;
  // kept across steps (PyTorch's buffers), in memory()'s state_stats
  static constexpr std::array<param_t, 2> state{{{"running_mean", shape_v<C>, param_role::replicated, -1},
                                                 {"running_var", shape_v<C>, param_role::replicated, -1}}};
  static constexpr shape_t in_shape = shape_v<C>;
  static constexpr shape_t out_shape(shape_t in) { return in; }
  static constexpr std::array<param_t, 2> params{{{"gamma", shape_v<C>, param_role::replicated, -1},
                                                  {"beta", shape_v<C>, param_role::replicated, -1}}};
  static double init(const init_site& s) { return s.tensor == 0 ? 1.0 : 0.0; }
  static constexpr long long forward_flops(shape_t in) { return 7LL * in.numel(); }
  static constexpr long long backward_flops(shape_t in) { return 9LL * in.numel(); }
  // the input, and each channel's mean and 1/σ; the backward's 2C sums in scratch; kept across
  // steps: the running mean and variance, and a step's sums of them and its micro-batch count
  static constexpr buffer_needs memory(const local_dims&) {
    return {.keep_input = true, .stash_stats = 2 * C, .scratch_stats = 2 * C, .state_stats = 2 * C,
            .state_sums = 2 * C + 1};
  }
  // running mean 0, running variance 1 (PyTorch's)
  static double state_init(long long k) { return k < C ? 0.0 : 1.0; }
  static constexpr shard_choice shard(const shard_query& q) { return detail::image_split(q); }
  // the part's shares of the micro-batch: its sums all-reduced (statistics type)
  static constexpr shard_choice data_shard(const shard_query&) {
    shard_choice c;
    c.add(collective::all_reduce, group_axis::part, pass::forward, C, 2, /*stats=*/true);
    c.add(collective::all_reduce, group_axis::part, pass::backward, 2 * C, 1, /*stats=*/true);
    return c;
  }

  template <class Ctx>
  static bool spread(const Ctx& c) { return c.sig == signature::data_parallel && c.n > 1; }
  template <class Ctx>
  static double count(const Ctx& c) { return double(c.rows) * (spread(c) ? c.n : 1); }

  template <class Ctx>
  static void forward(Ctx& c) {
    using S = typename Ctx::stat_type;
    S* mean = c.stash_stats;
    S* rstd = mean + C;
    const std::size_t ch = C;
    if (!c.training && c.state) {  // evaluation: the running statistics
      copy(c.q, 2 * ch, static_cast<const S*>(c.state), mean);
      batchnorm_finish(c.q, ch, 1.0, eps, static_cast<S*>(nullptr), rstd);
    } else {
      channel_moment(c.q, c.rows, ch, c.x, static_cast<const S*>(nullptr), mean);
      if (spread(c)) c.part.all_reduce(mean, ch, comm::reduce_op::sum);
      batchnorm_finish(c.q, ch, count(c), eps, mean, static_cast<S*>(nullptr));
      channel_moment(c.q, c.rows, ch, c.x, static_cast<const S*>(mean), rstd);
      if (spread(c)) c.part.all_reduce(rstd, ch, comm::reduce_op::sum);
      // a training forward (not a recompute) adds the micro-batch's statistics to the step's sums
      if (c.counts && c.state)
        batchnorm_accumulate(c.q, ch, count(c), static_cast<const S*>(mean), static_cast<const S*>(rstd),
                             c.state + 2 * ch);
      batchnorm_finish(c.q, ch, count(c), eps, static_cast<S*>(nullptr), rstd);
    }
    batchnorm_apply(c.q, c.rows, ch, c.x, static_cast<const S*>(mean), static_cast<const S*>(rstd), c.w[0], c.w[1], c.y);
  }
  // the step's end: the running statistics move towards its micro-batches' mean
  template <class Ctx>
  static void fold_state(Ctx& c) {
    batchnorm_fold(c.q, std::size_t(C), momentum, c.state, c.state + 2 * C);
  }
  template <class Ctx>
  static void backward(Ctx& c) {
    using S = typename Ctx::stat_type;
    const S* mean = c.stash_stats;
    const S* rstd = mean + C;
    S* sums = c.scratch_stats;
    const std::size_t ch = C;
    // γ's and β's gradients are this device's sums (the part's reduction adds them up); dx
    // needs the micro-batch's
    batchnorm_backward_sums(c.q, c.rows, ch, c.x, mean, rstd, c.dy, sums, c.g[0], c.g[1]);
    if (spread(c)) c.part.all_reduce(sums, 2 * ch, comm::reduce_op::sum);
    if (c.dx)
      batchnorm_backward_data(c.q, c.rows, ch, count(c), c.x, mean, rstd, c.w[0], c.dy, static_cast<const S*>(sums),
                              c.dx);
  }
};

}  // namespace strata::layers
