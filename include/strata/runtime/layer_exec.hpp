#pragma once
// Forward and backward of each built-in layer under each signature the planner can
// give it, written once against the backend kernel interface (found by argument-
// dependent lookup on the queue), so the same code runs on every backend.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/backend/bf16.hpp"
#include "strata/backend/host/kernels.hpp"
#include "strata/comm/communicator.hpp"
#include "strata/layers.hpp"
#include "strata/plan/sharding.hpp"

namespace strata::runtime {

using backend::activation;
using backend::trans;

// What a layer sees for one micro-batch: local rows × local columns, row-major.
// T is the compute type (activations and the parameters layers read); gradients
// are master_t<T> (float for bf16: mixed precision accumulates them in FP32).
template <class Backend, class T>
struct step_io {
  typename Backend::queue& q;
  const layer_plan& plan;
  std::size_t rows = 0;      // local rows of the input (samples × leading dims)
  std::size_t in_cols = 0;   // local input columns
  std::size_t out_cols = 0;  // local output columns
  int index = 0, n = 1;      // this device's position in the part
  std::vector<T*> params;    // local shards, in the layer's parameter order
  std::vector<master_t<T>*> grads;
  // Token ids of this micro-batch when the layer reads the model's input directly
  // (an Embedding first): cast from the batch's values, never through T (bf16 holds
  // integers exactly only up to 256).
  const std::int32_t* ids = nullptr;
  // The buffer that holds the layer's input, when the caller hands it over: a layer
  // that keeps its input for backward takes it instead of copying it.
  typename Backend::template buffer<T>* input = nullptr;
};

// Activations and scratch a layer keeps from forward to backward, per micro-batch.
// a and b hold per-row statistics, in stat_t<T>.
template <class Backend, class T>
struct stash {
  typename Backend::template buffer<T> x;
  typename Backend::template buffer<stat_t<T>> a, b;
  typename Backend::template buffer<std::int32_t> ids;
  std::size_t num_ids = 0;
};

// The loss layer's inputs and outputs beyond activations. `acc` (3 doubles in backend
// memory: Σ loss, correct rows, rows) is kept on the device so a step never needs the host.
template <class T>
struct loss_io {
  const std::int32_t* labels = nullptr;  // one per local row, backend memory
  double scale = 1.0;                     // d(step loss)/d(row loss)
  double* acc = nullptr;
  bool counts = true;                     // false where another device of the part reports the rows
  std::size_t valid = static_cast<std::size_t>(-1);  // local rows that are data, not padding
};

template <class Backend, class T>
void ensure(typename Backend::template buffer<T>& b, std::size_t n) {
  if (b.size() < n) b = Backend::template allocate<T>(n);
}

// Keeps the layer's input x (n values) in `slot` for backward: takes the caller's
// buffer when it was handed over (no copy, no extra memory), else copies.
template <class Backend, class T>
void keep_input(step_io<Backend, T>& io, typename Backend::template buffer<T>& slot, const T* x, std::size_t n) {
  if (io.input && io.input->data() == x && io.input->size() >= n) {
    slot = std::move(*io.input);
    io.input = nullptr;
    return;
  }
  ensure<Backend, T>(slot, n);
  copy(io.q, n, x, slot.data());
}

// ---- layer implementations ---------------------------------------------------------------

template <class L>
struct exec;  // specialised for each built-in layer

template <int In, int Out, bool Bias>
struct exec<layers::Linear<In, Out, Bias>> {
  template <class Backend, class T, class Comm>
  static void forward(step_io<Backend, T>& io, stash<Backend, T>& s, const T* x, T* y, Comm&, loss_io<T>*) {
    using S = gemm_scalar_t<T>;
    keep_input(io, s.x, x, io.rows * io.in_cols);  // x stays valid: a taken buffer keeps its memory
    // A row-parallel layer's outputs are partial sums: its whole bias is added once.
    const bool add_bias = Bias && (io.plan.sig != signature::row_parallel || io.index == 0);
    const T* bias = nullptr;
    if constexpr (Bias) bias = add_bias ? io.params[1] : nullptr;
    // the bias rides the GEMM's epilogue where the backend has one (cuBLASLt)
    gemm_bias_act(io.q, trans::N, trans::N, io.rows, io.out_cols, io.in_cols, S(1), x, io.in_cols, io.params[0],
                  io.out_cols, S(0), y, io.out_cols, bias, activation::none, static_cast<T*>(nullptr));
  }
  template <class Backend, class T, class Comm>
  static void backward(step_io<Backend, T>& io, stash<Backend, T>& s, const T* dy, T* dx, Comm&, loss_io<T>*) {
    using S = gemm_scalar_t<T>;
    // dW += Xᵀ dY straight into the (master-precision) gradient
    gemm(io.q, trans::T, trans::N, io.in_cols, io.out_cols, io.rows, S(1), s.x.data(), io.in_cols, dy, io.out_cols,
         S(1), io.grads[0], io.out_cols);
    if constexpr (Bias) bias_grad(io.q, io.rows, io.out_cols, dy, io.grads[1], true);
    if (dx)
      gemm(io.q, trans::N, trans::T, io.rows, io.in_cols, io.out_cols, S(1), dy, io.out_cols, io.params[0],
           io.out_cols, S(0), dx, io.in_cols);
  }
};

template <activation A>
struct exec_pointwise {
  template <class Backend, class T, class Comm>
  static void forward(step_io<Backend, T>& io, stash<Backend, T>& s, const T* x, T* y, Comm&, loss_io<T>*) {
    // no bias: the pre-activation backward needs is the input itself
    keep_input(io, s.x, x, io.rows * io.in_cols);
    bias_activation_forward(io.q, A, io.rows, io.in_cols, s.x.data(), static_cast<const T*>(nullptr),
                            static_cast<T*>(nullptr), y);
  }
  template <class Backend, class T, class Comm>
  static void backward(step_io<Backend, T>& io, stash<Backend, T>& s, const T* dy, T* dx, Comm&, loss_io<T>*) {
    if (dx) activation_backward(io.q, A, io.rows * io.in_cols, s.x.data(), dy, dx);
  }
};
template <>
struct exec<layers::ReLU> : exec_pointwise<activation::relu> {};
template <>
struct exec<layers::GeLU> : exec_pointwise<activation::gelu> {};

template <>
struct exec<layers::Flatten> {
  template <class Backend, class T, class Comm>
  static void forward(step_io<Backend, T>& io, stash<Backend, T>&, const T* x, T* y, Comm&, loss_io<T>*) {
    copy(io.q, io.rows * io.in_cols, x, y);  // row-major: the bytes do not move
  }
  template <class Backend, class T, class Comm>
  static void backward(step_io<Backend, T>& io, stash<Backend, T>&, const T* dy, T* dx, Comm&, loss_io<T>*) {
    if (dx) copy(io.q, io.rows * io.in_cols, dy, dx);
  }
};

template <int D>
struct exec<layers::LayerNorm<D>> {
  static constexpr double eps = 1e-5;
  template <class Backend, class T, class Comm>
  static void forward(step_io<Backend, T>& io, stash<Backend, T>& s, const T* x, T* y, Comm&, loss_io<T>*) {
    keep_input(io, s.x, x, io.rows * D);
    ensure<Backend, stat_t<T>>(s.a, io.rows);
    ensure<Backend, stat_t<T>>(s.b, io.rows);
    layernorm_forward(io.q, io.rows, std::size_t(D), x, io.params[0], io.params[1], eps, y, s.a.data(), s.b.data());
  }
  template <class Backend, class T, class Comm>
  static void backward(step_io<Backend, T>& io, stash<Backend, T>& s, const T* dy, T* dx, Comm&, loss_io<T>*) {
    typename Backend::template buffer<T> scratch;
    T* out = dx;
    if (!out) {
      scratch = Backend::template allocate<T>(io.rows * D);
      out = scratch.data();
    }
    layernorm_backward(io.q, io.rows, std::size_t(D), s.x.data(), io.params[0], s.a.data(), s.b.data(), dy, out,
                       io.grads[0], io.grads[1], true);
  }
};

template <int V, int D>
struct exec<layers::Embedding<V, D>> {
  // ids come from the trainer (io.ids, cast from the batch's values) or, for a real
  // T, as values of T (exact below 2^24 in float); the trainer has checked on every
  // rank, before any collective, that they are integers in [0, V)
  template <class Backend, class T, class Comm>
  static void forward(step_io<Backend, T>& io, stash<Backend, T>& s, const T* x, T* y, Comm&, loss_io<T>*) {
    const std::size_t n = io.rows * io.in_cols;
    if (s.ids.size() < n) s.ids = Backend::template allocate<std::int32_t>(n);
    s.num_ids = n;
    if (io.ids) {
      copy(io.q, n, io.ids, s.ids.data());
    } else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      cast_ids(io.q, n, x, s.ids.data());
    } else {
      throw std::logic_error("strata: Embedding: token ids cannot travel as bf16 values; the trainer passes io.ids");
    }
    const bool split = io.plan.sig == signature::vocab_embedding;
    const std::size_t local = split ? std::size_t(V / io.n) : std::size_t(V);
    const std::size_t offset = split ? local * std::size_t(io.index) : 0;
    embedding_forward(io.q, n, std::size_t(D), s.ids.data(), io.params[0], offset, local, y);
  }
  template <class Backend, class T, class Comm>
  static void backward(step_io<Backend, T>& io, stash<Backend, T>& s, const T* dy, T*, Comm&, loss_io<T>*) {
    const bool split = io.plan.sig == signature::vocab_embedding;
    const std::size_t local = split ? std::size_t(V / io.n) : std::size_t(V);
    const std::size_t offset = split ? local * std::size_t(io.index) : 0;
    embedding_backward(io.q, s.num_ids, std::size_t(D), s.ids.data(), dy, offset, local, io.grads[0], true);
  }
};

