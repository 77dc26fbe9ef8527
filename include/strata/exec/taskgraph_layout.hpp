#pragma once
// Each TaskGraph's parameter tensors on one stage, as one contiguous slot: its range of
// group 0, then its range of group 1, in the groups' order (a TaskGraph's layers lie
// together, so each range is contiguous in its group and a Zero<2/3> bucket, cut at
// TaskGraph boundaries, is contiguous in the slot). Staging slots (weights) and Zero<2/3>
// gradient slots are laid out this way.
#include <array>
#include <cstddef>
#include <utility>
#include <vector>

#include "strata/plan/lower.hpp"

namespace strata::exec {

template <class P>
class taskgraph_layout {
  using L = lower::lowered<P>;
  static constexpr std::size_t idx(int i) { return static_cast<std::size_t>(i); }

 public:
  explicit taskgraph_layout(int stage) {
    const int NT = P::num_taskgraphs;
    tensors_.resize(idx(NT));
    size_.assign(idx(NT), 0);
    first_.assign(idx(NT), {-1, -1});
    base_.assign(idx(NT), {0, 0});
    for (int tg = 0; tg < NT; ++tg) {
      for (int g = 0; g < 2; ++g) {
        base_[idx(tg)][idx(g)] = size_[idx(tg)];
        for (int i = 0; i < L::NL; ++i) {
          const lower::layer_call& c = L::tables.calls[idx(i)];
          if (c.taskgraph != tg || L::stage_of_part(P::layer_plans[idx(i)].part) != stage) continue;
          for (int k = 0; k < c.num_params; ++k) {
            const lower::tensor_place& t = L::tables.params[idx(i)][idx(k)];
            if (t.group != g) continue;
            if (first_[idx(tg)][idx(g)] < 0) first_[idx(tg)][idx(g)] = t.offset;
            offset_[idx(i)][idx(k)] = size_[idx(tg)];
            size_[idx(tg)] += t.size;
            tensors_[idx(tg)].push_back({i, k});
          }
        }
      }
      largest_ = largest_ > size_[idx(tg)] ? largest_ : size_[idx(tg)];
    }
  }

  // Elements of TaskGraph tg's slot, and of the largest.
  long long size(int tg) const { return size_[idx(tg)]; }
  long long largest() const { return largest_; }
  // Where tensor k of layer i lies in its TaskGraph's slot.
  long long offset(int layer, int k) const { return offset_[idx(layer)][idx(k)]; }
  // Where element `offset` of group g lies in TaskGraph tg's slot.
  long long position(int tg, int g, long long offset) const {
    return base_[idx(tg)][idx(g)] + (offset - first_[idx(tg)][idx(g)]);
  }
  // The (layer, tensor) pairs of TaskGraph tg, in slot order.
  const std::vector<std::pair<int, int>>& tensors(int tg) const { return tensors_[idx(tg)]; }

 private:
  std::vector<std::vector<std::pair<int, int>>> tensors_;
  std::vector<long long> size_;
  std::vector<std::array<long long, 2>> first_, base_;
  std::array<std::array<long long, max_layer_params>, idx(P::num_layers)> offset_{};
  long long largest_ = 1;
};

}  // namespace strata::exec
