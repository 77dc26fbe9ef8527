#pragma once
// The first broken rule of a plan, found by constexpr code, raised as the matching
// rule template so that its numbers appear in the diagnostic.
#include "strata/core/rules.hpp"

namespace strata::detail {

enum class rule_id : unsigned char {
  ok,
  device_count,
  nested,
  nested_group,
  empty_taskgraph,
  empty_stage,
  colocate_devices,
  stage_devices,
  replicate_batch,
  interleave_parts,
  interleave_micro_batches,
  tensor_2d,
  tensor_2p5d,
  tensor_3d,
  tensor_zero,
  world,
  shapes_chain,
  loss_last,
  loss_once,
  needs_loss,
  input_shape,
  input_rank,
  residual_shape,
  residual_part,
  residual_pairs,
  split_features,
  split_vocab,
  split_heads,
  split_experts,
  split_tokens,
  split_rows,
  tensor_mode_layer,
  tensor_batch,
  tensor_features,
  tensor_residual,
  deadlock,
  schedule_complete,
  zero_bubble,
  zero_bubble_v_parts
};

struct diagnosis {
  rule_id id = rule_id::ok;
  int a = 0, b = 0, c = 0;
  constexpr bool ok() const { return id == rule_id::ok; }
};

constexpr diagnosis first_of(diagnosis x, diagnosis y) { return x.ok() ? y : x; }

template <rule_id R, int A, int B, int C>
constexpr bool raise() {
  using enum rule_id;
  if constexpr (R == ok) return true;
  else if constexpr (R == device_count) return rule::device_count_positive<A>::value;
  else if constexpr (R == nested) return rule::no_nested_strategy<A, B>::value;
  else if constexpr (R == nested_group) return rule::nested_group<A>::value;
  else if constexpr (R == empty_taskgraph) return rule::taskgraph_not_empty<A>::value;
  else if constexpr (R == empty_stage) return rule::stage_not_empty<A>::value;
  else if constexpr (R == colocate_devices) return rule::colocate_equal_devices<A, B, C>::value;
  else if constexpr (R == stage_devices) return rule::pipeline_equal_devices<A, B, C>::value;
  else if constexpr (R == replicate_batch) return rule::replicate_batch_divisible<A, B>::value;
  else if constexpr (R == interleave_parts) return rule::interleave_parts_divisible<A, B>::value;
  else if constexpr (R == interleave_micro_batches) return rule::interleave_micro_batches<A, B>::value;
  else if constexpr (R == tensor_2d) return rule::tensor_2d_square<A>::value;
  else if constexpr (R == tensor_2p5d) return rule::tensor_2p5d_shape<A, B>::value;
  else if constexpr (R == tensor_3d) return rule::tensor_3d_cube<A>::value;
  else if constexpr (R == tensor_zero) return rule::tensor_mode_without_zero<A, B>::value;
  else if constexpr (R == world) return rule::world_multiple_of_replica<A, B>::value;
  else if constexpr (R == shapes_chain) return rule::shapes_chain<A, B, C>::value;
  else if constexpr (R == loss_last) return rule::loss_last<A, B>::value;
  else if constexpr (R == loss_once) return rule::loss_once<A, B>::value;
  else if constexpr (R == needs_loss) return rule::plan_needs_loss<(A != 0)>::value;
  else if constexpr (R == input_shape) return rule::input_shape_known<(A != 0)>::value;
  else if constexpr (R == input_rank) return rule::input_rank<A, B, C>::value;
  else if constexpr (R == residual_shape) return rule::residual_shape<A, B, C>::value;
  else if constexpr (R == residual_part) return rule::residual_part<A, B, C>::value;
  else if constexpr (R == residual_pairs) return rule::residual_pairs<A, B>::value;
  else if constexpr (R == split_features) return rule::split_features_divisible<A, B, C>::value;
  else if constexpr (R == split_vocab) return rule::split_vocab_divisible<A, B, C>::value;
  else if constexpr (R == split_heads) return rule::split_heads_divisible<A, B, C>::value;
  else if constexpr (R == split_experts) return rule::split_experts_divisible<A, B, C>::value;
  else if constexpr (R == split_tokens) return rule::split_tokens_divisible<A, B, C>::value;
  else if constexpr (R == split_rows) return rule::split_rows_divisible<A, B, C>::value;
  else if constexpr (R == tensor_mode_layer) return rule::tensor_mode_supports_layer<A, B>::value;
  else if constexpr (R == tensor_batch) return rule::tensor_batch_divisible<A, B>::value;
  else if constexpr (R == tensor_features) return rule::tensor_features_divisible<A, B, C>::value;
  else if constexpr (R == tensor_residual) return rule::tensor_3d_residual_even<A>::value;
  else if constexpr (R == deadlock) return rule::deadlock_free<A, B>::value;
  else if constexpr (R == schedule_complete) return rule::schedule_complete<A, B>::value;
  else if constexpr (R == zero_bubble) return rule::zero_bubble_options<A, B, C>::value;
  else if constexpr (R == zero_bubble_v_parts) return rule::zero_bubble_v_parts<A>::value;
  else return false;
}

}  // namespace strata::detail