template <>
struct exec<layers::SoftmaxCrossEntropy> {
  // stash: x = logits (vocabulary-parallel) or probabilities; a = row max; b = Σ exp
  template <class Backend, class T, class Comm>
  static void forward(step_io<Backend, T>& io, stash<Backend, T>& s, const T* x, T*, Comm& part, loss_io<T>* L) {
    const std::size_t R = io.rows, C = io.in_cols;
    using S = stat_t<T>;
    ensure<Backend, T>(s.x, R * C);
    ensure<Backend, S>(s.a, R);
    ensure<Backend, S>(s.b, R);
    typename Backend::template buffer<S> target = Backend::template allocate<S>(R), loss = Backend::template allocate<S>(R);
    if (io.plan.sig == signature::vocab_loss) {
      // max, Σexp and the target logit over the whole vocabulary by three all-reduces
      const std::size_t offset = C * std::size_t(io.index);
      copy(io.q, R * C, x, s.x.data());
      xent_local_max(io.q, R, C, x, s.a.data());
      part.all_reduce(s.a.data(), R, comm::reduce_op::max);
      xent_local_sumexp(io.q, R, C, x, s.a.data(), s.b.data());
      part.all_reduce(s.b.data(), R, comm::reduce_op::sum);
      xent_target_logit(io.q, R, C, x, L->labels, offset, target.data());
      part.all_reduce(target.data(), R, comm::reduce_op::sum);
      xent_loss(io.q, R, s.a.data(), s.b.data(), target.data(), loss.data());
    } else {
      softmax_cross_entropy_forward(io.q, R, C, x, L->labels, loss.data(), s.x.data());
      xent_local_max(io.q, R, C, x, s.a.data());
      xent_target_logit(io.q, R, C, x, L->labels, 0, target.data());
    }
    if (L->counts) loss_accumulate(io.q, R, L->valid, loss.data(), target.data(), s.a.data(), L->acc);
  }
  template <class Backend, class T, class Comm>
  static void backward(step_io<Backend, T>& io, stash<Backend, T>& s, const T*, T* dx, Comm&, loss_io<T>* L) {
    const std::size_t R = io.rows, C = io.in_cols;
    if (io.plan.sig == signature::vocab_loss)
      xent_local_backward(io.q, R, C, s.x.data(), L->labels, C * std::size_t(io.index), s.a.data(), s.b.data(), L->scale,
                          dx);
    else
      softmax_cross_entropy_backward(io.q, R, C, s.x.data(), L->labels, L->scale, dx);
  }
};

template <class L>
concept executable_layer = requires { sizeof(exec<L>); };

}  // namespace strata::runtime
