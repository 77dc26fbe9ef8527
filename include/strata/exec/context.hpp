#pragma once
// What a layer's forward and backward see (the `C` of `template <class C> static void
// forward(C& c)` in every layer header): this device's share of the layer's tensors
// for one micro-batch, as the lowering laid them out. Row-major, local rows × local
// columns; every pointer is backend memory.
#include <array>
#include <cstddef>
#include <cstdint>

#include "strata/core/precision.hpp"
#include "strata/core/sbp.hpp"

namespace strata::exec {

// The loss layer's inputs and outputs beyond activations.
template <class T>
struct loss_io {
  const std::int32_t* labels = nullptr;  // one per local row
  double scale = 1.0;                    // d(step loss)/d(row loss)
  double* acc = nullptr;                 // 3 doubles: Σ loss, correct rows, rows (the step's books)
  bool counts = true;                    // false where another device of the part reports the rows
  std::size_t valid = static_cast<std::size_t>(-1);  // local rows that are data, not padding
};

// An auxiliary loss a layer adds to the step's loss (MoE's load balancing), once per
// micro-batch: its gradient is scaled by `scale` = d(step loss)/d(this micro-batch's
// auxiliary loss), and it enters the books as acc[0] += aux · rows, so that the reported
// loss (Σ loss / Σ rows) is the mean cross-entropy plus the auxiliary loss averaged over
// the step's micro-batches.
struct aux_loss_io {
  double scale = 0.0;
  double rows = 0.0;      // the loss rows one micro-batch adds to the books
  double* acc = nullptr;  // the books (backend memory); null: not counted (evaluation, a
                          // recomputed forward, a device of the part that does not report)
};

template <class Backend, class T, class Comm>
struct layer_ctx {
  using backend_type = Backend;
  using value_type = T;                // activations and the parameters layers read
  using master_type = master_t<T>;     // gradients
  using stat_type = stat_t<T>;         // per-row statistics

  typename Backend::queue& q;
  Comm& part;                          // the devices of this pipeline part (Context<N, Split<T>>: its tensor group)
  signature sig = signature::replicated;
  int index = 0, n = 1;                // this device's position in `part`, and its size
  std::size_t rows = 0, in_cols = 0, out_cols = 0;
  shape_t in_shape{}, out_shape{};     // per-sample shapes of the input and output (an image's [H, W, C])
  const T* x = nullptr;                // forward: the input; backward: the kept input
  T* y = nullptr;                      // forward: the output
  const T* dy = nullptr;               // backward: the output's gradient
  T* dx = nullptr;                     // backward: the input's gradient (null: not needed)
  std::array<const T*, max_layer_params> w{};
  std::array<master_t<T>*, max_layer_params> g{};
  T* stash_values = nullptr;
  stat_t<T>* stash_stats = nullptr;
  std::int32_t* stash_ids = nullptr;
  T* scratch_values = nullptr;
  stat_t<T>* scratch_stats = nullptr;
  T* backward_values = nullptr;        // what this backward leaves an earlier one (buffer_needs::backward_values)
  const std::int32_t* ids = nullptr;   // the model's token ids, when this layer reads them
  loss_io<T>* loss = nullptr;          // the loss layer's books
  aux_loss_io* aux = nullptr;          // a layer's auxiliary loss (null: none)
  const T* skip = nullptr;             // ResidualEnd: the skip connection (the residual's input)
  const T* skip_grad = nullptr;        // ResidualBegin (ShortcutEnd): the skip's gradient ResidualEnd left
  T* keep = nullptr;                   // zero-bubble: what backward_data keeps for backward_weights
  std::size_t row0 = 0;                // the micro-batch row of this device's first local row (a row split;
                                       // 0 under Context<N>, whose rows are chunks of every sample)
  std::size_t col0 = 0;                // the first of this device's features (a feature split or S(0,-1) block)
  // Where the call stands in the run, for random draws that must not depend on the plan
  // (Dropout's mask, core/random.hpp: a function of global coordinates only).
  bool training = false;               // a training step's forward, recompute or backward; false in evaluation
  bool counts = false;                 // a training forward, not a recompute: it adds to the step's sums
  stat_t<T>* state = nullptr;          // the statistics the layer keeps across steps, then the step's sums
                                       // (buffer_needs::state_stats, state_sums; exec/layer_state.hpp)
  const std::uint64_t* step_key = nullptr;  // backend memory: dropout_step_key(seed, step), written before each step
  int site = 0;                        // the layer's index in the flat model: the same in every plan of the model
  std::uint64_t sample0 = 0;           // the micro-batch's first sample in the step's global batch
  std::size_t sample_rows = 1;         // local rows per sample: local row r is sample sample0 + (row0 + r) /
                                       // sample_rows at position pos0 + (row0 + r) % sample_rows (one piece;
                                       // two pieces under ContextAllGather, ContextRing: pieces() below)
  std::size_t pos0 = 0;                // Context<N>: the first position this device holds of each sample
  std::size_t pos1 = 0;                // ContextAllGather, ContextRing: its second piece's first position (local rows
                                       // [piece][sample][sample_rows / 2]: pieces() below)
  // The groups of the layer's own collectives, in the order the planner lists them
  // (plan/sharding.hpp): a vocabulary-parallel loss's part; 2D/2.5D/3D mesh rows, columns
  // or depths. Null past the layer's list.
  std::array<Comm*, 3> mesh{};
  int mesh_q = 1;                      // 2D/2.5D/3D: the mesh side
  int context = 1;                     // Context<N>: N (the part's devices split every sample's positions)
  int context_index = 0;               // Context<N>: which of the N this device is (its pieces)
  Comm* context_group = nullptr;       // Context<N>: the N devices attention exchanges with
  int local_pieces = 1;                // Context<N>: the pieces of every sample the local rows hold (pieces())
  context_mode exchange = context_mode::all_gather;  // Context<N>: how attention exchanges

  // The pieces of every sample the local rows hold (2 under ContextAllGather and ContextRing, else 1): piece
  // h is rows [h·rows/pieces, (h+1)·rows/pieces), sample_rows/pieces rows per sample from
  // position piece_pos0(h) on.
  int pieces() const { return local_pieces; }
  std::size_t piece_pos0(int h) const { return h == 0 ? pos0 : pos1; }
};

}  // namespace strata::exec
